//! Issue 30, item 4: calls that merge with earlier ones. `debounce = ".."`: the calls of
//! one partition within the window become one run: trailing (the default), the waiting
//! request takes the newest call's arguments and starts at the end of the newest call's
//! window; leading, the first call runs at once and the later ones of the window get
//! it. `unique_for = ".."`: a call whose arguments equal a call's of the period gets
//! that call's request. Each holds across two instances racing, and a rolled-back
//! caller's transaction leaves nothing of its call.
#![allow(clippy::extra_unused_type_parameters)] // every test takes the backend, used or not

#[macro_use]
mod common;

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use async_exec::{async_exec, Backend, Data, Outcome, QueueLimits, Runtime, Tx};
use common::TestDb;

/// A run: what ran, its partition, its value, when it started.
type Run = (String, String, u64, Instant);

/// The runs.
#[derive(Clone, Default)]
struct Seen(Arc<Mutex<Vec<Run>>>);

impl Seen {
    fn push(&self, what: &str, partition: &str, value: u64) {
        let run = (
            what.to_string(),
            partition.to_string(),
            value,
            Instant::now(),
        );
        self.0.lock().unwrap().push(run);
    }

    fn of(&self, what: &str, partition: &str) -> Vec<(u64, Instant)> {
        let runs = self.0.lock().unwrap();
        runs.iter()
            .filter(|(w, p, _, _)| w == what && p == partition)
            .map(|&(_, _, value, at)| (value, at))
            .collect()
    }

    async fn wait_runs(&self, what: &str, partition: &str, n: usize) {
        let deadline = Instant::now() + Duration::from_secs(20);
        while self.of(what, partition).len() < n {
            assert!(Instant::now() < deadline, "{n} runs of {what} {partition}");
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }
}

/// Rebuilds an account's index from `version` on: trailing debounce of 600 ms.
#[async_exec(type = SaveAsync, queue = "index", partition = account, debounce = "600ms")]
async fn reindex(account: String, version: u64, seen: Data<Seen>) {
    seen.push("reindex", &account, version);
}

/// The same with a window of 3 s: wide enough for 16 calls racing on SQLite's one
/// writer from two instances.
#[async_exec(type = SaveAsync, queue = "index", partition = account, debounce = "3s")]
async fn reindex_wide(account: String, version: u64, seen: Data<Seen>) {
    seen.push("reindex_wide", &account, version);
}

/// Alerts an account's owner: leading debounce of one second.
#[async_exec(type = SaveAsync, queue = "alerts", partition = account, debounce = "1s",
             debounce_edge = "leading")]
async fn alert(account: String, n: u64, seen: Data<Seen>) {
    seen.push("alert", &account, n);
}

/// Sends an order's invoice: once per order within 2 seconds.
#[async_exec(type = SaveAsync, unique_for = "2s")]
async fn invoice(order: u64, seen: Data<Seen>) {
    seen.push("invoice", "", order);
}

fn builder(db: &TestDb, seen: &Seen) -> async_exec::Builder {
    let _ = tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::from_default_env())
        .with_test_writer()
        .try_init();
    db.builder()
        .delete_on_success(false)
        .poll_interval(Duration::from_millis(50))
        .data(seen.clone())
        .queue("index", QueueLimits::new().concurrency(4))
        .queue("alerts", QueueLimits::new().concurrency(4))
}

/// Trailing: five calls 100 ms apart become one run, with the last call's arguments,
/// at least the window after the last call; another partition has its own; after the
/// run, a call writes a new request.
async fn trailing_calls_become_one_run_with_the_newest_arguments<DB: Backend>(db: TestDb) {
    let seen = Seen::default();
    let rt = builder(&db, &seen).start().await.unwrap();
    let first = reindex("a".into(), 1).on(&rt).await.unwrap();
    assert_eq!(first.outcome, Outcome::Queued);
    let other = reindex("b".into(), 1).on(&rt).await.unwrap();
    assert_eq!(other.outcome, Outcome::Queued);
    let mut last_call = Instant::now();
    for version in 2..=5 {
        tokio::time::sleep(Duration::from_millis(100)).await;
        last_call = Instant::now();
        let later = reindex("a".into(), version).on(&rt).await.unwrap();
        assert_eq!((later.id, later.outcome), (first.id, Outcome::Debounced));
    }
    seen.wait_runs("reindex", "a", 1).await;
    seen.wait_runs("reindex", "b", 1).await;
    let runs = seen.of("reindex", "a");
    assert_eq!(runs[0].0, 5, "the newest arguments");
    let waited = runs[0].1.duration_since(last_call);
    assert!(waited >= Duration::from_millis(550), "{waited:?}");
    assert_eq!(seen.of("reindex", "b")[0].0, 1);
    let after = reindex("a".into(), 6).on(&rt).await.unwrap();
    assert_eq!(after.outcome, Outcome::Queued);
    assert_ne!(after.id, first.id);
    seen.wait_runs("reindex", "a", 2).await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(seen.of("reindex", "a").len(), 2, "no other run");
    rt.shutdown().await.unwrap();
}

/// Two instances, 16 calls of one partition at once: one request, merged 15 times, one
/// run.
async fn trailing_calls_racing_from_two_instances_make_one_run<DB: Backend>(db: TestDb) {
    let seen = Seen::default();
    let rts = [
        builder(&db, &seen).start().await.unwrap(),
        builder(&db, &seen).start().await.unwrap(),
    ];
    let calls: Vec<_> = (0..16)
        .map(|n| {
            let rt = rts[n % 2].clone();
            tokio::spawn(async move { reindex_wide("c".into(), n as u64).on(&rt).await })
        })
        .collect();
    let mut ids = Vec::new();
    for call in calls {
        ids.push(call.await.unwrap().unwrap().id);
    }
    assert!(
        ids.iter().all(|id| id.is_some() && *id == ids[0]),
        "{ids:?}"
    );
    seen.wait_runs("reindex_wide", "c", 1).await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(seen.of("reindex_wide", "c").len(), 1);
    assert_eq!(db.count("async_req WHERE merged = 15").await, 1);
    for rt in rts {
        rt.shutdown().await.unwrap();
    }
}

/// A merge in the caller's transaction that rolls back leaves the waiting request as it
/// was; a call that rolls back leaves nothing.
async fn a_rolled_back_merge_leaves_the_request_as_it_was<DB: Backend>(db: TestDb) {
    let seen = Seen::default();
    let rt = builder(&db, &seen)
        .run_workers(false)
        .start()
        .await
        .unwrap();
    let mut tx: Tx<DB> = rt.begin().await.unwrap();
    reindex("d".into(), 1).within(&mut tx).await.unwrap();
    tx.rollback().await.unwrap();
    assert_eq!(db.count("async_req").await, 0);
    let first = reindex("d".into(), 2).on(&rt).await.unwrap();
    let mut tx: Tx<DB> = rt.begin().await.unwrap();
    let merged = reindex("d".into(), 3).within(&mut tx).await.unwrap();
    assert_eq!((merged.id, merged.outcome), (first.id, Outcome::Debounced));
    tx.rollback().await.unwrap();
    let id = first.id.unwrap();
    assert_eq!(
        db.count(&format!(
            "async_req WHERE id = {id} AND merged = 0 AND param_json LIKE '%\"version\":2%'"
        ))
        .await,
        1
    );
    rt.shutdown().await.unwrap();
}

/// Leading: the first call runs at once; a call within the window gets it; after the
/// window, a call runs again.
async fn leading_the_first_call_runs_and_the_window_gets_it<DB: Backend>(db: TestDb) {
    let seen = Seen::default();
    let rt = builder(&db, &seen).start().await.unwrap();
    let called = Instant::now();
    let first = alert("a".into(), 1).on(&rt).await.unwrap();
    assert_eq!(first.outcome, Outcome::Queued);
    seen.wait_runs("alert", "a", 1).await;
    assert!(seen.of("alert", "a")[0].1.duration_since(called) < Duration::from_millis(500));
    let within = alert("a".into(), 2).on(&rt).await.unwrap();
    assert_eq!((within.id, within.outcome), (first.id, Outcome::Existing));
    let other = alert("b".into(), 1).on(&rt).await.unwrap();
    assert_eq!(other.outcome, Outcome::Queued);
    tokio::time::sleep(Duration::from_millis(1_100).saturating_sub(called.elapsed())).await;
    let after = alert("a".into(), 3).on(&rt).await.unwrap();
    assert_eq!(after.outcome, Outcome::Queued);
    seen.wait_runs("alert", "a", 2).await;
    let values: Vec<u64> = seen.of("alert", "a").iter().map(|r| r.0).collect();
    assert_eq!(values, vec![1, 3]);
    rt.shutdown().await.unwrap();
}

/// `unique_for`: equal arguments within the period get the first call's request (also
/// from another instance, racing); other arguments are another request; after the
/// period, a call writes a new one.
async fn equal_arguments_within_the_period_get_the_first_request<DB: Backend>(db: TestDb) {
    let seen = Seen::default();
    let rts: [Runtime; 2] = [
        builder(&db, &seen).start().await.unwrap(),
        builder(&db, &seen).start().await.unwrap(),
    ];
    let called = Instant::now();
    let calls: Vec<_> = (0..8)
        .map(|n| {
            let rt = rts[n % 2].clone();
            tokio::spawn(async move { invoice(1).on(&rt).await })
        })
        .collect();
    let mut receipts = Vec::new();
    for call in calls {
        receipts.push(call.await.unwrap().unwrap());
    }
    let queued = receipts
        .iter()
        .filter(|r| r.outcome == Outcome::Queued)
        .count();
    assert_eq!(queued, 1, "{receipts:?}");
    assert!(
        receipts.iter().all(|r| r.id == receipts[0].id),
        "{receipts:?}"
    );
    let other = invoice(2).on(&rts[0]).await.unwrap();
    assert_eq!(other.outcome, Outcome::Queued);
    tokio::time::sleep(Duration::from_millis(2_100).saturating_sub(called.elapsed())).await;
    let after = invoice(1).on(&rts[1]).await.unwrap();
    assert_eq!(after.outcome, Outcome::Queued);
    assert_ne!(after.id, receipts[0].id);
    seen.wait_runs("invoice", "", 3).await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    let mut values: Vec<u64> = seen.of("invoice", "").iter().map(|r| r.0).collect();
    values.sort_unstable();
    assert_eq!(values, vec![1, 1, 2]);
    for rt in rts {
        rt.shutdown().await.unwrap();
    }
}

backend_suite!(
    trailing_calls_become_one_run_with_the_newest_arguments,
    trailing_calls_racing_from_two_instances_make_one_run,
    a_rolled_back_merge_leaves_the_request_as_it_was,
    leading_the_first_call_runs_and_the_window_gets_it,
    equal_arguments_within_the_period_get_the_first_request,
);

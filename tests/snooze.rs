//! Issue 20: a body that returns `Snooze` runs again after the delay without using up an
//! attempt (a third-party API answering 429 with Retry-After).
#![allow(clippy::extra_unused_type_parameters)] // every test takes the backend, used or not

#[macro_use]
mod common;

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use async_exec::{async_exec, Backend, Context, Data, Snooze, Status};
use common::TestDb;

/// When each attempt started, by call.
#[derive(Clone, Default)]
struct Starts(Arc<Mutex<Vec<(String, u32, Instant)>>>);

impl Starts {
    fn of(&self, name: &str) -> Vec<(u32, Instant)> {
        let starts = self.0.lock().unwrap();
        starts
            .iter()
            .filter(|s| s.0 == name)
            .map(|s| (s.1, s.2))
            .collect()
    }
}

/// Two attempts allowed: snoozes twice (200 ms asked, `Snooze::MIN_DELAY` waited), fails once, then succeeds (on attempt
/// 4, which only the snoozes not being counted allow).
#[async_exec(type = SaveAsync, max_attempts = 2)]
async fn rate_limited(name: String, starts: Data<Starts>, ctx: Context) -> anyhow::Result<()> {
    let attempt = ctx.attempt();
    starts
        .0
        .lock()
        .unwrap()
        .push((name, attempt, Instant::now()));
    match attempt {
        1 | 2 => Err(Snooze::new(Duration::from_millis(200), "the API said 429").into()),
        3 => anyhow::bail!("the API timed out"),
        _ => Ok(()),
    }
}

/// Runs in memory first: a snooze there writes the record to run later.
#[async_exec(type = AsyncSave, max_attempts = 1)]
async fn in_memory_first(name: String, starts: Data<Starts>, ctx: Context) -> Result<(), Snooze> {
    let attempt = ctx.attempt();
    starts
        .0
        .lock()
        .unwrap()
        .push((name, attempt, Instant::now()));
    match attempt {
        1 => Err(Snooze::new(Duration::from_millis(200), "not ready")),
        _ => Ok(()),
    }
}

/// Always asks to run again at once.
#[async_exec(type = SaveAsync, max_attempts = 1)]
async fn snoozes_for_nothing(
    name: String,
    starts: Data<Starts>,
    ctx: Context,
) -> anyhow::Result<()> {
    starts
        .0
        .lock()
        .unwrap()
        .push((name, ctx.attempt(), Instant::now()));
    Err(Snooze::new(Duration::ZERO, "Retry-After: 0").into())
}

/// Issue 30: a snooze waits at least `Snooze::MIN_DELAY` (1 s), so that a body that
/// snoozes for nothing does not run again and again at once: over 1.5 s, with the sweep
/// of due records every 50 ms, it ran twice (seen failing before: 27 and 28 runs).
async fn a_zero_snooze_waits_the_least_delay<DB: Backend>(db: TestDb) {
    assert_eq!(
        Snooze::new(Duration::ZERO, "now").delay(),
        Snooze::MIN_DELAY
    );
    let starts = Starts::default();
    let rt = db
        .builder()
        .retry_interval(Duration::from_millis(50))
        .data(starts.clone())
        .start()
        .await
        .unwrap();
    snoozes_for_nothing("z".into()).on(&rt).await.unwrap();
    tokio::time::sleep(Duration::from_millis(1_500)).await;
    let runs = starts.of("z");
    assert!(
        (1..=2).contains(&runs.len()),
        "ran {} times in 1.5 s",
        runs.len()
    );
    if let [first, second] = runs[..] {
        assert!(second.1 - first.1 >= Snooze::MIN_DELAY);
    }
    rt.shutdown().await.unwrap();
}

async fn a_snooze_runs_later_and_uses_no_attempt<DB: Backend>(db: TestDb) {
    let starts = Starts::default();
    let rt = db
        .builder()
        .retry_interval(Duration::from_millis(50))
        .delete_on_success(false)
        .log_success(true)
        .data(starts.clone())
        .start()
        .await
        .unwrap();
    let id = rate_limited("a".into()).on(&rt).await.unwrap().id.unwrap();
    common::wait_for(|| async {
        matches!(rt.get(id).await.unwrap(), Some(r) if r.status == Status::Success)
    })
    .await;
    let request = rt.get(id).await.unwrap().unwrap();
    assert_eq!(
        (request.exec_count, request.max_attempts),
        (4, 4),
        "{request:?}"
    );
    let outcomes: Vec<String> = rt
        .attempts(id)
        .await
        .unwrap()
        .into_iter()
        .map(|a| a.outcome)
        .collect();
    assert_eq!(outcomes, ["snoozed", "snoozed", "error", "success"]);
    let runs = starts.of("a");
    for pair in runs.windows(2).take(2) {
        let waited = pair[1].1 - pair[0].1;
        assert!(
            waited >= Duration::from_millis(200),
            "attempt {} ran {waited:?} after attempt {}",
            pair[1].0,
            pair[0].0
        );
    }
    rt.shutdown().await.unwrap();
}

async fn a_snooze_in_memory_is_written_to_run_later<DB: Backend>(db: TestDb) {
    let starts = Starts::default();
    let rt = db
        .builder()
        .retry_interval(Duration::from_millis(50))
        .delete_on_success(false)
        .data(starts.clone())
        .start()
        .await
        .unwrap();
    in_memory_first("b".into()).on(&rt).await.unwrap();
    common::wait_for(|| async { starts.of("b").len() == 2 }).await;
    common::wait_for(|| async { db.count("async_req WHERE status = 'success'").await == 1 }).await;
    let runs = starts.of("b");
    assert_eq!(runs.iter().map(|r| r.0).collect::<Vec<_>>(), [1, 2]);
    assert!(runs[1].1 - runs[0].1 >= Duration::from_millis(200));
    assert_eq!(
        db.count("async_req WHERE max_attempts = 2 AND exec_count = 2")
            .await,
        1,
        "one attempt allowed, one more for the snooze"
    );
    rt.shutdown().await.unwrap();
}

backend_suite!(
    a_zero_snooze_waits_the_least_delay,
    a_snooze_runs_later_and_uses_no_attempt,
    a_snooze_in_memory_is_written_to_run_later,
);

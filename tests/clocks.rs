//! Issue 8 item 3: instances whose clocks differ agree on leases and due times, because
//! every time they compare comes from the database's clock. Each test runs two runtimes
//! on one database with `simulated_clock_offset` (a settable clock offset per instance):
//! off by 10 s, more than the 3 s lease.
#![allow(clippy::extra_unused_type_parameters)] // every test takes the backend, used or not

#[macro_use]
mod common;

use std::time::{Duration, Instant};

use async_exec::{async_exec, Backend, Context, Data, Runtime};
use common::{Probe, TestDb};

#[async_exec(type = SaveAsync, max_attempts = 3, timeout = "1m")]
async fn works_a_while(label: String, millis: u64, probe: Data<Probe>, ctx: Context) {
    probe.record(&format!("{label} started"), ctx.attempt());
    tokio::time::sleep(Duration::from_millis(millis)).await;
    probe.record(&label, ctx.attempt());
}

#[async_exec(type = SaveAsync, max_attempts = 3)]
async fn fails_first(label: String, probe: Data<Probe>, ctx: Context) -> Result<(), String> {
    probe.record(&label, ctx.attempt());
    if ctx.attempt() == 1 {
        return Err("first attempt fails".into());
    }
    Ok(())
}

const OFF_BY_MS: i64 = 10_000;

fn probe(rt: &Runtime) -> Data<Probe> {
    rt.data::<Probe>().expect("a probe")
}

/// An instance with a 3 s lease, its clock off by `offset_ms`; `sweeps` runs its rescue
/// and retry sweeps every 100 ms (else they are parked).
async fn instance(db: &TestDb, offset_ms: i64, sweeps: bool) -> Runtime {
    let mut builder = db
        .builder()
        .lease(Duration::from_secs(3))
        .heartbeat_interval(Duration::from_millis(500))
        .listen(false)
        .simulated_clock_offset(offset_ms);
    if sweeps {
        builder = builder
            .compensate_interval(Duration::from_millis(100))
            .retry_interval(Duration::from_millis(100));
    }
    builder.start().await.expect("start")
}

/// B's clock is 10 s behind and A's 10 s ahead: were leases taken from the processes'
/// clocks, A would see B's lease as long expired and run B's live work too.
async fn live_work_is_not_rescued_across_skewed_clocks<DB: Backend>(db: TestDb) {
    let b = instance(&db, -OFF_BY_MS, false).await;
    let a = instance(&db, OFF_BY_MS, true).await;
    // Let both instances' start-up polls pass: the request below is B's.
    tokio::time::sleep(Duration::from_millis(300)).await;
    works_a_while("skewed".into(), 4_000)
        .on(&b)
        .await
        .expect("call");
    probe(&b).wait_runs("skewed", 1).await;
    b.wait_idle().await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(
        probe(&a).runs("skewed started"),
        0,
        "A rescued and ran B's live work"
    );
    assert_eq!(probe(&b).attempts("skewed started"), vec![1]);
    assert_eq!(db.count("async_req").await, 0, "the request succeeded once");
    a.shutdown().await.expect("shutdown a");
    b.shutdown().await.expect("shutdown b");
}

/// B's clock is 10 s ahead: the retry it schedules after a failure must be due by the
/// database's clock after the backoff (20 ms), not 10 s later, when A's retrier looks.
async fn a_retry_written_by_a_fast_clock_is_due_on_time<DB: Backend>(db: TestDb) {
    let b = instance(&db, OFF_BY_MS, false).await;
    let a = instance(&db, 0, true).await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    let started = Instant::now();
    fails_first("retried".into()).on(&b).await.expect("call");
    probe(&b).wait_runs("retried", 1).await;
    probe(&a)
        .wait_runs_within("retried", 1, Duration::from_secs(5))
        .await;
    let waited = started.elapsed();
    assert!(
        waited < Duration::from_secs(3),
        "the retry ran {waited:?} after the call"
    );
    a.shutdown().await.expect("shutdown a");
    b.shutdown().await.expect("shutdown b");
}

/// When each delayed call's body started, by label.
static STARTED: std::sync::Mutex<Vec<(String, Instant)>> = std::sync::Mutex::new(Vec::new());

#[async_exec(type = SaveAsync)]
async fn delayed(label: String) {
    STARTED.lock().unwrap().push((label, Instant::now()));
}

/// How long after `since` the body of `label` started (waits up to 20 s for it).
async fn started_after(label: &str, since: Instant) -> Duration {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let at = STARTED
            .lock()
            .unwrap()
            .iter()
            .find(|(l, _)| l == label)
            .map(|&(_, at)| at);
        match at {
            Some(at) => return at.saturating_duration_since(since),
            None if Instant::now() > deadline => panic!("{label} never started"),
            None => tokio::time::sleep(Duration::from_millis(10)).await,
        }
    }
}

/// Issue 18 item 6: two instances whose clocks are 15 s off each way; calls delayed by
/// 2 s started 12.5 s (PostgreSQL) and 7.5 s (MariaDB) after the call. A delayed call
/// starts on time by the database's clock on the instance that wrote it (its timer; the
/// sweeps here look only every 5 s), and within `retry_interval` (1 s) on another
/// instance when its writer runs no workers.
async fn delayed_calls_start_on_time_across_skewed_clocks<DB: Backend>(db: TestDb) {
    let skewed = |offset_ms: i64, retry: Duration| {
        db.builder()
            .listen(false)
            .simulated_clock_offset(offset_ms)
            .retry_interval(retry)
    };
    let ahead = skewed(15_000, Duration::from_secs(5))
        .start()
        .await
        .unwrap();
    let behind = skewed(-15_000, Duration::from_secs(5))
        .start()
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_millis(300)).await;
    let tag = rand::random::<u32>();
    let mut calls = Vec::new();
    for (name, rt) in [("ahead", &ahead), ("behind", &behind)] {
        for n in 0..3 {
            let label = format!("{tag}-{name}-{n}");
            let at = Instant::now();
            delayed(label.clone())
                .delay(Duration::from_secs(2))
                .on(rt)
                .await
                .unwrap();
            calls.push((label, at));
        }
    }
    for (label, at) in &calls {
        let after = started_after(label, *at).await;
        assert!(
            after >= Duration::from_millis(1_990) && after < Duration::from_millis(2_500),
            "{label} started {after:?} after a call delayed by 2 s"
        );
    }
    ahead.shutdown().await.unwrap();
    behind.shutdown().await.unwrap();

    // Written by an instance without workers, 15 s ahead; run by one 15 s behind.
    let writer = skewed(15_000, Duration::from_secs(1))
        .run_workers(false)
        .start()
        .await
        .unwrap();
    let worker = skewed(-15_000, Duration::from_secs(1))
        .start()
        .await
        .unwrap();
    let label = format!("{tag}-elsewhere");
    let at = Instant::now();
    delayed(label.clone())
        .delay(Duration::from_secs(2))
        .on(&writer)
        .await
        .unwrap();
    let after = started_after(&label, at).await;
    assert!(
        after >= Duration::from_millis(1_990) && after < Duration::from_millis(3_500),
        "{label} started {after:?} after a call delayed by 2 s (retry_interval 1 s)"
    );
    writer.shutdown().await.unwrap();
    worker.shutdown().await.unwrap();
}

backend_suite!(
    delayed_calls_start_on_time_across_skewed_clocks,
    live_work_is_not_rescued_across_skewed_clocks,
    a_retry_written_by_a_fast_clock_is_due_on_time,
);

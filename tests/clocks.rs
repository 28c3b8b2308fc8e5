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

backend_suite!(
    live_work_is_not_rescued_across_skewed_clocks,
    a_retry_written_by_a_fast_clock_is_due_on_time,
);

//! `rt.run_due()` (issue 9): in a test mode, everything waiting runs now, delayed and
//! retrying requests included, and the call returns once it has all finished; outside a
//! test mode it is refused.

#![allow(clippy::extra_unused_type_parameters)] // every test takes the backend, used or not

#[macro_use]
mod common;

use std::time::Duration;

use async_exec::{async_exec, Backend, Context, Data, Error, Status, TestMode};
use common::Probe;

/// Fails its first two attempts, then succeeds.
#[async_exec(type = SaveAsync, max_attempts = 5)]
async fn flaky(label: String, probe: Data<Probe>, ctx: Context) -> Result<(), String> {
    probe.record(&label, ctx.attempt());
    if ctx.attempt() <= 2 {
        return Err(format!("attempt {} fails", ctx.attempt()));
    }
    Ok(())
}

#[async_exec(type = SaveAsync)]
async fn later(label: String, probe: Data<Probe>, ctx: Context) {
    probe.record(&label, ctx.attempt());
}

/// Of a queue with a limit: its requests are claimed by the queue's claim only.
#[async_exec(type = SaveAsync, queue = "limited", max_attempts = 5)]
async fn queued(label: String, probe: Data<Probe>, ctx: Context) -> Result<(), String> {
    probe.record(&label, ctx.attempt());
    if ctx.attempt() == 1 {
        return Err("the first attempt fails".into());
    }
    Ok(())
}

/// Not written at the call: runs in memory after its delay.
#[async_exec(type = AsyncSave)]
async fn later_in_memory(label: String, probe: Data<Probe>, ctx: Context) {
    probe.record(&label, ctx.attempt());
}

const HOUR: Duration = Duration::from_secs(3600);

fn probe(rt: &async_exec::Runtime) -> Data<Probe> {
    rt.data::<Probe>().unwrap()
}

/// Held calls, an hour's delay and retries minutes apart all finish in one `run_due`.
async fn run_due_finishes_delays_and_retries_with_minutes_of_backoff<DB: Backend>(
    db: common::TestDb,
) {
    let rt = db
        .builder()
        .test_mode(TestMode::Hold)
        .delete_on_success(false)
        .retry_base_delay(Duration::from_secs(300))
        .retry_max_delay(Duration::from_secs(600))
        .start()
        .await
        .unwrap();
    let flaky_id = flaky("flaky".into()).on(&rt).await.unwrap().id.unwrap();
    let mut tx = rt.begin::<DB>().await.unwrap();
    let later_id = later("later".into())
        .delay(HOUR)
        .within(&mut tx)
        .await
        .unwrap()
        .id
        .unwrap();
    later_in_memory("in memory".into())
        .delay(HOUR)
        .within(&mut tx)
        .await
        .unwrap();
    tx.commit().await.unwrap();

    // drain runs what is due and leaves what waits.
    let drained = rt.drain().await.unwrap();
    assert_eq!((drained.succeeded, drained.failed), (0, 1));
    let waiting = rt.get(flaky_id).await.unwrap().unwrap();
    assert_eq!(waiting.status, Status::Failed);
    assert!(
        waiting.run_at > common::now_ms() + 60_000,
        "the retry waits minutes: {waiting:?}"
    );

    let started = std::time::Instant::now();
    let report = rt.run_due().await.unwrap();
    assert!(
        started.elapsed() < Duration::from_secs(30),
        "no waiting for delays"
    );
    assert_eq!(report.succeeded, 3, "{report:?}");
    assert_eq!(report.failed, 1, "{report:?}");
    // The in-memory call; the delayed record; the retry, twice (after attempts 1 and 2).
    assert_eq!(report.hurried, 4, "{report:?}");
    let probe = probe(&rt);
    assert_eq!(probe.attempts("flaky"), vec![1, 2, 3]);
    assert_eq!(probe.attempts("later"), vec![1]);
    assert_eq!(probe.attempts("in memory"), vec![1]);
    for id in [flaky_id, later_id] {
        let request = rt.get(id).await.unwrap().unwrap();
        assert_eq!(request.status, Status::Success, "{request:?}");
    }
    // Nothing is left: another round runs nothing.
    assert_eq!(
        rt.run_due().await.unwrap(),
        async_exec::RunDueReport::default()
    );
    rt.shutdown().await.unwrap();
}

/// In `TestMode::Inline` a call runs at once; its retries wait for `run_due`.
async fn run_due_runs_the_retries_of_inline_calls<DB: Backend>(db: common::TestDb) {
    let rt = db
        .builder()
        .test_mode(TestMode::Inline)
        .delete_on_success(false)
        .retry_base_delay(Duration::from_secs(300))
        .retry_max_delay(Duration::from_secs(600))
        .start()
        .await
        .unwrap();
    let id = flaky("inline".into()).on(&rt).await.unwrap().id.unwrap();
    assert_eq!(probe(&rt).attempts("inline"), vec![1]);
    assert_eq!(rt.get(id).await.unwrap().unwrap().status, Status::Failed);
    let report = rt.run_due().await.unwrap();
    assert_eq!((report.succeeded, report.failed), (1, 1), "{report:?}");
    assert_eq!(probe(&rt).attempts("inline"), vec![1, 2, 3]);
    assert_eq!(rt.get(id).await.unwrap().unwrap().status, Status::Success);
    rt.shutdown().await.unwrap();
}

/// Outside a test mode, `run_due` is refused and moves nothing.
async fn run_due_is_refused_outside_a_test_mode<DB: Backend>(db: common::TestDb) {
    let rt = db.builder().run_workers(false).start().await.unwrap();
    let id = later("refused".into())
        .delay(HOUR)
        .on(&rt)
        .await
        .unwrap()
        .id
        .unwrap();
    let before = rt.get(id).await.unwrap().unwrap();
    let error = rt.run_due().await.unwrap_err();
    assert!(matches!(error, Error::NotInTestMode("run_due")), "{error}");
    assert!(error.to_string().contains("TestMode::Hold"), "{error}");
    let after = rt.get(id).await.unwrap().unwrap();
    assert_eq!((after.status, after.run_at), (before.status, before.run_at));
    rt.shutdown().await.unwrap();
}

/// Requests of a queue run in `run_due` and `drain` too, within the queue's limit, retries
/// included (before, both left them waiting: only the executors in no queue were
/// claimed).
async fn run_due_runs_the_requests_of_queues<DB: Backend>(db: common::TestDb) {
    let rt = db
        .builder()
        .test_mode(TestMode::Hold)
        .delete_on_success(false)
        .retry_base_delay(Duration::from_secs(300))
        .retry_max_delay(Duration::from_secs(600))
        .queue("limited", async_exec::QueueLimits::new().concurrency(1))
        .start()
        .await
        .unwrap();
    let mut ids = Vec::new();
    for n in 0..3 {
        ids.push(queued(format!("q{n}")).on(&rt).await.unwrap().id.unwrap());
    }
    let report = rt.run_due().await.unwrap();
    assert_eq!((report.succeeded, report.failed), (3, 3), "{report:?}");
    for (n, id) in ids.into_iter().enumerate() {
        assert_eq!(probe(&rt).attempts(&format!("q{n}")), vec![1, 2]);
        assert_eq!(rt.get(id).await.unwrap().unwrap().status, Status::Success);
    }
    rt.shutdown().await.unwrap();
}

backend_suite!(
    run_due_runs_the_requests_of_queues,
    run_due_finishes_delays_and_retries_with_minutes_of_backoff,
    run_due_runs_the_retries_of_inline_calls,
    run_due_is_refused_outside_a_test_mode,
);

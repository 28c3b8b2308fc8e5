//! The promise, proved on every backend: what runs, how often, and what is recorded when it fails.
#![allow(clippy::extra_unused_type_parameters)] // every test takes the backend, used or not

#[macro_use]
mod common;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use async_exec::{
    async_exec, Backend, Context, Data, Final, Outcome, PageSpec, RequestQuery, Status, TestMode,
    Tx,
};
use common::{now_ms, wait_for, Probe, TestDb};

// ---- executors -------------------------------------------------------------------------

#[async_exec(type = SaveAsync, remark = "records that it ran")]
async fn ok_job(label: String, probe: Data<Probe>, ctx: Context) {
    probe.record(&label, ctx.attempt());
}

#[async_exec(type = SaveAsync, max_attempts = 3)]
async fn fail_always(label: String, probe: Data<Probe>, ctx: Context) -> Result<(), String> {
    probe.record(&label, ctx.attempt());
    Err(format!("{label} failed on attempt {}", ctx.attempt()))
}

#[async_exec(type = SaveAsync)]
async fn fail_once(label: String, probe: Data<Probe>, ctx: Context) -> anyhow::Result<()> {
    probe.record(&label, ctx.attempt());
    anyhow::ensure!(ctx.attempt() > 1, "first attempt fails");
    Ok(())
}

#[async_exec(type = SaveAsync)]
async fn panics_once(label: String, probe: Data<Probe>, ctx: Context) {
    probe.record(&label, ctx.attempt());
    if ctx.attempt() == 1 {
        panic!("boom on attempt one");
    }
}

#[async_exec(type = SaveAsync, timeout = "100ms", max_attempts = 2)]
async fn sleeps(label: String, millis: u64, probe: Data<Probe>, ctx: Context) {
    probe.record(&label, ctx.attempt());
    tokio::time::sleep(Duration::from_millis(millis)).await;
}

#[async_exec(type = SaveAsync, timeout = "200ms")]
async fn blocks_once(label: String, probe: Data<Probe>, ctx: Context) {
    probe.record(&label, ctx.attempt());
    if ctx.attempt() == 1 {
        // A body stuck in a blocking call: no timeout can interrupt it.
        std::thread::sleep(Duration::from_millis(1500));
    }
}

#[async_exec(type = SaveAsync)]
async fn gives_up(label: String, probe: Data<Probe>, ctx: Context) -> anyhow::Result<()> {
    probe.record(&label, ctx.attempt());
    Err(Final::new("the address does not exist").into())
}

#[async_exec(type = SaveAsync, name = "tests::versioned")]
async fn versioned(label: String, extra: Option<String>, probe: Data<Probe>, ctx: Context) {
    probe.record(&label, ctx.attempt());
    probe.record(&format!("{label}:extra={extra:?}"), ctx.attempt());
}

#[async_exec(type = SyncSave, max_attempts = 3)]
async fn sync_save(
    label: String,
    fail: bool,
    probe: Data<Probe>,
    ctx: Context,
) -> Result<(), String> {
    probe.record(&label, ctx.attempt());
    if fail && ctx.attempt() == 1 {
        return Err("sync failure".into());
    }
    Ok(())
}

#[async_exec(type = AsyncSave, max_attempts = 3)]
async fn async_save(
    label: String,
    fail: bool,
    probe: Data<Probe>,
    ctx: Context,
) -> Result<(), String> {
    probe.record(&label, ctx.attempt());
    if fail && ctx.attempt() == 1 {
        return Err("async-save failure".into());
    }
    Ok(())
}

#[async_exec(type = Async)]
async fn async_plain(
    label: String,
    fail: bool,
    probe: Data<Probe>,
    ctx: Context,
) -> Result<(), String> {
    probe.record(&label, ctx.attempt());
    if fail {
        return Err("async failure".into());
    }
    Ok(())
}

#[async_exec(type = Thread)]
async fn thread_job(label: String, probe: Data<Probe>, ctx: Context) {
    probe.record(&label, ctx.attempt());
}

#[async_exec(type = SaveAsync)]
async fn reads_baggage(label: String, probe: Data<Probe>, ctx: Context) {
    let tenant = ctx.baggage("tenant").unwrap_or("none").to_string();
    let task_tenant = async_exec::baggage("tenant").unwrap_or_else(|| "none".into());
    probe.record(&format!("{label}:{tenant}:{task_tenant}"), ctx.attempt());
}

async fn probe_of(rt: &async_exec::Runtime) -> Data<Probe> {
    // The probe is the one registered on this runtime's builder; bodies see the same one.
    rt.probe()
}

trait ProbeOf {
    fn probe(&self) -> Data<Probe>;
}

impl ProbeOf for async_exec::Runtime {
    fn probe(&self) -> Data<Probe> {
        self.data::<Probe>().expect("tests register a Probe")
    }
}

fn executor_name(f: &str) -> String {
    format!("behaviour::{f}")
}

// ---- commit, rollback, crash -----------------------------------------------------------

async fn commit_runs_exactly_once<DB: Backend>(db: TestDb)
where
    for<'c> &'c mut DB::Connection: sqlx::Executor<'c, Database = DB>,
    for<'q> <DB as sqlx::Database>::Arguments<'q>: sqlx::IntoArguments<'q, DB>,
{
    let rt = db.builder().start().await.unwrap();
    let probe = probe_of(&rt).await;
    db.exec("CREATE TABLE users (id INTEGER)").await;
    let mut tx: Tx<DB> = rt.begin().await.unwrap();
    // The caller's own statement, in the same transaction as the request.
    sqlx::query::<DB>("INSERT INTO users (id) VALUES (1)")
        .execute(tx.conn())
        .await
        .unwrap();
    let receipt = ok_job("commit".into()).within(&mut tx).await.unwrap();
    assert_eq!(receipt.outcome, Outcome::Queued);
    assert_eq!(probe.runs("commit"), 0, "nothing runs before the commit");
    tx.commit().await.unwrap();
    assert_eq!(db.count("users").await, 1);
    probe.wait_runs("commit", 1).await;
    rt.wait_idle().await;
    // Every sweep finds nothing more to run.
    assert_eq!(rt.retrier().run_once().await.unwrap().started, 0);
    assert_eq!(rt.rescuer().run_once().await.unwrap().retried.len(), 0);
    assert_eq!(db.count("async_req").await, 0, "success deletes the record");
    tokio::time::sleep(Duration::from_millis(50)).await;
    assert_eq!(probe.attempts("commit"), vec![1]);
    rt.shutdown().await.unwrap();
}

async fn call_without_transaction_runs_once<DB: Backend>(db: TestDb) {
    let rt = db.builder().start().await.unwrap();
    let receipt = ok_job("autocommit".into()).on(&rt).await.unwrap();
    assert!(receipt.id.is_some());
    rt.probe().wait_runs("autocommit", 1).await;
    rt.wait_idle().await;
    assert_eq!(rt.probe().runs("autocommit"), 1);
    rt.shutdown().await.unwrap();
}

async fn rollback_runs_nothing_under_every_strategy<DB: Backend>(db: TestDb) {
    let rt = db.builder().start().await.unwrap();
    let probe = rt.probe();
    for explicit in [true, false] {
        let mut tx: Tx<DB> = rt.begin().await.unwrap();
        ok_job("rb".into()).within(&mut tx).await.unwrap();
        async_save("rb".into(), false)
            .within(&mut tx)
            .await
            .unwrap();
        async_plain("rb".into(), false)
            .within(&mut tx)
            .await
            .unwrap();
        thread_job("rb".into()).within(&mut tx).await.unwrap();
        sync_save("rb-sync".into(), true)
            .within(&mut tx)
            .await
            .unwrap();
        if explicit {
            tx.rollback().await.unwrap();
        } else {
            drop(tx);
        }
    }
    // The sweeps would find anything that had been committed.
    let rt2 = db
        .builder()
        .stale_after(Duration::ZERO)
        .start()
        .await
        .unwrap();
    rt2.compensator().run_once().await.unwrap();
    rt2.retrier().run_once().await.unwrap();
    rt2.wait_idle().await;
    rt.wait_idle().await;
    assert_eq!(probe.runs("rb"), 0);
    assert_eq!(rt2.probe().runs("rb"), 0);
    // SyncSave ran inline at the call (twice); its retry records were rolled back.
    assert_eq!(probe.runs("rb-sync"), 2);
    assert_eq!(db.count("async_req").await, 0);
    rt.shutdown().await.unwrap();
    rt2.shutdown().await.unwrap();
}

async fn crash_between_commit_and_dispatch_still_runs_once<DB: Backend>(db: TestDb) {
    // An instance that commits and then dies before it dispatches anything.
    let crashed = db
        .builder()
        .test_mode(TestMode::Hold)
        .start()
        .await
        .unwrap();
    let mut tx: Tx<DB> = crashed.begin().await.unwrap();
    let id = ok_job("crash".into())
        .within(&mut tx)
        .await
        .unwrap()
        .id
        .unwrap();
    tx.commit().await.unwrap();
    crashed.abort();
    assert_eq!(crashed.probe().runs("crash"), 0);

    // The restarted instance runs it at start-up, once.
    let rt = db.builder().start().await.unwrap();
    rt.probe().wait_runs("crash", 1).await;
    rt.wait_idle().await;
    assert_eq!(rt.compensator().run_once().await.unwrap().started, 0);
    assert_eq!(rt.retrier().run_once().await.unwrap().started, 0);
    rt.wait_idle().await;
    assert_eq!(rt.probe().attempts("crash"), vec![1]);
    assert!(rt.get(id).await.unwrap().is_none(), "done and deleted");
    rt.shutdown().await.unwrap();
}

async fn compensator_runs_what_a_crashed_peer_never_dispatched<DB: Backend>(db: TestDb) {
    // A surviving instance, already running, that hears of nothing (polling parked, no
    // LISTEN, as if the notification were lost): only the sweep finds the work.
    let survivor = db
        .builder()
        .listen(false)
        .stale_after(Duration::from_millis(200))
        .start()
        .await
        .unwrap();
    let crashed = db
        .builder()
        .test_mode(TestMode::Hold)
        .start()
        .await
        .unwrap();
    let mut tx: Tx<DB> = crashed.begin().await.unwrap();
    let id = ok_job("peer-crash".into())
        .within(&mut tx)
        .await
        .unwrap()
        .id
        .unwrap();
    tx.commit().await.unwrap();
    crashed.abort();
    assert_eq!(
        survivor.compensator().run_once().await.unwrap().started,
        0,
        "not stale yet"
    );
    tokio::time::sleep(Duration::from_millis(250)).await;
    assert_eq!(survivor.compensator().run_once().await.unwrap().started, 1);
    survivor.wait_idle().await;
    assert_eq!(survivor.compensator().run_once().await.unwrap().started, 0);
    survivor.wait_idle().await;
    assert_eq!(survivor.probe().attempts("peer-crash"), vec![1]);
    assert!(survivor.get(id).await.unwrap().is_none());
    survivor.shutdown().await.unwrap();
}

async fn another_instances_request_is_picked_up<DB: Backend>(db: TestDb) {
    // PostgreSQL: woken by NOTIFY, with polling parked; elsewhere: found by polling.
    let notifies = <DB as sqlx::Database>::NAME == "PostgreSQL";
    let poll = if notifies {
        Duration::from_secs(3600)
    } else {
        Duration::from_millis(100)
    };
    let worker = db.builder().poll_interval(poll).start().await.unwrap();
    // An instance that only submits.
    let submitter = db
        .builder()
        .test_mode(TestMode::Hold)
        .start()
        .await
        .unwrap();
    let mut tx: Tx<DB> = submitter.begin().await.unwrap();
    let id = ok_job("elsewhere".into())
        .within(&mut tx)
        .await
        .unwrap()
        .id
        .unwrap();
    let committed = std::time::Instant::now();
    tx.commit().await.unwrap();
    worker.probe().wait_runs("elsewhere", 1).await;
    let took = committed.elapsed();
    if notifies {
        assert!(
            took < Duration::from_secs(2),
            "NOTIFY wakes the other instance: took {took:?}"
        );
    }
    // A batch wakes it the same way (its one NOTIFY rides in the multi-row insert).
    let mut tx: Tx<DB> = submitter.begin().await.unwrap();
    let calls = (0..3).map(|_| ok_job("elsewhere-batch".into()));
    async_exec::batch(calls).within(&mut tx).await.unwrap();
    let committed = std::time::Instant::now();
    tx.commit().await.unwrap();
    worker.probe().wait_runs("elsewhere-batch", 3).await;
    let took = committed.elapsed();
    if notifies {
        assert!(
            took < Duration::from_secs(2),
            "NOTIFY wakes the other instance for a batch: took {took:?}"
        );
    }
    worker.wait_idle().await;
    assert!(worker.get(id).await.unwrap().is_none());
    assert_eq!(submitter.probe().runs("elsewhere"), 0);
    submitter.shutdown().await.unwrap();
    worker.shutdown().await.unwrap();
}

// ---- failures --------------------------------------------------------------------------

async fn failing_body_backs_off_then_goes_dead_with_a_log_row_per_attempt<DB: Backend>(db: TestDb) {
    let rt = db
        .builder()
        .retry_base_delay(Duration::from_millis(100))
        .start()
        .await
        .unwrap();
    let probe = rt.probe();
    let id = fail_always("dead".into())
        .on(&rt)
        .await
        .unwrap()
        .id
        .unwrap();
    probe.wait_runs("dead", 1).await;
    rt.wait_idle().await;
    let record = rt.get(id).await.unwrap().unwrap();
    assert_eq!(record.status, Status::Failed);
    assert_eq!(record.exec_count, 1);
    assert_eq!(
        record.last_error.as_deref(),
        Some("dead failed on attempt 1")
    );
    let first_delay = record.run_at - record.update_time;
    assert!(
        (75..=125).contains(&first_delay),
        "first retry after ~100 ms, got {first_delay}"
    );
    assert_eq!(
        rt.retrier().run_once().await.unwrap().started,
        0,
        "not due yet"
    );

    // Drive the retries as the sweep would.
    let mut delays = vec![first_delay];
    while rt.get(id).await.unwrap().unwrap().status == Status::Failed {
        let record = rt.get(id).await.unwrap().unwrap();
        tokio::time::sleep(Duration::from_millis(
            (record.run_at - now_ms()).max(0) as u64 + 5,
        ))
        .await;
        assert_eq!(rt.retrier().run_once().await.unwrap().started, 1);
        rt.wait_idle().await;
        let after = rt.get(id).await.unwrap().unwrap();
        if after.status == Status::Failed {
            delays.push(after.run_at - after.update_time);
        }
    }
    let record = rt.get(id).await.unwrap().unwrap();
    assert_eq!(record.status, Status::Dead);
    assert_eq!(record.exec_count, 3);
    assert!(record
        .last_error
        .unwrap()
        .contains("gave up after 3 attempts"));
    assert_eq!(probe.attempts("dead"), vec![1, 2, 3]);
    assert_eq!(delays.len(), 2);
    assert!(delays[1] > delays[0], "delays grow: {delays:?}");
    let logs = rt.attempts(id).await.unwrap();
    assert_eq!(
        logs.iter().map(|l| l.attempt).collect::<Vec<_>>(),
        vec![1, 2, 3]
    );
    assert!(logs
        .iter()
        .all(|l| l.outcome == "error" && l.error.is_some()));
    // Dead is terminal: sweeps leave it alone.
    tokio::time::sleep(Duration::from_millis(50)).await;
    assert_eq!(rt.retrier().run_once().await.unwrap().started, 0);
    rt.shutdown().await.unwrap();
}

async fn retried_body_succeeds_on_its_second_attempt<DB: Backend>(db: TestDb) {
    let rt = db
        .builder()
        .retry_interval(Duration::from_millis(20))
        .start()
        .await
        .unwrap();
    let id = fail_once("once".into()).on(&rt).await.unwrap().id.unwrap();
    rt.probe().wait_runs("once", 2).await;
    rt.wait_idle().await;
    assert_eq!(rt.probe().attempts("once"), vec![1, 2]);
    assert!(rt.get(id).await.unwrap().is_none());
    let logs = rt.attempts(id).await.unwrap();
    assert_eq!(
        logs.len(),
        1,
        "only the failed attempt is logged by default"
    );
    assert_eq!(logs[0].error.as_deref(), Some("first attempt fails"));
    rt.shutdown().await.unwrap();
}

async fn panic_is_recorded_and_the_worker_lives_on<DB: Backend>(db: TestDb) {
    let rt = db.builder().concurrency(1).start().await.unwrap();
    let id = panics_once("panic".into())
        .on(&rt)
        .await
        .unwrap()
        .id
        .unwrap();
    rt.probe().wait_runs("panic", 1).await;
    rt.wait_idle().await;
    let record = rt.get(id).await.unwrap().unwrap();
    assert_eq!(record.status, Status::Failed);
    assert!(record
        .last_error
        .as_deref()
        .unwrap()
        .contains("boom on attempt one"));
    assert_eq!(rt.attempts(id).await.unwrap()[0].outcome, "panic");
    // The only worker still runs calls.
    ok_job("after-panic".into()).on(&rt).await.unwrap();
    rt.probe().wait_runs("after-panic", 1).await;
    rt.shutdown().await.unwrap();
}

async fn timeout_is_recorded<DB: Backend>(db: TestDb) {
    let rt = db.builder().start().await.unwrap();
    let id = sleeps("slow".into(), 5_000)
        .on(&rt)
        .await
        .unwrap()
        .id
        .unwrap();
    rt.probe().wait_runs("slow", 1).await;
    rt.wait_idle().await;
    let record = rt.get(id).await.unwrap().unwrap();
    assert_eq!(record.status, Status::Failed);
    assert!(record
        .last_error
        .as_deref()
        .unwrap()
        .contains("timed out after 100ms"));
    assert_eq!(rt.attempts(id).await.unwrap()[0].outcome, "timeout");
    rt.shutdown().await.unwrap();
}

async fn final_error_goes_dead_at_once<DB: Backend>(db: TestDb) {
    let rt = db.builder().start().await.unwrap();
    let id = gives_up("final".into()).on(&rt).await.unwrap().id.unwrap();
    rt.probe().wait_runs("final", 1).await;
    rt.wait_idle().await;
    let record = rt.get(id).await.unwrap().unwrap();
    assert_eq!(record.status, Status::Dead);
    assert_eq!(record.exec_count, 1);
    assert_eq!(
        record.last_error.as_deref(),
        Some("the address does not exist")
    );
    rt.shutdown().await.unwrap();
}

async fn expired_lease_of_a_stuck_worker_is_recovered_and_runs_again<DB: Backend>(db: TestDb) {
    let rt = db
        .builder()
        .lease(Duration::from_millis(300))
        .heartbeat_interval(Duration::from_millis(50))
        .start()
        .await
        .unwrap();
    let probe = rt.probe();
    let id = blocks_once("stuck".into())
        .on(&rt)
        .await
        .unwrap()
        .id
        .unwrap();
    probe.wait_runs("stuck", 1).await;
    // The heartbeat keeps the lease while the body is within its timeout...
    tokio::time::sleep(Duration::from_millis(150)).await;
    assert!(rt.rescuer().run_once().await.unwrap().retried.is_empty());
    // ...and stops once the body overran it without yielding; the lease then expires.
    tokio::time::sleep(Duration::from_millis(500)).await;
    let rescued = rt.rescuer().run_once().await.unwrap();
    assert_eq!(rescued.retried, vec![id]);
    assert_eq!(rt.retrier().run_once().await.unwrap().started, 1);
    probe.wait_runs("stuck", 2).await;
    rt.wait_idle().await;
    assert_eq!(probe.attempts("stuck"), vec![1, 2]);
    assert!(
        rt.get(id).await.unwrap().is_none(),
        "the second attempt succeeded"
    );
    let logs = rt.attempts(id).await.unwrap();
    assert_eq!(logs.len(), 1);
    assert_eq!(logs[0].outcome, "lease_expired");
    rt.shutdown().await.unwrap();
}

// ---- arguments and signatures ----------------------------------------------------------

async fn tampered_arguments_go_dead_with_a_clear_message<DB: Backend>(db: TestDb) {
    let rt = db
        .builder()
        .test_mode(TestMode::Hold)
        .start()
        .await
        .unwrap();
    let id = ok_job("tampered".into()).on(&rt).await.unwrap().id.unwrap();
    db.exec(&format!(
        "UPDATE async_req SET param_json = '{{\"label\": 42}}' WHERE id = {id}"
    ))
    .await;
    let report = rt.drain().await.unwrap();
    assert_eq!(report.failed, 1);
    let record = rt.get(id).await.unwrap().unwrap();
    assert_eq!(record.status, Status::Dead);
    let error = record.last_error.unwrap();
    assert!(error.contains(&executor_name("ok_job")), "{error}");
    assert!(
        error.contains("invalid type: integer `42`, expected a string"),
        "{error}"
    );
    assert_eq!(rt.probe().runs("tampered"), 0);
    rt.shutdown().await.unwrap();
}

async fn signature_changes_compatible_run_incompatible_go_dead<DB: Backend>(db: TestDb) {
    let rt = db
        .builder()
        .test_mode(TestMode::Hold)
        .start()
        .await
        .unwrap();
    // Written by an older build whose function had only `label`: a new Option parameter is compatible.
    let compatible = db
        .insert_raw("tests::versioned", "00000000000000aa", r#"{"label":"v1"}"#)
        .await;
    // Written by a build where `label` was a number: incompatible.
    let incompatible = db
        .insert_raw("tests::versioned", "00000000000000bb", r#"{"label":7}"#)
        .await;
    rt.drain().await.unwrap();
    assert_eq!(rt.probe().runs("v1:extra=None"), 1);
    assert!(rt.get(compatible).await.unwrap().is_none());
    let record = rt.get(incompatible).await.unwrap().unwrap();
    assert_eq!(record.status, Status::Dead);
    let error = record.last_error.unwrap();
    assert!(error.contains("tests::versioned"), "{error}");
    assert!(
        error.contains("00000000000000bb"),
        "names the stored signature: {error}"
    );
    assert!(
        error.contains("(label: String, extra: Option<String>)"),
        "names the current one: {error}"
    );
    rt.shutdown().await.unwrap();
}

async fn records_of_unknown_executors_are_left_alone<DB: Backend>(db: TestDb) {
    let rt = db
        .builder()
        .stale_after(Duration::ZERO)
        .start()
        .await
        .unwrap();
    let id = db
        .insert_raw("other_service::job", "0123456789abcdef", "{}")
        .await;
    assert_eq!(rt.compensator().run_once().await.unwrap().started, 0);
    assert_eq!(rt.drain().await.unwrap(), Default::default());
    let record = rt.get(id).await.unwrap().unwrap();
    assert_eq!(record.status, Status::Init);
    assert_eq!(record.exec_count, 0);
    rt.shutdown().await.unwrap();
}

// ---- idempotency -----------------------------------------------------------------------

async fn idempotency_key_holds_under_concurrent_calls<DB: Backend>(db: TestDb) {
    let rt = db
        .builder()
        .test_mode(TestMode::Hold)
        .start()
        .await
        .unwrap();
    let mut calls = Vec::new();
    for i in 0..20 {
        let rt = rt.clone();
        calls.push(tokio::spawn(async move {
            if i % 2 == 0 {
                ok_job("idem".into()).key("order-1").on(&rt).await
            } else {
                let mut tx: Tx<DB> = rt.begin().await?;
                let receipt = ok_job("idem".into()).key("order-1").within(&mut tx).await?;
                tx.commit().await?;
                Ok(receipt)
            }
        }));
    }
    let mut ids = Vec::new();
    let mut new = 0;
    for call in calls {
        let receipt = call.await.unwrap().unwrap();
        if receipt.outcome == Outcome::Queued {
            new += 1;
        } else {
            assert_eq!(receipt.outcome, Outcome::Existing);
        }
        ids.push(receipt.id.unwrap());
    }
    assert_eq!(new, 1, "exactly one call created the request");
    ids.dedup();
    assert_eq!(ids.len(), 1, "every call got the same id");
    assert_eq!(db.count("async_req").await, 1);
    rt.drain().await.unwrap();
    assert_eq!(rt.probe().runs("idem"), 1);
    rt.shutdown().await.unwrap();
}

async fn batch_writes_many_calls_at_once<DB: Backend>(db: TestDb) {
    let rt = db.builder().start().await.unwrap();
    let probe = rt.probe();
    let mut tx: Tx<DB> = rt.begin().await.unwrap();
    let first = ok_job("keyed".into())
        .key("k1")
        .within(&mut tx)
        .await
        .unwrap()
        .id
        .unwrap();
    let mut calls: Vec<async_exec::Call> = (0..40).map(|_| ok_job("batched".into())).collect();
    calls.push(ok_job("keyed".into()).key("k1")); // already there: returns the first
    calls.push(async_plain("batched-async".into(), false)); // not persisted
    let receipts = async_exec::batch(calls).within(&mut tx).await.unwrap();
    assert_eq!(receipts.len(), 42);
    let ids: Vec<i64> = receipts[..40].iter().map(|r| r.id.unwrap()).collect();
    assert!(
        ids.windows(2).all(|w| w[0] < w[1]),
        "ids in call order: {ids:?}"
    );
    assert!(receipts[..40].iter().all(|r| r.outcome == Outcome::Queued));
    assert_eq!(
        receipts[40],
        async_exec::Receipt {
            id: Some(first),
            outcome: Outcome::Existing
        }
    );
    assert_eq!(receipts[41].outcome, Outcome::InMemory);
    assert_eq!(probe.runs("batched"), 0, "nothing before the commit");
    tx.commit().await.unwrap();
    probe.wait_runs("batched", 40).await;
    probe.wait_runs("batched-async", 1).await;
    probe.wait_runs("keyed", 1).await;
    // Outside a transaction too.
    let receipts = async_exec::batch((0..10).map(|_| ok_job("batched-2".into())))
        .on(&rt)
        .await
        .unwrap();
    assert!(receipts.iter().all(|r| r.outcome == Outcome::Queued));
    probe.wait_runs("batched-2", 10).await;
    rt.wait_idle().await;
    assert_eq!(
        (
            probe.runs("batched"),
            probe.runs("keyed"),
            probe.runs("batched-2")
        ),
        (40, 1, 10)
    );
    assert_eq!(db.count("async_req").await, 0);
    rt.shutdown().await.unwrap();
}

async fn batch_receipts_name_their_own_records<DB: Backend>(db: TestDb) {
    // Held: the records stay as written, to be read back.
    let rt = db
        .builder()
        .test_mode(TestMode::Hold)
        .start()
        .await
        .unwrap();
    // Two multi-row statements' worth, with keyed calls (written one by one) among them,
    // and a column (the priority) that differs from row to row in the first statement only.
    let labels: Vec<String> = (0..1200).map(|i| format!("batch-{i}")).collect();
    let calls = labels.iter().enumerate().map(|(i, label)| {
        let call = ok_job(label.clone());
        let call = if i < 600 && i % 7 == 0 {
            call.priority(i as i32)
        } else {
            call
        };
        if i % 97 == 0 {
            call.key(format!("key-{i}"))
        } else {
            call
        }
    });
    let mut tx: Tx<DB> = rt.begin().await.unwrap();
    let receipts = async_exec::batch(calls).within(&mut tx).await.unwrap();
    tx.commit().await.unwrap();
    assert_eq!(receipts.len(), labels.len());
    for (label, receipt) in labels.iter().zip(&receipts) {
        let id = receipt.id.unwrap();
        let record = rt.get(id).await.unwrap().expect("the receipt's record");
        let stored: serde_json::Value = serde_json::from_str(&record.param_json).unwrap();
        assert_eq!(stored["label"], label.as_str(), "record {id}");
        let i: usize = label["batch-".len()..].parse().unwrap();
        let priority = if i < 600 && i % 7 == 0 { i as i32 } else { 0 };
        assert_eq!(record.priority, priority, "record {id}");
    }
    rt.shutdown().await.unwrap();
}

async fn a_batch_of_identical_calls_writes_a_record_for_each<DB: Backend>(db: TestDb) {
    // Every column the same in every row: the multi-row insert binds no per-row value.
    let rt = db
        .builder()
        .test_mode(TestMode::Hold)
        .start()
        .await
        .unwrap();
    let mut tx: Tx<DB> = rt.begin().await.unwrap();
    let calls = (0..3).map(|_| ok_job("same".to_string()));
    let receipts = async_exec::batch(calls).within(&mut tx).await.unwrap();
    tx.commit().await.unwrap();
    let ids: std::collections::BTreeSet<_> = receipts.iter().map(|r| r.id.unwrap()).collect();
    assert_eq!(ids.len(), 3, "{receipts:?}");
    for id in ids {
        let record = rt.get(id).await.unwrap().expect("the receipt's record");
        assert!(record.param_json.contains("same"), "{}", record.param_json);
    }
    assert_eq!(db.count("async_req").await, 3);
    rt.shutdown().await.unwrap();
}

async fn rolled_back_batch_runs_nothing<DB: Backend>(db: TestDb) {
    let rt = db.builder().start().await.unwrap();
    let mut tx: Tx<DB> = rt.begin().await.unwrap();
    async_exec::batch((0..20).map(|_| ok_job("rb-batch".into())))
        .within(&mut tx)
        .await
        .unwrap();
    tx.rollback().await.unwrap();
    rt.wait_idle().await;
    assert_eq!(db.count("async_req").await, 0);
    assert_eq!(rt.probe().runs("rb-batch"), 0);
    rt.shutdown().await.unwrap();
}

// ---- strategies ------------------------------------------------------------------------

async fn sync_save_runs_inline_and_defers_a_failure<DB: Backend>(db: TestDb) {
    let rt = db.builder().start().await.unwrap();
    let ran = sync_save("sync-ok".into(), false).on(&rt).await.unwrap();
    assert_eq!(
        ran,
        async_exec::Receipt {
            id: None,
            outcome: Outcome::Ran
        }
    );
    assert_eq!(
        rt.probe().runs("sync-ok"),
        1,
        "ran before the call returned"
    );
    let deferred = sync_save("sync-fail".into(), true).on(&rt).await.unwrap();
    assert_eq!(
        deferred.outcome,
        Outcome::Deferred {
            error: "sync failure".into()
        }
    );
    let id = deferred.id.unwrap();
    let record = rt.get(id).await.unwrap().unwrap();
    assert_eq!((record.status, record.exec_count), (Status::Failed, 1));
    tokio::time::sleep(Duration::from_millis(60)).await;
    assert_eq!(rt.retrier().run_once().await.unwrap().started, 1);
    rt.wait_idle().await;
    assert_eq!(rt.probe().attempts("sync-fail"), vec![1, 2]);
    assert!(rt.get(id).await.unwrap().is_none());
    rt.shutdown().await.unwrap();
}

async fn async_save_writes_nothing_unless_it_fails<DB: Backend>(db: TestDb) {
    let rt = db.builder().start().await.unwrap();
    let mut tx: Tx<DB> = rt.begin().await.unwrap();
    let receipt = async_save("as-ok".into(), false)
        .within(&mut tx)
        .await
        .unwrap();
    assert_eq!(
        receipt,
        async_exec::Receipt {
            id: None,
            outcome: Outcome::InMemory
        }
    );
    assert_eq!(db.count("async_req").await, 0);
    tx.commit().await.unwrap();
    rt.probe().wait_runs("as-ok", 1).await;
    async_save("as-fail".into(), true).on(&rt).await.unwrap();
    rt.probe().wait_runs("as-fail", 1).await;
    rt.wait_idle().await;
    wait_for(|| async { db.count("async_req WHERE status = 'failed'").await == 1 }).await;
    assert_eq!(db.count("async_log WHERE outcome = 'error'").await, 1);
    tokio::time::sleep(Duration::from_millis(60)).await;
    assert_eq!(rt.retrier().run_once().await.unwrap().started, 1);
    rt.wait_idle().await;
    assert_eq!(rt.probe().attempts("as-fail"), vec![1, 2]);
    assert_eq!(db.count("async_req").await, 0);
    rt.shutdown().await.unwrap();
}

async fn async_and_thread_write_nothing_even_on_failure<DB: Backend>(db: TestDb) {
    let rt = db.builder().start().await.unwrap();
    let mut tx: Tx<DB> = rt.begin().await.unwrap();
    async_plain("a".into(), true).within(&mut tx).await.unwrap();
    thread_job("t".into()).within(&mut tx).await.unwrap();
    assert_eq!(
        rt.probe().runs("a") + rt.probe().runs("t"),
        0,
        "nothing before commit"
    );
    tx.commit().await.unwrap();
    rt.probe().wait_runs("a", 1).await;
    rt.probe().wait_runs("t", 1).await;
    rt.wait_idle().await;
    assert_eq!(db.count("async_req").await, 0);
    assert_eq!(db.count("async_log").await, 0);
    rt.shutdown().await.unwrap();
}

// ---- shutdown --------------------------------------------------------------------------

async fn graceful_shutdown_finishes_short_work<DB: Backend>(db: TestDb) {
    let rt = db
        .builder()
        .shutdown_grace(Duration::from_secs(5))
        .start()
        .await
        .unwrap();
    // 80 ms of work, within its 100 ms timeout and the grace period.
    let id = sleeps("short".into(), 80)
        .on(&rt)
        .await
        .unwrap()
        .id
        .unwrap();
    rt.probe().wait_runs("short", 1).await;
    let report = rt.shutdown().await.unwrap();
    assert!(report.finished);
    assert_eq!(report.released, 0);
    let rt2 = db.builder().start().await.unwrap();
    assert!(
        rt2.get(id).await.unwrap().is_none(),
        "finished and deleted before shutdown returned"
    );
    rt2.shutdown().await.unwrap();
}

async fn graceful_shutdown_releases_long_work_at_once<DB: Backend>(db: TestDb) {
    // Three calls wait in the store; one worker starts: it claims all three, the first
    // runs (forever), the other two wait for it.
    let submitter = db.builder().run_workers(false).start().await.unwrap();
    let mut ids = Vec::new();
    for _ in 0..3 {
        ids.push(blocks_forever_call(&submitter).await);
    }
    submitter.shutdown().await.unwrap();
    let rt = db
        .builder()
        .concurrency(1)
        .shutdown_grace(Duration::from_millis(100))
        .default_timeout(Duration::from_secs(60))
        .start()
        .await
        .unwrap();
    rt.probe().wait_runs("forever", 1).await;
    let started = std::time::Instant::now();
    let report = rt.shutdown().await.unwrap();
    assert!(started.elapsed() < Duration::from_secs(3));
    assert!(!report.finished);
    let rt2 = db
        .builder()
        .test_mode(TestMode::Hold)
        .start()
        .await
        .unwrap();
    for id in ids {
        let record = rt2.get(id).await.unwrap().unwrap();
        assert_eq!(
            record.status,
            Status::Init,
            "handed back without waiting for the lease: {record:?}"
        );
        assert_eq!(
            record.exec_count, 0,
            "the interrupted attempt does not count"
        );
        assert!(record.lease_owner.is_none());
    }
    assert_eq!(rt.probe().runs("forever"), 1);
    rt2.shutdown().await.unwrap();
}

#[async_exec(type = SaveAsync, timeout = "1h")]
async fn waits_forever(label: String, probe: Data<Probe>, ctx: Context) {
    probe.record(&label, ctx.attempt());
    std::future::pending::<()>().await;
}

async fn blocks_forever_call(rt: &async_exec::Runtime) -> i64 {
    waits_forever("forever".into())
        .on(rt)
        .await
        .unwrap()
        .id
        .unwrap()
}

// ---- operations, test modes, tracing context ------------------------------------------

async fn operations_get_list_retry_cancel_delete<DB: Backend>(db: TestDb) {
    let rt = db
        .builder()
        .test_mode(TestMode::Hold)
        .delete_on_success(false)
        .start()
        .await
        .unwrap();
    let a = ok_job("ops-a".into()).on(&rt).await.unwrap().id.unwrap();
    let b = ok_job("ops-b".into()).on(&rt).await.unwrap().id.unwrap();
    let c = gives_up("ops-c".into()).on(&rt).await.unwrap().id.unwrap();
    let listed = rt
        .list(
            &RequestQuery::default().status(Status::Init),
            &PageSpec::default(),
        )
        .await
        .unwrap()
        .requests;
    assert_eq!(
        listed.iter().map(|r| r.id).collect::<Vec<_>>(),
        vec![c, b, a]
    );
    rt.cancel(b).await.unwrap();
    assert!(matches!(
        rt.cancel(b).await,
        Err(async_exec::Error::InvalidState { .. })
    ));
    rt.drain().await.unwrap();
    assert_eq!(rt.get(a).await.unwrap().unwrap().status, Status::Success);
    assert_eq!(rt.get(b).await.unwrap().unwrap().status, Status::Cancelled);
    assert_eq!(rt.get(c).await.unwrap().unwrap().status, Status::Dead);
    let dead = rt
        .list(
            &RequestQuery::default().status(Status::Dead),
            &PageSpec::default(),
        )
        .await
        .unwrap()
        .requests;
    assert_eq!(dead.len(), 1);
    let by_executor = rt
        .list(
            &RequestQuery::default().executor(executor_name("ok_job")),
            &PageSpec::default(),
        )
        .await
        .unwrap()
        .requests;
    assert_eq!(by_executor.len(), 2);
    // Replays: a dead request runs again with fresh attempts, a cancelled one too.
    rt.retry_now(c).await.unwrap();
    rt.retry_now(b).await.unwrap();
    rt.drain().await.unwrap();
    assert_eq!(rt.probe().attempts("ops-c"), vec![1, 1]);
    assert_eq!(rt.probe().runs("ops-b"), 1);
    rt.delete(a).await.unwrap();
    assert!(rt.get(a).await.unwrap().is_none());
    assert!(matches!(
        rt.delete(a).await,
        Err(async_exec::Error::NotFound(_))
    ));
    let counts = rt.count_by_status().await.unwrap();
    assert!(
        counts.contains(&(Status::Dead, 1)) && counts.contains(&(Status::Success, 1)),
        "{counts:?}"
    );
    rt.shutdown().await.unwrap();
}

async fn inline_test_mode_runs_every_call_before_it_returns<DB: Backend>(db: TestDb) {
    let rt = db
        .builder()
        .test_mode(TestMode::Inline)
        .start()
        .await
        .unwrap();
    ok_job("inline".into()).on(&rt).await.unwrap();
    assert_eq!(rt.probe().runs("inline"), 1);
    let mut tx: Tx<DB> = rt.begin().await.unwrap();
    ok_job("inline-tx".into()).within(&mut tx).await.unwrap();
    async_plain("inline-async".into(), false)
        .within(&mut tx)
        .await
        .unwrap();
    assert_eq!(rt.probe().runs("inline-tx"), 0);
    tx.commit().await.unwrap();
    assert_eq!(rt.probe().runs("inline-tx"), 1);
    assert_eq!(rt.probe().runs("inline-async"), 1);
    rt.shutdown().await.unwrap();
}

async fn hold_test_mode_runs_nothing_until_drain<DB: Backend>(db: TestDb) {
    let rt = db
        .builder()
        .test_mode(TestMode::Hold)
        .start()
        .await
        .unwrap();
    ok_job("held".into()).on(&rt).await.unwrap();
    thread_job("held-thread".into()).on(&rt).await.unwrap();
    tokio::time::sleep(Duration::from_millis(50)).await;
    assert_eq!(rt.probe().runs("held") + rt.probe().runs("held-thread"), 0);
    let report = rt.drain().await.unwrap();
    assert_eq!(report.succeeded, 2);
    assert_eq!(rt.probe().runs("held"), 1);
    assert_eq!(rt.probe().runs("held-thread"), 1);
    rt.shutdown().await.unwrap();
}

async fn caller_baggage_travels_with_the_record<DB: Backend>(db: TestDb) {
    let rt = db
        .builder()
        .test_mode(TestMode::Hold)
        .start()
        .await
        .unwrap();
    async_exec::with_baggage([("tenant", "acme")], async {
        reads_baggage("bag".into()).on(&rt).await.unwrap();
    })
    .await;
    reads_baggage("nobag".into()).on(&rt).await.unwrap();
    let stored = rt
        .list(&RequestQuery::default(), &PageSpec::default())
        .await
        .unwrap()
        .requests;
    assert!(stored
        .iter()
        .any(|r| r.trace_json.as_deref() == Some(r#"{"baggage":[["tenant","acme"]]}"#)));
    rt.drain().await.unwrap();
    assert_eq!(rt.probe().runs("bag:acme:acme"), 1);
    assert_eq!(rt.probe().runs("nobag:none:none"), 1);
    rt.shutdown().await.unwrap();
}

async fn full_channel_never_blocks_the_caller_and_loses_nothing<DB: Backend>(db: TestDb) {
    let rt = db
        .builder()
        .channel_capacity(1)
        .concurrency(2)
        .start()
        .await
        .unwrap();
    let calls = 200;
    let started = std::time::Instant::now();
    for _ in 0..calls {
        ok_job("burst".into()).on(&rt).await.unwrap();
    }
    let submitting = started.elapsed();
    rt.probe().wait_runs("burst", calls).await;
    rt.wait_idle().await;
    assert_eq!(rt.probe().runs("burst"), calls);
    assert_eq!(db.count("async_req").await, 0);
    assert!(submitting < Duration::from_secs(10));
    rt.shutdown().await.unwrap();
}

static GLOBAL_RUNS: AtomicUsize = AtomicUsize::new(0);

#[async_exec(type = SaveAsync)]
async fn counts_globally() {
    GLOBAL_RUNS.fetch_add(1, Ordering::SeqCst);
}

/// Backend-independent, and it installs the global runtime: run once, on SQLite.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn bare_await_uses_the_global_runtime() {
    let db = TestDb::new(common::Kind::Sqlite).await;
    let rt = db.builder().install_global(true).start().await.unwrap();
    counts_globally().await.unwrap();
    rt.wait_idle().await;
    wait_for(|| async { GLOBAL_RUNS.load(Ordering::SeqCst) == 1 }).await;
    rt.shutdown().await.unwrap();
    assert!(matches!(
        counts_globally().await,
        Err(async_exec::Error::NoRuntime)
    ));
}

backend_suite!(
    commit_runs_exactly_once,
    call_without_transaction_runs_once,
    rollback_runs_nothing_under_every_strategy,
    crash_between_commit_and_dispatch_still_runs_once,
    compensator_runs_what_a_crashed_peer_never_dispatched,
    another_instances_request_is_picked_up,
    failing_body_backs_off_then_goes_dead_with_a_log_row_per_attempt,
    retried_body_succeeds_on_its_second_attempt,
    panic_is_recorded_and_the_worker_lives_on,
    timeout_is_recorded,
    final_error_goes_dead_at_once,
    expired_lease_of_a_stuck_worker_is_recovered_and_runs_again,
    tampered_arguments_go_dead_with_a_clear_message,
    signature_changes_compatible_run_incompatible_go_dead,
    records_of_unknown_executors_are_left_alone,
    idempotency_key_holds_under_concurrent_calls,
    batch_writes_many_calls_at_once,
    batch_receipts_name_their_own_records,
    a_batch_of_identical_calls_writes_a_record_for_each,
    rolled_back_batch_runs_nothing,
    sync_save_runs_inline_and_defers_a_failure,
    async_save_writes_nothing_unless_it_fails,
    async_and_thread_write_nothing_even_on_failure,
    graceful_shutdown_finishes_short_work,
    graceful_shutdown_releases_long_work_at_once,
    operations_get_list_retry_cancel_delete,
    inline_test_mode_runs_every_call_before_it_returns,
    hold_test_mode_runs_nothing_until_drain,
    caller_baggage_travels_with_the_record,
    full_channel_never_blocks_the_caller_and_loses_nothing,
);

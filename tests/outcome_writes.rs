//! Outcomes that a database refuses (a NUL byte in PostgreSQL text) or that are too large
//! to be worth storing: on every backend, the text is sanitized and capped where the
//! runtime builds it, a poisoned outcome never wedges its batch, and shutdown returns.
#![allow(clippy::extra_unused_type_parameters)] // every test takes the backend, used or not

#[macro_use]
mod common;

use std::time::Duration;

use async_exec::{async_exec, Backend, Context, Data, Outcome, Status, Tx};
use common::{refuse_failed_outcome_of, wait_for, Probe, TestDb};
use tokio::sync::Semaphore;

/// The most bytes the runtime stores of one text (an error, the trace JSON).
const TEXT_CAP: usize = 8 * 1024;

/// The error of the poisoned body: PostgreSQL refuses a NUL byte in text (SQLSTATE 22021).
const NUL_ERROR: &str = "card declined\0 by the bank";

/// Holds bodies until the test opens it, so that they finish together and their outcomes
/// share one batch of the completer.
struct Gate(Semaphore);

impl Default for Gate {
    fn default() -> Self {
        Gate(Semaphore::new(0))
    }
}

impl Gate {
    async fn pass(&self) {
        let _permit = self.0.acquire().await.expect("the gate is never closed");
    }

    fn open(&self) {
        self.0.add_permits(Semaphore::MAX_PERMITS / 2);
    }
}

// ---- executors -------------------------------------------------------------------------

#[async_exec(type = SaveAsync, remark = "a payment: must not run twice")]
async fn pays(gate: Data<Gate>, probe: Data<Probe>, ctx: Context) {
    probe.record("arrived", ctx.attempt());
    gate.pass().await;
    probe.record("paid", ctx.attempt());
}

#[async_exec(type = SaveAsync, remark = "a declined payment")]
async fn declined(gate: Data<Gate>, probe: Data<Probe>, ctx: Context) -> Result<(), String> {
    probe.record("arrived", ctx.attempt());
    gate.pass().await;
    probe.record("declined", ctx.attempt());
    Err("card declined".into())
}

#[async_exec(type = SaveAsync, remark = "fails with a NUL byte in its error")]
async fn fails_with_nul(gate: Data<Gate>, probe: Data<Probe>, ctx: Context) -> Result<(), String> {
    probe.record("arrived", ctx.attempt());
    gate.pass().await;
    probe.record("nul", ctx.attempt());
    Err(NUL_ERROR.into())
}

/// A 1,000,001-byte error of two-byte characters after one ASCII byte, so that the cap
/// falls inside a character unless it is cut on a boundary.
fn huge_error() -> String {
    format!("x{}", "é".repeat(500_000))
}

#[async_exec(type = SaveAsync, max_attempts = 2)]
async fn fails_hugely(probe: Data<Probe>, ctx: Context) -> Result<(), String> {
    probe.record("huge", ctx.attempt());
    Err(huge_error())
}

#[async_exec(type = SyncSave, max_attempts = 2)]
async fn sync_fails_hugely(probe: Data<Probe>, ctx: Context) -> Result<(), String> {
    probe.record("sync-huge", ctx.attempt());
    Err(huge_error())
}

#[async_exec(type = SaveAsync)]
async fn reads_tenant(probe: Data<Probe>, ctx: Context) {
    let tenant = ctx.baggage("tenant").unwrap_or("none").len();
    probe.record(&format!("tenant-len:{tenant}"), ctx.attempt());
}

// ---- helpers -------------------------------------------------------------------------

/// Asserts that `stored` is `original` capped at [`TEXT_CAP`] bytes with the cut marker,
/// and that the marker counts exactly the bytes left out.
fn assert_capped(what: &str, stored: &str, original: &str) {
    assert!(
        stored.len() <= TEXT_CAP,
        "{what}: {} bytes stored, more than {TEXT_CAP}",
        stored.len()
    );
    let (kept, marker) = stored
        .rsplit_once(" [cut: ")
        .unwrap_or_else(|| panic!("{what}: no cut marker in {} bytes", stored.len()));
    let kept = kept.strip_suffix('…').unwrap_or(kept);
    assert!(
        original.starts_with(kept),
        "{what}: the kept text is a prefix of the original"
    );
    let cut: usize = marker
        .strip_suffix(" more bytes]")
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("{what}: unreadable marker `{marker}`"));
    assert_eq!(
        kept.len() + cut,
        original.len(),
        "{what}: the marker counts the bytes cut"
    );
    assert!(kept.len() > TEXT_CAP / 2, "{what}: most of the cap is used");
}

async fn status_of(db: &TestDb, status: &str) -> i64 {
    db.count(&format!("async_req WHERE status = '{status}'"))
        .await
}

// ---- tests -------------------------------------------------------------------------

/// (a) One outcome the database refuses, in the same batch as many successes: the
/// successes are written, the failure is stored sanitized, nothing runs twice, and
/// shutdown returns.
async fn poisoned_outcome_does_not_wedge_its_batch<DB: Backend>(db: TestDb) {
    const PAYMENTS: usize = 100;
    let rt = db
        .builder()
        .concurrency(PAYMENTS + 8)
        .data(Gate::default())
        .start()
        .await
        .unwrap();
    let probe = rt.data::<Probe>().unwrap();
    let gate = rt.data::<Gate>().unwrap();
    let mut tx: Tx<DB> = rt.begin().await.unwrap();
    let mut calls: Vec<async_exec::Call> = (0..PAYMENTS / 2).map(|_| pays()).collect();
    calls.push(fails_with_nul());
    calls.extend((0..PAYMENTS / 2).map(|_| pays()));
    let receipts = async_exec::batch(calls).within(&mut tx).await.unwrap();
    let poisoned = receipts[PAYMENTS / 2].id.unwrap();
    tx.commit().await.unwrap();
    // Every body waits at the gate; opened, they finish within microseconds of each other.
    probe.wait_runs("arrived", PAYMENTS + 1).await;
    gate.open();
    probe.wait_runs("paid", PAYMENTS).await;
    probe.wait_runs("nul", 1).await;

    // Every outcome is written within 5 s: no record is left `running`.
    wait_for(|| async { status_of(&db, "running").await == 0 }).await;
    assert_eq!(db.count("async_req").await, 1, "the successes are deleted");
    let record = rt.get(poisoned).await.unwrap().unwrap();
    assert!(
        matches!(record.status, Status::Failed | Status::Dead),
        "the poisoned outcome is stored: {:?}",
        record.status
    );
    let error = record.last_error.expect("the failure's message");
    assert!(!error.contains('\0'), "no NUL byte is stored: {error:?}");
    assert!(
        error.contains("card declined\u{FFFD} by the bank"),
        "the NUL is replaced, the rest kept: {error:?}"
    );
    let logs = rt.attempts(poisoned).await.unwrap();
    assert_eq!(logs.len(), 1, "one log row for the failed attempt");
    let logged = logs[0].error.as_deref().unwrap_or_default();
    assert!(!logged.contains('\0'), "no NUL in async_log: {logged:?}");

    // Nothing runs twice: no lease is left to expire, nothing waits to be rescued.
    assert_eq!(rt.rescuer().run_once().await.unwrap().retried.len(), 0);
    assert_eq!(probe.attempts("paid"), vec![1; PAYMENTS]);
    assert_eq!(probe.attempts("nul"), vec![1]);
    tokio::time::timeout(Duration::from_secs(5), rt.shutdown())
        .await
        .expect("shutdown returns within 5 s")
        .unwrap();
}

/// (a') An outcome the database refuses whatever its text (a trigger raises a data error
/// for it), in one batch with many successes: the successes are written, the refused one
/// is isolated and written `dead` with the database's reason and the outcome it replaces,
/// nothing runs twice, and shutdown returns.
async fn refused_outcome_is_isolated_and_written_dead<DB: Backend>(db: TestDb) {
    const PAYMENTS: usize = 100;
    let rt = db
        .builder()
        .concurrency(PAYMENTS + 8)
        .data(Gate::default())
        .start()
        .await
        .unwrap();
    let probe = rt.data::<Probe>().unwrap();
    let gate = rt.data::<Gate>().unwrap();
    let mut calls: Vec<async_exec::Call> = (0..PAYMENTS / 2).map(|_| pays()).collect();
    calls.push(declined());
    calls.extend((0..PAYMENTS / 2).map(|_| pays()));
    let mut tx: Tx<DB> = rt.begin().await.unwrap();
    let receipts = async_exec::batch(calls).within(&mut tx).await.unwrap();
    let refused = receipts[PAYMENTS / 2].id.unwrap();
    tx.commit().await.unwrap();
    probe.wait_runs("arrived", PAYMENTS + 1).await;
    refuse_failed_outcome_of(&db, refused).await;
    gate.open();
    probe.wait_runs("paid", PAYMENTS).await;
    probe.wait_runs("declined", 1).await;

    wait_for(|| async { status_of(&db, "running").await == 0 }).await;
    assert_eq!(db.count("async_req").await, 1, "the successes are deleted");
    let record = rt.get(refused).await.unwrap().unwrap();
    assert_eq!(
        record.status,
        Status::Dead,
        "the refused outcome is isolated as dead"
    );
    let error = record.last_error.unwrap();
    assert!(
        error.contains("could not store the outcome"),
        "says why: {error}"
    );
    assert!(
        error.contains("refused by the test"),
        "the database's error: {error}"
    );
    assert!(
        error.contains("card declined"),
        "the outcome it replaces: {error}"
    );
    let logs = rt.attempts(refused).await.unwrap();
    assert_eq!(logs.len(), 1);
    assert_eq!(logs[0].error.as_deref(), Some(error.as_str()));
    assert_eq!(rt.rescuer().run_once().await.unwrap().retried.len(), 0);
    assert_eq!(probe.attempts("paid"), vec![1; PAYMENTS]);
    assert_eq!(probe.attempts("declined"), vec![1]);
    tokio::time::timeout(Duration::from_secs(5), rt.shutdown())
        .await
        .expect("shutdown returns within 5 s")
        .unwrap();
}

/// (a'') The same refusal when the outcome is written inline (`drain`, test modes): the
/// drain succeeds and the record is `dead` with the database's reason.
async fn refused_outcome_in_drain_is_written_dead<DB: Backend>(db: TestDb) {
    let rt = db
        .builder()
        .test_mode(async_exec::TestMode::Hold)
        .data(Gate::default())
        .start()
        .await
        .unwrap();
    rt.data::<Gate>().unwrap().open();
    let refused = declined().on(&rt).await.unwrap().id.unwrap();
    let paid = pays().on(&rt).await.unwrap().id.unwrap();
    refuse_failed_outcome_of(&db, refused).await;
    let drained = tokio::time::timeout(Duration::from_secs(10), rt.drain())
        .await
        .expect("the drain ends within 10 s")
        .expect("a refused outcome does not fail the drain");
    assert_eq!((drained.succeeded, drained.failed), (1, 1));
    let record = rt.get(refused).await.unwrap().unwrap();
    assert_eq!(record.status, Status::Dead);
    assert!(record.last_error.unwrap().contains("refused by the test"));
    assert!(
        rt.get(paid).await.unwrap().is_none(),
        "the success is written"
    );
    assert_eq!(status_of(&db, "running").await, 0);
    tokio::time::timeout(Duration::from_secs(10), rt.shutdown())
        .await
        .expect("shutdown returns within 10 s")
        .unwrap();
}

/// (b) A 1 MB error is stored capped at 8 KiB on a character boundary, marked as cut, in
/// `last_error` and in the `async_log` row; a `SyncSave` failure's record too.
async fn huge_error_is_stored_capped<DB: Backend>(db: TestDb) {
    let rt = db.builder().data(Gate::default()).start().await.unwrap();
    let probe = rt.data::<Probe>().unwrap();
    let original = huge_error();
    let id = fails_hugely().on(&rt).await.unwrap().id.unwrap();
    probe.wait_runs("huge", 1).await;
    tokio::time::timeout(Duration::from_secs(10), rt.wait_idle())
        .await
        .expect("the outcome is written within 10 s");
    let record = rt.get(id).await.unwrap().unwrap();
    assert_eq!(record.status, Status::Failed);
    assert_capped(
        "last_error",
        record.last_error.as_deref().unwrap(),
        &original,
    );
    let logs = rt.attempts(id).await.unwrap();
    assert_eq!(logs.len(), 1);
    assert_capped(
        "async_log.error",
        logs[0].error.as_deref().unwrap(),
        &original,
    );

    // The record written for a failed SyncSave call is capped the same way.
    let receipt = sync_fails_hugely().on(&rt).await.unwrap();
    assert!(matches!(receipt.outcome, Outcome::Deferred { .. }));
    let record = rt.get(receipt.id.unwrap()).await.unwrap().unwrap();
    assert_capped(
        "SyncSave last_error",
        record.last_error.as_deref().unwrap(),
        &original,
    );
    let logs = rt.attempts(record.id).await.unwrap();
    assert_capped(
        "SyncSave async_log.error",
        logs[0].error.as_deref().unwrap(),
        &original,
    );
    tokio::time::timeout(Duration::from_secs(10), rt.shutdown())
        .await
        .expect("shutdown returns within 10 s")
        .unwrap();
}

/// (b) The trace JSON of a call whose baggage is huge and holds a NUL byte is stored
/// capped, stays valid JSON, and the call still runs.
async fn huge_baggage_is_stored_capped<DB: Backend>(db: TestDb) {
    let rt = db
        .builder()
        .data(Gate::default())
        .test_mode(async_exec::TestMode::Hold)
        .start()
        .await
        .unwrap();
    let tenant = format!("acme\0{}", "t".repeat(1 << 20));
    let id = async_exec::with_baggage([("tenant", tenant.as_str()), ("region", "eu")], async {
        reads_tenant().on(&rt).await.unwrap().id.unwrap()
    })
    .await;
    let record = rt.get(id).await.unwrap().unwrap();
    let json = record.trace_json.expect("the baggage is stored");
    assert!(json.len() <= TEXT_CAP, "trace_json is {} bytes", json.len());
    assert!(!json.contains('\0'));
    let value: serde_json::Value = serde_json::from_str(&json).expect("still valid JSON");
    assert!(
        value.get("baggage").is_some(),
        "the baggage is kept: {json}"
    );
    assert!(json.contains("region"), "small fields survive: {json}");
    assert_eq!(rt.drain().await.unwrap().succeeded, 1, "the call runs");
    tokio::time::timeout(Duration::from_secs(10), rt.shutdown())
        .await
        .expect("shutdown returns within 10 s")
        .unwrap();
}

#[async_exec(type = SaveAsync, remark = "fails on its first attempt only")]
async fn fails_first(ctx: Context) -> Result<(), String> {
    match ctx.attempt() {
        1 => Err("the first attempt fails".into()),
        _ => Ok(()),
    }
}

/// Issue 18 item 11: a kept success showed the error of the attempt before it (seen
/// failing: `last_error` was "the first attempt fails" on every backend). A success clears
/// it; the attempt log keeps what happened.
async fn a_success_clears_the_last_attempts_error<DB: Backend>(db: TestDb) {
    let rt = db
        .builder()
        .delete_on_success(false)
        .retry_interval(Duration::from_millis(50))
        .data(Gate::default())
        .start()
        .await
        .unwrap();
    let id = fails_first().on(&rt).await.unwrap().id.unwrap();
    wait_for(|| async { matches!(rt.get(id).await, Ok(Some(r)) if r.status == Status::Success) })
        .await;
    let record = rt.get(id).await.unwrap().unwrap();
    assert_eq!(record.exec_count, 2, "{record:?}");
    assert_eq!(record.last_error, None, "{record:?}");
    rt.shutdown().await.unwrap();
}

backend_suite!(
    a_success_clears_the_last_attempts_error,
    poisoned_outcome_does_not_wedge_its_batch,
    refused_outcome_is_isolated_and_written_dead,
    refused_outcome_in_drain_is_written_dead,
    huge_error_is_stored_capped,
    huge_baggage_is_stored_capped,
);

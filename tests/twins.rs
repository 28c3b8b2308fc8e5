//! Issue 18 item 1: lease ownership that cannot be confused. Two live instances may share
//! a name (containers: every replica is pid 1); renewals and shutdown's hand-back are
//! fenced by the attempt this instance claimed, as outcome writes are, so that a record a
//! twin holds (the same name, another attempt; or a record this instance never claimed)
//! is neither renewed nor handed back by it. A body that could not be stopped at shutdown
//! keeps its record. (That 1,000 names in one process are distinct is a unit test of the
//! naming function, `runtime/src/identity.rs`: building 1,000 runtimes is too slow.)

#![allow(clippy::extra_unused_type_parameters)] // every test takes the backend, used or not

#[macro_use]
mod common;

use std::time::Duration;

use async_exec::{async_exec, Backend, Context, Data, Runtime};
use common::{now_ms, Probe, TestDb};

/// Runs until its lease is lost, or 15 s.
#[async_exec(type = SaveAsync, max_attempts = 3, timeout = "1m")]
async fn held(probe: Data<Probe>, ctx: Context) {
    probe.record("held started", ctx.attempt());
    tokio::select! {
        _ = tokio::time::sleep(Duration::from_secs(15)) => {}
        _ = ctx.cancelled() => {}
    }
}

/// Blocks its thread for 7 s: no abort ends it sooner.
#[async_exec(type = SaveAsync, max_attempts = 3, timeout = "1m")]
async fn unstoppable(probe: Data<Probe>, ctx: Context) {
    probe.record("unstoppable started", ctx.attempt());
    std::thread::sleep(Duration::from_secs(7));
}

#[async_exec(type = SaveAsync, max_attempts = 3)]
async fn quick(probe: Data<Probe>, ctx: Context) {
    probe.record("quick", ctx.attempt());
}

fn probe(rt: &Runtime) -> Data<Probe> {
    rt.data::<Probe>().expect("a probe")
}

/// Whether record `id` is `running` under `owner` at attempt `attempt`, with its lease
/// ending at `until` when given.
async fn held_as(db: &TestDb, id: i64, owner: &str, attempt: i32, until: Option<i64>) -> bool {
    let until = until.map_or(String::new(), |u| format!(" AND lease_until = {u}"));
    db.count(&format!(
        "async_req WHERE id = {id} AND status = 'running' AND lease_owner = '{owner}' \
         AND exec_count = {attempt}{until}"
    ))
    .await
        == 1
}

/// Record `id`, held by this instance at attempt 1, is claimed by its twin (the same
/// name) at attempt 2, its lease set to end at `until`.
async fn taken_by_a_twin(db: &TestDb, id: i64, until: i64) {
    db.exec(&format!(
        "UPDATE async_req SET exec_count = exec_count + 1, lease_until = {until} WHERE id = {id}"
    ))
    .await;
}

/// A record this instance claimed, taken over by a twin at the next attempt: this
/// instance's heartbeat does not renew it (it did, matching the name alone), and its body
/// here is told the lease is lost.
async fn a_twins_record_is_not_renewed<DB: Backend>(db: TestDb) {
    let a = db.builder().start().await.expect("start");
    let id = held().on(&a).await.expect("call").id.expect("stored");
    probe(&a).wait_runs("held started", 1).await;
    let until = now_ms() + 3_600_000;
    taken_by_a_twin(&db, id, until).await;
    let report = a.heartbeat().run_once().await.expect("heartbeat");
    assert!(
        held_as(&db, id, a.instance(), 2, Some(until)).await,
        "the twin's lease was renewed by this instance ({report:?})"
    );
    assert_eq!(report.renewed, 0, "{report:?}");
    assert_eq!(report.lost, 1, "{report:?}");
    a.shutdown().await.expect("shutdown");
    assert!(
        held_as(&db, id, a.instance(), 2, Some(until)).await,
        "the twin's record was handed back by this instance's shutdown"
    );
}

/// At shutdown this instance hands back what its pool holds, by (id, attempt): neither a
/// record its twin took over at the next attempt, nor one it never claimed that runs
/// under the same name (it handed back everything `running` under its name).
async fn a_twins_records_survive_this_instances_shutdown<DB: Backend>(db: TestDb) {
    let a = db
        .builder()
        .shutdown_grace(Duration::from_millis(200))
        .start()
        .await
        .expect("start");
    let id = held().on(&a).await.expect("call").id.expect("stored");
    probe(&a).wait_runs("held started", 1).await;
    let until = now_ms() + 3_600_000;
    taken_by_a_twin(&db, id, until).await;
    let other = db.insert_raw("twins::quick", "s", "{}").await;
    db.exec(&format!(
        "UPDATE async_req SET status = 'running', exec_count = 1, lease_owner = '{}', \
         lease_until = {until} WHERE id = {other}",
        a.instance()
    ))
    .await;
    let report = a.shutdown().await.expect("shutdown");
    assert!(
        held_as(&db, id, a.instance(), 2, Some(until)).await,
        "the record the twin took over was handed back ({report:?})"
    );
    assert!(
        held_as(&db, other, a.instance(), 1, Some(until)).await,
        "the twin's own record was handed back ({report:?})"
    );
    assert_eq!(report.released, 0, "{report:?}");
}

/// A body that abort did not end within shutdown's wait may still be running: its record
/// is not handed back (another instance would run it at once, twice at the same time),
/// and the report counts it.
async fn a_body_that_could_not_be_stopped_keeps_its_record<DB: Backend>(db: TestDb) {
    let a = db
        .builder()
        .shutdown_grace(Duration::from_millis(100))
        .start()
        .await
        .expect("start");
    let id = unstoppable()
        .on(&a)
        .await
        .expect("call")
        .id
        .expect("stored");
    probe(&a).wait_runs("unstoppable started", 1).await;
    let report = a.shutdown().await.expect("shutdown");
    assert_eq!(report.unstopped, 1, "{report:?}");
    assert_eq!(report.released, 0, "{report:?}");
    assert!(
        held_as(&db, id, a.instance(), 1, None).await,
        "the record of a body still running was handed back ({report:?})"
    );
}

/// The longest application name there is (255 characters) fits the instance's name in
/// every column that holds it (MariaDB's `lease_owner` and `async_log.worker` were
/// `VARCHAR(255)`: a claim failed with "Data too long").
async fn the_longest_application_name_fits<DB: Backend>(db: TestDb) {
    let a = db
        .builder()
        .application_name("a".repeat(255))
        .log_success(true)
        .start()
        .await
        .expect("start");
    assert!(a.instance().len() > 255, "{}", a.instance());
    quick().on(&a).await.expect("call");
    probe(&a)
        .wait_runs_within("quick", 1, Duration::from_secs(5))
        .await;
    a.wait_idle().await;
    assert_eq!(
        db.count(&format!(
            "async_log WHERE outcome = 'success' AND worker = '{}'",
            a.instance()
        ))
        .await,
        1
    );
    a.shutdown().await.expect("shutdown");
}

backend_suite!(
    a_twins_record_is_not_renewed,
    a_twins_records_survive_this_instances_shutdown,
    a_body_that_could_not_be_stopped_keeps_its_record,
    the_longest_application_name_fits,
);

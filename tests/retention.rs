//! Issue 9: the retention sweep (`Settings::retention`), on fixtures written with raw SQL
//! and `run_once`, on every backend: which records and attempt logs it prunes, that it
//! keeps what may still run, that `None` keeps everything, and that instances running it
//! at the same time delete each row once.

#![allow(clippy::extra_unused_type_parameters)] // every test takes the backend, used or not

#[macro_use]
mod common;

use std::time::Duration;

use common::{now_ms, TestDb};

const DAY_MS: i64 = 86_400_000;

/// Inserts a record of an executor no runtime here knows, in `status`, last changed at
/// `updated`; returns its id.
async fn record(db: &TestDb, status: &str, updated: i64) -> i64 {
    db.exec(&format!(
        "INSERT INTO async_req (application_name, executor, sign, strategy, status, exec_count, \
         max_attempts, param_json, remark, priority, run_at, create_time, update_time) \
         VALUES ('tests', 'retention::fixture', '0', 'SaveAsync', '{status}', 1, 5, '{{}}', '', 0, \
         {updated}, {updated}, {updated})"
    ))
    .await;
    let pool = sqlx::AnyPool::connect(&db.url).await.unwrap();
    let (id,): (i64,) = sqlx::query_as("SELECT MAX(id) FROM async_req")
        .fetch_one(&pool)
        .await
        .unwrap();
    pool.close().await;
    id
}

/// An attempt log of request `req`, finished at `finished`, by an instance of `tests`.
async fn log(db: &TestDb, req: i64, finished: i64) {
    log_by(db, req, finished, "tests@host:1:00").await;
}

/// An attempt log of request `req`, finished at `finished`, by the instance `worker`.
async fn log_by(db: &TestDb, req: i64, finished: i64, worker: &str) {
    db.exec(&format!(
        "INSERT INTO async_log (req_id, attempt, worker, started, finished, outcome, error) \
         VALUES ({req}, 1, '{worker}', {finished}, {finished}, 'error', 'e')"
    ))
    .await;
}

async fn exists(db: &TestDb, id: i64) -> bool {
    db.count(&format!("async_req WHERE id = {id}")).await == 1
}

/// Finished records (success, cancelled, dead) past the retention go, with their logs;
/// so do old logs whose request is gone. Recent finished records, waiting and failed
/// records of any age, their logs, and recent orphan logs stay.
async fn finished_records_and_old_logs_past_the_retention_are_pruned<DB: async_exec::Backend>(
    db: TestDb,
) {
    let rt = db
        .builder()
        .run_workers(false)
        .retention(Some(Duration::from_secs(7 * 86_400)))
        .start()
        .await
        .unwrap();
    let now = now_ms();
    let (old, recent) = (now - 8 * DAY_MS, now - DAY_MS);
    let mut gone = Vec::new();
    for status in ["success", "cancelled", "dead"] {
        gone.push(record(&db, status, old).await);
    }
    let mut kept = Vec::new();
    for (status, updated) in [
        ("success", recent),
        ("dead", recent),
        ("failed", old),
        ("init", old),
    ] {
        kept.push(record(&db, status, updated).await);
    }
    for &id in &gone {
        log(&db, id, old).await;
    }
    let failed_old = kept[2];
    log(&db, failed_old, old).await;
    log(&db, 999_999_001, old).await; // its request is gone: pruned
    log(&db, 999_999_002, recent).await; // gone too, but recent: kept
                                         // Issue 18 item 11: old orphans of other applications (`other`, and `tests@x`, whose
                                         // name starts like this one's) are theirs to prune, not this one's (seen failing:
                                         // they were pruned too).
    log_by(&db, 999_999_003, old, "other@host:1:00").await;
    log_by(&db, 999_999_004, old, "tests@x@host:1:00").await;

    let report = rt.retention().run_once().await.unwrap();
    assert_eq!((report.requests, report.attempt_logs), (3, 4), "{report:?}");
    for id in gone {
        assert!(!exists(&db, id).await, "{id} is past the retention");
    }
    for &id in &kept {
        assert!(exists(&db, id).await, "{id} must be kept");
    }
    assert_eq!(
        db.count(&format!("async_log WHERE req_id = {failed_old}"))
            .await,
        1
    );
    assert_eq!(db.count("async_log WHERE req_id = 999999002").await, 1);
    assert_eq!(db.count("async_log WHERE req_id > 999999002").await, 2);
    assert_eq!(db.count("async_log").await, 4);
    let again = rt.retention().run_once().await.unwrap();
    assert_eq!((again.requests, again.attempt_logs), (0, 0));
    rt.shutdown().await.unwrap();
}

/// `retention(None)` keeps every record and log, `audit_retention(None)` every audit row.
async fn no_retention_keeps_everything<DB: async_exec::Backend>(db: TestDb) {
    let rt = db
        .builder()
        .run_workers(false)
        .retention(None)
        .audit_retention(None)
        .start()
        .await
        .unwrap();
    let old = now_ms() - 400 * DAY_MS;
    let id = record(&db, "success", old).await;
    log(&db, id, old).await;
    log(&db, 999_999_003, old).await;
    audit_row(&db, "tests", old).await;
    let report = rt.retention().run_once().await.unwrap();
    assert_eq!(
        (report.requests, report.attempt_logs, report.batches),
        (0, 0, 0)
    );
    assert!(exists(&db, id).await);
    assert_eq!(db.count("async_log").await, 2);
    assert_eq!(db.count("async_audit").await, 1);
    rt.shutdown().await.unwrap();
}

/// An audit row of `application`, written at `at`.
async fn audit_row(db: &TestDb, application: &str, at: i64) {
    db.exec(&format!(
        "INSERT INTO async_audit (application_name, actor, action, target, affected, \
         create_time) VALUES ('{application}', 'alice', 'retry', '{{}}', 1, {at})"
    ))
    .await;
}

/// Issue 30: audit rows were kept forever. They have a retention of their own (default
/// 90 days), pruned by the same sweep: older rows of this application go, recent ones
/// and other applications' stay.
async fn audit_rows_past_their_retention_are_pruned<DB: async_exec::Backend>(db: TestDb) {
    let rt = db.builder().run_workers(false).start().await.unwrap();
    let now = now_ms();
    for _ in 0..3 {
        audit_row(&db, "tests", now - 100 * DAY_MS).await;
    }
    audit_row(&db, "tests", now - 80 * DAY_MS).await;
    audit_row(&db, "other", now - 100 * DAY_MS).await;
    let report = rt.retention().run_once().await.unwrap();
    assert_eq!(report.audit_rows, 3, "{report:?}");
    assert_eq!(
        db.count("async_audit WHERE application_name = 'tests'")
            .await,
        1
    );
    assert_eq!(
        db.count("async_audit WHERE application_name = 'other'")
            .await,
        1
    );
    rt.shutdown().await.unwrap();
    // A shorter retention of its own.
    let rt = db
        .builder()
        .run_workers(false)
        .audit_retention(Some(Duration::from_secs(30 * 86_400)))
        .start()
        .await
        .unwrap();
    let report = rt.retention().run_once().await.unwrap();
    assert_eq!(report.audit_rows, 1, "{report:?}");
    assert_eq!(
        db.count("async_audit WHERE application_name = 'tests'")
            .await,
        0
    );
    rt.shutdown().await.unwrap();
}

/// Two instances pruning the same backlog (more than one batch of it) at once delete
/// every row once between them.
async fn instances_pruning_at_once_delete_each_row_once<DB: async_exec::Backend>(db: TestDb) {
    let start = || {
        db.builder()
            .run_workers(false)
            .retention(Some(Duration::from_secs(86_400)))
            .start()
    };
    let (a, b) = (start().await.unwrap(), start().await.unwrap());
    let old = now_ms() - 30 * DAY_MS;
    const N: usize = 2_500;
    let rows: Vec<String> = (0..N)
        .map(|_| {
            format!(
                "('tests', 'retention::fixture', '0', 'SaveAsync', 'success', 1, 5, '{{}}', '', 0, \
                 {old}, {old}, {old})"
            )
        })
        .collect();
    db.exec(&format!(
        "INSERT INTO async_req (application_name, executor, sign, strategy, status, exec_count, \
         max_attempts, param_json, remark, priority, run_at, create_time, update_time) VALUES {}",
        rows.join(", ")
    ))
    .await;
    let (sweep_a, sweep_b) = (a.retention(), b.retention());
    let (ra, rb) = tokio::join!(sweep_a.run_once(), sweep_b.run_once());
    let (ra, rb) = (ra.unwrap(), rb.unwrap());
    assert_eq!(ra.requests + rb.requests, N as u64, "{ra:?} {rb:?}");
    assert!(ra.batches + rb.batches >= 4, "{ra:?} {rb:?}");
    assert_eq!(db.count("async_req").await, 0);
    a.shutdown().await.unwrap();
    b.shutdown().await.unwrap();
}

backend_suite!(
    finished_records_and_old_logs_past_the_retention_are_pruned,
    no_retention_keeps_everything,
    audit_rows_past_their_retention_are_pruned,
    instances_pruning_at_once_delete_each_row_once,
);

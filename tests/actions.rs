//! Issue 18, "The console under attack": an operator's action on many requests goes in
//! batches of 500, each its own transaction, so that it does not hold SQLite's writer
//! (or the rows' locks) for seconds; every matching request is changed once, across the
//! batches' seams, and nothing that does not match.
#![allow(clippy::extra_unused_type_parameters)] // every test takes the backend, used or not

#[macro_use]
mod common;

use async_exec::{Action, Backend, RequestQuery, Status, Tx};
use common::{now_ms, TestDb};

/// Writes `n` `failed` records (due in an hour) of `executor` (one statement per 500), each with an attempt log.
async fn dead_records(db: &TestDb, executor: &str, n: usize) {
    let now = now_ms();
    let due = now + 3_600_000;
    let rows: Vec<String> = (0..n)
        .map(|_| {
            format!(
                "('tests', '{executor}', 's', 'SaveAsync', 'failed', 1, 5, '{{}}', '', 0, {due}, 'failed once', {now}, {now})"
            )
        })
        .collect();
    for chunk in rows.chunks(500) {
        db.exec(&format!(
            "INSERT INTO async_req (application_name, executor, sign, strategy, status, exec_count, \
             max_attempts, param_json, remark, priority, run_at, last_error, create_time, update_time) \
             VALUES {}",
            chunk.join(", ")
        ))
        .await;
    }
    db.exec(&format!(
        "INSERT INTO async_log (req_id, attempt, worker, started, finished, outcome, error) \
         SELECT id, 1, 'w', {now}, {now}, 'failed', 'gave up' FROM async_req WHERE executor = '{executor}'"
    ))
    .await;
}

/// 1,234 failed requests of one executor and 10 of another: a cancel of the first changes
/// its 1,234 (three batches) and not the others; a delete of them removes them and their
/// attempt logs, and leaves the others'.
async fn an_action_on_many_requests_changes_each_once_in_batches<DB: Backend>(db: TestDb) {
    let rt = db.builder().run_workers(false).start().await.unwrap();
    dead_records(&db, "actions::many", 1_234).await;
    dead_records(&db, "actions::other", 10).await;
    let many = RequestQuery::default().executor("actions::many");
    let cancelled = rt.act(Action::Cancel, &many, "ops").await.unwrap();
    assert_eq!(cancelled, 1_234);
    let status = |status: Status| format!("async_req WHERE status = '{}'", status.as_str());
    assert_eq!(db.count(&status(Status::Cancelled)).await, 1_234);
    let failed = db.count(&status(Status::Failed)).await;
    assert_eq!(failed, 10, "the other executor's are left");

    let deleted = rt.act(Action::Delete, &many, "ops").await.unwrap();
    assert_eq!(deleted, 1_234);
    assert_eq!(db.count("async_req").await, 10);
    assert_eq!(
        db.count("async_log").await,
        10,
        "the deleted requests' logs went with them"
    );
    assert_eq!(rt.act(Action::Delete, &many, "ops").await.unwrap(), 0);
    rt.shutdown().await.unwrap();
}

/// `act_up_to` (the console's confirmed action): with more matching than confirmed,
/// nothing changes and the error says how many match; confirmed for exactly as many, it
/// changes each once across the batches' seams (1,234: three batches), attempt logs of
/// deleted requests included; a request that matches only after the action read its ids
/// is left (on SQLite, with a held write lock, in `console_attack.rs`).
async fn a_confirmed_action_changes_no_more_than_confirmed<DB: Backend>(db: TestDb) {
    let rt = db.builder().run_workers(false).start().await.unwrap();
    dead_records(&db, "actions::many", 1_234).await;
    dead_records(&db, "actions::other", 10).await;
    let many = RequestQuery::default().executor("actions::many");
    let refused = rt
        .act_up_to(Action::Cancel, &many, 1_233, "ops")
        .await
        .unwrap_err();
    assert!(
        matches!(
            refused,
            async_exec::Error::MoreMatch {
                matching: 1_234,
                up_to: 1_233
            }
        ),
        "{refused}"
    );
    assert!(
        refused.to_string().contains("1234 requests match"),
        "{refused}"
    );
    assert_eq!(db.count("async_req WHERE status = 'failed'").await, 1_244);
    assert_eq!(
        db.count("async_audit").await,
        0,
        "nothing changed, nothing audited"
    );
    let cancelled = rt
        .act_up_to(Action::Cancel, &many, 1_234, "ops")
        .await
        .unwrap();
    assert_eq!(cancelled, 1_234);
    assert_eq!(
        db.count("async_req WHERE status = 'cancelled'").await,
        1_234
    );
    let deleted = rt
        .act_up_to(Action::Delete, &many, 5_000, "ops")
        .await
        .unwrap();
    assert_eq!(deleted, 1_234);
    assert_eq!(db.count("async_req").await, 10);
    assert_eq!(db.count("async_log").await, 10);
    let absurd = rt.act_up_to(Action::Delete, &many, u64::MAX, "ops").await;
    assert!(
        matches!(absurd, Err(async_exec::Error::InvalidFilter(_))),
        "{absurd:?}"
    );
    rt.shutdown().await.unwrap();
}

/// Issue 30: actions inside the caller's transaction (`rt.act_matching(..).within(&mut
/// tx)`): 1,234 failed requests of one executor (three statements of 500) and 10 of
/// another; a rollback keeps all; a cancel, then a retry of what is cancelled, then a
/// delete, each committed, change the 1,234 only, with their attempt logs on delete.
async fn actions_in_the_callers_transaction_go_with_it<DB: Backend>(db: TestDb) {
    let rt = db.builder().run_workers(false).start().await.unwrap();
    dead_records(&db, "actions::many", 1_234).await;
    dead_records(&db, "actions::other", 10).await;
    let many = RequestQuery::default().executor("actions::many");
    let status = |status: Status| format!("async_req WHERE status = '{}'", status.as_str());

    let mut tx: Tx<DB> = rt.begin().await.unwrap();
    let cancelled = rt
        .act_matching(Action::Cancel, &many)
        .within(&mut tx)
        .await
        .unwrap();
    assert_eq!(cancelled, 1_234);
    tx.rollback().await.unwrap();
    assert_eq!(
        db.count(&status(Status::Failed)).await,
        1_244,
        "rolled back"
    );

    let mut tx: Tx<DB> = rt.begin().await.unwrap();
    let cancelled = rt
        .act_matching(Action::Cancel, &many)
        .within(&mut tx)
        .await
        .unwrap();
    // Within the same transaction the next action sees what the first did.
    let retried = rt
        .act_matching(Action::Retry, &many)
        .within(&mut tx)
        .await
        .unwrap();
    tx.commit().await.unwrap();
    assert_eq!((cancelled, retried), (1_234, 1_234));
    assert_eq!(db.count(&status(Status::Init)).await, 1_234);
    assert_eq!(db.count(&status(Status::Failed)).await, 10);

    let mut tx: Tx<DB> = rt.begin().await.unwrap();
    let deleted = rt
        .act_matching(Action::Delete, &many)
        .within(&mut tx)
        .await
        .unwrap();
    tx.commit().await.unwrap();
    assert_eq!(deleted, 1_234);
    assert_eq!(db.count("async_req").await, 10);
    assert_eq!(
        db.count("async_log").await,
        10,
        "the deleted ones' logs went"
    );
    // Nothing matches now: 0, and nothing else changes.
    let mut tx: Tx<DB> = rt.begin().await.unwrap();
    let none = rt
        .act_matching(Action::ReplayDead, &many)
        .within(&mut tx)
        .await
        .unwrap();
    tx.commit().await.unwrap();
    assert_eq!(none, 0);
    rt.shutdown().await.unwrap();
}

backend_suite!(
    actions_in_the_callers_transaction_go_with_it,
    an_action_on_many_requests_changes_each_once_in_batches,
    a_confirmed_action_changes_no_more_than_confirmed
);

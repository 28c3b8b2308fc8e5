//! An operator's look at, and change of, one record (the console's and the CLI's
//! `show`, `retry`, `cancel`, `delete`), written once for every backend over its
//! [`SqlRunner`]. A change reads the record's status, locked until its transaction ends
//! (`FOR UPDATE`; SQLite's one writer), so that it cannot race with a claim or a
//! completion, and decides on it.

use std::str::FromStr;

use super::sql::{Cells, Col, Sql, SqlRunner, Txn};
use super::REQUEST_COLUMNS;
use crate::base::error::Result;
use crate::base::record::{AttemptLog, Request, RequestId, Status};

/// One record.
pub(crate) async fn get<S: SqlRunner + ?Sized>(
    store: &S,
    application: &str,
    id: RequestId,
) -> Result<Option<Request>> {
    let mut s = store.sql(&format!(
        "SELECT {REQUEST_COLUMNS} FROM async_req WHERE application_name = "
    ));
    s.bind_text(application).push(" AND id = ").bind_int(id);
    let mut found = store.fetch_requests(&s).await?;
    attach_tags(store, application, &mut found).await?;
    Ok(found.into_iter().next())
}

/// Fills in the tags of `requests` (of `application`): one read through the tag table's
/// index of requests.
pub(crate) async fn attach_tags<S: SqlRunner + ?Sized>(
    store: &S,
    application: &str,
    requests: &mut [Request],
) -> Result<()> {
    if requests.is_empty() {
        return Ok(());
    }
    let mut s = store.sql("SELECT req_id, tag FROM async_tag WHERE req_id IN (");
    for (i, request) in requests.iter().enumerate() {
        if i > 0 {
            s.push(", ");
        }
        s.bind_int(request.id);
    }
    s.push(") AND application_name = ")
        .bind_text(application)
        .push(" ORDER BY tag");
    for mut row in store.fetch_rows(&s, &[Col::Int, Col::Text]).await? {
        let (id, tag) = (row.int()?, row.text()?);
        if let Some(request) = requests.iter_mut().find(|r| r.id == id) {
            request.tags.push(tag);
        }
    }
    Ok(())
}

/// How many records are in each status (statuses this version does not know left out).
pub(crate) async fn count_by_status<S: SqlRunner + ?Sized>(
    store: &S,
    application: &str,
) -> Result<Vec<(Status, i64)>> {
    let mut s = store.sql("SELECT status, COUNT(*) FROM async_req WHERE application_name = ");
    s.bind_text(application).push(" GROUP BY status");
    let rows = store.fetch_rows(&s, &[Col::Text, Col::Int]).await?;
    let mut counts = Vec::with_capacity(rows.len());
    for mut row in rows {
        let (status, n) = (row.text()?, row.int()?);
        if let Ok(status) = Status::from_str(&status) {
            counts.push((status, n));
        }
    }
    Ok(counts)
}

/// The attempts of one request, in the order they were written, unless the request
/// belongs to another application.
pub(crate) async fn logs<S: SqlRunner + ?Sized>(
    store: &S,
    application: &str,
    id: RequestId,
) -> Result<Vec<AttemptLog>> {
    let mut s = store.sql(
        "SELECT req_id, attempt, worker, started, finished, outcome, error FROM async_log \
         WHERE req_id = ",
    );
    s.bind_int(id)
        .push(
            " AND NOT EXISTS (SELECT 1 FROM async_req r \
             WHERE r.id = async_log.req_id AND r.application_name <> ",
        )
        .bind_text(application)
        .push(") ORDER BY id");
    store.fetch_logs(&s).await
}

/// How a record is run again ([`retry_now`]).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct Rerun {
    /// A `success` runs again too (a replay).
    pub(crate) replay_success: bool,
    /// Its durable steps are deleted in the same transaction: every step runs again.
    pub(crate) reset_steps: bool,
}

/// Makes a record due now: `failed` keeps its attempts; `dead` and `cancelled` (and
/// `success`, with `replay_success`) start over; with `reset_steps` its steps go too.
/// Returns the status it had.
pub(crate) async fn retry_now<S: SqlRunner + ?Sized>(
    store: &S,
    application: &str,
    id: RequestId,
    now: i64,
    rerun: Rerun,
) -> Result<Option<Status>> {
    change(store, application, id, |status| {
        if !status.may_retry(rerun.replay_success) {
            return Vec::new();
        }
        // A failed record keeps its attempts; a terminal one is replayed with fresh ones.
        // MySQL assigns left to right: `exec_count` reads the old status, so it goes first.
        let mut s = store.sql(
            "UPDATE async_req SET exec_count = CASE WHEN status = 'failed' THEN exec_count \
             ELSE 0 END, deadline_at = CASE WHEN status = 'failed' THEN deadline_at ELSE NULL END, \
             cancel_requested = NULL, status = 'failed', run_at = ",
        );
        s.bind_int(now).push(", update_time = ").bind_int(now);
        let mut statements = vec![of_record(s, application, id)];
        if rerun.reset_steps {
            // In the transaction that holds the record locked: no claim of the record
            // can read the steps in between.
            let mut steps = store.sql("DELETE FROM async_step WHERE req_id = ");
            steps
                .bind_int(id)
                .push(" AND application_name = ")
                .bind_text(application);
            statements.push(steps);
        }
        statements
    })
    .await
}

/// Cancels a record that is `init` or `failed`; asks a `running` one to stop (its
/// instance tells the body, and the record ends `cancelled` unless the body succeeds).
/// Returns the status it had.
pub(crate) async fn cancel<S: SqlRunner + ?Sized>(
    store: &S,
    application: &str,
    id: RequestId,
    now: i64,
) -> Result<Option<Status>> {
    change(store, application, id, |status| {
        if status == Status::Running {
            let mut s =
                store.sql("UPDATE async_req SET cancel_requested = COALESCE(cancel_requested, ");
            s.bind_int(now).push(")");
            let mut s = of_record(s, application, id);
            s.push(" AND status = 'running'");
            return vec![s];
        }
        if !matches!(status, Status::Init | Status::Failed) {
            return Vec::new();
        }
        let mut s = store.sql("UPDATE async_req SET status = 'cancelled', update_time = ");
        s.bind_int(now);
        vec![of_record(s, application, id)]
    })
    .await
}

/// Deletes a record that is not `running`, with its log rows. Returns the status it had.
pub(crate) async fn delete<S: SqlRunner + ?Sized>(
    store: &S,
    application: &str,
    id: RequestId,
) -> Result<Option<Status>> {
    change(store, application, id, |status| {
        if status == Status::Running {
            return Vec::new();
        }
        let mut logs = store.sql("DELETE FROM async_log WHERE req_id = ");
        logs.bind_int(id);
        vec![
            of_record(store.sql("DELETE FROM async_req"), application, id),
            logs,
        ]
    })
    .await
}

/// `s` with ` WHERE application_name = .. AND id = ..`.
fn of_record(mut s: Sql, application: &str, id: RequestId) -> Sql {
    s.push(" WHERE application_name = ")
        .bind_text(application)
        .push(" AND id = ")
        .bind_int(id);
    s
}

/// In one transaction: reads the record's status, locked, then runs the statements
/// `statements` makes of it (none when the record is gone, or its status unknown).
async fn change<S, F>(
    store: &S,
    application: &str,
    id: RequestId,
    statements: F,
) -> Result<Option<Status>>
where
    S: SqlRunner + ?Sized,
    F: Fn(Status) -> Vec<Sql> + Sync,
{
    let lock = store.dialect().lock_rows();
    let mut read = of_record(store.sql("SELECT status FROM async_req"), application, id);
    read.push(lock);
    let status_of =
        |rows: &[Cells]| -> Option<Status> { Status::from_str(rows.first()?.first_text()?).ok() };
    let change = |rows: &[Cells]| status_of(rows).map(&statements).unwrap_or_default();
    let (rows, _) = store
        .read_then_write(Txn::Record, Some((&read, &[Col::Text])), &change)
        .await?;
    Ok(status_of(&rows))
}

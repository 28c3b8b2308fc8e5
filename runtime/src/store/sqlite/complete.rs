//! The SQLite SQL of outcomes: each write fenced by owner and attempt, and which were not
//! written found out only when a write fell short.
//!
//! Most batches are successes of one attempt with nothing to log: one `DELETE`, its own
//! transaction. When it deletes fewer records than it was given, those still there were
//! fenced off; and when exactly as many of them are gone as it deleted, the gone ones are
//! those it deleted (ids are never reused: `AUTOINCREMENT`). When more are gone, a record
//! of the batch was deleted before this statement by someone else (another attempt of it,
//! run after its lease expired, succeeded first; an operator deleted it): the statement's
//! one count cannot say which of the gone ones it deleted, so none of them is reported
//! written, and their listeners are not called. Asking the `DELETE` for its ids
//! (`RETURNING`) would tell, at the cost of a row sent back per record on every batch.
//!
//! Any other batch is one transaction. When one of its group deletes falls short, it is
//! rolled back and written again with `RETURNING`, which tells them apart; its updates
//! tell one by one.

use std::collections::HashSet;

use sqlx::{Sqlite, SqliteConnection};

use super::json_list;
use crate::base::error::Result;
use crate::base::record::RequestId;
use crate::store::{fence_groups, Completion, Fence, Positioned, Wrote};

/// Writes outcomes, each fenced by owner and attempt; says which were not written.
pub(super) async fn complete_many(
    conn: &mut SqliteConnection,
    completions: &[Completion],
) -> Result<Wrote> {
    let (quick, rest): (Positioned, Positioned) = completions
        .iter()
        .enumerate()
        .partition(|(_, c)| c.is_plain_delete());
    let quick: Vec<&Completion> = quick.into_iter().map(|(_, c)| c).collect();
    let groups = fence_groups(&quick);
    if rest.is_empty() && groups.len() == 1 {
        // One statement: its own transaction.
        let (fence, ids) = &groups[0];
        let rows = delete_fenced(&mut *conn, fence.owner, fence.attempt, ids).await?;
        if rows == ids.len() as u64 {
            return Ok(Wrote::all(completions.len()));
        }
        return deleted_among(conn, completions, *fence, ids, rows).await;
    }
    if let Some(wrote) = write_all(conn, completions, &groups, &rest, false).await? {
        return Ok(wrote);
    }
    let wrote = write_all(conn, completions, &groups, &rest, true).await?;
    Ok(wrote.expect("a write that notes its records never falls short"))
}

/// Writes the groups of plain deletes and the other outcomes in one transaction. Unless
/// `noting`, gives up (rolled back: `None`) when a group deletes fewer records than it
/// holds ids; `noting`, asks each group which it deleted.
async fn write_all<'a>(
    conn: &mut SqliteConnection,
    completions: &'a [Completion],
    groups: &[(Fence<'a>, Vec<RequestId>)],
    rest: &[(usize, &'a Completion)],
    noting: bool,
) -> Result<Option<Wrote>> {
    let mut tx = sqlx::Connection::begin(&mut *conn).await?;
    let mut rows = 0;
    // Noting: every record written. Else: the outcomes of `rest` fenced off.
    let mut written: HashSet<(RequestId, &'a str, i32)> = HashSet::new();
    let mut unwritten = Vec::new();
    for (fence, ids) in groups {
        if noting {
            let deleted: Vec<RequestId> = sqlx::query_scalar(
                "DELETE FROM async_req WHERE id IN (SELECT value FROM json_each(?1)) \
                 AND status = 'running' AND lease_owner = ?2 AND exec_count = ?3 RETURNING id",
            )
            .bind(json_list(ids))
            .bind(fence.owner)
            .bind(fence.attempt)
            .fetch_all(&mut *tx)
            .await?;
            written.extend(
                deleted
                    .into_iter()
                    .map(|id| (id, fence.owner, fence.attempt)),
            );
            continue;
        }
        let deleted = delete_fenced(&mut *tx, fence.owner, fence.attempt, ids).await?;
        if deleted < ids.len() as u64 {
            tx.rollback().await?;
            return Ok(None);
        }
        rows += deleted;
    }
    for &(position, c) in rest {
        let now = c.finished;
        let result = match c.result.update() {
            None => {
                sqlx::query(
                    "DELETE FROM async_req WHERE id = ? AND status = 'running' \
                     AND lease_owner = ? AND exec_count = ?",
                )
                .bind(c.id)
                .bind(&*c.owner)
                .bind(c.attempt)
                .execute(&mut *tx)
                .await?
            }
            Some((status, error, run_at)) => {
                sqlx::query(
                    // A cancel asked for after the body ended, before this write: the
                    // request it would put back to wait is cancelled instead.
                    "UPDATE async_req SET status = CASE WHEN cancel_requested IS NOT NULL \
                       AND ? IN ('failed', 'init') THEN 'cancelled' ELSE ? END, \
                     run_at = COALESCE(?, run_at), \
                     last_error = ?, result_json = ?, lease_owner = NULL, lease_until = NULL, \
                     max_attempts = CASE WHEN max_attempts < 2147483647 \
                       THEN max_attempts + ? ELSE max_attempts END, \
                     update_time = ? WHERE id = ? AND status = 'running' AND lease_owner = ? \
                     AND exec_count = ?",
                )
                .bind(status)
                .bind(status)
                .bind(run_at)
                .bind(error)
                .bind(c.result_json.as_deref())
                // A snooze (the one outcome that writes `init`): one more attempt.
                .bind(i32::from(status == "init"))
                .bind(now)
                .bind(c.id)
                .bind(&*c.owner)
                .bind(c.attempt)
                .execute(&mut *tx)
                .await?
            }
        };
        if result.rows_affected() == 0 {
            unwritten.push(position);
            continue;
        }
        if noting {
            written.insert((c.id, &*c.owner, c.attempt));
        }
        rows += 1;
        if let Some(log) = &c.log {
            crate::store::shared::log_insert::<sqlx::Sqlite>(&mut tx, log).await?;
        }
    }
    tx.commit().await?;
    if noting {
        return Ok(Some(Wrote::of(completions, written)));
    }
    // Every group was written whole: only outcomes of `rest` may be missing, in order.
    Ok(Some(Wrote { rows, unwritten }))
}

/// After the one `DELETE` of `ids` (every completion's, one fence) deleted `rows` of
/// them, fewer than it was given: which it deleted, when that can be told (see the
/// [module docs](self)). Runs on the writer, as the `DELETE` did.
async fn deleted_among(
    conn: &mut SqliteConnection,
    completions: &[Completion],
    fence: Fence<'_>,
    ids: &[RequestId],
    rows: u64,
) -> Result<Wrote> {
    let present: HashSet<RequestId> = sqlx::query_scalar::<_, RequestId>(
        "SELECT id FROM async_req WHERE id IN (SELECT value FROM json_each(?))",
    )
    .bind(json_list(ids))
    .fetch_all(&mut *conn)
    .await?
    .into_iter()
    .collect();
    let gone: HashSet<RequestId> = ids
        .iter()
        .copied()
        .filter(|id| !present.contains(id))
        .collect();
    if gone.len() as u64 == rows {
        let written = gone
            .into_iter()
            .map(|id| (id, fence.owner, fence.attempt))
            .collect();
        return Ok(Wrote::of(completions, written));
    }
    crate::log::debug!(
        completions = completions.len(),
        rows,
        gone = gone.len(),
        "more records of a batch of successes are gone than it deleted: it cannot tell which \
         it deleted, and reports none of them written"
    );
    Ok(Wrote {
        rows,
        unwritten: (0..completions.len()).collect(),
    })
}

/// Deletes the `running` records of `ids` that `owner` holds at `attempt`.
pub(super) async fn delete_fenced<'e>(
    conn: impl sqlx::Executor<'e, Database = Sqlite>,
    owner: &str,
    attempt: i32,
    ids: &[RequestId],
) -> Result<u64> {
    let done = sqlx::query(
        "DELETE FROM async_req WHERE id IN (SELECT value FROM json_each(?1)) \
         AND status = 'running' AND lease_owner = ?2 AND exec_count = ?3",
    )
    .bind(json_list(ids))
    .bind(owner)
    .bind(attempt)
    .execute(conn)
    .await?;
    Ok(done.rows_affected())
}

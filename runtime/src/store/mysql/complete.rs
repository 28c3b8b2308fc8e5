//! The MySQL/MariaDB SQL of outcomes: one transaction per batch, each write fenced by owner
//! and attempt. Successes with nothing to log are deleted with one statement per fence and
//! chunk, which says only how many it deleted: when one deletes fewer than it was given,
//! the transaction is rolled back and written again noting which (the records that match
//! the fence are locked, `SELECT ... FOR UPDATE`, then deleted by id), since MySQL's
//! `DELETE` has no `RETURNING`. The other outcomes are written one by one, each telling
//! whether it was written.

use std::collections::HashSet;

use sqlx::{MySql, MySqlConnection, Row};

use super::{bind_list, marks, with_retry, MySqlStore, MAX_IN};
use crate::base::error::Result;
use crate::base::record::RequestId;
use crate::store::{fence_groups, Completion, Fence, Positioned, Wrote};

/// Writes outcomes, each fenced by owner and attempt; says which were not written.
pub(super) async fn complete_many(store: &MySqlStore, completions: &[Completion]) -> Result<Wrote> {
    if completions.is_empty() {
        return Ok(Wrote::default());
    }
    // In id order, as the rescuer locks them: fewer deadlocks.
    let mut sorted: Vec<(usize, &Completion)> = completions.iter().enumerate().collect();
    sorted.sort_by_key(|(_, c)| c.id);
    if let Some(wrote) = with_retry(|| complete_once(store, completions, &sorted, false)).await? {
        return Ok(wrote);
    }
    let wrote = with_retry(|| complete_once(store, completions, &sorted, true)).await?;
    Ok(wrote.expect("a write that notes its records never falls short"))
}

/// Writes `sorted` (the completions in id order, with their positions) in one
/// transaction. Unless `noting`, gives up (rolled back: `None`) when a delete of plain
/// successes deletes fewer records than it was given; `noting`, finds out which it deletes.
async fn complete_once<'a>(
    store: &MySqlStore,
    completions: &'a [Completion],
    sorted: &[(usize, &'a Completion)],
    noting: bool,
) -> Result<Option<Wrote>> {
    // The common case, successes with nothing to log: one DELETE per owner and chunk,
    // each row still fenced by owner and attempt.
    let (quick, rest): (Positioned, Positioned) = sorted
        .iter()
        .copied()
        .partition(|(_, c)| c.is_plain_delete());
    let quick: Vec<&Completion> = quick.into_iter().map(|(_, c)| c).collect();
    let mut tx = store.begin().await?;
    let mut rows = 0;
    // Noting: every record written. Else: the outcomes of `rest` fenced off.
    let mut written: HashSet<(RequestId, &'a str, i32)> = HashSet::new();
    let mut unwritten = Vec::new();
    for (fence, ids) in fence_groups(&quick) {
        // In id order, as every statement locks them.
        for chunk in ids.chunks(MAX_IN) {
            if noting {
                let held = lock_fenced(&mut tx, fence, chunk).await?;
                if !held.is_empty() {
                    rows += delete_fenced(&mut tx, fence, &held).await?;
                }
                written.extend(held.into_iter().map(|id| (id, fence.owner, fence.attempt)));
                continue;
            }
            let deleted = delete_fenced(&mut tx, fence, chunk).await?;
            if deleted < chunk.len() as u64 {
                tx.rollback().await?;
                return Ok(None);
            }
            rows += deleted;
        }
    }
    for (position, c) in rest {
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
        // The connection reports matched rows (CLIENT_FOUND_ROWS): 0 means fenced off.
        if result.rows_affected() == 0 {
            unwritten.push(position);
            continue;
        }
        if noting {
            written.insert((c.id, &*c.owner, c.attempt));
        }
        rows += 1;
        if let Some(log) = &c.log {
            crate::store::shared::log_insert::<sqlx::MySql>(&mut tx, log).await?;
        }
    }
    tx.commit().await?;
    if noting {
        return Ok(Some(Wrote::of(completions, written)));
    }
    // Every delete of plain successes was written whole: only outcomes of `rest` may be
    // missing (in id order here).
    unwritten.sort_unstable();
    Ok(Some(Wrote { rows, unwritten }))
}

/// Locks the `running` records of `ids` that the fence's owner holds at its attempt;
/// returns their ids.
async fn lock_fenced(
    conn: &mut MySqlConnection,
    fence: Fence<'_>,
    ids: &[RequestId],
) -> Result<Vec<RequestId>> {
    let sql = format!(
        "SELECT id FROM async_req WHERE id IN ({}) AND status = 'running' AND lease_owner = ? \
         AND exec_count = ? ORDER BY id FOR UPDATE",
        marks(ids.len())
    );
    let rows = bind_list(sqlx::query(&sql), ids)
        .bind(fence.owner)
        .bind(fence.attempt)
        .fetch_all(conn)
        .await?;
    rows.iter()
        .map(|row| Ok(row.try_get::<RequestId, _>(0)?))
        .collect()
}

/// Deletes running records by id, if still held by the fence's owner at its attempt.
async fn delete_fenced(
    conn: &mut MySqlConnection,
    fence: Fence<'_>,
    ids: &[RequestId],
) -> Result<u64> {
    let sql = format!(
        "DELETE FROM async_req WHERE id IN ({}) AND status = 'running' AND lease_owner = ? \
         AND exec_count = ?",
        marks(ids.len())
    );
    let query = bind_list(sqlx::query::<MySql>(&sql), ids)
        .bind(fence.owner)
        .bind(fence.attempt);
    Ok(query.execute(conn).await?.rows_affected())
}

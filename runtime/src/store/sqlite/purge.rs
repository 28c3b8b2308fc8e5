//! The SQLite SQL of purges: finished records and the log rows of requests that are gone.

use sqlx::{QueryBuilder, Sqlite, SqlitePool};

use crate::base::error::Result;
use crate::store::{PurgeBatch, Purged};

/// The ids of one batch, as a subquery: the oldest first.
fn doomed(q: &mut QueryBuilder<'_, Sqlite>, b: &PurgeBatch<'_>) {
    q.push("SELECT id FROM async_req WHERE application_name = ")
        .push_bind(b.application.to_owned())
        .push(" AND update_time < ")
        .push_bind(b.before)
        .push(" AND status IN (");
    let mut statuses = q.separated(", ");
    for status in b.statuses {
        statuses.push_bind(status.as_str());
    }
    q.push(") ORDER BY id LIMIT ").push_bind(b.limit);
}

/// One batch, in one transaction: its first statement is a write, so it holds the write
/// lock from the start and the second statement sees the same records.
pub(super) async fn requests(pool: &SqlitePool, b: &PurgeBatch<'_>) -> Result<Purged> {
    if b.statuses.is_empty() {
        return Ok(Purged::default());
    }
    let mut tx = pool.begin().await?;
    let mut logs = QueryBuilder::new("DELETE FROM async_log WHERE req_id IN (");
    doomed(&mut logs, b);
    logs.push(")");
    let logs = logs.build().execute(&mut *tx).await?.rows_affected();
    let mut requests = QueryBuilder::new("DELETE FROM async_req WHERE id IN (");
    doomed(&mut requests, b);
    requests.push(")");
    let requests = requests.build().execute(&mut *tx).await?.rows_affected();
    tx.commit().await?;
    Ok(Purged { requests, logs })
}

/// Up to `limit` log rows of `application` finished before `before` whose request is gone.
pub(super) async fn orphan_logs(
    pool: &SqlitePool,
    application: &str,
    before: i64,
    limit: i64,
) -> Result<u64> {
    let (prefix, chars) = crate::store::orphan_worker_prefix(application);
    let deleted = sqlx::query(
        "DELETE FROM async_log WHERE id IN (SELECT l.id FROM async_log l \
         WHERE l.finished < ?1 AND NOT EXISTS (SELECT 1 FROM async_req r WHERE r.id = l.req_id) \
         AND substr(l.worker, 1, ?3) = ?4 AND instr(substr(l.worker, ?3 + 1), '@') = 0 \
         ORDER BY l.id LIMIT ?2)",
    )
    .bind(before)
    .bind(limit)
    .bind(chars)
    .bind(&prefix)
    .execute(pool)
    .await?;
    Ok(deleted.rows_affected())
}

//! The PostgreSQL SQL of purges: finished records and the log rows of requests that are gone.

use sqlx::{PgPool, Postgres, QueryBuilder};

use crate::base::error::Result;
use crate::store::{PurgeBatch, Purged};

/// One batch in one statement: the records (locked, skipping those another transaction
/// holds), then their log rows.
pub(super) async fn requests(pool: &PgPool, b: &PurgeBatch<'_>) -> Result<Purged> {
    if b.statuses.is_empty() {
        return Ok(Purged::default());
    }
    let mut q = QueryBuilder::<Postgres>::new(
        "WITH doomed AS (DELETE FROM async_req WHERE id IN (\
         SELECT id FROM async_req WHERE application_name = ",
    );
    q.push_bind(b.application)
        .push(" AND update_time < ")
        .push_bind(b.before)
        .push(" AND status = ANY(")
        .push_bind(b.statuses.iter().map(|s| s.as_str()).collect::<Vec<_>>())
        .push(") ORDER BY id LIMIT ")
        .push_bind(b.limit)
        .push(
            " FOR UPDATE SKIP LOCKED) RETURNING id), \
             logs AS (DELETE FROM async_log WHERE req_id IN (SELECT id FROM doomed) RETURNING 1) \
             SELECT (SELECT COUNT(*) FROM doomed), (SELECT COUNT(*) FROM logs)",
        );
    let (requests, logs): (i64, i64) = q.build_query_as().fetch_one(pool).await?;
    Ok(Purged {
        requests: requests as u64,
        logs: logs as u64,
    })
}

/// Up to `limit` log rows of `application` finished before `before` whose request is gone.
pub(super) async fn orphan_logs(
    pool: &PgPool,
    application: &str,
    before: i64,
    limit: i64,
) -> Result<u64> {
    let (prefix, chars) = crate::store::orphan_worker_prefix(application);
    let deleted = sqlx::query(
        "DELETE FROM async_log WHERE id IN (SELECT l.id FROM async_log l \
         WHERE l.finished < $1 AND NOT EXISTS (SELECT 1 FROM async_req r WHERE r.id = l.req_id) \
         AND left(l.worker, $3) = $4 AND strpos(substr(l.worker, $3 + 1), '@') = 0 \
         ORDER BY l.id LIMIT $2 FOR UPDATE SKIP LOCKED)",
    )
    .bind(before)
    .bind(limit)
    .bind(chars as i32)
    .bind(&prefix)
    .execute(pool)
    .await?;
    Ok(deleted.rows_affected())
}

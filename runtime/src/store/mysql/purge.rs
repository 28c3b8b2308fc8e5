//! The MySQL/MariaDB SQL of purges: finished records and the log rows of requests that
//! are gone. Neither allows `LIMIT` in an `IN (...)` subquery: a batch locks its ids with
//! a `SELECT ... FOR UPDATE SKIP LOCKED` and deletes by id.

use sqlx::{MySql, QueryBuilder, Row};

use super::{with_retry, MySqlStore};
use crate::base::error::Result;
use crate::base::record::RequestId;
use crate::store::{PurgeBatch, Purged};

/// One batch, in one transaction (run again when it deadlocks).
pub(super) async fn requests(store: &MySqlStore, b: &PurgeBatch<'_>) -> Result<Purged> {
    if b.statuses.is_empty() {
        return Ok(Purged::default());
    }
    with_retry(|| requests_once(store, b)).await
}

async fn requests_once(store: &MySqlStore, b: &PurgeBatch<'_>) -> Result<Purged> {
    let mut tx = store.begin().await?;
    let mut q = QueryBuilder::<MySql>::new("SELECT id FROM async_req WHERE application_name = ");
    q.push_bind(b.application)
        .push(" AND update_time < ")
        .push_bind(b.before)
        .push(" AND status IN (");
    let mut statuses = q.separated(", ");
    for status in b.statuses {
        statuses.push_bind(status.as_str());
    }
    q.push(") ORDER BY id LIMIT ")
        .push_bind(b.limit)
        .push(" FOR UPDATE SKIP LOCKED");
    let ids: Vec<RequestId> = q
        .build()
        .fetch_all(&mut *tx)
        .await?
        .iter()
        .map(|row| row.try_get(0))
        .collect::<Result<_, _>>()?;
    if ids.is_empty() {
        tx.commit().await?;
        return Ok(Purged::default());
    }
    let mut purged = Purged::default();
    for (table, column) in [("async_log", "req_id"), ("async_req", "id")] {
        let mut q = QueryBuilder::<MySql>::new(format!("DELETE FROM {table} WHERE {column} IN ("));
        let mut list = q.separated(", ");
        for id in &ids {
            list.push_bind(*id);
        }
        q.push(")");
        let deleted = q.build().execute(&mut *tx).await?.rows_affected();
        if table == "async_req" {
            purged.requests = deleted;
        } else {
            purged.logs = deleted;
        }
    }
    tx.commit().await?;
    Ok(purged)
}

/// Up to `limit` log rows of `application` finished before `before` whose request is gone.
pub(super) async fn orphan_logs(
    store: &MySqlStore,
    application: &str,
    before: i64,
    limit: i64,
) -> Result<u64> {
    let (prefix, chars) = crate::store::orphan_worker_prefix(application);
    with_retry(|| async {
        let deleted = sqlx::query(
            "DELETE FROM async_log WHERE finished < ? \
             AND NOT EXISTS (SELECT 1 FROM async_req r WHERE r.id = async_log.req_id) \
             AND LEFT(worker, ?) = ? AND LOCATE('@', SUBSTRING(worker, ? + 1)) = 0 \
             ORDER BY id LIMIT ?",
        )
        .bind(before)
        .bind(chars)
        .bind(&prefix)
        .bind(chars)
        .bind(limit)
        .execute(store.pool())
        .await?;
        Ok(deleted.rows_affected())
    })
    .await
}

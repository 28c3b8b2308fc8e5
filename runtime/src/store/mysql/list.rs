//! The MySQL/MariaDB SQL of operator listings: [`RequestFilter`] as a `WHERE` clause.

use sqlx::{MySql, QueryBuilder};

use super::{request_from_row, REQUEST_COLUMNS};
use crate::error::Result;
use crate::record::{Request, Status};
use crate::store::RequestFilter;

/// The records of `application` that pass `f`, newest first (oldest first when paging
/// with `after_id`). Text is bound, never spliced: `%`, `_`, quotes and backslashes in a
/// filter are plain characters; substrings are found with `LOCATE`, which has no
/// wildcards.
pub(super) async fn list(
    pool: &sqlx::Pool<MySql>,
    application: &str,
    f: &RequestFilter,
) -> Result<Vec<Request>> {
    let mut q = QueryBuilder::<MySql>::new(format!(
        "SELECT {REQUEST_COLUMNS} FROM async_req WHERE application_name = "
    ));
    q.push_bind(application);
    if let Some(status) = f.status {
        q.push(" AND status = ").push_bind(Status::as_str(status));
    }
    if let Some(executor) = &f.executor {
        q.push(" AND executor = ").push_bind(executor);
    }
    if let Some(id) = f.id {
        q.push(" AND id = ").push_bind(id);
    }
    if let Some(after) = f.after_id {
        q.push(" AND id > ").push_bind(after);
    }
    if let Some(before) = f.before_id {
        q.push(" AND id < ").push_bind(before);
    }
    if let Some(key) = &f.key {
        q.push(" AND idempotency_key = ").push_bind(key);
    }
    if let Some(text) = &f.remark_contains {
        q.push(" AND LOCATE(").push_bind(text).push(", remark) > 0");
    }
    if let Some(text) = &f.error_contains {
        q.push(" AND last_error IS NOT NULL AND LOCATE(")
            .push_bind(text)
            .push(", last_error) > 0");
    }
    if let Some(from) = f.created_from {
        q.push(" AND create_time >= ").push_bind(from);
    }
    if let Some(before) = f.created_before {
        q.push(" AND create_time < ").push_bind(before);
    }
    q.push(if f.ascending() {
        " ORDER BY id ASC"
    } else {
        " ORDER BY id DESC"
    });
    q.push(" LIMIT ").push_bind(f.limit.unwrap_or(100).max(0));
    let rows = q.build().fetch_all(pool).await?;
    rows.iter().map(request_from_row).collect()
}

/// When the oldest record of `application` waiting to run (`init` or `failed`, due by
/// `now`) was due: `None` when none is.
pub(super) async fn oldest_due(
    pool: &sqlx::Pool<MySql>,
    application: &str,
    now: i64,
) -> Result<Option<i64>> {
    let oldest: Option<i64> = sqlx::query_scalar(
        "SELECT MIN(run_at) FROM async_req WHERE application_name = ? \
         AND status IN ('init', 'failed') AND run_at <= ?",
    )
    .bind(application)
    .bind(now)
    .fetch_one(pool)
    .await?;
    Ok(oldest)
}

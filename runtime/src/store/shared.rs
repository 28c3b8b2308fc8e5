//! Statements that every backend runs alike but for placeholders and row locks, inside a
//! caller's transaction or one of the store's, written once over the sqlx database type:
//! the reads and assignment of idempotency keys and the write of an attempt log. Each is
//! a [`Statement`]: fixed text, rendered once per dialect, so that sqlx prepares it once
//! per connection as before. What differs in meaning stays with each backend: a key's
//! claim (PostgreSQL's `RETURNING`, MySQL's conditional `ON DUPLICATE KEY UPDATE`,
//! SQLite's one writer) and the sweep of expired keys (`SKIP LOCKED` on PostgreSQL).

use sqlx::{Encode, FromRow, Type};

use super::sql::{Dialect, HasDialect, Statement};
use super::{Backend, StoredKey, KEY_PENDING};
use crate::base::error::Result;
use crate::base::record::{AttemptLog, NewRequest, RequestId};

static KEY_FIND: Statement = Statement::new(
    "SELECT request_id, create_time, expire_time FROM async_key \
     WHERE application_name = ? AND idempotency_key = ? AND expire_time > ?",
);

static KEY_FIND_LOCKED: Statement = Statement::new(
    "SELECT request_id, create_time, expire_time FROM async_key \
     WHERE application_name = ? AND idempotency_key = ? AND expire_time > ? \
     FOR UPDATE",
);

static KEY_HOLDER: Statement = Statement::new(
    "SELECT request_id FROM async_key WHERE application_name = ? AND idempotency_key = ?",
);

static KEY_HOLDER_LOCKED: Statement = Statement::new(
    "SELECT request_id FROM async_key WHERE application_name = ? AND idempotency_key = ? \
     FOR UPDATE",
);

static KEY_ASSIGN: Statement = Statement::new(
    "UPDATE async_key SET request_id = ? WHERE application_name = ? AND idempotency_key = ?",
);

static QUOTA_MAKE_SQLITE: Statement =
    Statement::new("INSERT OR IGNORE INTO async_quota (application_name, scope) VALUES (?, ?)");

static QUOTA_LOCK: Statement = Statement::new(
    "SELECT scope FROM async_quota WHERE application_name = ? AND scope = ? FOR UPDATE",
);

static TAG_INSERT: Statement = Statement::new(
    "INSERT INTO async_tag (application_name, tag, req_id, create_time) VALUES (?, ?, ?, ?)",
);

static LOG_INSERT: Statement = Statement::new(
    "INSERT INTO async_log (req_id, attempt, worker, started, finished, outcome, error) \
     VALUES (?, ?, ?, ?, ?, ?, ?)",
);

/// Whether a read locks the rows it reads until the transaction ends (`FOR UPDATE`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
// SQLite locks nothing: a build with only SQLite makes no locking read.
#[cfg_attr(not(any(feature = "postgres", feature = "mysql")), allow(dead_code))]
pub(crate) enum Lock {
    /// A plain read.
    No,
    /// A locking read: it also sees the latest committed row, not a snapshot.
    ForUpdate,
}

/// The key `key` of `application`, unless it expired by `now`.
pub(crate) async fn key_find<'q, DB>(
    conn: &mut DB::Connection,
    lock: Lock,
    application: &'q str,
    key: &'q str,
    now: i64,
) -> Result<Option<StoredKey>>
where
    DB: Backend + HasDialect,
    &'q str: Encode<'q, DB> + Type<DB>,
    i64: Encode<'q, DB> + Type<DB>,
    for<'r> (Option<i64>, i64, i64): FromRow<'r, DB::Row>,
{
    let statement = match lock {
        Lock::No => &KEY_FIND,
        Lock::ForUpdate => &KEY_FIND_LOCKED,
    };
    let row: Option<(Option<RequestId>, i64, i64)> = sqlx::query_as(statement.text(DB::DIALECT))
        .bind(application)
        .bind(key)
        .bind(now)
        .fetch_optional(DB::executor(conn))
        .await?;
    Ok(row.map(|(request_id, create_time, expire_time)| StoredKey {
        request_id: request_id.filter(|&id| id != KEY_PENDING),
        create_time,
        expire_time,
    }))
}

/// The request that the request's key names, after this transaction's claim of it.
pub(crate) async fn key_holder<'q, DB>(
    conn: &mut DB::Connection,
    lock: Lock,
    r: &'q NewRequest,
) -> Result<Option<RequestId>>
where
    DB: Backend + HasDialect,
    &'q str: Encode<'q, DB> + Type<DB>,
    &'q Option<String>: Encode<'q, DB> + Type<DB>,
    for<'r> (Option<i64>,): FromRow<'r, DB::Row>,
{
    let statement = match lock {
        Lock::No => &KEY_HOLDER,
        Lock::ForUpdate => &KEY_HOLDER_LOCKED,
    };
    let (request_id,): (Option<RequestId>,) = sqlx::query_as(statement.text(DB::DIALECT))
        .bind(&*r.application_name)
        .bind(&r.idempotency_key)
        .fetch_one(DB::executor(conn))
        .await?;
    Ok(request_id)
}

/// Names the request that a claimed key protects (`None`: a `SyncSave` call that ran).
pub(crate) async fn key_assign<'q, DB>(
    conn: &mut DB::Connection,
    r: &'q NewRequest,
    request_id: Option<RequestId>,
) -> Result<()>
where
    DB: Backend + HasDialect,
    &'q str: Encode<'q, DB> + Type<DB>,
    &'q Option<String>: Encode<'q, DB> + Type<DB>,
    Option<i64>: Encode<'q, DB> + Type<DB>,
{
    sqlx::query(KEY_ASSIGN.text(DB::DIALECT))
        .bind(request_id)
        .bind(&*r.application_name)
        .bind(&r.idempotency_key)
        .execute(DB::executor(conn))
        .await?;
    Ok(())
}

/// Locks the row of quota `scope` of `application` until the caller's transaction ends:
/// SQLite's quota check (`call::quota::check`), where the write that makes the row takes
/// the database's write lock, which the call's own write would take anyway. PostgreSQL
/// and MySQL/MariaDB reserve places in one statement of their own instead
/// (`call::quota::reserve`) and never call this.
pub(crate) async fn quota_lock<'q, DB>(
    conn: &mut DB::Connection,
    application: &'q str,
    scope: &'q str,
) -> Result<()>
where
    DB: Backend + HasDialect,
    &'q str: Encode<'q, DB> + Type<DB>,
{
    // SQLite's lock is its write lock, which the write that makes the row (or finds it
    // made) takes.
    let lock = match DB::DIALECT {
        Dialect::Sqlite => &QUOTA_MAKE_SQLITE,
        Dialect::Postgres | Dialect::MySql => &QUOTA_LOCK,
    };
    sqlx::query(lock.text(DB::DIALECT))
        .bind(application)
        .bind(scope)
        .execute(DB::executor(conn))
        .await?;
    Ok(())
}

/// Writes the tags of request `request_id` (`r`'s), in the transaction that writes it.
pub(crate) async fn tags_insert<'q, DB>(
    conn: &mut DB::Connection,
    r: &'q NewRequest,
    request_id: RequestId,
) -> Result<()>
where
    DB: Backend + HasDialect,
    &'q str: Encode<'q, DB> + Type<DB>,
    i64: Encode<'q, DB> + Type<DB>,
{
    for tag in &r.tags {
        sqlx::query(TAG_INSERT.text(DB::DIALECT))
            .bind(&*r.application_name)
            .bind(tag.as_str())
            .bind(request_id)
            .bind(r.now)
            .execute(DB::executor(&mut *conn))
            .await?;
    }
    Ok(())
}

/// Writes an attempt's log row.
pub(crate) async fn log_insert<'q, DB>(conn: &mut DB::Connection, log: &'q AttemptLog) -> Result<()>
where
    DB: Backend + HasDialect,
    &'q String: Encode<'q, DB> + Type<DB>,
    &'q Option<String>: Encode<'q, DB> + Type<DB>,
    i64: Encode<'q, DB> + Type<DB>,
    i32: Encode<'q, DB> + Type<DB>,
{
    sqlx::query(LOG_INSERT.text(DB::DIALECT))
        .bind(log.request_id)
        .bind(log.attempt)
        .bind(&log.worker)
        .bind(log.started)
        .bind(log.finished)
        .bind(&log.outcome)
        .bind(&log.error)
        .execute(DB::executor(conn))
        .await?;
    Ok(())
}

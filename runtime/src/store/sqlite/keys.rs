//! The SQLite SQL of idempotency keys (`async_key`).

use sqlx::SqliteConnection;

use crate::base::error::Result;
use crate::base::record::NewRequest;
use crate::store::shared::{self, Lock};
use crate::store::{KeyClaim, KEY_PENDING};

/// Claims the request's key in the current transaction: inserts it, or takes over an
/// expired one (SQLite has one writer at a time: no other transaction holds it meanwhile).
pub(super) async fn claim(conn: &mut SqliteConnection, r: &NewRequest) -> Result<KeyClaim> {
    sqlx::query(
        "INSERT INTO async_key (application_name, idempotency_key, request_id, create_time, expire_time) \
         VALUES (?1, ?2, ?3, ?4, ?5) \
         ON CONFLICT (application_name, idempotency_key) DO UPDATE \
         SET request_id = excluded.request_id, create_time = excluded.create_time, \
           expire_time = excluded.expire_time \
         WHERE async_key.expire_time <= excluded.create_time",
    )
    .bind(&*r.application_name)
    .bind(&r.idempotency_key)
    .bind(KEY_PENDING)
    .bind(r.now)
    .bind(r.key_expire_time())
    .execute(&mut *conn)
    .await?;
    let request_id = shared::key_holder::<sqlx::Sqlite>(conn, Lock::No, r).await?;
    Ok(KeyClaim::from_request_id(request_id))
}

/// Records the key of a `SyncSave` call that ran, unless it is taken.
pub(super) async fn record(conn: &mut SqliteConnection, r: &NewRequest) -> Result<()> {
    if claim(&mut *conn, r).await? == KeyClaim::Ours {
        shared::key_assign::<sqlx::Sqlite>(conn, r, None).await?;
    }
    Ok(())
}

/// Deletes up to `limit` expired keys.
pub(super) async fn expire(
    conn: &mut SqliteConnection,
    application: &str,
    now: i64,
    limit: i64,
) -> Result<u64> {
    let done = sqlx::query(
        "DELETE FROM async_key WHERE rowid IN (SELECT rowid FROM async_key \
         WHERE application_name = ? AND expire_time <= ? ORDER BY expire_time LIMIT ?)",
    )
    .bind(application)
    .bind(now)
    .bind(limit)
    .execute(conn)
    .await?;
    Ok(done.rows_affected())
}

/// Undoes this transaction's claim of the request's key after the request could not be
/// written: a failed statement does not end the transaction here (unlike PostgreSQL),
/// and a caller that swallows the error and commits would otherwise commit a key that
/// names no request (which a later `SyncSave` call with the key took for one that ran).
/// A key this transaction took over from an expired row goes with it (expired anyway).
pub(super) async fn release_pending(conn: &mut SqliteConnection, r: &NewRequest) -> Result<()> {
    sqlx::query(
        "DELETE FROM async_key WHERE application_name = ? AND idempotency_key = ? \
         AND request_id = ?",
    )
    .bind(&*r.application_name)
    .bind(&r.idempotency_key)
    .bind(KEY_PENDING)
    .execute(conn)
    .await?;
    Ok(())
}

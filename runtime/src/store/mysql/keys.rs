//! The MySQL/MariaDB SQL of idempotency keys (`async_key`).

use sqlx::MySqlConnection;

use super::MySqlStore;
use crate::base::error::Result;
use crate::base::record::NewRequest;
use crate::store::shared::{self, Lock};
use crate::store::{KeyClaim, KEY_PENDING};

/// Claims the request's key in the current transaction: inserts it, or takes over an
/// expired one. A transaction that holds the key uncommitted makes the insert wait for its
/// outcome (the primary key's lock); after a commit the key is taken, after a rollback it
/// is ours. Either way the key's row stays locked until this transaction ends.
pub(super) async fn claim(conn: &mut MySqlConnection, r: &NewRequest) -> Result<KeyClaim> {
    // Each assignment tests `expire_time` before the last one changes it. `VALUES(col)`
    // rather than a row alias: MariaDB has no alias (MySQL 8 warns that it is deprecated).
    sqlx::query(
        "INSERT INTO async_key (application_name, idempotency_key, request_id, create_time, expire_time) \
         VALUES (?, ?, ?, ?, ?) \
         ON DUPLICATE KEY UPDATE \
           request_id = IF(expire_time <= VALUES(create_time), VALUES(request_id), request_id), \
           create_time = IF(expire_time <= VALUES(create_time), VALUES(create_time), create_time), \
           expire_time = IF(expire_time <= VALUES(create_time), VALUES(expire_time), expire_time)",
    )
    .bind(&*r.application_name)
    .bind(&r.idempotency_key)
    .bind(KEY_PENDING)
    .bind(r.now)
    .bind(r.key_expire_time())
    .execute(&mut *conn)
    .await?;
    // A locking read: in a REPEATABLE READ transaction it reads the latest committed row,
    // not the snapshot (this transaction holds its lock already).
    let request_id = shared::key_holder::<sqlx::MySql>(conn, Lock::ForUpdate, r).await?;
    Ok(KeyClaim::from_request_id(request_id))
}

/// Records the key of a `SyncSave` call that ran, unless it is taken.
pub(super) async fn record(conn: &mut MySqlConnection, r: &NewRequest) -> Result<()> {
    if claim(&mut *conn, r).await? == KeyClaim::Ours {
        shared::key_assign::<sqlx::MySql>(conn, r, None).await?;
    }
    Ok(())
}

/// Deletes up to `limit` expired keys (run it in a READ COMMITTED transaction: no gap
/// locks before the keys that callers insert).
pub(super) async fn expire(
    conn: &mut MySqlConnection,
    application: &str,
    now: i64,
    limit: i64,
) -> Result<u64> {
    let done = sqlx::query(
        "DELETE FROM async_key WHERE application_name = ? AND expire_time <= ? \
         ORDER BY expire_time LIMIT ?",
    )
    .bind(application)
    .bind(now)
    .bind(limit)
    .execute(conn)
    .await?;
    Ok(done.rows_affected())
}

impl MySqlStore {
    /// Records the key of a `SyncSave` call that ran, in a transaction of its own.
    pub(super) async fn key_record_once(&self, r: &NewRequest) -> Result<()> {
        let mut tx = self.begin().await?;
        record(&mut tx, r).await?;
        tx.commit().await?;
        Ok(())
    }

    /// Deletes expired keys in a READ COMMITTED transaction of its own.
    pub(super) async fn key_expire_once(
        &self,
        application: &str,
        now: i64,
        limit: i64,
    ) -> Result<u64> {
        let mut tx = self.begin().await?;
        let deleted = expire(&mut tx, application, now, limit).await?;
        tx.commit().await?;
        Ok(deleted)
    }
}

/// Undoes this transaction's claim of the request's key after the request could not be
/// written: a failed statement does not end the transaction here (unlike PostgreSQL),
/// and a caller that swallows the error and commits would otherwise commit a key that
/// names no request (which a later `SyncSave` call with the key took for one that ran).
/// A key this transaction took over from an expired row goes with it (expired anyway).
pub(super) async fn release_pending(conn: &mut MySqlConnection, r: &NewRequest) -> Result<()> {
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

//! The PostgreSQL SQL of idempotency keys (`async_key`).

use sqlx::PgConnection;

use crate::base::error::Result;
use crate::base::record::NewRequest;
use crate::store::shared::{self, Lock};
use crate::store::{KeyClaim, KEY_PENDING};

/// Claims the request's key in the current transaction: inserts it, or takes over an
/// expired one. A transaction that holds the key uncommitted makes this statement wait
/// for its outcome; after a commit the key is taken, after a rollback it is ours. Either
/// way the key's row stays locked until this transaction ends.
pub(super) async fn claim(conn: &mut PgConnection, r: &NewRequest) -> Result<KeyClaim> {
    let ours: Option<(i32,)> = sqlx::query_as(
        "INSERT INTO async_key (application_name, idempotency_key, request_id, create_time, expire_time) \
         VALUES ($1, $2, $3, $4, $5) \
         ON CONFLICT (application_name, idempotency_key) DO UPDATE \
         SET request_id = EXCLUDED.request_id, create_time = EXCLUDED.create_time, \
           expire_time = EXCLUDED.expire_time \
         WHERE async_key.expire_time <= EXCLUDED.create_time \
         RETURNING 1",
    )
    .bind(&*r.application_name)
    .bind(&r.idempotency_key)
    .bind(KEY_PENDING)
    .bind(r.now)
    .bind(r.key_expire_time())
    .fetch_optional(&mut *conn)
    .await?;
    if ours.is_some() {
        return Ok(KeyClaim::Ours);
    }
    // A new statement: in READ COMMITTED it sees the row the other transaction committed.
    let request_id = shared::key_holder::<sqlx::Postgres>(conn, Lock::No, r).await?;
    Ok(KeyClaim::from_request_id(request_id))
}

/// Records the key of a `SyncSave` call that ran, unless it is taken.
pub(super) async fn record(conn: &mut PgConnection, r: &NewRequest) -> Result<()> {
    if claim(&mut *conn, r).await? == KeyClaim::Ours {
        shared::key_assign::<sqlx::Postgres>(conn, r, None).await?;
    }
    Ok(())
}

/// Deletes up to `limit` expired keys. Keys locked by a transaction (one taking over an
/// expired key) are skipped, so the sweep never waits for a caller.
pub(super) async fn expire(
    conn: &mut PgConnection,
    application: &str,
    now: i64,
    limit: i64,
) -> Result<u64> {
    let done = sqlx::query(
        "DELETE FROM async_key k USING ( \
           SELECT application_name, idempotency_key FROM async_key \
           WHERE application_name = $1 AND expire_time <= $2 \
           ORDER BY expire_time LIMIT $3 FOR UPDATE SKIP LOCKED) d \
         WHERE k.application_name = d.application_name \
           AND k.idempotency_key = d.idempotency_key AND k.expire_time <= $2",
    )
    .bind(application)
    .bind(now)
    .bind(limit)
    .execute(conn)
    .await?;
    Ok(done.rows_affected())
}

//! The PostgreSQL SQL of instance announcements (`async_instance`).

use sqlx::PgPool;

use super::DB_NOW;
use crate::base::error::Result;
use crate::base::record::{parse_executors, InstanceInfo};
use crate::store::AnnounceOwned;

/// Announces an instance, on `conn` (the store's connection for announcements).
pub(super) async fn announce(conn: &mut sqlx::PgConnection, a: &AnnounceOwned) -> Result<()> {
    sqlx::query(&format!(
        "INSERT INTO async_instance (owner, application_name, workers, started, seen, executors) \
         VALUES ($1, $2, $3, {DB_NOW}, {DB_NOW}, $4) \
         ON CONFLICT (owner) DO UPDATE SET seen = EXCLUDED.seen, workers = EXCLUDED.workers, \
           executors = EXCLUDED.executors"
    ))
    .bind(&a.owner)
    .bind(&a.application)
    .bind(a.workers)
    .bind(&a.executors)
    .execute(&mut *conn)
    .await?;
    if let Some(forget_after_ms) = a.forget_after_ms {
        sqlx::query(&format!(
            "DELETE FROM async_instance WHERE seen < {DB_NOW} - $1"
        ))
        .bind(forget_after_ms)
        .execute(&mut *conn)
        .await?;
    }
    Ok(())
}

pub(super) async fn leave(pool: &PgPool, owner: &str) -> Result<()> {
    sqlx::query("DELETE FROM async_instance WHERE owner = $1")
        .bind(owner)
        .execute(pool)
        .await?;
    Ok(())
}

pub(super) async fn list<'e>(
    executor: impl sqlx::PgExecutor<'e>,
    application: &str,
    seen_within_ms: i64,
) -> Result<Vec<InstanceInfo>> {
    let rows: Vec<(String, String, bool, i64, i64, String)> = sqlx::query_as(&format!(
        "SELECT owner, application_name, workers, started, seen, executors FROM async_instance \
         WHERE application_name = $1 AND seen >= {DB_NOW} - $2 ORDER BY owner"
    ))
    .bind(application)
    .bind(seen_within_ms)
    .fetch_all(executor)
    .await?;
    Ok(rows
        .into_iter()
        .map(
            |(name, application, workers, started, last_seen, executors)| InstanceInfo {
                name,
                application,
                workers,
                started,
                last_seen,
                executors: parse_executors(&executors),
            },
        )
        .collect())
}

//! The SQLite SQL of instance announcements (`async_instance`).

use sqlx::{SqliteConnection, SqlitePool};

use super::DB_NOW;
use crate::base::error::Result;
use crate::base::record::{parse_executors, InstanceInfo};
use crate::store::Announce;

pub(super) async fn announce(conn: &mut SqliteConnection, a: &Announce<'_>) -> Result<()> {
    sqlx::query(&format!(
        "INSERT INTO async_instance (owner, application_name, workers, started, seen, executors) \
         VALUES (?, ?, ?, {DB_NOW}, {DB_NOW}, ?) \
         ON CONFLICT (owner) DO UPDATE SET seen = excluded.seen, workers = excluded.workers, \
           executors = excluded.executors"
    ))
    .bind(a.owner)
    .bind(a.application)
    .bind(a.workers)
    .bind(a.executors)
    .execute(&mut *conn)
    .await?;
    if let Some(forget_after_ms) = a.forget_after_ms {
        sqlx::query(&format!(
            "DELETE FROM async_instance WHERE seen < {DB_NOW} - ?"
        ))
        .bind(forget_after_ms)
        .execute(&mut *conn)
        .await?;
    }
    Ok(())
}

pub(super) async fn leave(conn: &mut SqliteConnection, owner: &str) -> Result<()> {
    sqlx::query("DELETE FROM async_instance WHERE owner = ?")
        .bind(owner)
        .execute(&mut *conn)
        .await?;
    Ok(())
}

pub(super) async fn list(
    pool: &SqlitePool,
    application: &str,
    seen_within_ms: i64,
) -> Result<Vec<InstanceInfo>> {
    let rows: Vec<(String, String, bool, i64, i64, String)> = sqlx::query_as(&format!(
        "SELECT owner, application_name, workers, started, seen, executors FROM async_instance \
         WHERE application_name = ? AND seen >= {DB_NOW} - ? ORDER BY owner"
    ))
    .bind(application)
    .bind(seen_within_ms)
    .fetch_all(pool)
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

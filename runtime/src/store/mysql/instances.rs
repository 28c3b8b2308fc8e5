//! The MySQL/MariaDB SQL of instance announcements (`async_instance`).

use sqlx::mysql::MySqlRow;
use sqlx::{MySqlPool, Row};

use super::DB_NOW;
use crate::base::error::Result;
use crate::base::record::{parse_executors, InstanceInfo};
use crate::store::AnnounceOwned;

/// Announces an instance, on `conn` (the store's connection for announcements).
pub(super) async fn announce(conn: &mut sqlx::MySqlConnection, a: &AnnounceOwned) -> Result<()> {
    sqlx::query(&format!(
        "INSERT INTO async_instance (owner, application_name, workers, started, seen, executors) \
         VALUES (?, ?, ?, {DB_NOW}, {DB_NOW}, ?) \
         ON DUPLICATE KEY UPDATE seen = VALUES(seen), workers = VALUES(workers), \
           executors = VALUES(executors)"
    ))
    .bind(&a.owner)
    .bind(&a.application)
    .bind(a.workers)
    .bind(&a.executors)
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

pub(super) async fn leave(pool: &MySqlPool, owner: &str) -> Result<()> {
    sqlx::query("DELETE FROM async_instance WHERE owner = ?")
        .bind(owner)
        .execute(pool)
        .await?;
    Ok(())
}

pub(super) async fn list<'e>(
    executor: impl sqlx::MySqlExecutor<'e>,
    application: &str,
    seen_within_ms: i64,
) -> Result<Vec<InstanceInfo>> {
    // Text columns of a binary collation come back as VARBINARY: read them unchecked.
    let rows = sqlx::query(&format!(
        "SELECT owner, application_name, workers, started, seen, executors FROM async_instance \
         WHERE application_name = ? AND seen >= {DB_NOW} - ? ORDER BY owner"
    ))
    .bind(application)
    .bind(seen_within_ms)
    .try_map(|row: MySqlRow| {
        let executors: String = row.try_get_unchecked(5)?;
        Ok(InstanceInfo {
            name: row.try_get_unchecked(0)?,
            application: row.try_get_unchecked(1)?,
            workers: row.try_get(2)?,
            started: row.try_get(3)?,
            last_seen: row.try_get(4)?,
            executors: parse_executors(&executors),
        })
    })
    .fetch_all(executor)
    .await?;
    Ok(rows)
}

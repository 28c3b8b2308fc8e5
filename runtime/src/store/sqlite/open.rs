//! Opening a SQLite database: the pool and the writer connection, in WAL mode.
//!
//! Turning a new file to WAL takes an exclusive lock that SQLite's busy handler does not
//! wait for: a second process (or pool) opening the same new file at that moment is told
//! `database is locked` at once. Several replicas started together on an empty file (a
//! deploy) hit that; so an open that finds the file busy tries again until the busy
//! timeout, as every other write waits.

use std::str::FromStr;
use std::time::Duration;

use sqlx::sqlite::{SqliteConnectOptions, SqliteJournalMode, SqlitePoolOptions, SqliteSynchronous};
use sqlx::{SqliteConnection, SqlitePool};

use crate::base::error::{is_sqlite_busy, Result};

/// The options of every connection of the store: WAL, `synchronous`, `busy_timeout`.
pub(super) fn options(
    url: &str,
    synchronous: crate::SqliteSynchronous,
    busy_timeout: Duration,
) -> Result<SqliteConnectOptions> {
    let synchronous = match synchronous {
        crate::SqliteSynchronous::Full => SqliteSynchronous::Full,
        crate::SqliteSynchronous::Normal => SqliteSynchronous::Normal,
        crate::SqliteSynchronous::Off => SqliteSynchronous::Off,
    };
    Ok(SqliteConnectOptions::from_str(url)?
        .create_if_missing(true)
        .journal_mode(SqliteJournalMode::Wal)
        .synchronous(synchronous)
        .busy_timeout(busy_timeout))
}

/// Opens a pool of up to `max_connections` (one connection opened before it returns).
/// An open that finds the file busy is tried again for up to `patience`.
pub(super) async fn pool(
    options: SqliteConnectOptions,
    max_connections: u32,
    patience: Duration,
) -> std::result::Result<SqlitePool, sqlx::Error> {
    while_busy(patience, || {
        SqlitePoolOptions::new()
            .max_connections(max_connections.max(1))
            // A file connection does not break: no ping (a thread hop) on every acquire.
            .test_before_acquire(false)
            .connect_with(options.clone())
    })
    .await
}

/// Opens one connection with `options` (the runtime's writer), tried again while the file
/// is busy for up to `patience`.
pub(super) async fn connection(
    options: &SqliteConnectOptions,
    patience: Duration,
) -> std::result::Result<SqliteConnection, sqlx::Error> {
    while_busy(patience, || sqlx::ConnectOptions::connect(options)).await
}

/// Runs `open` again while it fails with SQLITE_BUSY, for up to `patience`.
async fn while_busy<T, F>(
    patience: Duration,
    mut open: impl FnMut() -> F,
) -> std::result::Result<T, sqlx::Error>
where
    F: std::future::Future<Output = std::result::Result<T, sqlx::Error>>,
{
    let deadline = tokio::time::Instant::now() + patience;
    let mut pause = Duration::from_millis(5);
    loop {
        match open().await {
            Err(e) if is_sqlite_busy(&e) && tokio::time::Instant::now() + pause < deadline => {
                tokio::time::sleep(pause).await;
                pause = (pause * 2).min(Duration::from_millis(100));
            }
            opened => return opened,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Replicas started together on a new file all open it (CI, stop 12: "replica 2 did
    /// not start: ... (code: 5) database is locked"; tests/setup.rs failed 4 of 30 runs of
    /// four at once). Without trying again while busy, 16 stores at once failed 5 of 5
    /// runs (8 stores failed 8 of 8 runs, then 1 of 3 later the same day: too few).
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn stores_opening_a_new_file_at_once_all_open() {
        let patience = Duration::from_secs(10);
        for round in 0..60 {
            let dir = tempfile::tempdir().unwrap();
            let url = format!("sqlite:{}", dir.path().join("new.db").display());
            let mut opens = tokio::task::JoinSet::new();
            for _ in 0..16 {
                let options = options(&url, Default::default(), patience).unwrap();
                opens.spawn(async move {
                    let pool = pool(options.clone(), 2, patience).await?;
                    let writer = connection(&options, patience).await?;
                    drop(writer);
                    pool.close().await;
                    Ok::<_, sqlx::Error>(())
                });
            }
            while let Some(opened) = opens.join_next().await {
                opened
                    .unwrap()
                    .unwrap_or_else(|e| panic!("round {round}: did not open: {e}"));
            }
        }
    }
}

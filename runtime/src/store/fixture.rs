//! Stores for the unit tests of parts that run on a store alone (no runtime): one per
//! compiled backend. PostgreSQL and MySQL need `ASYNC_EXEC_TEST_POSTGRES_URL` /
//! `ASYNC_EXEC_TEST_MYSQL_URL` (their tests are ignored without them).

use std::sync::Arc;
use std::time::Duration;

use super::Store;

/// A migrated SQLite store in a file of `dir`.
#[cfg(feature = "sqlite")]
pub(crate) async fn sqlite(dir: &tempfile::TempDir) -> Arc<dyn Store> {
    let url = format!("sqlite:{}", dir.path().join("fixture.db").display());
    let store =
        super::sqlite::SqliteStore::connect(&url, 1, Default::default(), Duration::from_secs(10))
            .await
            .unwrap();
    store.migrate().await.unwrap();
    Arc::new(store)
}

/// A migrated PostgreSQL store on `ASYNC_EXEC_TEST_POSTGRES_URL`.
#[cfg(feature = "postgres")]
pub(crate) async fn postgres() -> Arc<dyn Store> {
    let url = std::env::var("ASYNC_EXEC_TEST_POSTGRES_URL").expect("ASYNC_EXEC_TEST_POSTGRES_URL");
    let store = super::postgres::PostgresStore::connect(&url, 2)
        .await
        .expect("ASYNC_EXEC_TEST_POSTGRES_URL is set but unreachable");
    store.migrate().await.unwrap();
    Arc::new(store)
}

/// A migrated MySQL/MariaDB store on `ASYNC_EXEC_TEST_MYSQL_URL`.
#[cfg(feature = "mysql")]
pub(crate) async fn mysql() -> Arc<dyn Store> {
    let url = std::env::var("ASYNC_EXEC_TEST_MYSQL_URL").expect("ASYNC_EXEC_TEST_MYSQL_URL");
    let store = super::mysql::MySqlStore::connect(&url, 2)
        .await
        .expect("ASYNC_EXEC_TEST_MYSQL_URL is set but unreachable");
    store.migrate().await.unwrap();
    Arc::new(store)
}

//! Stores for the unit tests of parts that run on a store alone (no runtime): one per
//! compiled backend. PostgreSQL and MySQL need `ASYNC_EXEC_TEST_POSTGRES_URL` /
//! `ASYNC_EXEC_TEST_MYSQL_URL` (their tests are ignored without them).

use std::sync::Arc;
use std::time::Duration;

use super::{ClaimDue, DueKind, Store};
use crate::base::record::{now_ms, Claimed, NewRequest, Status};

/// A fresh request (`init`, never attempted, due now, three attempts) of `executor` with
/// signature `sign`: change what a test needs with `NewRequest { .., ..new_request(..) }`.
pub(crate) fn new_request(
    application: &Arc<str>,
    executor: &'static str,
    sign: &'static str,
) -> NewRequest {
    NewRequest {
        application_name: application.clone(),
        executor,
        sign,
        strategy: "SaveAsync",
        status: Status::Init,
        exec_count: 0,
        max_attempts: 3,
        param_json: Arc::from("{}"),
        remark: "",
        idempotency_key: None,
        key_retention: 86_400_000,
        priority: 0,
        run_at: now_ms(),
        deadline_at: None,
        queue: "",
        partition: None,
        singleton: None,
        debounce: None,
        tags: Vec::new(),
        last_error: None,
        trace_json: None,
        now: now_ms(),
        notify: None,
        log: None,
    }
}

/// Claims up to 10 due records of `executor` (`kind`) for `owner`, with a minute's lease.
pub(crate) async fn claim_due(
    store: &dyn Store,
    application: &str,
    executor: &'static str,
    kind: DueKind,
    owner: &str,
) -> Vec<Claimed> {
    store
        .request_claim_due(ClaimDue {
            application,
            queue: "",
            executors: &[executor],
            kind,
            owner,
            now: now_ms(),
            lease_ms: 60_000,
            limit: 10,
            skip: &[],
            cap: None,
            global: None,
        })
        .await
        .unwrap()
}

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

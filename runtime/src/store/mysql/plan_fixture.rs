//! Records for the query-plan tests: what the optimizer sees in a service (on an empty
//! application every index looks alike).

use sqlx::mysql::MySqlRow;
use sqlx::Row;

use super::MySqlStore;
use crate::store::Store;

/// What `EXPLAIN` says of a statement's first table.
#[derive(Debug)]
pub(super) struct Plan {
    pub(super) key: Option<String>,
    pub(super) reference: Option<String>,
    /// The optimizer's estimate of the rows it reads.
    pub(super) rows: Option<i64>,
    pub(super) extra: String,
}

impl Plan {
    /// The plan in an `EXPLAIN` row.
    pub(super) fn of(row: &MySqlRow) -> Plan {
        // MariaDB answers `rows` as text, MySQL as a number.
        let rows = row
            .try_get_unchecked::<Option<String>, _>("rows")
            .ok()
            .flatten()
            .and_then(|r| r.parse().ok())
            .or_else(|| row.try_get_unchecked("rows").ok().flatten());
        Plan {
            key: row.try_get_unchecked("key").unwrap(),
            reference: row.try_get_unchecked("ref").unwrap(),
            rows,
            extra: row
                .try_get_unchecked::<Option<String>, _>("Extra")
                .unwrap()
                .unwrap_or_default(),
        }
    }
}

/// A store on `ASYNC_EXEC_TEST_MYSQL_URL`, migrated.
pub(super) async fn store() -> MySqlStore {
    let url = std::env::var("ASYNC_EXEC_TEST_MYSQL_URL").expect("ASYNC_EXEC_TEST_MYSQL_URL");
    let store = MySqlStore::connect(&url, 2).await.unwrap();
    store.migrate().await.unwrap();
    store
}

/// A new application (`name` and the time) holding 5,000 records, analyzed: mostly
/// finished, one in fifty dead, a fifth waiting, some running (leased until `i` ms), a key
/// on a third, seven executors (`executor_0` to `executor_6`).
pub(super) async fn seeded_application(store: &MySqlStore, name: &str) -> String {
    let application = format!("plan-test-{name}-{}", crate::base::record::now_ms());
    sqlx::query(
        "INSERT INTO async_req (application_name, executor, sign, strategy, status, \
           max_attempts, param_json, remark, idempotency_key, run_at, lease_owner, lease_until, \
           create_time, update_time) \
         WITH RECURSIVE k (i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM k WHERE i < 1000), \
           n (i) AS (SELECT a.i + 1000 * (b.i - 1) FROM k a JOIN k b ON b.i <= 5) \
         SELECT ?, CONCAT('executor_', i % 7), 's', 'SaveAsync', \
           CASE WHEN i % 50 = 0 THEN 'dead' WHEN i % 5 = 0 THEN 'init' \
             WHEN i % 7 = 0 THEN 'running' ELSE 'success' END, \
           3, '{}', '', CASE WHEN i % 3 = 0 THEN CONCAT('key-', i) END, i, \
           CASE WHEN i % 7 = 0 AND i % 5 <> 0 AND i % 50 <> 0 THEN 'owner' END, \
           CASE WHEN i % 7 = 0 AND i % 5 <> 0 AND i % 50 <> 0 THEN i END, i, i FROM n",
    )
    .bind(&application)
    .execute(&store.pool)
    .await
    .unwrap();
    sqlx::query("ANALYZE TABLE async_req")
        .execute(&store.pool)
        .await
        .unwrap();
    application
}

/// Deletes `application`'s records.
pub(super) async fn remove(store: &MySqlStore, application: &str) {
    sqlx::query("DELETE FROM async_req WHERE application_name = ?")
        .bind(application)
        .execute(&store.pool)
        .await
        .unwrap();
}

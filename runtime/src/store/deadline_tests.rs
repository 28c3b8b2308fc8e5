//! The deadline sweep over a long history (issue 30, H4): a finished request keeps its
//! `deadline_at`, and the sweep that ends waiting requests past their deadline runs every
//! second on every instance. It must read the waiting requests with a deadline only: not
//! the finished ones (50,000 here, each with a deadline that passed), nor the waiting ones
//! without a deadline (a backlog of 5,000). Each backend in a database of its own (the
//! plans are read after `ANALYZE`); PostgreSQL and MySQL/MariaDB when
//! `ASYNC_EXEC_TEST_POSTGRES_URL` / `ASYNC_EXEC_TEST_MYSQL_URL` are set.

use crate::base::record::now_ms;
use crate::store::ops::{deadline_expire_ids, deadline_expired};
use crate::store::sql::{Bind, Dialect, Sql};
use crate::store::Store;

/// Finished requests with a passed deadline, waiting ones without a deadline, and waiting
/// ones whose deadline passed (the only ones the sweep is for).
const FINISHED: i64 = 50_000;
const BACKLOG: i64 = 5_000;
const EXPIRED: i64 = 50;

/// `sql` with its binds, for any backend.
macro_rules! bound {
    ($sql:expr) => {{
        let sql: &Sql = $sql;
        let mut q = sqlx::query(&sql.text);
        for b in &sql.binds {
            q = match b {
                Bind::Int(n) => q.bind(*n),
                Bind::Text(t) => q.bind(t.clone()),
            };
        }
        q
    }};
}

/// The rows as `INSERT .. SELECT` from a numbers table `n (i)`: `FINISHED` finished
/// (`success`, one in ten `dead`, one in ten `cancelled`) whose deadline passed, then
/// `BACKLOG` waiting without a deadline, then `EXPIRED` waiting whose deadline passed,
/// then as many waiting whose deadline is an hour away.
fn rows_select(application: &str, now: i64) -> String {
    let (f, b, e) = (FINISHED, FINISHED + BACKLOG, FINISHED + BACKLOG + EXPIRED);
    format!(
        "SELECT '{application}', 'ex', 's', 'SaveAsync', \
           CASE WHEN i <= {f} AND i % 10 = 0 THEN 'dead' WHEN i <= {f} AND i % 10 = 1 THEN \
           'cancelled' WHEN i <= {f} THEN 'success' ELSE 'init' END, 3, '{{}}', '', {now}, \
           {now}, {now}, CASE WHEN i <= {f} THEN {now} - 1000 - i WHEN i <= {b} THEN NULL \
           WHEN i <= {e} THEN {now} - 1000 ELSE {now} + 3600000 END FROM n"
    )
}

const INSERT: &str = "INSERT INTO async_req (application_name, executor, sign, strategy, \
                      status, max_attempts, param_json, remark, run_at, create_time, \
                      update_time, deadline_at) ";

fn total() -> i64 {
    FINISHED + BACKLOG + 2 * EXPIRED
}

/// A database of its own on the server of `var`'s URL: (the server's URL, the new
/// database's name, its URL).
#[cfg(any(feature = "postgres", feature = "mysql"))]
async fn fresh_database(var: &str) -> (String, String, String) {
    let admin = std::env::var(var).unwrap_or_else(|_| panic!("{var}"));
    let name = format!(
        "ae_deadline_{}_{:08x}",
        std::process::id(),
        rand::random::<u32>()
    );
    let (base, _) = admin.rsplit_once('/').expect("a URL with a database");
    (admin.clone(), name.clone(), format!("{base}/{name}"))
}

/// How many waiting records went `dead` for their deadline, and that no finished one did.
async fn expire_all(store: &dyn Store, application: &str, now: i64) {
    let expired = store
        .ops()
        .request_expire_deadlines(application, now, 1_000)
        .await
        .unwrap();
    assert_eq!(
        expired as i64, EXPIRED,
        "the waiting requests past their deadline"
    );
    let again = store
        .ops()
        .request_expire_deadlines(application, now, 1_000)
        .await
        .unwrap();
    assert_eq!(again, 0);
}

#[cfg(feature = "postgres")]
#[tokio::test]
#[cfg_attr(
    not(async_exec_test_postgres),
    ignore = "set ASYNC_EXEC_TEST_POSTGRES_URL to run it"
)]
async fn postgres_the_deadline_sweep_reads_waiting_requests_only() {
    use sqlx::{Connection, PgConnection, PgPool};
    let (admin, name, url) = fresh_database("ASYNC_EXEC_TEST_POSTGRES_URL").await;
    let mut server = PgConnection::connect(&admin).await.unwrap();
    sqlx::query(&format!("CREATE DATABASE {name}"))
        .execute(&mut server)
        .await
        .unwrap();
    let store = crate::store::postgres::PostgresStore::connect(&url, 2)
        .await
        .unwrap();
    store.migrate().await.unwrap();
    let pool = PgPool::connect(&url).await.unwrap();
    let (application, now) = ("deadlines", now_ms());
    let fill = format!(
        "{INSERT} WITH n (i) AS (SELECT generate_series(1, {})) {}",
        total(),
        rows_select(application, now)
    );
    sqlx::query(&fill).execute(&pool).await.unwrap();
    sqlx::query("ANALYZE async_req")
        .execute(&pool)
        .await
        .unwrap();

    let select = deadline_expired(Dialect::Postgres, application, now, 1_000);
    for generic in [false, true] {
        // sqlx prepares its statements: after five runs PostgreSQL may plan them
        // for any bound value, which must read the same index.
        let mut conn = pool.acquire().await.unwrap();
        let mode = if generic {
            "force_generic_plan"
        } else {
            "auto"
        };
        sqlx::query(&format!("SET plan_cache_mode = {mode}"))
            .execute(&mut *conn)
            .await
            .unwrap();
        let explain = select.prefixed("EXPLAIN (ANALYZE, FORMAT JSON)");
        let row = bound!(&explain).fetch_one(&mut *conn).await.unwrap();
        let plan: String = sqlx::Row::try_get_unchecked(&row, 0).unwrap();
        let plan: serde_json::Value = serde_json::from_str(&plan).unwrap();
        let mut scans = Vec::new();
        pg_scans(&plan[0]["Plan"], &mut scans);
        let said = format!("{mode}: {scans:?}: {}", select.text);
        assert!(
            scans
                .iter()
                .any(|(_, index, _)| index == "async_req_deadline_waiting"),
            "{said}"
        );
        let examined: i64 = scans
            .iter()
            .map(|(_, _, rows)| rows)
            .max()
            .copied()
            .unwrap();
        assert!(examined <= EXPIRED, "rows examined: {examined}; {said}");
        sqlx::query("RESET plan_cache_mode")
            .execute(&mut *conn)
            .await
            .unwrap();
    }
    expire_all(&store, application, now).await;
    let finished_dead: i64 = sqlx::query_scalar(
        "SELECT COUNT(*) FROM async_req WHERE last_error = 'deadline passed while it waited'",
    )
    .fetch_one(&pool)
    .await
    .unwrap();
    assert_eq!(finished_dead, EXPIRED);
    pool.close().await;
    drop(store);
    sqlx::query(&format!("DROP DATABASE {name} WITH (FORCE)"))
        .execute(&mut server)
        .await
        .unwrap();
}

/// The scans of a PostgreSQL JSON plan: (node type, index, rows it read: returned plus
/// removed by a filter or a recheck, over its loops).
#[cfg(feature = "postgres")]
pub(super) fn pg_scans(node: &serde_json::Value, out: &mut Vec<(String, String, i64)>) {
    let kind = node["Node Type"].as_str().unwrap_or_default().to_string();
    if kind.contains("Scan") && !kind.contains("Subquery") {
        let n = |k: &str| node[k].as_i64().unwrap_or(0);
        let rows =
            (n("Actual Rows") + n("Rows Removed by Filter") + n("Rows Removed by Index Recheck"))
                * n("Actual Loops").max(1);
        let index = node["Index Name"].as_str().unwrap_or_default().to_string();
        out.push((kind, index, rows));
    }
    if let Some(children) = node["Plans"].as_array() {
        for child in children {
            pg_scans(child, out);
        }
    }
}

#[cfg(feature = "mysql")]
#[tokio::test]
#[cfg_attr(
    not(async_exec_test_mysql),
    ignore = "set ASYNC_EXEC_TEST_MYSQL_URL to run it"
)]
async fn mysql_the_deadline_sweep_reads_waiting_requests_only_and_holds_up_no_insert() {
    use sqlx::{Connection, MySqlConnection, MySqlPool};
    let (admin, name, url) = fresh_database("ASYNC_EXEC_TEST_MYSQL_URL").await;
    let mut server = MySqlConnection::connect(&admin).await.unwrap();
    sqlx::query(&format!("CREATE DATABASE {name}"))
        .execute(&mut server)
        .await
        .unwrap();
    let store = crate::store::mysql::MySqlStore::connect(&url, 2)
        .await
        .unwrap();
    store.migrate().await.unwrap();
    let pool = MySqlPool::connect(&url).await.unwrap();
    let (application, now) = ("deadlines", now_ms());
    let mut conn = pool.acquire().await.unwrap();
    // MariaDB's name for it; MySQL's is `cte_max_recursion_depth`.
    let depth = sqlx::query("SET SESSION max_recursive_iterations = 1000000")
        .execute(&mut *conn)
        .await;
    if depth.is_err() {
        sqlx::query("SET SESSION cte_max_recursion_depth = 1000000")
            .execute(&mut *conn)
            .await
            .unwrap();
    }
    let fill = format!(
        "{INSERT} WITH RECURSIVE n (i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < {}) {}",
        total(),
        rows_select(application, now)
    );
    sqlx::query(&fill).execute(&mut *conn).await.unwrap();
    sqlx::query("ANALYZE TABLE async_req")
        .execute(&mut *conn)
        .await
        .unwrap();
    drop(conn);

    // What the sweep reads: the index of waiting requests with a deadline, only those
    // whose deadline passed (`ANALYZE FORMAT=JSON` is MariaDB's; MySQL says `EXPLAIN
    // ANALYZE` in text, read below for its index only).
    let select = deadline_expired(Dialect::MySql, application, now, 1_000);
    let analyze = select.prefixed("ANALYZE FORMAT=JSON");
    let analyzed = bound!(&analyze).fetch_one(&pool).await;
    let said = |what: &str| format!("{what}: {}", select.text);
    match analyzed {
        Ok(row) => {
            let json: String = sqlx::Row::try_get_unchecked(&row, 0).unwrap();
            let plan: serde_json::Value = serde_json::from_str(&json).unwrap();
            let table = &plan["query_block"]["nested_loop"][0]["table"];
            assert_eq!(
                table["key"].as_str(),
                Some("async_req_deadline_waiting"),
                "{}",
                said(&json)
            );
            let read = table["r_rows"].as_f64().unwrap() * table["r_loops"].as_f64().unwrap();
            assert!(
                read <= EXPIRED as f64,
                "rows examined: {read}; {}",
                said(&json)
            );
        }
        Err(_) => {
            let explain = select.prefixed("EXPLAIN");
            let row = bound!(&explain).fetch_one(&pool).await.unwrap();
            let key: Option<String> = sqlx::Row::try_get_unchecked(&row, "key").unwrap();
            assert_eq!(key.as_deref(), Some("async_req_deadline_waiting"));
        }
    }

    // The sweep's statements in a transaction left open (as a slow sweep would hold
    // them): an ordinary insert (no deadline) goes through, not held by a gap lock.
    let mut sweep = pool.begin().await.unwrap();
    let ids: Vec<i64> = bound!(&select)
        .fetch_all(&mut *sweep)
        .await
        .unwrap()
        .iter()
        .map(|r| sqlx::Row::get(r, 0))
        .collect();
    assert_eq!(ids.len() as i64, EXPIRED);
    let update = deadline_expire_ids(Dialect::MySql, application, now, &ids);
    let done = bound!(&update).execute(&mut *sweep).await.unwrap();
    assert_eq!(done.rows_affected() as i64, EXPIRED);
    let mut other = pool.acquire().await.unwrap();
    sqlx::query("SET SESSION innodb_lock_wait_timeout = 1")
        .execute(&mut *other)
        .await
        .unwrap();
    let started = std::time::Instant::now();
    let insert = format!(
        "{INSERT} SELECT '{application}', 'ex', 's', 'SaveAsync', 'init', 3, '{{}}', '', \
         {now}, {now}, {now}, NULL"
    );
    let inserted = sqlx::query(&insert).execute(&mut *other).await;
    let took = started.elapsed();
    assert!(
        inserted.is_ok(),
        "held up by the sweep ({took:?}): {inserted:?}"
    );
    drop(other);
    sweep.rollback().await.unwrap();

    expire_all(&store, application, now).await;
    pool.close().await;
    drop(store);
    sqlx::query(&format!("DROP DATABASE {name}"))
        .execute(&mut server)
        .await
        .unwrap();
}

#[cfg(feature = "sqlite")]
#[tokio::test]
async fn sqlite_the_deadline_sweep_reads_waiting_requests_only() {
    use sqlx::SqlitePool;
    let dir = tempfile::tempdir().unwrap();
    let url = format!("sqlite:{}", dir.path().join("deadlines.db").display());
    let store = crate::store::sqlite::SqliteStore::connect(
        &url,
        1,
        Default::default(),
        std::time::Duration::from_secs(10),
    )
    .await
    .unwrap();
    store.migrate().await.unwrap();
    let pool = SqlitePool::connect(&url).await.unwrap();
    let (application, now) = ("deadlines", now_ms());
    let fill = format!(
        "{INSERT} WITH RECURSIVE n (i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < {}) {}",
        total(),
        rows_select(application, now)
    );
    sqlx::query(&fill).execute(&pool).await.unwrap();
    sqlx::query("ANALYZE").execute(&pool).await.unwrap();
    let select = deadline_expired(Dialect::Sqlite, application, now, 1_000);
    let explain = select.prefixed("EXPLAIN QUERY PLAN");
    let plan: Vec<String> = bound!(&explain)
        .fetch_all(&pool)
        .await
        .unwrap()
        .iter()
        .map(|r| sqlx::Row::get::<String, _>(r, "detail"))
        .collect();
    assert!(
        plan.iter()
            .any(|d| d.contains("async_req_deadline_waiting")),
        "{plan:?}: {}",
        select.text
    );
    pool.close().await;
    expire_all(&store, application, now).await;
}

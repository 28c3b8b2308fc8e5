//! The flow view over a long history (issue 30 item 7): a queue's counts, per queue and
//! per partition, read its waiting records through the claim index and its running ones
//! through the running index, never the finished history (a single statement over both
//! statuses matched neither partial index and read the whole table on PostgreSQL).
//! PostgreSQL in a database of its own (plans read after `ANALYZE`), when
//! `ASYNC_EXEC_TEST_POSTGRES_URL` is set.

/// Finished records of the queue, waiting ones, running ones.
#[cfg(feature = "postgres")]
const FINISHED: i64 = 50_000;
#[cfg(feature = "postgres")]
const WAITING: i64 = 5_000;
#[cfg(feature = "postgres")]
const RUNNING: i64 = 20;

#[cfg(feature = "postgres")]
#[tokio::test]
#[cfg_attr(
    not(async_exec_test_postgres),
    ignore = "set ASYNC_EXEC_TEST_POSTGRES_URL to run it"
)]
async fn postgres_the_flow_view_reads_live_records_only() {
    use sqlx::{Connection, PgConnection, PgPool};

    use crate::base::record::now_ms;
    use crate::store::ops::{partitions_running, partitions_waiting, queue_live};
    use crate::store::sql::{Bind, Dialect, Sql};
    use crate::store::Store;

    let admin = std::env::var("ASYNC_EXEC_TEST_POSTGRES_URL").unwrap();
    let name = format!(
        "ae_flow_{}_{:08x}",
        std::process::id(),
        rand::random::<u32>()
    );
    let (base, _) = admin.rsplit_once('/').expect("a URL with a database");
    let url = format!("{base}/{name}");
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
    let (application, now) = ("flow", now_ms());
    let (f, w) = (FINISHED, FINISHED + WAITING);
    let fill = format!(
        "INSERT INTO async_req (application_name, executor, sign, strategy, status, \
         max_attempts, param_json, run_at, create_time, update_time, queue_name, \
         partition_key) SELECT '{application}', 'ex', 's', 'SaveAsync', CASE WHEN i <= {f} \
         THEN 'success' WHEN i <= {w} THEN 'init' ELSE 'running' END, 3, '{{}}', {now} - i, \
         {now}, {now}, 'big', 't' || (i % 50) FROM generate_series(1, {}) AS n (i)",
        w + RUNNING
    );
    sqlx::query(&fill).execute(&pool).await.unwrap();
    sqlx::query("VACUUM ANALYZE async_req")
        .execute(&pool)
        .await
        .unwrap();
    let d = Dialect::Postgres;
    let statements: Vec<Sql> = vec![
        queue_live(d, application, &["big"], now),
        queue_live(d, application, &["big", "other", "third"], now),
        partitions_waiting(d, application, "big", 100),
        partitions_running(d, application, "big"),
    ];
    for statement in &statements {
        for mode in ["auto", "force_generic_plan"] {
            // sqlx prepares its statements: after five runs PostgreSQL may plan them for
            // any bound value, which must read the same indexes.
            let mut conn = pool.acquire().await.unwrap();
            sqlx::query(&format!("SET plan_cache_mode = {mode}"))
                .execute(&mut *conn)
                .await
                .unwrap();
            let explain = statement.prefixed("EXPLAIN (ANALYZE, FORMAT JSON)");
            let mut q = sqlx::query(&explain.text);
            for b in &explain.binds {
                q = match b {
                    Bind::Int(n) => q.bind(*n),
                    Bind::Text(t) => q.bind(t.clone()),
                };
            }
            let row = q.fetch_one(&mut *conn).await.unwrap();
            let plan: String = sqlx::Row::try_get_unchecked(&row, 0).unwrap();
            let plan: serde_json::Value = serde_json::from_str(&plan).unwrap();
            let mut scans = Vec::new();
            super::deadline_tests::pg_scans(&plan[0]["Plan"], &mut scans);
            let said = format!("{mode}: {scans:?}: {}", statement.text);
            // Index scans of the two indexes, or the heap read through their bitmap;
            // never a sequential scan.
            let allowed = |index: &str| index == "async_req_due" || index == "async_req_running";
            assert!(
                scans.iter().any(|(_, index, _)| allowed(index))
                    && scans
                        .iter()
                        .all(|(kind, index, _)| allowed(index) || kind == "Bitmap Heap Scan"),
                "{said}"
            );
            let read: i64 = scans.iter().map(|(_, _, rows)| *rows).max().unwrap_or(0);
            assert!(read <= WAITING + RUNNING, "rows read: {read}; {said}");
            sqlx::query("RESET plan_cache_mode")
                .execute(&mut *conn)
                .await
                .unwrap();
        }
    }
    // And the answers are right.
    let now_rows = store
        .ops()
        .queue_now(application, &["big"], now)
        .await
        .unwrap();
    assert_eq!(now_rows.len(), 1);
    let big = &now_rows[0];
    assert_eq!(
        (big.running, big.waiting, big.due),
        (RUNNING, WAITING, WAITING)
    );
    assert_eq!(big.oldest_due, Some(now - w));
    let partitions = store
        .ops()
        .queue_partitions(application, "big", 3)
        .await
        .unwrap();
    assert_eq!(partitions.len(), 3);
    assert!(
        partitions.iter().all(|p| p.2 == WAITING / 50),
        "{partitions:?}"
    );
    pool.close().await;
    drop(store);
    sqlx::query(&format!("DROP DATABASE {name} WITH (FORCE)"))
        .execute(&mut server)
        .await
        .unwrap();
}

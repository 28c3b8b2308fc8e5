//! Issue 18, items 3, 7 and 11: a commit that did not commit is an error and dispatches
//! nothing (PostgreSQL after a failed statement, MariaDB after a deadlock); a keyed
//! `SyncSave` in a transaction whose snapshot is older than the key still sees the key;
//! SQLite's `rt.begin()` takes the write lock at once, so read-then-write transactions
//! do not fail with `SQLITE_BUSY_SNAPSHOT` under load.
#![allow(clippy::extra_unused_type_parameters)] // every test takes the backend, used or not

#[macro_use]
mod common;

use std::time::Duration;

use async_exec::{async_exec, Backend, Context, Data, Error, Outcome, Tx};
use common::{Probe, TestDb};

#[async_exec(type = SaveAsync)]
async fn stored(label: String, probe: Data<Probe>, ctx: Context) {
    probe.record(&label, ctx.attempt());
}

#[async_exec(type = AsyncSave)]
async fn after_commit(label: String, probe: Data<Probe>, ctx: Context) {
    probe.record(&label, ctx.attempt());
}

#[async_exec(type = SyncSave)]
async fn sync_once(label: String, probe: Data<Probe>, ctx: Context) {
    probe.record(&label, ctx.attempt());
}

fn probe(rt: &async_exec::Runtime) -> Data<Probe> {
    rt.data::<Probe>().expect("tests register a Probe")
}

/// Whether `result` is the error of a transaction that the server rolled back.
#[cfg(any(
    all(feature = "postgres", async_exec_test_postgres),
    all(feature = "mysql", async_exec_test_mysql)
))]
fn rolled_back<T: std::fmt::Debug>(result: &async_exec::Result<T>) -> bool {
    match result {
        Err(error) => error
            .to_string()
            .contains("the database server rolled this transaction back"),
        Ok(_) => false,
    }
}

/// Item 7: transaction T1 takes its snapshot (a read), then another task commits key K
/// (a keyed `SaveAsync` call: no body runs before its key is written), then T1 makes a
/// keyed `SyncSave` call with K: exactly one of the two takes K, and one body runs.
/// (Before: on MariaDB's REPEATABLE READ and SQLite's deferred WAL transactions T1 did
/// not see K and ran its body although K was taken.) On SQLite T1 holds the write lock
/// from its BEGIN, so the other call waits for T1's commit instead and finds K then.
async fn a_keyed_sync_save_sees_a_key_committed_after_the_snapshot<DB: Backend>(db: TestDb)
where
    for<'c> &'c mut DB::Connection: sqlx::Executor<'c, Database = DB>,
    for<'q> <DB as sqlx::Database>::Arguments<'q>: sqlx::IntoArguments<'q, DB>,
    i64: for<'r> sqlx::Decode<'r, DB> + sqlx::Type<DB>,
    (i64,): for<'r> sqlx::FromRow<'r, DB::Row>,
{
    let rt = db.builder().start().await.unwrap();
    db.exec("CREATE TABLE orders (id INTEGER)").await;
    let mut tx: Tx<DB> = rt.begin().await.unwrap();
    let (_,): (i64,) = sqlx::query_as::<DB, (i64,)>("SELECT COUNT(*) FROM orders")
        .fetch_one(tx.conn())
        .await
        .unwrap();
    let other = tokio::spawn({
        let rt = rt.clone();
        async move { stored("k7-stored".into()).key("K7").on(&rt).await }
    });
    // The other call commits K7 now (MariaDB, PostgreSQL), or waits for T1 (SQLite):
    // either way T1 goes on once it has finished or had time to.
    let _ = tokio::time::timeout(Duration::from_millis(500), async {
        while !other.is_finished() {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    })
    .await;
    let mine = sync_once("k7-sync".into())
        .key("K7")
        .within(&mut tx)
        .await
        .unwrap();
    tx.commit().await.unwrap();
    let other = other.await.unwrap().unwrap();
    let outcomes = [mine.outcome, other.outcome];
    let took = outcomes.iter().filter(|o| **o != Outcome::Existing).count();
    assert_eq!(took, 1, "one call takes K7: {outcomes:?}");
    tokio::time::sleep(Duration::from_millis(100)).await;
    rt.wait_idle().await;
    let runs = probe(&rt).runs("k7-sync") + probe(&rt).runs("k7-stored");
    assert_eq!(runs, 1, "one body runs: {outcomes:?}");
    rt.shutdown().await.unwrap();
}

/// Item 11: tasks doing read-then-write transactions through `rt.begin()` at the same
/// time all commit. (Before, on SQLite, a deferred transaction whose snapshot was older
/// than another's commit failed its write at once with `SQLITE_BUSY_SNAPSHOT`.)
async fn read_then_write_transactions_all_commit<DB: Backend>(db: TestDb)
where
    for<'c> &'c mut DB::Connection: sqlx::Executor<'c, Database = DB>,
    for<'q> <DB as sqlx::Database>::Arguments<'q>: sqlx::IntoArguments<'q, DB>,
    i64: for<'r> sqlx::Decode<'r, DB> + sqlx::Type<DB>,
    (i64,): for<'r> sqlx::FromRow<'r, DB::Row>,
{
    let rt = db.builder().start().await.unwrap();
    db.exec("CREATE TABLE counter (id INTEGER PRIMARY KEY, n BIGINT)")
        .await;
    db.exec("INSERT INTO counter (id, n) VALUES (1, 0)").await;
    let tasks: Vec<_> = (0..6)
        .map(|_| {
            let rt = rt.clone();
            tokio::spawn(async move {
                for _ in 0..10 {
                    let mut tx: Tx<DB> = rt.begin().await?;
                    let (n,): (i64,) =
                        sqlx::query_as::<DB, (i64,)>("SELECT n FROM counter WHERE id = 1")
                            .fetch_one(tx.conn())
                            .await?;
                    tokio::task::yield_now().await;
                    let sql = format!("UPDATE counter SET n = {} WHERE id = 1", n + 1);
                    sqlx::query::<DB>(&sql).execute(tx.conn()).await?;
                    tx.commit().await?;
                }
                Ok::<_, Error>(())
            })
        })
        .collect();
    for task in tasks {
        task.await.unwrap().unwrap();
    }
    rt.shutdown().await.unwrap();
}

backend_suite!(
    a_keyed_sync_save_sees_a_key_committed_after_the_snapshot,
    read_then_write_transactions_all_commit,
);

/// Item 3 on PostgreSQL: a statement failed in the transaction and the caller caught
/// the error, so the server answers COMMIT with ROLLBACK. (Before: `commit()` returned
/// `Ok` and the `AsyncSave` call made in the transaction ran.)
#[cfg(all(feature = "postgres", async_exec_test_postgres))]
mod postgres_only {
    use super::*;
    use async_exec::Postgres;

    async fn fail_a_statement(tx: &mut Tx<Postgres>) {
        let failed = sqlx::query("INSERT INTO users (id) VALUES (1)")
            .execute(tx.conn())
            .await;
        assert!(failed.is_err(), "the duplicate was to fail");
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
    async fn commit_after_a_swallowed_failure_is_an_error() {
        let db = TestDb::new(common::Kind::Postgres).await;
        let rt = db.builder().start().await.unwrap();
        db.exec("CREATE TABLE users (id INTEGER PRIMARY KEY)").await;

        let mut tx: Tx<Postgres> = rt.begin().await.unwrap();
        sqlx::query("INSERT INTO users (id) VALUES (1)")
            .execute(tx.conn())
            .await
            .unwrap();
        after_commit("pg-tx".into()).within(&mut tx).await.unwrap();
        fail_a_statement(&mut tx).await;
        let refused = stored("pg-tx-late".into()).within(&mut tx).await;
        assert!(rolled_back(&refused), "{refused:?}");
        let committed = tx.commit().await;
        assert!(rolled_back(&committed), "{committed:?}");

        let scoped: async_exec::Result<()> = rt
            .transaction(|tx: &mut Tx<Postgres>| {
                Box::pin(async move {
                    sqlx::query("INSERT INTO users (id) VALUES (1)")
                        .execute(tx.conn())
                        .await?;
                    after_commit("pg-scope".into()).await?;
                    fail_a_statement(tx).await;
                    Ok(())
                })
            })
            .await;
        assert!(rolled_back(&scoped), "{scoped:?}");

        tokio::time::sleep(Duration::from_millis(200)).await;
        rt.wait_idle().await;
        for label in ["pg-tx", "pg-tx-late", "pg-scope"] {
            assert_eq!(probe(&rt).runs(label), 0, "{label} ran");
        }
        assert_eq!(db.count("users").await, 0);
        assert_eq!(db.count("async_req").await, 0);
        // A call, then a failed statement of the caller's, then at once the commit: the
        // call's success does not vouch for the transaction after the caller's statement.
        let mut tx: Tx<Postgres> = rt.begin().await.unwrap();
        sqlx::query("INSERT INTO users (id) VALUES (1)")
            .execute(tx.conn())
            .await
            .unwrap();
        stored("pg-then-failed".into())
            .within(&mut tx)
            .await
            .unwrap();
        fail_a_statement(&mut tx).await;
        let committed = tx.commit().await;
        assert!(rolled_back(&committed), "{committed:?}");
        // A transaction whose statements all succeeded still commits.
        let mut tx: Tx<Postgres> = rt.begin().await.unwrap();
        after_commit("pg-ok".into()).within(&mut tx).await.unwrap();
        tx.commit().await.unwrap();
        probe(&rt).wait_runs("pg-ok", 1).await;
        rt.shutdown().await.unwrap();
    }
}

/// Item 3 on MariaDB: a real deadlock makes the server roll the whole transaction back
/// and the session continue in autocommit. (Before: a call `.within(&mut tx)` then
/// autocommitted its record on its own, and `commit()` returned `Ok` and dispatched.)
#[cfg(all(feature = "mysql", async_exec_test_mysql))]
mod mysql_only {
    use super::*;
    use async_exec::MySql;
    use sqlx::MySqlPool;

    /// Makes `tx` the victim of a deadlock with another connection (which did more work,
    /// so the server rolls `tx` back) and catches the error; the other one commits.
    async fn lose_a_deadlock(url: &str, tx: &mut Tx<MySql>) {
        sqlx::query("UPDATE rows2 SET v = v + 1 WHERE id = 1")
            .execute(tx.conn())
            .await
            .unwrap();
        let pool = MySqlPool::connect(url).await.unwrap();
        let mut other = pool.begin().await.unwrap();
        let (other_id,): (u64,) = sqlx::query_as("SELECT CONNECTION_ID()")
            .fetch_one(&mut *other)
            .await
            .unwrap();
        sqlx::query("INSERT INTO heavy (id) VALUES (1),(2),(3),(4),(5),(6),(7),(8),(9),(10)")
            .execute(&mut *other)
            .await
            .unwrap();
        sqlx::query("UPDATE rows2 SET v = v + 1 WHERE id = 2")
            .execute(&mut *other)
            .await
            .unwrap();
        let waiting = tokio::spawn(async move {
            sqlx::query("UPDATE rows2 SET v = v + 1 WHERE id = 1")
                .execute(&mut *other)
                .await?;
            other.commit().await
        });
        let watch = MySqlPool::connect(url).await.unwrap();
        // Until the other transaction waits for this one's row (a state, not a time: a
        // loaded CI machine once took longer than the 5 s of `common::wait_for`).
        let began = std::time::Instant::now();
        // Its own transaction's state: the server runs other tests' transactions too.
        // Read every 250 ms: the cache behind `innodb_trx` is refreshed only when it was
        // not read for 100 ms (the behaviour of MySQL bug #48883, seen here on MariaDB
        // 10.11): read every 10 ms, as this test did, it kept showing its first reading
        // for good. The test failed now and then with "never waited" when that reading
        // came before the wait, and its second call passed only on a stale row of the
        // first (watching its own connection's row, it failed every time).
        loop {
            let (n,): (i64,) = sqlx::query_as(
                "SELECT COUNT(*) FROM information_schema.innodb_trx \
                 WHERE trx_state = 'LOCK WAIT' AND trx_mysql_thread_id = ?",
            )
            .bind(other_id)
            .fetch_one(&watch)
            .await
            .unwrap();
            if n > 0 {
                break;
            }
            if waiting.is_finished() {
                // It did not wait: say what happened to it rather than time out.
                panic!(
                    "the other transaction did not wait for this one's row: {:?}",
                    waiting.await
                );
            }
            if began.elapsed() > Duration::from_secs(30) {
                let states: Vec<(u64, String)> = sqlx::query_as(
                    "SELECT trx_mysql_thread_id, trx_state FROM information_schema.innodb_trx",
                )
                .fetch_all(&watch)
                .await
                .unwrap();
                panic!(
                    "the other transaction (connection {other_id}) never waited for this \
                     one's row; the server's transactions: {states:?}"
                );
            }
            tokio::time::sleep(Duration::from_millis(250)).await;
        }
        let lost = sqlx::query("UPDATE rows2 SET v = v + 1 WHERE id = 2")
            .execute(tx.conn())
            .await
            .expect_err("this transaction was to lose the deadlock");
        let code = lost
            .as_database_error()
            .and_then(|e| e.try_downcast_ref::<sqlx::mysql::MySqlDatabaseError>())
            .map(|e| e.number());
        assert_eq!(code, Some(1213), "{lost}");
        waiting.await.unwrap().unwrap();
        watch.close().await;
        pool.close().await;
    }

    async fn tables(db: &TestDb) {
        db.exec("CREATE TABLE rows2 (id INTEGER PRIMARY KEY, v INTEGER)")
            .await;
        db.exec("INSERT INTO rows2 (id, v) VALUES (1, 0), (2, 0)")
            .await;
        db.exec("CREATE TABLE heavy (id INTEGER)").await;
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
    async fn a_deadlock_victim_neither_writes_nor_commits() {
        let db = TestDb::new(common::Kind::MySql).await;
        let rt = db.builder().start().await.unwrap();
        tables(&db).await;

        let mut tx: Tx<MySql> = rt.begin().await.unwrap();
        after_commit("my-tx".into()).within(&mut tx).await.unwrap();
        lose_a_deadlock(&db.url, &mut tx).await;
        let refused = stored("my-tx-late".into()).within(&mut tx).await;
        assert!(rolled_back(&refused), "{refused:?}");
        assert_eq!(
            db.count("async_req").await,
            0,
            "nothing written outside the transaction"
        );
        let committed = tx.commit().await;
        assert!(rolled_back(&committed), "{committed:?}");

        let url = db.url.clone();
        let scoped: async_exec::Result<()> = rt
            .transaction(|tx: &mut Tx<MySql>| {
                Box::pin(async move {
                    after_commit("my-scope".into()).await?;
                    lose_a_deadlock(&url, tx).await;
                    stored("my-scope-late".into()).await?;
                    Ok(())
                })
            })
            .await;
        assert!(rolled_back(&scoped), "{scoped:?}");

        tokio::time::sleep(Duration::from_millis(200)).await;
        rt.wait_idle().await;
        for label in ["my-tx", "my-tx-late", "my-scope", "my-scope-late"] {
            assert_eq!(probe(&rt).runs(label), 0, "{label} ran");
        }
        assert_eq!(db.count("async_req").await, 0);
        let mut tx: Tx<MySql> = rt.begin().await.unwrap();
        after_commit("my-ok".into()).within(&mut tx).await.unwrap();
        tx.commit().await.unwrap();
        probe(&rt).wait_runs("my-ok", 1).await;
        rt.shutdown().await.unwrap();
    }
}

//! Issue 30, item 4: a singleton queue (`QueueLimits::singleton`) holds at most one live
//! (waiting or running) request per partition. A later call writes nothing and gets the
//! live request's id with `Outcome::Live`; once that request finishes, the next call
//! writes a new one. A unique index over the live records holds it: two instances racing
//! write one, a caller's transaction that rolls back leaves nothing, and a call in a
//! transaction waits for another transaction's uncommitted request of its partition.
#![allow(clippy::extra_unused_type_parameters)] // every test takes the backend, used or not

#[macro_use]
mod common;

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use async_exec::{async_exec, batch, Backend, Data, Outcome, QueueLimits, Tx};
use common::TestDb;

/// The runs that started, by account and n, and how long each body holds.
#[derive(Clone, Default)]
struct Runs(Arc<Mutex<Vec<(String, u64)>>>);

impl Runs {
    fn started(&self) -> Vec<(String, u64)> {
        self.0.lock().unwrap().clone()
    }

    async fn wait_started(&self, n: usize) {
        let deadline = Instant::now() + Duration::from_secs(20);
        while self.started().len() < n {
            assert!(
                Instant::now() < deadline,
                "{n} runs started: {:?}",
                self.started()
            );
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }
}

/// Rebuilds an account's search index: 400 ms.
#[async_exec(type = SaveAsync, queue = "reindex", partition = account)]
async fn reindex(account: String, n: u64, runs: Data<Runs>) {
    runs.0.lock().unwrap().push((account, n));
    tokio::time::sleep(Duration::from_millis(400)).await;
}

fn builder(db: &TestDb, runs: &Runs) -> async_exec::Builder {
    let _ = tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::from_default_env())
        .with_test_writer()
        .try_init();
    db.builder()
        .delete_on_success(false)
        .poll_interval(Duration::from_millis(50))
        .data(runs.clone())
        .queue("reindex", QueueLimits::new().singleton())
}

/// Live records of a partition.
async fn live(db: &TestDb, account: &str) -> i64 {
    db.count(&format!(
        "async_req WHERE partition_key = '{account}' AND status IN ('init', 'failed', 'running')"
    ))
    .await
}

/// While one waits, the next call of its partition writes nothing and gets its id; the
/// other partitions are theirs; a batch's second call of a partition gets the first's;
/// once the request finished (here: went `dead`), a call writes a new one, and a replay
/// of the dead one is refused while the new one lives.
async fn a_later_call_gets_the_live_request<DB: Backend>(db: TestDb) {
    let runs = Runs::default();
    let rt = builder(&db, &runs)
        .run_workers(false)
        .start()
        .await
        .unwrap();
    let first = reindex("a".into(), 1).on(&rt).await.unwrap();
    assert_eq!(first.outcome, Outcome::Queued);
    let second = reindex("a".into(), 2).on(&rt).await.unwrap();
    assert_eq!((second.id, second.outcome), (first.id, Outcome::Live));
    let other = reindex("b".into(), 1).on(&rt).await.unwrap();
    assert_eq!(other.outcome, Outcome::Queued);
    assert_ne!(other.id, first.id);
    let in_batch = batch([reindex("c".into(), 1), reindex("c".into(), 2)])
        .on(&rt)
        .await
        .unwrap();
    assert_eq!(in_batch[0].outcome, Outcome::Queued);
    assert_eq!(
        (in_batch[1].id, in_batch[1].outcome.clone()),
        (in_batch[0].id, Outcome::Live)
    );
    assert_eq!(db.count("async_req").await, 3);
    // The first one finishes: the partition is free again.
    let id = first.id.unwrap();
    db.exec(&format!(
        "UPDATE async_req SET status = 'dead' WHERE id = {id}"
    ))
    .await;
    let third = reindex("a".into(), 3).on(&rt).await.unwrap();
    assert_eq!(third.outcome, Outcome::Queued);
    assert_ne!(third.id, first.id);
    assert_eq!(live(&db, "a").await, 1);
    // A replay of the dead one while the partition has a live one fails on the index.
    let replayed = rt.retry_now(id).await;
    assert!(replayed.is_err(), "{replayed:?}");
    assert_eq!(live(&db, "a").await, 1);
    rt.shutdown().await.unwrap();
}

/// With workers: a call while the request runs gets it; after it succeeded, a call
/// writes and runs a new one. Each ran once.
async fn a_running_request_holds_its_partition_until_it_ends<DB: Backend>(db: TestDb) {
    let runs = Runs::default();
    let rt = builder(&db, &runs).start().await.unwrap();
    let first = reindex("a".into(), 1).on(&rt).await.unwrap();
    runs.wait_started(1).await;
    let during = reindex("a".into(), 2).on(&rt).await.unwrap();
    assert_eq!((during.id, during.outcome), (first.id, Outcome::Live));
    common::wait_for(|| async { live(&db, "a").await == 0 }).await;
    let after = reindex("a".into(), 3).on(&rt).await.unwrap();
    assert_eq!(after.outcome, Outcome::Queued);
    runs.wait_started(2).await;
    common::wait_for(|| async { live(&db, "a").await == 0 }).await;
    assert_eq!(
        runs.started(),
        vec![("a".to_string(), 1), ("a".to_string(), 3)]
    );
    rt.shutdown().await.unwrap();
}

/// Two instances, 16 calls of one partition at once from both: one record is written,
/// and every call names it.
async fn two_instances_racing_write_one<DB: Backend>(db: TestDb) {
    let runs = Runs::default();
    let rts = [
        builder(&db, &runs)
            .run_workers(false)
            .start()
            .await
            .unwrap(),
        builder(&db, &runs)
            .run_workers(false)
            .start()
            .await
            .unwrap(),
    ];
    for round in 0..3 {
        let account = format!("race-{round}");
        let calls = (0..16).map(|n| {
            let rt = rts[n % 2].clone();
            let account = account.clone();
            tokio::spawn(async move { reindex(account, n as u64).on(&rt).await })
        });
        let mut ids = Vec::new();
        let mut queued = 0;
        for call in calls.collect::<Vec<_>>() {
            let receipt = call.await.unwrap().unwrap();
            queued += usize::from(receipt.outcome == Outcome::Queued);
            ids.push(receipt.id);
        }
        assert_eq!(queued, 1, "{ids:?}");
        assert!(
            ids.iter().all(|id| id.is_some() && *id == ids[0]),
            "{ids:?}"
        );
        assert_eq!(live(&db, &account).await, 1);
    }
    for rt in rts {
        rt.shutdown().await.unwrap();
    }
}

/// A call in the caller's transaction that rolls back leaves nothing: the next call
/// writes its own request.
async fn a_rolled_back_call_leaves_nothing<DB: Backend>(db: TestDb) {
    let runs = Runs::default();
    let rt = builder(&db, &runs)
        .run_workers(false)
        .start()
        .await
        .unwrap();
    let mut tx: Tx<DB> = rt.begin().await.unwrap();
    let inside = reindex("a".into(), 1).within(&mut tx).await.unwrap();
    assert_eq!(inside.outcome, Outcome::Queued);
    let again = reindex("a".into(), 2).within(&mut tx).await.unwrap();
    assert_eq!((again.id, again.outcome), (inside.id, Outcome::Live));
    tx.rollback().await.unwrap();
    assert_eq!(db.count("async_req").await, 0);
    let after = reindex("a".into(), 3).on(&rt).await.unwrap();
    assert_eq!(after.outcome, Outcome::Queued);
    assert_eq!(live(&db, "a").await, 1);
    rt.shutdown().await.unwrap();
}

backend_suite!(
    a_later_call_gets_the_live_request,
    a_running_request_holds_its_partition_until_it_ends,
    two_instances_racing_write_one,
    a_rolled_back_call_leaves_nothing,
);

// Two callers' transactions on PostgreSQL and MariaDB, at READ COMMITTED and REPEATABLE
// READ: the first writes a request of partition "a" and holds its transaction open; the
// second, which read the table before (its snapshot is older than the first's commit),
// calls for "a". The second's call waits for the first's transaction: after its commit
// it gets the first's request (`Live`), after its rollback it writes its own. Never two
// live. PostgreSQL at REPEATABLE READ cannot show the second a request newer than its
// snapshot: its call fails with a serialization error (40001), and its transaction,
// run again, gets the first's request.
#[cfg(any(
    all(feature = "postgres", async_exec_test_postgres),
    all(feature = "mysql", async_exec_test_mysql)
))]
mod transactions {
    use super::*;
    use async_exec::Runtime;
    use common::Kind;

    /// How the first transaction ends.
    #[derive(Debug, Clone, Copy, PartialEq, Eq)]
    enum End {
        Commit,
        Rollback,
    }

    /// Runs the race at `level`, in transactions that `begin` opens (each has read the
    /// table: its snapshot is taken).
    async fn race<DB, B, F>(db: &TestDb, rt: &Runtime, begin: &B, level: &str, end: End)
    where
        DB: Backend,
        B: Fn() -> F,
        F: std::future::Future<Output = Tx<DB>>,
    {
        db.exec("DELETE FROM async_req").await;
        let mut second = begin().await;
        let mut first = begin().await;
        let written = reindex("a".into(), 1).within(&mut first).await.unwrap();
        assert_eq!(written.outcome, Outcome::Queued);
        let waiting = tokio::spawn(async move {
            let receipt = reindex("a".into(), 2).within(&mut second).await;
            (receipt, second)
        });
        tokio::time::sleep(Duration::from_millis(300)).await;
        assert!(
            !waiting.is_finished(),
            "the second call waits for the first"
        );
        match end {
            End::Commit => first.commit().await.unwrap(),
            End::Rollback => first.rollback().await.unwrap(),
        }
        let (receipt, second) = waiting.await.unwrap();
        match (end, receipt) {
            (End::Commit, Ok(receipt)) => {
                assert_eq!((receipt.id, receipt.outcome), (written.id, Outcome::Live));
                second.commit().await.unwrap();
            }
            (End::Commit, Err(error)) => {
                assert!(
                    db.kind == Kind::Postgres && level == "REPEATABLE READ",
                    "{level}: {error}"
                );
                assert!(error.to_string().contains("serializ"), "{error}");
                drop(second);
                // Run again, the transaction sees the first's request.
                let mut again = begin().await;
                let receipt = reindex("a".into(), 2).within(&mut again).await.unwrap();
                assert_eq!((receipt.id, receipt.outcome), (written.id, Outcome::Live));
                again.commit().await.unwrap();
            }
            (End::Rollback, receipt) => {
                let receipt = receipt.unwrap_or_else(|e| panic!("{level}: {e}"));
                assert_eq!(receipt.outcome, Outcome::Queued);
                assert_ne!(receipt.id, written.id);
                second.commit().await.unwrap();
            }
        }
        assert_eq!(live(db, "a").await, 1, "{level} {end:?}");
        assert_eq!(db.count("async_req").await, 1, "{level} {end:?}");
        let _ = rt;
    }

    const LEVELS: [&str; 2] = ["READ COMMITTED", "REPEATABLE READ"];
    const ENDS: [End; 2] = [End::Commit, End::Rollback];

    #[cfg(all(feature = "postgres", async_exec_test_postgres))]
    #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
    async fn postgres_a_call_waits_for_the_other_transaction() {
        use async_exec::Postgres;
        let db = TestDb::new(Kind::Postgres).await;
        let runs = Runs::default();
        let rt = builder(&db, &runs)
            .run_workers(false)
            .start()
            .await
            .unwrap();
        for level in LEVELS {
            let begin = || async {
                let mut tx: Tx<Postgres> = rt.begin().await.unwrap();
                sqlx::query(&format!("SET TRANSACTION ISOLATION LEVEL {level}"))
                    .execute(tx.conn())
                    .await
                    .unwrap();
                sqlx::query("SELECT COUNT(*) FROM async_req")
                    .execute(tx.conn())
                    .await
                    .unwrap();
                tx
            };
            for end in ENDS {
                race::<Postgres, _, _>(&db, &rt, &begin, level, end).await;
            }
        }
        rt.shutdown().await.unwrap();
    }

    #[cfg(all(feature = "mysql", async_exec_test_mysql))]
    #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
    async fn mysql_a_call_waits_for_the_other_transaction() {
        use async_exec::MySql;
        let db = TestDb::new(Kind::MySql).await;
        let runs = Runs::default();
        let rt = builder(&db, &runs)
            .run_workers(false)
            .start()
            .await
            .unwrap();
        for level in LEVELS {
            let pool = sqlx::mysql::MySqlPoolOptions::new()
                .max_connections(3)
                .after_connect(move |conn, _| {
                    Box::pin(async move {
                        let set = format!("SET SESSION TRANSACTION ISOLATION LEVEL {level}");
                        sqlx::query(&set).execute(&mut *conn).await?;
                        Ok(())
                    })
                })
                .connect(&db.url)
                .await
                .unwrap();
            let begin = || async {
                let mut tx: Tx<MySql> = rt.wrap::<MySql>(pool.begin().await.unwrap());
                sqlx::query("SELECT COUNT(*) FROM async_req")
                    .execute(tx.conn())
                    .await
                    .unwrap();
                tx
            };
            for end in ENDS {
                race::<MySql, _, _>(&db, &rt, &begin, level, end).await;
            }
            pool.close().await;
        }
        rt.shutdown().await.unwrap();
    }
}

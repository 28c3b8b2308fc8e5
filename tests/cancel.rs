//! Issue 20: cancel inside the caller's transaction, and by key. `rt.cancel(id)` and
//! `rt.cancel_key(key)` cancel a waiting request at once when awaited, or inside the
//! caller's transaction with `.within(&mut tx)`: a rollback keeps the request, a commit
//! cancels it, and a request that is running or finished is refused.
#![allow(clippy::extra_unused_type_parameters)] // every test takes the backend, used or not

#[macro_use]
mod common;

use std::time::Duration;

use async_exec::{async_exec, Backend, CancelOutcome, Error, Status, Tx};
use common::TestDb;

/// A reminder for tomorrow.
#[async_exec(type = SaveAsync)]
async fn remind(subscription: i64) {
    let _ = subscription;
}

/// Runs at once.
#[async_exec(type = SaveAsync)]
async fn quick(n: i64) {
    let _ = n;
}

const TOMORROW: Duration = Duration::from_secs(86_400);

async fn status_of(db: &TestDb, id: i64) -> String {
    let rows = ["init", "running", "failed", "success", "dead", "cancelled"];
    for status in rows {
        if db
            .count(&format!(
                "async_req WHERE id = {id} AND status = '{status}'"
            ))
            .await
            == 1
        {
            return status.into();
        }
    }
    "gone".into()
}

/// A cancel in a transaction that rolls back leaves the request waiting; in one that
/// commits, cancels it; by id and by key.
async fn a_cancel_rolls_back_with_the_transaction<DB: Backend>(db: TestDb) {
    let rt = db.builder().start().await.unwrap();
    let id = remind(1).delay(TOMORROW).on(&rt).await.unwrap().id.unwrap();
    let keyed = remind(2)
        .key("reminder-2")
        .delay(TOMORROW)
        .on(&rt)
        .await
        .unwrap()
        .id
        .unwrap();

    let mut tx: Tx<DB> = rt.begin().await.unwrap();
    rt.cancel(id).within(&mut tx).await.unwrap();
    rt.cancel_key("reminder-2").within(&mut tx).await.unwrap();
    tx.rollback().await.unwrap();
    assert_eq!(status_of(&db, id).await, "init");
    assert_eq!(status_of(&db, keyed).await, "init");

    let mut tx: Tx<DB> = rt.begin().await.unwrap();
    // Each says what it did: both were waiting.
    assert_eq!(
        rt.cancel(id).within(&mut tx).await.unwrap(),
        CancelOutcome::Cancelled
    );
    assert_eq!(
        rt.cancel_key("reminder-2").within(&mut tx).await.unwrap(),
        CancelOutcome::Cancelled
    );
    tx.commit().await.unwrap();
    assert_eq!(status_of(&db, id).await, "cancelled");
    assert_eq!(status_of(&db, keyed).await, "cancelled");
    assert_eq!(rt.get(id).await.unwrap().unwrap().status, Status::Cancelled);
    rt.shutdown().await.unwrap();
}

/// What cannot be cancelled is refused, saying why, in a transaction and at once: a
/// cancelled request, a finished one, an unknown id, a key no request holds.
async fn what_cannot_be_cancelled_is_refused<DB: Backend>(db: TestDb) {
    let rt = db.builder().delete_on_success(false).start().await.unwrap();
    let waiting = remind(3)
        .key("reminder-3")
        .delay(TOMORROW)
        .on(&rt)
        .await
        .unwrap()
        .id
        .unwrap();
    assert_eq!(
        rt.cancel_key("reminder-3").await.unwrap(),
        CancelOutcome::Cancelled
    );
    assert_eq!(status_of(&db, waiting).await, "cancelled");
    let again = rt.cancel(waiting).await.unwrap_err();
    assert!(
        matches!(&again, Error::InvalidState { status, .. } if status == "cancelled"),
        "{again}"
    );
    let done = quick(4).on(&rt).await.unwrap().id.unwrap();
    common::wait_for(|| async { status_of(&db, done).await == "success" }).await;
    let mut tx: Tx<DB> = rt.begin().await.unwrap();
    let refused = rt.cancel(done).within(&mut tx).await.unwrap_err();
    assert!(
        matches!(&refused, Error::InvalidState { status, .. } if status == "success"),
        "{refused}"
    );
    let unknown = rt.cancel(done + 1_000).within(&mut tx).await.unwrap_err();
    assert!(matches!(unknown, Error::NotFound(_)), "{unknown}");
    let no_key = rt
        .cancel_key("no-such-key")
        .within(&mut tx)
        .await
        .unwrap_err();
    assert!(
        matches!(&no_key, Error::KeyNotFound(k) if k == "no-such-key"),
        "{no_key}"
    );
    tx.commit().await.unwrap();
    assert!(matches!(
        rt.cancel_key("no-such-key").await,
        Err(Error::KeyNotFound(_))
    ));
    assert_eq!(status_of(&db, done).await, "success");
    rt.shutdown().await.unwrap();
}

/// Inside `rt.transaction(..)`, a cancel awaited on its own joins the scope: the scope's
/// rollback keeps the request, its commit cancels it; one refused at the commit (the
/// request finished meanwhile) fails the scope and writes none of its calls.
async fn a_cancel_in_a_scope_goes_with_the_scope<DB: Backend>(db: TestDb) {
    let rt = db.builder().delete_on_success(false).start().await.unwrap();
    let id = remind(5).delay(TOMORROW).on(&rt).await.unwrap().id.unwrap();
    let scoped = rt.clone();
    let result: Result<(), Error> = rt
        .transaction(|_tx: &mut Tx<DB>| {
            Box::pin(async move {
                scoped.cancel(id).await?;
                Err(Error::NotFound(0)) // the scope rolls back
            })
        })
        .await;
    assert!(result.is_err());
    assert_eq!(status_of(&db, id).await, "init");
    let scoped = rt.clone();
    rt.transaction(|_tx: &mut Tx<DB>| {
        Box::pin(async move {
            // On its own: joins the scope, and says so.
            assert_eq!(scoped.cancel(id).await?, CancelOutcome::AtCommit);
            let now = scoped.get(id).await?.unwrap().status;
            assert_eq!(now, Status::Init, "made at the commit, not at the call");
            Ok::<_, Error>(())
        })
    })
    .await
    .unwrap();
    assert_eq!(status_of(&db, id).await, "cancelled");

    let done = quick(6).on(&rt).await.unwrap().id.unwrap();
    common::wait_for(|| async { status_of(&db, done).await == "success" }).await;
    let scoped = rt.clone();
    let refused = rt
        .transaction(|_tx: &mut Tx<DB>| {
            Box::pin(async move {
                remind(7).delay(TOMORROW).await?;
                scoped.cancel(done).await?;
                Ok::<_, Error>(())
            })
        })
        .await
        .unwrap_err();
    assert!(
        matches!(&refused, Error::InvalidState { status, .. } if status == "success"),
        "{refused}"
    );
    assert_eq!(
        db.count("async_req WHERE status = 'init'").await,
        0,
        "the scope's call was not written"
    );
    rt.shutdown().await.unwrap();
}

/// Issue 30: every request with a tag, with a key, or matching a filter, cancelled in the
/// caller's transaction by one call: the waiting ones `cancelled`, the running one asked
/// to stop, the finished one and another tenant's left alone; a rollback keeps them all,
/// and the counts are what the commit made true.
async fn a_bulk_cancel_goes_with_the_transaction<DB: Backend>(db: TestDb) {
    let rt = db.builder().delete_on_success(false).start().await.unwrap();
    let submit = |n: i64, tags: &'static [&'static str]| {
        let rt = rt.clone();
        async move {
            let mut call = remind(n).delay(TOMORROW);
            for tag in tags {
                call = call.tag(*tag);
            }
            call.on(&rt).await.unwrap().id.unwrap()
        }
    };
    let waiting = [
        submit(1, &["tenant:a"]).await,
        submit(2, &["tenant:a", "batch:9"]).await,
    ];
    let failed = submit(3, &["tenant:a"]).await;
    db.exec(&format!(
        "UPDATE async_req SET status = 'failed' WHERE id = {failed}"
    ))
    .await;
    let running = submit(4, &["tenant:a"]).await;
    db.exec(&format!(
        "UPDATE async_req SET status = 'running', lease_owner = 'other', \
         lease_until = {}, exec_count = 1 WHERE id = {running}",
        common::now_ms() + 86_400_000
    ))
    .await;
    let finished = submit(5, &["tenant:a"]).await;
    db.exec(&format!(
        "UPDATE async_req SET status = 'success' WHERE id = {finished}"
    ))
    .await;
    let other_tenant = submit(6, &["tenant:b"]).await;
    let keyed = remind(7)
        .key("reminder-7")
        .delay(TOMORROW)
        .on(&rt)
        .await
        .unwrap()
        .id
        .unwrap();

    let before = |ids: &[i64]| {
        let ids = ids.to_vec();
        let db = &db;
        async move {
            let mut statuses = Vec::new();
            for id in ids {
                statuses.push(status_of(db, id).await);
            }
            statuses
        }
    };
    let all = [
        waiting[0],
        waiting[1],
        failed,
        running,
        finished,
        other_tenant,
        keyed,
    ];
    let as_written = before(&all).await;

    // Rolled back: nothing changes.
    let mut tx: Tx<DB> = rt.begin().await.unwrap();
    let done = rt.cancel_tagged("tenant:a").within(&mut tx).await.unwrap();
    assert_eq!((done.cancelled, done.stop_asked), (3, 1));
    tx.rollback().await.unwrap();
    assert_eq!(before(&all).await, as_written);
    assert_eq!(
        db.count("async_req WHERE cancel_requested IS NOT NULL")
            .await,
        0
    );

    // By a filter (the list's): a tag and a second tag; then the tenant; then a key.
    let mut tx: Tx<DB> = rt.begin().await.unwrap();
    let batch = async_exec::RequestQuery::default()
        .tag("batch:9")
        .executor(rt.get(waiting[1]).await.unwrap().unwrap().executor);
    let done = rt.cancel_matching(&batch).within(&mut tx).await.unwrap();
    assert_eq!((done.cancelled, done.stop_asked, done.total()), (1, 0, 1));
    let done = rt.cancel_tagged("tenant:a").within(&mut tx).await.unwrap();
    assert_eq!(
        (done.cancelled, done.stop_asked),
        (2, 1),
        "the one by the filter is done"
    );
    let by_key = async_exec::RequestQuery::default().key("reminder-7");
    let done = rt.cancel_matching(&by_key).within(&mut tx).await.unwrap();
    assert_eq!((done.cancelled, done.stop_asked), (1, 0));
    tx.commit().await.unwrap();

    for id in [waiting[0], waiting[1], failed, keyed] {
        assert_eq!(status_of(&db, id).await, "cancelled", "request {id}");
    }
    assert_eq!(status_of(&db, running).await, "running");
    assert_eq!(
        db.count(&format!(
            "async_req WHERE id = {running} AND cancel_requested IS NOT NULL"
        ))
        .await,
        1,
        "the running one is asked to stop"
    );
    assert_eq!(status_of(&db, finished).await, "success");
    assert_eq!(status_of(&db, other_tenant).await, "init");

    // Again: nothing is left to cancel; the running one is counted as asked again.
    let mut tx: Tx<DB> = rt.begin().await.unwrap();
    let done = rt.cancel_tagged("tenant:a").within(&mut tx).await.unwrap();
    assert_eq!((done.cancelled, done.stop_asked), (0, 1));
    tx.commit().await.unwrap();
    // Awaited, at once (a transaction of the runtime's own); inside a scope, refused.
    let other = async_exec::RequestQuery::default().tag("tenant:b");
    let done = rt.cancel_matching(&other).await.unwrap();
    assert_eq!((done.cancelled, done.stop_asked), (1, 0));
    assert_eq!(status_of(&db, other_tenant).await, "cancelled");
    let scoped = rt.clone();
    let nested = rt
        .transaction(|_tx: &mut Tx<DB>| {
            Box::pin(async move {
                scoped.cancel_tagged("tenant:a").await?;
                Ok::<_, Error>(())
            })
        })
        .await
        .unwrap_err();
    assert!(
        matches!(nested, Error::NestedTransaction { .. }),
        "{nested}"
    );
    // A filter that is not one is refused, saying why.
    let mut tx: Tx<DB> = rt.begin().await.unwrap();
    let long = async_exec::RequestQuery::default().tag("x".repeat(2_000));
    let refused = rt.cancel_matching(&long).within(&mut tx).await.unwrap_err();
    assert!(matches!(refused, Error::InvalidFilter(_)), "{refused}");
    tx.rollback().await.unwrap();
    rt.shutdown().await.unwrap();
}

backend_suite!(
    a_bulk_cancel_goes_with_the_transaction,
    a_cancel_rolls_back_with_the_transaction,
    what_cannot_be_cancelled_is_refused,
    a_cancel_in_a_scope_goes_with_the_scope,
);

// Issue 30, H1: a cancel inside the caller's transaction decides under the record's lock,
// from what is committed when it is made, whatever the caller's transaction read before
// and at whatever isolation it runs. Two transactions race on one record: the caller's,
// which cancels, and another that claims or finishes it (written here as raw SQL, as a
// worker's claim or outcome would). The answer must hold once the caller's transaction
// commits: `Cancelled` means the record is `cancelled`, `StopAsked` that it runs and is
// asked to stop, a refusal names the status it has; an error (PostgreSQL's serialization
// failure at REPEATABLE READ) leaves it as the other transaction wrote it.
//
// Before the fix the cancel ran two updates and then a plain read of the status: on
// MariaDB at REPEATABLE READ (its default) the read saw the caller's snapshot, so a request
// that ran to its end meanwhile was answered `Cancelled`; on PostgreSQL at READ COMMITTED
// a running record that turned `failed` between the two updates was answered `Cancelled`
// and retried.

#[cfg(any(
    all(feature = "postgres", async_exec_test_postgres),
    all(feature = "mysql", async_exec_test_mysql)
))]
mod races {
    use super::*;
    use async_exec::Runtime;
    use common::Kind;

    /// The isolation the caller's transaction runs at: the server's default, or one named.
    #[derive(Debug, Clone, Copy, PartialEq, Eq)]
    #[allow(dead_code)] // each server's tests use some of them
    enum Isolation {
        Default,
        RepeatableRead,
        ReadCommitted,
    }

    impl Isolation {
        fn sql(self) -> Option<&'static str> {
            match self {
                Isolation::Default => None,
                Isolation::RepeatableRead => Some("REPEATABLE READ"),
                Isolation::ReadCommitted => Some("READ COMMITTED"),
            }
        }
    }

    /// What the answer must be once the caller's transaction is over.
    #[derive(Debug, Clone, Copy)]
    enum Expect {
        Cancelled,
        StopAsked,
        Refused(&'static str),
    }

    /// How the other transaction moves the record: committed before the cancel (after the
    /// caller's transaction read it), or holding its lock while the cancel starts.
    #[derive(Debug, Clone, Copy, PartialEq, Eq)]
    enum Race {
        CommittedAfterRead,
        LockedDuringCancel,
    }

    /// The statement that puts record `id` in `status`, as a claim or an outcome writes it.
    fn move_to(id: i64, status: &str) -> String {
        let far = common::now_ms() + 86_400_000;
        match status {
            "running" => format!(
                "UPDATE async_req SET status = 'running', lease_owner = 'other', \
                 lease_until = {far}, exec_count = exec_count + 1 WHERE id = {id}"
            ),
            "failed" => format!(
                "UPDATE async_req SET status = 'failed', lease_owner = NULL, lease_until = NULL, \
                 run_at = {far}, last_error = 'failed on purpose' WHERE id = {id}"
            ),
            other => format!(
                "UPDATE async_req SET status = '{other}', lease_owner = NULL, lease_until = NULL \
                 WHERE id = {id}"
            ),
        }
    }

    async fn row_of(db: &TestDb, id: i64) -> (String, bool) {
        let pool = sqlx::AnyPool::connect(&db.url).await.unwrap();
        let row: Option<(String, Option<i64>)> = sqlx::query_as(&format!(
            "SELECT status, cancel_requested FROM async_req WHERE id = {id}"
        ))
        .fetch_optional(&pool)
        .await
        .unwrap();
        pool.close().await;
        row.map_or(("gone".into(), false), |(s, asked)| (s, asked.is_some()))
    }

    /// The cancel of a race: of the record by id, or of every record with its tag (the bulk
    /// cancel, whose count says the same as the one cancel's answer).
    async fn cancel_by<DB: Backend>(
        rt: &Runtime,
        db: &TestDb,
        tx: &mut Tx<DB>,
        id: i64,
        tag: &str,
        bulk: bool,
    ) -> Result<CancelOutcome, Error> {
        if !bulk {
            return rt.cancel(id).within(tx).await;
        }
        let done = rt.cancel_tagged(tag).within(tx).await?;
        Ok(match (done.cancelled, done.stop_asked) {
            (1, 0) => CancelOutcome::Cancelled,
            (0, 1) => CancelOutcome::StopAsked,
            (0, 0) => {
                let (status, _) = row_of(db, id).await;
                return Err(Error::InvalidState {
                    id,
                    status,
                    reason: "the bulk cancel left it alone",
                });
            }
            other => panic!("one record, counted {other:?}"),
        })
    }

    /// One race: a record in `from`, moved to `to` by another transaction as `race` says,
    /// cancelled in a transaction `begin` opens. Checks the answer against the record once the
    /// caller's transaction ended; `may_fail`: the isolation may refuse the cancel instead.
    #[allow(clippy::too_many_arguments)]
    async fn race<DB, B, F>(
        db: &TestDb,
        rt: &Runtime,
        begin: &B,
        from: &str,
        to: &str,
        race: Race,
        expect: Expect,
        may_fail: bool,
        bulk: bool,
    ) where
        DB: Backend,
        B: Fn() -> F,
        F: std::future::Future<Output = Tx<DB>>,
    {
        let tag = format!("race-{}", rand::random::<u32>());
        let id = remind(1)
            .tag(tag.as_str())
            .delay(TOMORROW)
            .on(rt)
            .await
            .unwrap()
            .id
            .unwrap();
        if from != "init" {
            db.exec(&move_to(id, from)).await;
        }
        let case = format!("{from} -> {to}, {race:?}, bulk: {bulk}");
        let mut tx = begin().await;
        // The caller's transaction reads the record first (its snapshot, where it keeps one).
        sqlx::query(&format!("SELECT status FROM async_req WHERE id = {id}"))
            .execute(tx.conn())
            .await
            .unwrap();
        let answer = match race {
            Race::CommittedAfterRead => {
                db.exec(&move_to(id, to)).await;
                cancel_by(rt, db, &mut tx, id, &tag, bulk).await
            }
            Race::LockedDuringCancel => {
                let other = sqlx::AnyPool::connect(&db.url).await.unwrap();
                let mut other_tx = other.begin().await.unwrap();
                sqlx::query(&move_to(id, to))
                    .execute(&mut *other_tx)
                    .await
                    .unwrap();
                let (answer, ()) =
                    tokio::join!(cancel_by(rt, db, &mut tx, id, &tag, bulk), async {
                        tokio::time::sleep(Duration::from_millis(400)).await;
                        other_tx.commit().await.unwrap();
                    });
                other.close().await;
                answer
            }
        };
        match answer {
            Ok(outcome) => {
                tx.commit().await.unwrap();
                let (status, asked) = row_of(db, id).await;
                match outcome {
                    CancelOutcome::Cancelled => {
                        assert_eq!(status, "cancelled", "{case}: answered Cancelled")
                    }
                    CancelOutcome::StopAsked => assert!(
                        status == "running" && asked,
                        "{case}: answered StopAsked, the record is {status} (asked: {asked})"
                    ),
                    other => panic!("{case}: {other:?}"),
                }
                match expect {
                    Expect::Cancelled => assert_eq!(outcome, CancelOutcome::Cancelled, "{case}"),
                    Expect::StopAsked => assert_eq!(outcome, CancelOutcome::StopAsked, "{case}"),
                    Expect::Refused(s) => {
                        panic!("{case}: answered {outcome:?}, expected refused as {s}")
                    }
                }
            }
            Err(Error::InvalidState { status, .. }) => {
                tx.rollback().await.unwrap();
                let (now, _) = row_of(db, id).await;
                // A bulk cancel leaves a finished record alone and reads it after the commit.
                assert_eq!(
                    status, now,
                    "{case}: refused as {status}, the record is {now}"
                );
                assert!(
                    matches!(expect, Expect::Refused(s) if s == status),
                    "{case}: refused as {status}, expected {expect:?}"
                );
            }
            Err(error) => {
                let _ = tx.rollback().await;
                assert!(may_fail, "{case}: {error}");
                let (now, asked) = row_of(db, id).await;
                assert_eq!(
                    now, to,
                    "{case}: failed ({error}), the record is kept as written"
                );
                assert!(!asked, "{case}: failed ({error}), nothing asked");
            }
        }
    }

    /// Every race, in transactions that `begin` opens.
    async fn every_race<DB, B, F>(db: &TestDb, rt: &Runtime, begin: B, may_fail: bool)
    where
        DB: Backend,
        B: Fn() -> F,
        F: std::future::Future<Output = Tx<DB>>,
    {
        use Expect::*;
        use Race::*;
        let cases = [
            ("init", "success", CommittedAfterRead, Refused("success")),
            ("init", "running", CommittedAfterRead, StopAsked),
            ("running", "failed", CommittedAfterRead, Cancelled),
            ("running", "success", CommittedAfterRead, Refused("success")),
            ("running", "failed", LockedDuringCancel, Cancelled),
            ("init", "running", LockedDuringCancel, StopAsked),
            ("running", "success", LockedDuringCancel, Refused("success")),
            ("failed", "running", LockedDuringCancel, StopAsked),
        ];
        for bulk in [false, true] {
            for (from, to, how, expect) in cases {
                race::<DB, _, _>(db, rt, &begin, from, to, how, expect, may_fail, bulk).await;
            }
        }
    }

    #[cfg(all(feature = "postgres", async_exec_test_postgres))]
    async fn postgres_at(isolation: Isolation) {
        use async_exec::Postgres;
        let db = TestDb::new(Kind::Postgres).await;
        let rt = db.builder().delete_on_success(false).start().await.unwrap();
        let begin = || async {
            let mut tx: Tx<Postgres> = rt.begin().await.unwrap();
            if let Some(level) = isolation.sql() {
                sqlx::query(&format!("SET TRANSACTION ISOLATION LEVEL {level}"))
                    .execute(tx.conn())
                    .await
                    .unwrap();
            }
            tx
        };
        // At REPEATABLE READ PostgreSQL refuses to change a row changed since its snapshot.
        let may_fail = isolation == Isolation::RepeatableRead;
        every_race::<Postgres, _, _>(&db, &rt, begin, may_fail).await;
        rt.shutdown().await.unwrap();
    }

    #[cfg(all(feature = "mysql", async_exec_test_mysql))]
    async fn mysql_at(isolation: Isolation) {
        use async_exec::MySql;
        let db = TestDb::new(Kind::MySql).await;
        let rt = db.builder().delete_on_success(false).start().await.unwrap();
        let level = isolation.sql();
        let pool = sqlx::mysql::MySqlPoolOptions::new()
            .max_connections(2)
            .after_connect(move |conn, _| {
                Box::pin(async move {
                    if let Some(level) = level {
                        let set = format!("SET SESSION TRANSACTION ISOLATION LEVEL {level}");
                        sqlx::query(&set).execute(&mut *conn).await?;
                    }
                    Ok(())
                })
            })
            .connect(&db.url)
            .await
            .unwrap();
        let begin = || async { rt.wrap::<MySql>(pool.begin().await.unwrap()) };
        every_race::<MySql, _, _>(&db, &rt, begin, false).await;
        pool.close().await;
        rt.shutdown().await.unwrap();
    }

    #[cfg(all(feature = "postgres", async_exec_test_postgres))]
    mod postgres_races {
        use super::*;

        #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
        async fn a_cancel_decides_under_the_lock_at_the_default_isolation() {
            postgres_at(Isolation::Default).await;
        }

        #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
        async fn a_cancel_decides_under_the_lock_at_repeatable_read() {
            postgres_at(Isolation::RepeatableRead).await;
        }
    }

    #[cfg(all(feature = "mysql", async_exec_test_mysql))]
    mod mysql_races {
        use super::*;

        #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
        async fn a_cancel_decides_under_the_lock_at_the_default_isolation() {
            mysql_at(Isolation::Default).await;
        }

        #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
        async fn a_cancel_decides_under_the_lock_at_read_committed() {
            mysql_at(Isolation::ReadCommitted).await;
        }
    }
}

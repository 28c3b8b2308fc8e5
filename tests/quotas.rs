//! Issue 20: quotas of waiting requests at submission. Past the application's
//! (`max_waiting`), a queue's (`QueueLimits::max_waiting`) or an owner's
//! (`max_waiting_per_owner`) quota a `SaveAsync` call is refused with
//! `Error::QuotaExceeded` and nothing is written; calls racing in transactions never
//! exceed a quota; a transaction's own calls count before it commits.
#![allow(clippy::extra_unused_type_parameters)] // every test takes the backend, used or not

#[macro_use]
mod common;

use std::time::Duration;

use async_exec::{async_exec, batch, Backend, Error, QueueLimits, Tx};
use common::TestDb;

#[async_exec(type = SaveAsync)]
async fn export(n: i64) {
    let _ = n;
}

#[async_exec(type = SaveAsync, queue = "reports")]
async fn report(n: i64) {
    let _ = n;
}

const LATER: Duration = Duration::from_secs(3_600);

fn over(result: Result<async_exec::Receipt, Error>, scope: &str) {
    match result {
        Err(Error::QuotaExceeded { scope: s, .. }) if s.contains(scope) => {}
        other => panic!("expected the quota of {scope} to refuse: {other:?}"),
    }
}

/// The application's quota: calls alone, in a batch and in a transaction (whose own calls
/// count before it commits); nothing of a refused call is written.
async fn the_applications_quota_refuses_past_it<DB: Backend>(db: TestDb) {
    let rt = db
        .builder()
        .run_workers(false)
        .max_waiting(Some(4))
        .start()
        .await
        .unwrap();
    export(1).delay(LATER).on(&rt).await.unwrap();
    export(2).delay(LATER).on(&rt).await.unwrap();
    // A batch of 3 would make 5: refused whole.
    let refused = batch((3..6).map(|n| export(n).delay(LATER))).on(&rt).await;
    assert!(
        matches!(
            refused,
            Err(Error::QuotaExceeded {
                limit: 4,
                waiting: 2,
                ..
            })
        ),
        "{refused:?}"
    );
    assert_eq!(db.count("async_req").await, 2);
    let mut tx: Tx<DB> = rt.begin().await.unwrap();
    export(3).delay(LATER).within(&mut tx).await.unwrap();
    export(4).delay(LATER).within(&mut tx).await.unwrap();
    // Two committed and two of its own: a fifth is refused in the transaction too.
    over(
        export(5).delay(LATER).within(&mut tx).await,
        "the application",
    );
    tx.commit().await.unwrap();
    assert_eq!(db.count("async_req").await, 4);
    let error = export(6).delay(LATER).on(&rt).await.unwrap_err();
    assert!(
        error.to_string().contains("Builder::max_waiting")
            && error.to_string().contains("nothing was written"),
        "{error}"
    );
    // Requests that ran no longer wait: room again, once the quota counts them (a call
    // that finds it full counts again when its last count is 100 ms old; the instances
    // that run workers count every second).
    db.exec("UPDATE async_req SET status = 'success'").await;
    tokio::time::sleep(std::time::Duration::from_millis(150)).await;
    export(7).delay(LATER).on(&rt).await.unwrap();
    rt.shutdown().await.unwrap();
}

/// A queue's quota counts its own requests; an owner's counts that owner's; calls of
/// other queues, other owners and without an owner are not held up.
async fn queue_and_owner_quotas_count_their_own<DB: Backend>(db: TestDb) {
    let rt = db
        .builder()
        .run_workers(false)
        .queue("reports", QueueLimits::new().max_waiting(2))
        .max_waiting_per_owner(Some(2))
        .start()
        .await
        .unwrap();
    report(1).delay(LATER).on(&rt).await.unwrap();
    report(2).delay(LATER).on(&rt).await.unwrap();
    over(report(3).delay(LATER).on(&rt).await, "queue \"reports\"");
    export(1).delay(LATER).on(&rt).await.unwrap();

    export(10)
        .owner("tenant-7")
        .delay(LATER)
        .on(&rt)
        .await
        .unwrap();
    export(11)
        .owner("tenant-7")
        .delay(LATER)
        .on(&rt)
        .await
        .unwrap();
    over(
        export(12).owner("tenant-7").delay(LATER).on(&rt).await,
        "owner \"tenant-7\"",
    );
    export(13)
        .owner("tenant-8")
        .delay(LATER)
        .on(&rt)
        .await
        .unwrap();
    export(14).delay(LATER).on(&rt).await.unwrap();
    let tagged = rt
        .list(
            &async_exec::RequestQuery::default().tag("owner:tenant-7"),
            &async_exec::PageSpec::default(),
        )
        .await
        .unwrap();
    assert_eq!(tagged.requests.len(), 2);
    assert!(matches!(
        export(1).owner("").on(&rt).await,
        Err(Error::InvalidCall {
            option: "owner",
            ..
        })
    ));
    rt.shutdown().await.unwrap();
}

/// Issue 30, M7: a tag cannot name an owner's quota. A call tagged `owner:victim` by hand
/// (not made with `.owner("victim")`) is refused, so it cannot spend the victim's quota;
/// `.owner(..)` set twice keeps the last owner only. Seen failing before the fix: the
/// hand-tagged call was written (`Ok(Receipt { .. Queued })`) on every backend.
async fn a_tag_cannot_spend_an_owners_quota<DB: Backend>(db: TestDb) {
    let rt = db
        .builder()
        .run_workers(false)
        .max_waiting_per_owner(Some(2))
        .start()
        .await
        .unwrap();
    for n in 0..2 {
        let hostile = export(n).tag("owner:victim").delay(LATER).on(&rt).await;
        match hostile {
            Err(Error::InvalidCall {
                option: "tag",
                reason,
                ..
            }) => {
                assert!(reason.contains(".owner("), "{reason}")
            }
            other => panic!("a hand-made owner tag must be refused: {other:?}"),
        }
    }
    // Also in a transaction, and in a batch.
    let mut tx: Tx<DB> = rt.begin().await.unwrap();
    let hostile = export(3)
        .tag("owner:victim")
        .delay(LATER)
        .within(&mut tx)
        .await;
    assert!(
        matches!(hostile, Err(Error::InvalidCall { option: "tag", .. })),
        "{hostile:?}"
    );
    tx.rollback().await.unwrap();
    let hostile = batch([export(4).tag("owner:victim").delay(LATER)])
        .on(&rt)
        .await;
    assert!(
        matches!(hostile, Err(Error::InvalidCall { option: "tag", .. })),
        "{hostile:?}"
    );
    assert_eq!(db.count("async_req").await, 0);
    // The victim's quota is whole.
    export(5)
        .owner("victim")
        .delay(LATER)
        .on(&rt)
        .await
        .unwrap();
    export(6)
        .owner("victim")
        .delay(LATER)
        .on(&rt)
        .await
        .unwrap();
    over(
        export(7).owner("victim").delay(LATER).on(&rt).await,
        "owner \"victim\"",
    );
    // A second `.owner(..)` replaces the first: the request counts for one owner only.
    export(8)
        .owner("victim")
        .owner("other")
        .delay(LATER)
        .on(&rt)
        .await
        .unwrap();
    assert_eq!(db.count("async_tag WHERE tag = 'owner:victim'").await, 2);
    assert_eq!(db.count("async_tag WHERE tag = 'owner:other'").await, 1);
    // Its own owner's tag, named again by hand, is the same tag: accepted.
    export(9)
        .owner("other")
        .tag("owner:other")
        .delay(LATER)
        .on(&rt)
        .await
        .unwrap();
    rt.shutdown().await.unwrap();
}

/// Twenty transactions racing, each with one call, under a quota of 5: exactly 5 commit,
/// the others are refused; the quota is never exceeded.
async fn racing_transactions_never_exceed_a_quota<DB: Backend>(db: TestDb) {
    let rt = db
        .builder()
        .run_workers(false)
        .max_waiting(Some(5))
        .max_connections(24)
        .start()
        .await
        .unwrap();
    let mut tasks = Vec::new();
    for n in 0..20 {
        let rt = rt.clone();
        tasks.push(tokio::spawn(async move {
            let mut tx: Tx<DB> = rt.begin().await?;
            export(n).delay(LATER).within(&mut tx).await?;
            // Held open a moment, as a service's transaction does.
            tokio::time::sleep(Duration::from_millis(20)).await;
            tx.commit().await
        }));
    }
    let (mut committed, mut refused) = (0, 0);
    for task in tasks {
        match task.await.unwrap() {
            Ok(()) => committed += 1,
            Err(Error::QuotaExceeded { .. }) => refused += 1,
            Err(other) => panic!("{other}"),
        }
    }
    assert_eq!((committed, refused), (5, 15));
    assert_eq!(db.count("async_req").await, 5);
    rt.shutdown().await.unwrap();
}

/// Quotas out of range are refused at start, with the range.
async fn absurd_quotas_are_refused<DB: Backend>(db: TestDb) {
    for builder in [
        db.builder().max_waiting(Some(0)),
        db.builder().max_waiting_per_owner(Some(2_000_000_000)),
        db.builder()
            .queue("reports", QueueLimits::new().max_waiting(0)),
    ] {
        let error = builder.start().await.unwrap_err().to_string();
        assert!(
            error.contains("between 1 and") || error.contains("at least 1"),
            "{error}"
        );
    }
}

backend_suite!(
    the_applications_quota_refuses_past_it,
    queue_and_owner_quotas_count_their_own,
    a_tag_cannot_spend_an_owners_quota,
    racing_transactions_never_exceed_a_quota,
    absurd_quotas_are_refused,
);

/// Issue 30 (M1, M11, pool of 2): what a quota's check must not do on the servers, where
/// it locked the quota's row in the caller's transaction until it ended. Each test runs
/// on PostgreSQL and MariaDB (SQLite's one writer serialises transactions that write
/// whatever the quota does).
#[cfg_attr(
    not(any(async_exec_test_postgres, async_exec_test_mysql)),
    allow(dead_code, unused_imports)
)]
mod servers {
    use super::*;
    use common::Kind;

    /// Runs `$body::<DB>(db)` with the backend of `db`.
    macro_rules! on_backend {
        ($body:ident, $db:expr) => {{
            let db = $db;
            match db.kind {
                #[cfg(feature = "postgres")]
                Kind::Postgres => $body::<async_exec::Postgres>(db).await,
                #[cfg(feature = "mysql")]
                Kind::MySql => $body::<async_exec::MySql>(db).await,
                other => panic!("{other:?} is not a server"),
            }
        }};
    }

    /// M11: two transactions call for two owners in opposite order (A: owner a, then b;
    /// B: owner b, then a). Before, each locked its first owner's row until it ended and
    /// waited for the other's: a deadlock (one of them failed). Both commit.
    async fn two_owners_in_opposite_order<DB: Backend>(db: TestDb) {
        let rt = db
            .builder()
            .run_workers(false)
            .max_waiting_per_owner(Some(10))
            .start()
            .await
            .unwrap();
        let mut a: Tx<DB> = rt.begin().await.unwrap();
        let mut b: Tx<DB> = rt.begin().await.unwrap();
        export(1)
            .owner("a")
            .delay(LATER)
            .within(&mut a)
            .await
            .unwrap();
        export(2)
            .owner("b")
            .delay(LATER)
            .within(&mut b)
            .await
            .unwrap();
        let second = async {
            let (x, y) = tokio::join!(
                async {
                    export(3).owner("b").delay(LATER).within(&mut a).await?;
                    a.commit().await
                },
                async {
                    export(4).owner("a").delay(LATER).within(&mut b).await?;
                    b.commit().await
                }
            );
            (x, y)
        };
        let (x, y) = tokio::time::timeout(Duration::from_secs(20), second)
            .await
            .expect("the two transactions still wait for each other after 20 s");
        assert!(x.is_ok() && y.is_ok(), "A: {x:?}, B: {y:?}");
        assert_eq!(db.count("async_req").await, 4);
        rt.shutdown().await.unwrap();
    }

    /// M1: a transaction that made a call under the application's quota and is still open
    /// does not hold up another call under it (before: the quota's row stayed locked until
    /// the first transaction ended, and every submission took turns on it).
    async fn an_open_transaction_holds_up_no_other_submission<DB: Backend>(db: TestDb) {
        let rt = db
            .builder()
            .run_workers(false)
            .max_waiting(Some(100))
            .start()
            .await
            .unwrap();
        let mut open: Tx<DB> = rt.begin().await.unwrap();
        export(1).delay(LATER).within(&mut open).await.unwrap();
        // A call alone, in a task of its own (in this task, with a transaction open, it
        // would be refused as a call that forgot `.within`).
        let alone = {
            let rt = rt.clone();
            tokio::time::timeout(
                Duration::from_secs(3),
                tokio::spawn(async move { export(2).delay(LATER).on(&rt).await }),
            )
            .await
            .map(|joined| joined.unwrap())
        };
        let mut other: Tx<DB> = rt.begin().await.unwrap();
        let within = tokio::time::timeout(
            Duration::from_secs(3),
            std::future::IntoFuture::into_future(export(3).delay(LATER).within(&mut other)),
        )
        .await;
        drop(other);
        open.commit().await.unwrap();
        assert!(
            matches!(alone, Ok(Ok(_))),
            "a call alone waited for the open transaction: {alone:?}"
        );
        assert!(
            matches!(within, Ok(Ok(_))),
            "a call in another transaction waited for the open one: {within:?}"
        );
        rt.shutdown().await.unwrap();
    }

    /// A pool of 2 and two transactions open, each making a call under a quota: the
    /// quota's check needs a connection besides the transaction's, and none is free. The
    /// error says so and that nothing of the call was written (before: the database "did
    /// not answer", "whether the statement took effect is not known").
    async fn a_pool_held_by_transactions_is_said_so<DB: Backend>(db: TestDb) {
        let rt = db
            .builder()
            .run_workers(false)
            .max_waiting(Some(100))
            .max_connections(2)
            .lease(Duration::from_secs(4))
            .heartbeat_interval(Duration::from_secs(1))
            .start()
            .await
            .unwrap();
        let mut a: Tx<DB> = rt.begin().await.unwrap();
        let mut b: Tx<DB> = rt.begin().await.unwrap();
        let error = export(1)
            .delay(LATER)
            .within(&mut a)
            .await
            .expect_err("no connection was free for the quota's check");
        let said = error.to_string();
        assert!(
            said.contains("nothing of the call was written") && said.contains("max_connections"),
            "{said}"
        );
        assert!(!said.contains("may have been written"), "{said}");
        drop(a);
        export(2).delay(LATER).within(&mut b).await.unwrap();
        b.commit().await.unwrap();
        assert_eq!(db.count("async_req").await, 1);
        rt.shutdown().await.unwrap();
    }

    /// Twenty transactions racing at REPEATABLE READ (set by the caller on PostgreSQL;
    /// MariaDB's default), each with one call, under a quota of 5: exactly 5 commit.
    async fn racing_at_repeatable_read<DB: Backend>(db: TestDb) {
        let rt = db
            .builder()
            .run_workers(false)
            .max_waiting(Some(5))
            .max_connections(24)
            .start()
            .await
            .unwrap();
        let postgres = db.kind == Kind::Postgres;
        let mut tasks = Vec::new();
        for n in 0..20 {
            let rt = rt.clone();
            tasks.push(tokio::spawn(async move {
                let mut tx: Tx<DB> = rt.begin().await?;
                if postgres {
                    sqlx::query("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ")
                        .execute(tx.conn())
                        .await
                        .unwrap();
                }
                export(n).delay(LATER).within(&mut tx).await?;
                tokio::time::sleep(Duration::from_millis(20)).await;
                tx.commit().await
            }));
        }
        let (mut committed, mut refused) = (0, 0);
        for task in tasks {
            match task.await.unwrap() {
                Ok(()) => committed += 1,
                Err(Error::QuotaExceeded { .. }) => refused += 1,
                Err(other) => panic!("{other}"),
            }
        }
        assert_eq!((committed, refused), (5, 15));
        assert_eq!(db.count("async_req").await, 5);
        rt.shutdown().await.unwrap();
    }

    /// One quota row per owner ever seen stayed for ever (and an in-memory entry each):
    /// a row that holds nothing and saw no call for a minute is deleted by the quotas'
    /// count, and made again on the owner's next call.
    async fn empty_rows_are_swept<DB: Backend>(db: TestDb) {
        let rt = db
            .builder()
            .max_waiting_per_owner(Some(5))
            .start()
            .await
            .unwrap();
        for owner in ["t1", "t2", "t3"] {
            export(1).owner(owner).delay(LATER).on(&rt).await.unwrap();
        }
        assert_eq!(db.count("async_quota").await, 3);
        // Their requests no longer wait, and no call came for a minute.
        db.exec("UPDATE async_req SET status = 'success'").await;
        db.exec("UPDATE async_quota SET touched = 0").await;
        let asked = std::time::Instant::now();
        while db.count("async_quota").await > 0 {
            assert!(
                asked.elapsed() < Duration::from_secs(6),
                "quota rows left: {}",
                db.count("async_quota").await
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        export(2).owner("t1").delay(LATER).on(&rt).await.unwrap();
        assert_eq!(db.count("async_quota").await, 1);
        rt.shutdown().await.unwrap();
    }

    async fn empty_quota_rows_are_swept(db: TestDb) {
        on_backend!(empty_rows_are_swept, db)
    }
    /// The same race with the runtime's own sessions at REPEATABLE READ too (PostgreSQL's
    /// database default set so; MariaDB's is already): the reservations that meet a
    /// concurrent one are tried again, and exactly 5 commit.
    async fn racing_with_every_session_at_repeatable_read<DB: Backend>(db: TestDb) {
        if db.kind == Kind::Postgres {
            let name = db.url.rsplit('/').next().unwrap().to_string();
            db.exec(&format!(
                "ALTER DATABASE {name} SET default_transaction_isolation = 'repeatable read'"
            ))
            .await;
        }
        super::racing_transactions_never_exceed_a_quota::<DB>(db).await;
    }

    async fn every_session_at_repeatable_read_never_exceeds_a_quota(db: TestDb) {
        on_backend!(racing_with_every_session_at_repeatable_read, db)
    }
    async fn two_owners_in_opposite_order_do_not_deadlock(db: TestDb) {
        on_backend!(two_owners_in_opposite_order, db)
    }
    async fn a_submission_does_not_wait_for_an_open_transaction(db: TestDb) {
        on_backend!(an_open_transaction_holds_up_no_other_submission, db)
    }
    async fn a_pool_of_two_held_by_two_transactions_is_said_so(db: TestDb) {
        on_backend!(a_pool_held_by_transactions_is_said_so, db)
    }
    async fn racing_transactions_at_repeatable_read_never_exceed_a_quota(db: TestDb) {
        on_backend!(racing_at_repeatable_read, db)
    }

    network_suite!(
        every_session_at_repeatable_read_never_exceeds_a_quota,
        empty_quota_rows_are_swept,
        two_owners_in_opposite_order_do_not_deadlock,
        a_submission_does_not_wait_for_an_open_transaction,
        a_pool_of_two_held_by_two_transactions_is_said_so,
        racing_transactions_at_repeatable_read_never_exceed_a_quota,
    );
}

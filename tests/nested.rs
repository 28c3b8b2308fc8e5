//! Issue 18, item 4: a transaction inside a transaction scope. `rt.transaction(..)` and
//! `rt.begin()` inside `rt.transaction(..)` are refused (they would open a second,
//! independent transaction: on PostgreSQL and MariaDB it committed while the scope
//! rolled back, on SQLite it waited 10 s for the scope's write lock) and mark the scope
//! rollback-only; `rt.transaction_requires_new(..)` is the independent form, by name.
#![allow(clippy::extra_unused_type_parameters)] // every test takes the backend, used or not

#[macro_use]
mod common;

use std::time::Duration;

use async_exec::{async_exec, Backend, Context, Data, Error, Tx};
use common::{Probe, TestDb};

#[async_exec(type = SaveAsync)]
async fn stored(label: String, probe: Data<Probe>, ctx: Context) {
    probe.record(&label, ctx.attempt());
}

fn probe(rt: &async_exec::Runtime) -> Data<Probe> {
    rt.data::<Probe>().expect("tests register a Probe")
}

/// Waits for the calls that were to run, then checks that those not to run did not.
async fn ran_only(rt: &async_exec::Runtime, ran: &[&str], not: &[&str]) {
    for label in ran {
        probe(rt).wait_runs(label, 1).await;
    }
    tokio::time::sleep(Duration::from_millis(100)).await;
    rt.wait_idle().await;
    for label in not {
        assert_eq!(probe(rt).runs(label), 0, "`{label}` ran");
    }
}

/// The refusal names both ways out.
fn names_both_ways(error: &Error) {
    let message = error.to_string();
    for way in ["&mut Tx", "rt.transaction_requires_new("] {
        assert!(message.contains(way), "{message}");
    }
}

/// The inner `rt.transaction(..)` is refused, the outer body swallows the error and
/// returns `Ok`: the outer scope rolls back all the same, and no call made in either
/// runs. (Before: on PostgreSQL and MariaDB the inner transaction committed on its own
/// and its call ran; on SQLite it waited 10 s and failed, and the outer one committed.)
async fn a_transaction_inside_a_scope_is_refused_and_rolls_the_scope_back<DB: Backend>(db: TestDb)
where
    for<'c> &'c mut DB::Connection: sqlx::Executor<'c, Database = DB>,
    for<'q> <DB as sqlx::Database>::Arguments<'q>: sqlx::IntoArguments<'q, DB>,
{
    let rt = db
        .builder()
        .sqlite_busy_timeout(Duration::from_secs(1))
        .start()
        .await
        .unwrap();
    db.exec("CREATE TABLE users (id INTEGER)").await;
    let inner_rt = rt.clone();
    let outer: Result<(), Error> = rt
        .transaction(|tx: &mut Tx<DB>| {
            Box::pin(async move {
                sqlx::query::<DB>("INSERT INTO users (id) VALUES (1)")
                    .execute(tx.conn())
                    .await?;
                stored("outer".into()).await?;
                let inner: Result<(), Error> = inner_rt
                    .transaction(|tx: &mut Tx<DB>| {
                        Box::pin(async move {
                            sqlx::query::<DB>("INSERT INTO users (id) VALUES (2)")
                                .execute(tx.conn())
                                .await?;
                            stored("inner".into()).await?;
                            Ok(())
                        })
                    })
                    .await;
                let refused = inner.expect_err("the inner transaction is refused");
                names_both_ways(&refused);
                Ok(()) // swallowed
            })
        })
        .await;
    let error = outer.expect_err("the scope was marked rollback-only");
    assert!(error.to_string().contains("rollback-only"), "{error}");
    ran_only(&rt, &[], &["outer", "inner"]).await;
    assert_eq!(db.count("users").await, 0);
    assert_eq!(db.count("async_req").await, 0);
    rt.shutdown().await.unwrap();
}

/// `rt.begin()` inside a scope is refused with an error that names both ways, and marks
/// the scope rollback-only. (Before: it began a second transaction.)
async fn begin_inside_a_scope_is_refused<DB: Backend>(db: TestDb) {
    let rt = db.builder().start().await.unwrap();
    let inner_rt = rt.clone();
    let outer: Result<(), Error> = rt
        .transaction(|_: &mut Tx<DB>| {
            Box::pin(async move {
                stored("outer".into()).await?;
                let begun = inner_rt.begin::<DB>().await;
                let refused = begun.expect_err("rt.begin() in a scope is refused");
                names_both_ways(&refused);
                Ok(())
            })
        })
        .await;
    assert!(outer.is_err(), "{outer:?}");
    ran_only(&rt, &[], &["outer"]).await;
    // Outside the scope, `rt.begin()` is fine.
    let mut tx: Tx<DB> = rt.begin().await.unwrap();
    stored("after".into()).within(&mut tx).await.unwrap();
    tx.commit().await.unwrap();
    ran_only(&rt, &["after"], &[]).await;
    rt.shutdown().await.unwrap();
}

/// `rt.transaction_requires_new(..)` inside a scope commits on its own: its call runs
/// and its row stays although the scope rolls back (PostgreSQL, MariaDB). On SQLite,
/// where it would wait for the scope's write lock, it is refused at once; outside any
/// transaction it commits there too.
async fn requires_new_commits_on_its_own<DB: Backend>(db: TestDb)
where
    for<'c> &'c mut DB::Connection: sqlx::Executor<'c, Database = DB>,
    for<'q> <DB as sqlx::Database>::Arguments<'q>: sqlx::IntoArguments<'q, DB>,
{
    let rt = db.builder().start().await.unwrap();
    db.exec("CREATE TABLE users (id INTEGER)").await;
    let sqlite = DB::NAME == "SQLite";
    let inner_rt = rt.clone();
    let outer: Result<(), Error> = rt
        .transaction(|_: &mut Tx<DB>| {
            Box::pin(async move {
                stored("outer".into()).await?;
                let inner: Result<(), Error> = inner_rt
                    .transaction_requires_new(|tx: &mut Tx<DB>| {
                        Box::pin(async move {
                            sqlx::query::<DB>("INSERT INTO users (id) VALUES (1)")
                                .execute(tx.conn())
                                .await?;
                            stored("inner".into()).await?;
                            Ok(())
                        })
                    })
                    .await;
                if sqlite {
                    let refused = inner.expect_err("refused on SQLite");
                    assert!(refused.to_string().contains("SQLite"), "{refused}");
                } else {
                    inner.unwrap();
                }
                Err(Error::NotFound(0)) // the scope rolls back
            })
        })
        .await;
    assert!(outer.is_err());
    if sqlite {
        ran_only(&rt, &[], &["outer", "inner"]).await;
        assert_eq!(db.count("users").await, 0);
        let alone: Result<(), Error> = rt
            .transaction_requires_new(|_: &mut Tx<DB>| {
                Box::pin(async move {
                    stored("alone".into()).await?;
                    Ok(())
                })
            })
            .await;
        alone.unwrap();
        ran_only(&rt, &["alone"], &[]).await;
    } else {
        ran_only(&rt, &["inner"], &["outer"]).await;
        assert_eq!(db.count("users").await, 1);
    }
    rt.shutdown().await.unwrap();
}

backend_suite!(
    a_transaction_inside_a_scope_is_refused_and_rolls_the_scope_back,
    begin_inside_a_scope_is_refused,
    requires_new_commits_on_its_own,
);

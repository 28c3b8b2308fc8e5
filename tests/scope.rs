//! Issue 8 item 10: calls that cannot forget their transaction. Inside
//! `rt.transaction(..)` a call without `.within` joins the transaction (written in one
//! INSERT before the COMMIT, rolled back with it); outside one, a call without `.within`
//! from a task that holds an open `Tx` is refused unless it says `.independent()`.
#![allow(clippy::extra_unused_type_parameters)] // every test takes the backend, used or not

#[macro_use]
mod common;

use std::future::IntoFuture;
use std::time::Duration;

use async_exec::{async_exec, Backend, Context, Data, Error, Outcome, Status, Tx};
use common::{Probe, TestDb};

#[async_exec(type = SaveAsync)]
async fn plain(label: String, probe: Data<Probe>, ctx: Context) {
    probe.record(&label, ctx.attempt());
}

#[async_exec(type = Async)]
async fn in_memory(label: String, probe: Data<Probe>, ctx: Context) {
    probe.record(&label, ctx.attempt());
}

#[async_exec(type = SyncSave, max_attempts = 3)]
async fn sync_job(
    label: String,
    fail: bool,
    probe: Data<Probe>,
    ctx: Context,
) -> Result<(), String> {
    probe.record(&label, ctx.attempt());
    if fail {
        Err(format!("{label} failed"))
    } else {
        Ok(())
    }
}

fn probe(rt: &async_exec::Runtime) -> Data<Probe> {
    rt.data::<Probe>().expect("tests register a Probe")
}

/// Bare calls in the scope are held (nothing runs, `Pending`), then written with the
/// caller's row in one batch (consecutive ids) and run after the commit.
async fn bare_calls_in_the_scope_commit_with_it<DB: Backend>(db: TestDb)
where
    for<'c> &'c mut DB::Connection: sqlx::Executor<'c, Database = DB>,
    for<'q> <DB as sqlx::Database>::Arguments<'q>: sqlx::IntoArguments<'q, DB>,
{
    let rt = db.builder().start().await.unwrap();
    let probe = probe(&rt);
    db.exec("CREATE TABLE users (id INTEGER)").await;
    let seen = probe.clone();
    let (held, receipts) = rt
        .transaction_with_receipts(|tx: &mut Tx<DB>| {
            Box::pin(async move {
                sqlx::query::<DB>("INSERT INTO users (id) VALUES (1)")
                    .execute(tx.conn())
                    .await
                    .map_err(Error::from)?;
                let mut held = Vec::new();
                for label in ["a", "b", "c"] {
                    held.push(plain(label.into()).await?);
                }
                held.push(in_memory("m".into()).await?);
                tokio::time::sleep(Duration::from_millis(50)).await;
                assert_eq!(
                    seen.runs("a") + seen.runs("m"),
                    0,
                    "nothing runs before the commit"
                );
                Ok::<_, Error>(held)
            })
        })
        .await
        .unwrap();
    let outcomes: Vec<Outcome> = held.iter().map(|r| r.outcome.clone()).collect();
    assert_eq!(
        outcomes,
        [
            Outcome::Pending { index: 0 },
            Outcome::Pending { index: 1 },
            Outcome::Pending { index: 2 },
            Outcome::InMemory
        ]
    );
    assert!(held.iter().all(|r| r.id.is_none()));
    assert_eq!(db.count("users").await, 1);
    assert_eq!(receipts.len(), 4);
    let ids: Vec<i64> = receipts[..3].iter().map(|r| r.id.unwrap()).collect();
    assert!(receipts[..3].iter().all(|r| r.outcome == Outcome::Queued));
    assert_eq!(
        ids,
        [ids[0], ids[0] + 1, ids[0] + 2],
        "one batch: consecutive ids"
    );
    assert_eq!(receipts[3].outcome, Outcome::InMemory);
    for label in ["a", "b", "c", "m"] {
        probe.wait_runs(label, 1).await;
    }
    rt.wait_idle().await;
    assert_eq!(db.count("async_req").await, 0, "ran and deleted");
    rt.shutdown().await.unwrap();
}

/// The scope's body returning `Err` rolls back its calls and the caller's row: nothing runs.
async fn bare_calls_roll_back_when_the_scope_fails<DB: Backend>(db: TestDb)
where
    for<'c> &'c mut DB::Connection: sqlx::Executor<'c, Database = DB>,
    for<'q> <DB as sqlx::Database>::Arguments<'q>: sqlx::IntoArguments<'q, DB>,
{
    let rt = db.builder().start().await.unwrap();
    db.exec("CREATE TABLE users (id INTEGER)").await;
    let result: anyhow::Result<()> = rt
        .transaction(|tx: &mut Tx<DB>| {
            Box::pin(async move {
                sqlx::query::<DB>("INSERT INTO users (id) VALUES (1)")
                    .execute(tx.conn())
                    .await?;
                plain("err".into()).await?;
                plain("err".into()).key("err-key").await?;
                in_memory("err".into()).await?;
                anyhow::bail!("the order is refused")
            })
        })
        .await;
    assert_eq!(result.unwrap_err().to_string(), "the order is refused");
    tokio::time::sleep(Duration::from_millis(100)).await;
    rt.wait_idle().await;
    assert_eq!(probe(&rt).runs("err"), 0);
    assert_eq!(db.count("users").await, 0);
    assert_eq!(db.count("async_req").await, 0);
    assert!(
        rt.find_by_key("err-key").await.unwrap().is_none(),
        "the key is forgotten"
    );
    // The runtime goes on: the next scope commits.
    rt.transaction(|_: &mut Tx<DB>| Box::pin(async move { plain("after".into()).await }))
        .await
        .unwrap();
    probe(&rt).wait_runs("after", 1).await;
    rt.shutdown().await.unwrap();
}

/// A panic in the scope's body rolls back its calls too.
async fn bare_calls_roll_back_when_the_scope_panics<DB: Backend>(db: TestDb) {
    let rt = db.builder().start().await.unwrap();
    let in_task = rt.clone();
    let panicked = tokio::spawn(async move {
        in_task
            .transaction(|_: &mut Tx<DB>| {
                Box::pin(async move {
                    plain("panic".into()).await?;
                    in_memory("panic".into()).await?;
                    let mistake = true;
                    if mistake {
                        panic!("the body panicked");
                    }
                    Ok::<_, Error>(())
                })
            })
            .await
    })
    .await;
    assert!(panicked.unwrap_err().is_panic());
    tokio::time::sleep(Duration::from_millis(100)).await;
    rt.wait_idle().await;
    assert_eq!(probe(&rt).runs("panic"), 0);
    assert_eq!(db.count("async_req").await, 0);
    rt.transaction(|_: &mut Tx<DB>| Box::pin(async move { plain("after".into()).await }))
        .await
        .unwrap();
    probe(&rt).wait_runs("after", 1).await;
    rt.shutdown().await.unwrap();
}

/// Keys in the scope: a key used earlier (committed) and a key used twice in the scope
/// are each one request, and the final receipts say `Existing` with the first's id.
async fn keys_in_the_scope_dedupe<DB: Backend>(db: TestDb) {
    let rt = db.builder().start().await.unwrap();
    let earlier = plain("k0".into()).key("k0").on(&rt).await.unwrap();
    probe(&rt).wait_runs("k0", 1).await;
    let ((), receipts) = rt
        .transaction_with_receipts(|_: &mut Tx<DB>| {
            Box::pin(async move {
                plain("k0".into()).key("k0").await?;
                plain("k1".into()).key("k1").await?;
                plain("k1".into()).key("k1").await?;
                plain("free".into()).await?;
                let sync = sync_job("k1-sync".into(), false).key("k1").await?;
                assert_eq!(
                    sync.outcome,
                    Outcome::Existing,
                    "the scope's own key is seen"
                );
                Ok::<_, Error>(())
            })
        })
        .await
        .unwrap();
    let outcomes: Vec<Outcome> = receipts.iter().map(|r| r.outcome.clone()).collect();
    assert_eq!(
        outcomes,
        [
            Outcome::Existing,
            Outcome::Queued,
            Outcome::Existing,
            Outcome::Queued,
            Outcome::Existing
        ]
    );
    assert_eq!(receipts[0].id, earlier.id, "the earlier request");
    assert!(receipts[1].id.is_some());
    assert_eq!(
        receipts[2].id, receipts[1].id,
        "the first call with the key"
    );
    probe(&rt).wait_runs("k1", 1).await;
    probe(&rt).wait_runs("free", 1).await;
    rt.wait_idle().await;
    tokio::time::sleep(Duration::from_millis(50)).await;
    assert_eq!(probe(&rt).runs("k0"), 1);
    assert_eq!(probe(&rt).runs("k1"), 1);
    assert_eq!(probe(&rt).runs("k1-sync"), 0);
    rt.shutdown().await.unwrap();
}

/// `SyncSave` in the scope runs its body at the call; its key and its failure record are
/// written in the transaction: kept when it commits, gone when it rolls back.
async fn sync_save_in_the_scope_runs_at_the_call<DB: Backend>(db: TestDb) {
    let rt = db
        .builder()
        .retry_base_delay(Duration::from_secs(3600))
        .retry_max_delay(Duration::from_secs(3600))
        .start()
        .await
        .unwrap();
    let seen = probe(&rt);
    let (ran, receipts) = rt
        .transaction_with_receipts(|_: &mut Tx<DB>| {
            Box::pin(async move {
                let ok = sync_job("sync-ok".into(), false).key("sync-key").await?;
                let failed = sync_job("sync-fail".into(), true).await?;
                assert_eq!(
                    seen.runs("sync-ok") + seen.runs("sync-fail"),
                    2,
                    "ran at the call"
                );
                Ok::<_, Error>((ok, failed))
            })
        })
        .await
        .unwrap();
    assert_eq!(ran.0.outcome, Outcome::Ran);
    assert!(
        matches!(&ran.1.outcome, Outcome::Deferred { error } if error.contains("sync-fail failed"))
    );
    assert_eq!(ran.1.id, None, "drawn at the commit");
    let failed_id = receipts[1].id.expect("the failure record's id");
    let record = rt.get(failed_id).await.unwrap().unwrap();
    assert_eq!(record.status, Status::Failed);
    assert!(rt.find_by_key("sync-key").await.unwrap().is_some());
    let again = sync_job("sync-ok".into(), false)
        .key("sync-key")
        .on(&rt)
        .await
        .unwrap();
    assert_eq!(again.outcome, Outcome::Existing);
    assert_eq!(probe(&rt).runs("sync-ok"), 1);

    let result = rt
        .transaction(|_: &mut Tx<DB>| {
            Box::pin(async move {
                sync_job("sync-rb".into(), true).key("rb-key").await?;
                Err::<(), _>(Error::NotFound(0))
            })
        })
        .await;
    assert!(result.is_err());
    assert_eq!(probe(&rt).runs("sync-rb"), 1, "the body ran at the call");
    assert_eq!(
        db.count("async_req").await,
        1,
        "its failure record was rolled back"
    );
    assert!(rt.find_by_key("rb-key").await.unwrap().is_none());
    rt.shutdown().await.unwrap();
}

/// Item 10's mistake, made loud: a call without `.within` from a task that holds an open
/// `Tx` is refused with an error naming both fixes. (Before, on PostgreSQL it autocommitted
/// and ran although the transaction rolled back; on SQLite it waited for the lock.) With
/// `.independent()` it runs on its own, and calls from other tasks are not refused.
async fn bare_call_while_holding_a_tx_is_refused<DB: Backend>(db: TestDb) {
    let rt = db.builder().start().await.unwrap();
    let mut tx: Tx<DB> = rt.begin().await.unwrap();
    let forgot = plain("forgot".into()).on(&rt).await;
    let message = match &forgot {
        Err(error @ Error::BareCallInTransaction { executor }) => {
            assert_eq!(*executor, "scope::plain");
            error.to_string()
        }
        other => panic!("expected BareCallInTransaction, got {other:?}"),
    };
    for fix in [".within(&mut tx)", "rt.transaction(", ".independent()"] {
        assert!(message.contains(fix), "{message}");
    }
    let batch = async_exec::batch([plain("forgot".into())]).on(&rt).await;
    assert!(
        matches!(batch, Err(Error::BareCallInTransaction { .. })),
        "{batch:?}"
    );
    // On SQLite `tx` holds the write lock from its BEGIN: the calls made beside it wait
    // for its end to write (they are not refused), so they finish after the rollback.
    let other_task = tokio::spawn({
        let rt = rt.clone();
        async move { plain("other-task".into()).on(&rt).await }
    });
    let (independent, ()) = tokio::join!(
        plain("independent".into())
            .on(&rt)
            .independent()
            .into_future(),
        async {
            plain("inside".into()).within(&mut tx).await.unwrap();
            tx.rollback().await.unwrap();
        }
    );
    assert_eq!(independent.unwrap().outcome, Outcome::Queued);
    assert!(
        other_task.await.unwrap().is_ok(),
        "another task holds no transaction"
    );
    probe(&rt).wait_runs("independent", 1).await;
    probe(&rt).wait_runs("other-task", 1).await;
    rt.wait_idle().await;
    tokio::time::sleep(Duration::from_millis(50)).await;
    assert_eq!(probe(&rt).runs("forgot") + probe(&rt).runs("inside"), 0);
    // Once the transaction is over, a bare call is fine again.
    plain("after".into()).on(&rt).await.unwrap();
    probe(&rt).wait_runs("after", 1).await;
    rt.shutdown().await.unwrap();
}

backend_suite!(
    bare_calls_in_the_scope_commit_with_it,
    bare_calls_roll_back_when_the_scope_fails,
    bare_calls_roll_back_when_the_scope_panics,
    keys_in_the_scope_dedupe,
    sync_save_in_the_scope_runs_at_the_call,
    bare_call_while_holding_a_tx_is_refused,
);

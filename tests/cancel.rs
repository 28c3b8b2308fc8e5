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

backend_suite!(
    a_cancel_rolls_back_with_the_transaction,
    what_cannot_be_cancelled_is_refused,
    a_cancel_in_a_scope_goes_with_the_scope,
);

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
    // Requests that ran no longer wait: room again.
    db.exec("UPDATE async_req SET status = 'success'").await;
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

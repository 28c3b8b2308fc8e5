//! Issue 20: tags. `.tag("subscription:42")` on a call is written in the call's
//! transaction; `RequestQuery::tag` finds the requests of a tag (`rt.list`, and through
//! it the API, the CLI and the console), `rt.get` and pages show a request's tags, an
//! action on a tag's filter cancels them in bulk, and the tags of requests that are gone
//! are purged. Searches in the arguments (a path and a value) and in any case.
#![allow(clippy::extra_unused_type_parameters)] // every test takes the backend, used or not

#[macro_use]
mod common;

use std::time::Duration;

use async_exec::{async_exec, Action, Backend, Error, PageSpec, Purge, RequestQuery, Status, Tx};
use common::TestDb;

/// A reminder for later.
#[async_exec(type = SaveAsync)]
async fn remind(subscription: i64) {
    let _ = subscription;
}

#[derive(serde::Serialize, serde::Deserialize)]
struct Order {
    customer: i64,
    email: String,
    express: bool,
}

/// An order to ship, with nested arguments.
#[async_exec(type = SaveAsync, remark = "Ship the ORDER")]
async fn ship(order: Order, note: String) {
    let _ = (order, note);
}

/// Runs at once, in memory: takes no tags.
#[async_exec(type = Async)]
async fn in_memory(n: i64) {
    let _ = n;
}

const LATER: Duration = Duration::from_secs(86_400);

async fn ids_tagged(rt: &async_exec::Runtime, tag: &str) -> Vec<i64> {
    let page = rt
        .list(&RequestQuery::default().tag(tag), &PageSpec::default())
        .await
        .unwrap();
    let mut ids: Vec<i64> = page.requests.iter().map(|r| r.id).collect();
    ids.sort_unstable();
    ids
}

/// Tags go with the call's transaction; the requests of a tag are listed, and only them;
/// a request shows its tags; a batch writes its calls' tags.
async fn tags_are_written_with_the_call_and_found<DB: Backend>(db: TestDb) {
    let rt = db.builder().start().await.unwrap();
    let mut tx: Tx<DB> = rt.begin().await.unwrap();
    remind(1)
        .tag("subscription:1")
        .delay(LATER)
        .within(&mut tx)
        .await
        .unwrap();
    tx.rollback().await.unwrap();
    assert_eq!(db.count("async_tag").await, 0, "rolled back with the call");
    assert!(ids_tagged(&rt, "subscription:1").await.is_empty());

    let mut tx: Tx<DB> = rt.begin().await.unwrap();
    let a = remind(1)
        .tag("subscription:1")
        .tag("tenant:7")
        .tag("tenant:7") // counted once
        .delay(LATER)
        .within(&mut tx)
        .await
        .unwrap()
        .id
        .unwrap();
    tx.commit().await.unwrap();
    let b = remind(2)
        .tag("subscription:2")
        .tag("tenant:7")
        .delay(LATER)
        .on(&rt)
        .await
        .unwrap()
        .id
        .unwrap();
    let untagged = remind(3).delay(LATER).on(&rt).await.unwrap().id.unwrap();
    let receipts = async_exec::batch([
        remind(4).tag("subscription:4").delay(LATER),
        remind(5).delay(LATER),
    ])
    .on(&rt)
    .await
    .unwrap();
    let c = receipts[0].id.unwrap();

    assert_eq!(ids_tagged(&rt, "subscription:1").await, vec![a]);
    assert_eq!(ids_tagged(&rt, "tenant:7").await, vec![a, b]);
    assert_eq!(ids_tagged(&rt, "subscription:4").await, vec![c]);
    assert!(
        ids_tagged(&rt, "tenant:").await.is_empty(),
        "exact, not a prefix"
    );
    assert!(ids_tagged(&rt, "Tenant:7").await.is_empty(), "exact case");
    let request = rt.get(a).await.unwrap().unwrap();
    assert_eq!(request.tags, vec!["subscription:1", "tenant:7"]);
    assert!(rt.get(untagged).await.unwrap().unwrap().tags.is_empty());
    // A page shows the tags of its requests; other filters combine with the tag.
    let page = rt
        .list(
            &RequestQuery::default().tag("tenant:7").status(Status::Init),
            &PageSpec::default(),
        )
        .await
        .unwrap();
    let b_listed = page.requests.iter().find(|r| r.id == b).unwrap();
    assert_eq!(b_listed.tags, vec!["subscription:2", "tenant:7"]);
    rt.shutdown().await.unwrap();
}

/// An action on a tag's filter cancels every waiting request of the tag and no other.
async fn a_tag_cancels_in_bulk<DB: Backend>(db: TestDb) {
    let rt = db.builder().start().await.unwrap();
    let mut tagged = Vec::new();
    for n in 0..5 {
        let id = remind(n)
            .tag("subscription:9")
            .delay(LATER)
            .on(&rt)
            .await
            .unwrap()
            .id
            .unwrap();
        tagged.push(id);
    }
    let other = remind(99)
        .tag("subscription:10")
        .delay(LATER)
        .on(&rt)
        .await
        .unwrap()
        .id
        .unwrap();
    let query = RequestQuery::default().tag("subscription:9");
    let cancelled = rt.act(Action::Cancel, &query, "test").await.unwrap();
    assert_eq!(cancelled, 5);
    for id in tagged {
        assert_eq!(rt.get(id).await.unwrap().unwrap().status, Status::Cancelled);
    }
    assert_eq!(rt.get(other).await.unwrap().unwrap().status, Status::Init);
    rt.shutdown().await.unwrap();
}

/// The tags of requests that are gone (deleted on success here) are purged with what
/// retention deletes; those of requests still kept stay.
async fn the_tags_of_requests_that_are_gone_are_purged<DB: Backend>(db: TestDb) {
    let rt = db.builder().start().await.unwrap();
    let done = remind(1).tag("gone").on(&rt).await.unwrap().id.unwrap();
    let kept = remind(2)
        .tag("kept")
        .delay(LATER)
        .on(&rt)
        .await
        .unwrap()
        .id
        .unwrap();
    common::wait_for(|| async { rt.get(done).await.unwrap().is_none() }).await;
    assert_eq!(db.count("async_tag").await, 2);
    tokio::time::sleep(Duration::from_millis(20)).await;
    rt.purge(Purge::older_than(Duration::from_millis(1)))
        .await
        .unwrap();
    assert_eq!(db.count("async_tag").await, 1);
    assert_eq!(ids_tagged(&rt, "kept").await, vec![kept]);
    rt.shutdown().await.unwrap();
}

/// Tags that cannot be kept are refused when the call is awaited, and nothing is written.
async fn bad_tags_are_refused<DB: Backend>(db: TestDb) {
    let rt = db.builder().start().await.unwrap();
    let refused = |result: Result<async_exec::Receipt, Error>, says: &str| {
        let error = result.unwrap_err();
        assert!(
            matches!(&error, Error::InvalidCall { option: "tag", .. }),
            "{error}"
        );
        assert!(error.to_string().contains(says), "{error}");
    };
    let mut eleven = remind(1);
    for n in 0..=async_exec::MAX_TAGS {
        eleven = eleven.tag(format!("t{n}"));
    }
    refused(eleven.on(&rt).await, "at most 10 tags");
    refused(remind(1).tag("").on(&rt).await, "1 to 255 characters");
    refused(remind(1).tag("x".repeat(256)).on(&rt).await, "1 to 255");
    refused(remind(1).tag("a\0b").on(&rt).await, "without NUL");
    refused(in_memory(1).tag("t").on(&rt).await, "only `SaveAsync`");
    // The longest tag fits every backend's column, in characters.
    let longest = "é".repeat(255);
    let id = remind(1)
        .tag(longest.clone())
        .delay(LATER)
        .on(&rt)
        .await
        .unwrap()
        .id
        .unwrap();
    assert_eq!(ids_tagged(&rt, &longest).await, vec![id]);
    assert_eq!(db.count("async_req").await, 1, "only the last call wrote");
    rt.shutdown().await.unwrap();
}

/// A value at a path of the arguments finds the requests that hold it (numbers, text,
/// booleans as JSON writes them), also for the API's and the console's `arg` field;
/// a bad path is refused; remark and error are searched in any case on request.
async fn arguments_and_any_case_are_searched<DB: Backend>(db: TestDb) {
    let rt = db.builder().run_workers(false).start().await.unwrap();
    let order = |customer, email: &str, express| Order {
        customer,
        email: email.into(),
        express,
    };
    let a = ship(order(4711, "ann@example.com", true), "fragile".into())
        .delay(LATER)
        .on(&rt)
        .await
        .unwrap()
        .id
        .unwrap();
    let b = ship(order(42, "bob@example.com", false), "4711".into())
        .delay(LATER)
        .on(&rt)
        .await
        .unwrap()
        .id
        .unwrap();
    let found = |query: RequestQuery| {
        let rt = rt.clone();
        async move {
            let mut ids: Vec<i64> = rt
                .list(&query, &PageSpec::default())
                .await
                .unwrap()
                .requests
                .iter()
                .map(|r| r.id)
                .collect();
            ids.sort_unstable();
            ids
        }
    };
    assert_eq!(
        found(RequestQuery::default().arg("order.customer", "4711")).await,
        vec![a]
    );
    assert_eq!(
        found(RequestQuery::default().arg("note", "4711")).await,
        vec![b]
    );
    assert_eq!(
        found(RequestQuery::default().arg("order.email", "bob@example.com")).await,
        vec![b]
    );
    assert!(found(RequestQuery::default().arg("order.customer", "471"))
        .await
        .is_empty());
    assert!(found(RequestQuery::default().arg("order.nothing", "1"))
        .await
        .is_empty());
    let bad = rt
        .list(
            &RequestQuery::default().arg("order['x']", "1"),
            &PageSpec::default(),
        )
        .await
        .unwrap_err();
    assert!(matches!(bad, Error::InvalidFilter(_)), "{bad}");
    // Exact case unless asked.
    assert!(
        found(RequestQuery::default().remark_contains("ship the order"))
            .await
            .is_empty()
    );
    assert_eq!(
        found(
            RequestQuery::default()
                .remark_contains("ship the order")
                .any_case()
        )
        .await,
        vec![a, b]
    );
    rt.shutdown().await.unwrap();
}

backend_suite!(
    arguments_and_any_case_are_searched,
    tags_are_written_with_the_call_and_found,
    a_tag_cancels_in_bulk,
    the_tags_of_requests_that_are_gone_are_purged,
    bad_tags_are_refused,
);

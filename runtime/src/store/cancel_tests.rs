//! A store operation given up while its transaction begins (a timeout, an aborted task)
//! must leave no transaction open on the connection it returns to the pool.
//!
//! sqlx 0.8.6 counts a transaction as begun only once `BEGIN` has answered (sqlx issues
//! 4385 and 4393, open for PostgreSQL and MySQL in 0.8.6 and 0.9.0): a future dropped in
//! between hands the connection back with the server's transaction open and nothing to end
//! it. The statements the next borrower runs in autocommit then join that transaction: they
//! are not seen by other connections, and hold their row locks, until something ends it.
//! The runtime gives up store calls that take longer than a lease, so a slow database made
//! this happen. Here a latency proxy makes `BEGIN` slow, a call that begins a transaction
//! is given up, and an autocommit claim that follows must be visible from another
//! connection at once. PostgreSQL and MySQL run when `ASYNC_EXEC_TEST_POSTGRES_URL` /
//! `ASYNC_EXEC_TEST_MYSQL_URL` name a database.

#[path = "../../../tests/common/proxy.rs"]
// Shared with the integration tests, whose items are `pub`.
#[allow(dead_code, unreachable_pub)]
mod proxy;

use std::sync::Arc;
use std::time::Duration;

use super::{ClaimIds, Store};
use crate::base::record::{now_ms, Inserted, NewRequest, Status};

fn new_request(application: &Arc<str>) -> NewRequest {
    super::fixture::new_request(application, "cancel_test", "cancel_test()")
}

/// Gives up a transaction of `store` (whose only connection goes through `proxy`) while
/// its `BEGIN` is on the wire, then claims a record in autocommit on that connection.
/// Returns the record's status as `other`, a store on a connection of its own, reads it.
async fn claim_after_a_begin_given_up(
    store: &dyn Store,
    proxy: &proxy::Proxy,
    other: &dyn Store,
) -> Option<Status> {
    store.migrate().await.unwrap();
    let application: Arc<str> = Arc::from(format!("cancel-test-{}", now_ms()).as_str());
    let application = &application;
    let status = |id| async move {
        other
            .request_get(application, id)
            .await
            .unwrap()
            .map(|r| r.status)
    };
    let Inserted::New(record) = store
        .request_insert(&new_request(application))
        .await
        .unwrap()
    else {
        panic!("a new record");
    };
    assert_eq!(status(record).await, Some(Status::Init));

    // Every chunk either way waits 300 ms: the pool's ping of the connection it hands out
    // answers at about 600 ms; `BEGIN`, sent then, reaches the server at about 900 and its
    // answer comes back at about 1,200: give up at 1,050, when the server has begun.
    proxy.set_latency(Duration::from_millis(300));
    let given_up = tokio::time::timeout(
        Duration::from_millis(1_050),
        store.request_insert_many(&[new_request(application)]),
    )
    .await;
    assert!(given_up.is_err(), "the insert was to be given up mid-BEGIN");
    proxy.set_latency(Duration::ZERO);

    let claimed = store
        .request_claim_ids(ClaimIds {
            ids: &[record],
            owner: "cancel-test",
            now: now_ms(),
            lease_ms: 60_000,
        })
        .await
        .unwrap();
    assert_eq!(claimed.len(), 1, "the record is claimed");
    let seen = status(record).await;
    // Leave the shared test database as found, through `store`: with a transaction left
    // open, `other` would wait for its locks (MySQL refuses `store`'s delete instead, and
    // the assertion on `seen` then says what went wrong).
    let _ = store
        .lease_release("cancel-test", &[(record, 1)], now_ms())
        .await;
    let _ = store.request_delete(application, record).await;
    seen
}

#[cfg(feature = "postgres")]
#[tokio::test]
#[cfg_attr(
    not(async_exec_test_postgres),
    ignore = "set ASYNC_EXEC_TEST_POSTGRES_URL to run it"
)]
async fn postgres_a_transaction_given_up_while_it_begins_leaves_none_open() {
    let url = std::env::var("ASYNC_EXEC_TEST_POSTGRES_URL").expect("ASYNC_EXEC_TEST_POSTGRES_URL");
    let (proxy, proxied) = proxy::Proxy::for_url(&url).await;
    let store = super::postgres::PostgresStore::connect(&proxied, 1)
        .await
        .expect("ASYNC_EXEC_TEST_POSTGRES_URL is set but unreachable");
    let other = super::fixture::postgres().await;
    let seen = claim_after_a_begin_given_up(&store, &proxy, &*other).await;
    assert_eq!(seen, Some(Status::Running), "the claim was committed");
}

#[cfg(feature = "mysql")]
#[tokio::test]
#[cfg_attr(
    not(async_exec_test_mysql),
    ignore = "set ASYNC_EXEC_TEST_MYSQL_URL to run it"
)]
async fn mysql_a_transaction_given_up_while_it_begins_leaves_none_open() {
    let url = std::env::var("ASYNC_EXEC_TEST_MYSQL_URL").expect("ASYNC_EXEC_TEST_MYSQL_URL");
    let (proxy, proxied) = proxy::Proxy::for_url(&url).await;
    let store = super::mysql::MySqlStore::connect(&proxied, 1)
        .await
        .expect("ASYNC_EXEC_TEST_MYSQL_URL is set but unreachable");
    let other = super::fixture::mysql().await;
    let seen = claim_after_a_begin_given_up(&store, &proxy, &*other).await;
    assert_eq!(seen, Some(Status::Running), "the claim was committed");
}

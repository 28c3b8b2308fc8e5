//! A claim of due records hands back each record as it was written, on each compiled
//! backend, whatever its text holds: quotes, backslashes, control characters, non-ASCII
//! (SQLite returns a claim as one JSON array per record, see `sqlite::claims::claim_due`).
//! PostgreSQL and MySQL run when `ASYNC_EXEC_TEST_POSTGRES_URL` /
//! `ASYNC_EXEC_TEST_MYSQL_URL` name a database (and fail when it is unreachable).

use std::sync::Arc;

use super::{DueKind, Store};
use crate::base::record::{now_ms, Claimed, Inserted};

/// Text no record holds as is in JSON, SQL or either's escapes.
const AWKWARD: &str = "a \"quoted\" \\ back\\slash, tab\t, new\nline, nul-free \u{1} ctl, é 雪 🦀";

async fn a_claim_returns_every_column_as_written(store: &dyn Store) {
    let application: Arc<str> = Arc::from(format!("claim-test-{}", now_ms()).as_str());
    let mut keyed = super::fixture::new_request(&application, "claim_test", "0123456789abcdef");
    keyed.param_json = Arc::from(
        serde_json::json!({ "text": AWKWARD, "n": -7, "nested": [1, { "k": "v" }] })
            .to_string()
            .as_str(),
    );
    keyed.idempotency_key = Some(format!("key {AWKWARD}"));
    keyed.trace_json = Some(serde_json::json!({ "baggage": [["k", AWKWARD]] }).to_string());
    keyed.priority = -3;
    keyed.max_attempts = 7;
    keyed.run_at -= 1_000;
    keyed.deadline_at = Some(keyed.now + 3_600_000);
    let plain = super::fixture::new_request(&application, "claim_test", "0123456789abcdef");
    let written = [keyed, plain];
    let mut ids = Vec::new();
    for request in &written {
        match store.request_insert(request).await.unwrap() {
            Inserted::New(id) => ids.push(id),
            other => panic!("a new key, no singleton, yet {other:?}"),
        }
    }
    let stale = DueKind::Stale { older_than: 0 };
    let mut claimed: Vec<Claimed> =
        super::fixture::claim_due(store, &application, "claim_test", stale, "claimer").await;
    claimed.sort_by_key(|c| c.id);
    assert_eq!(claimed.len(), 2, "{claimed:?}");
    for ((c, w), id) in claimed.iter().zip(&written).zip(&ids) {
        assert_eq!(c.id, *id);
        assert_eq!(c.executor, w.executor);
        assert_eq!(c.sign, w.sign);
        assert_eq!(&*c.param_json, &*w.param_json);
        assert_eq!(c.attempt, 1, "claimed once");
        assert_eq!(c.max_attempts, w.max_attempts);
        assert_eq!(c.trace_json, w.trace_json);
        assert_eq!(c.priority, w.priority);
        assert_eq!(c.run_at, w.run_at);
        assert_eq!(c.idempotency_key, w.idempotency_key);
        assert_eq!(c.deadline_at, w.deadline_at);
    }
}

#[cfg(feature = "sqlite")]
#[tokio::test]
async fn sqlite_a_claim_returns_every_column_as_written() {
    let dir = tempfile::tempdir().unwrap();
    let store = super::fixture::sqlite(&dir).await;
    a_claim_returns_every_column_as_written(&*store).await;
}

#[cfg(feature = "postgres")]
#[tokio::test]
#[cfg_attr(
    not(async_exec_test_postgres),
    ignore = "set ASYNC_EXEC_TEST_POSTGRES_URL to run it"
)]
async fn postgres_a_claim_returns_every_column_as_written() {
    let store = super::fixture::postgres().await;
    a_claim_returns_every_column_as_written(&*store).await;
}

#[cfg(feature = "mysql")]
#[tokio::test]
#[cfg_attr(
    not(async_exec_test_mysql),
    ignore = "set ASYNC_EXEC_TEST_MYSQL_URL to run it"
)]
async fn mysql_a_claim_returns_every_column_as_written() {
    let store = super::fixture::mysql().await;
    a_claim_returns_every_column_as_written(&*store).await;
}

//! Times made "now" are due by the database's clock in the claim that follows, on each
//! compiled backend (PostgreSQL and MySQL when their test URLs are set, as in
//! [`super::fixture`]).

use std::sync::Arc;

use super::{fixture, DueKind, Store};
use crate::base::record::{now_ms, Inserted, NewRequest, Status};

const HOUR_MS: i64 = 3_600_000;

/// `Runtime::run_due` makes every waiting record due and claims at once: the claim must
/// find each of them. CI saw a retry made due by `run_due` left unclaimed (SQLite): the
/// due time came from the runtime's estimate of the database's clock, and SQLite's
/// reading of its own clock was truncated a millisecond short about half the time, so a
/// record made due "now" could be a millisecond in the future for the claim.
async fn a_record_made_due_is_claimed_at_once(store: &dyn Store) {
    let application: Arc<str> = Arc::from(format!("due-test-{}", now_ms()).as_str());
    for round in 0..300 {
        let waiting = NewRequest {
            status: Status::Failed,
            exec_count: 1,
            run_at: now_ms() + HOUR_MS,
            ..fixture::new_request(&application, "due_test", "due_test()")
        };
        let id = match store.request_insert_many(&[waiting]).await.unwrap()[..] {
            [Inserted::New(id)] => id,
            ref other => panic!("one new record, not {other:?}"),
        };
        assert_eq!(store.request_make_due(&application).await.unwrap(), 1);
        let claimed = fixture::claim_due(
            store,
            &application,
            "due_test",
            DueKind::Scheduled,
            "due-test",
        )
        .await;
        assert_eq!(
            claimed.iter().map(|c| c.id).collect::<Vec<_>>(),
            vec![id],
            "round {round}: the record made due was not due in the claim after it"
        );
        store.request_delete(&application, id).await.unwrap();
    }
}

#[cfg(feature = "sqlite")]
#[tokio::test]
async fn sqlite_a_record_made_due_is_claimed_at_once() {
    let dir = tempfile::tempdir().unwrap();
    a_record_made_due_is_claimed_at_once(&*fixture::sqlite(&dir).await).await;
}

#[cfg(feature = "postgres")]
#[tokio::test]
#[cfg_attr(
    not(async_exec_test_postgres),
    ignore = "set ASYNC_EXEC_TEST_POSTGRES_URL to run it"
)]
async fn postgres_a_record_made_due_is_claimed_at_once() {
    a_record_made_due_is_claimed_at_once(&*fixture::postgres().await).await;
}

#[cfg(feature = "mysql")]
#[tokio::test]
#[cfg_attr(
    not(async_exec_test_mysql),
    ignore = "set ASYNC_EXEC_TEST_MYSQL_URL to run it"
)]
async fn mysql_a_record_made_due_is_claimed_at_once() {
    a_record_made_due_is_claimed_at_once(&*fixture::mysql().await).await;
}

/// SQLite keeps its clock in whole milliseconds, but reads it out as a Julian day in a
/// double; converted back to unix milliseconds and truncated, about half the readings
/// came out a millisecond short. The reading must be exact: the same as SQLite's own
/// text of the time, which it prints from the whole milliseconds.
#[cfg(feature = "sqlite")]
#[tokio::test]
async fn sqlite_reads_its_clock_to_the_millisecond() {
    let pool = sqlx::SqlitePool::connect("sqlite::memory:").await.unwrap();
    let sql = format!(
        "SELECT {now}, CAST(strftime('%s', 'now') AS INTEGER) * 1000 \
         + CAST(substr(strftime('%f', 'now'), 4) AS INTEGER)",
        now = super::sqlite::DB_NOW
    );
    let mut short = 0;
    for _ in 0..2_000 {
        let (read, exact): (i64, i64) = sqlx::query_as(&sql).fetch_one(&pool).await.unwrap();
        if read != exact {
            assert_eq!(read, exact - 1, "off by more than the truncation");
            short += 1;
        }
    }
    assert_eq!(short, 0, "{short} of 2000 readings a millisecond short");
}

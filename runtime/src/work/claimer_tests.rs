//! The claimer on its own: the core parts on a store, no runtime started.

use std::sync::atomic::Ordering;
use std::sync::Arc;

use crate::base::record::{now_ms, Inserted, RequestId, Status};
use crate::base::registry::tests_support::def_with_secrets;
use crate::base::registry::ExecutorDef;
use crate::base::settings::Settings;
use crate::runtime::parts::{Core, Shared};
use crate::store::{ClaimIds, Store};
use crate::sweeps::clock::Clock;

static CLAIMED: ExecutorDef = def_with_secrets("claimer_test::claimed", &[]);

const OWNER: &str = "claimer-test";

/// A claim that got no answer but committed took a record: the next claim's round hands
/// it back (`init`, its attempt uncounted); a record claimed at the same time that the
/// pool holds stays this instance's. (Not counted among the records shutdown hands back.)
async fn what_a_claim_without_answer_took_is_handed_back(store: Arc<dyn Store>) {
    store.migrate().await.unwrap();
    let application: Arc<str> = Arc::from(format!("claimer-test-{}", now_ms()).as_str());
    let request = crate::store::fixture::new_request(&application, CLAIMED.name, CLAIMED.sign);
    let ids: Vec<RequestId> = store
        .request_insert_many(&[request.clone(), request])
        .await
        .unwrap()
        .into_iter()
        .map(|inserted| match inserted {
            Inserted::New(id) => id,
            Inserted::Existing(_) | Inserted::Live(_) | Inserted::Merged(_) => {
                unreachable!("no keys, no singletons")
            }
        })
        .collect();
    let (taken, held) = (ids[0], ids[1]);
    let clock = Arc::new(Clock::new(0));
    clock.sync(&*store).await.unwrap();
    let shared = Shared::for_tests(
        store.clone(),
        application.clone(),
        OWNER,
        clock.clone(),
        &CLAIMED,
    );
    let handed_back = shared.handed_back.clone();
    let core = Core::assemble(&Settings::default(), &shared);
    let claimer = core.claimer.clone();
    // Both claimed at `at`; the answer came for `held` only (reserved in the pool).
    let at = clock.now_ms() - 5;
    let claimed = store
        .request_claim_ids(ClaimIds {
            ids: &ids,
            owner: OWNER,
            now: at,
            lease_ms: 60_000,
        })
        .await
        .unwrap();
    assert_eq!(claimed.len(), 2);
    claimer.pool().reserve(held, 1, at + 60_000);
    // Without a claim noted, a claim looks for nothing.
    assert!(claimer.claim_ids(&[]).await.unwrap().is_empty());
    let status = |id| {
        let (store, application) = (store.clone(), application.clone());
        async move {
            let record = store.request_get(&application, id).await.unwrap().unwrap();
            (record.status, record.exec_count)
        }
    };
    assert_eq!(status(taken).await, (Status::Running, 1));
    claimer.unanswered.note(at);
    assert!(claimer.claim_ids(&[]).await.unwrap().is_empty());
    assert_eq!(status(taken).await, (Status::Init, 0));
    assert_eq!(status(held).await, (Status::Running, 1));
    assert_eq!(handed_back.load(Ordering::Acquire), 0);
    for id in ids {
        store.request_delete(&application, id).await.unwrap();
    }
}

static QUEUED: ExecutorDef = ExecutorDef {
    queue: Some("clock-q"),
    ..def_with_secrets("claimer_test::queued", &[])
};

/// The probe of due queues finds a record due by the database's clock that this
/// process's reading (behind it by up to the last reading's round trip) does not yet
/// call due: the claim, which asks the database's clock, would take it, so the poll must
/// not skip its queue (here a reading whose answer took 300 ms to come back).
async fn the_probe_finds_what_is_due_by_the_databases_clock(store: Arc<dyn Store>) {
    store.migrate().await.unwrap();
    let application: Arc<str> = Arc::from(format!("claimer-clock-{}", now_ms()).as_str());
    let clock = Arc::new(Clock::new(0));
    let slow_answer = async {
        let db = store.db_now_ms().await;
        tokio::time::sleep(std::time::Duration::from_millis(300)).await;
        db
    };
    clock.sync_with(slow_answer).await.unwrap();
    let shared = Shared::for_tests(store.clone(), application.clone(), OWNER, clock, &QUEUED);
    let core = Core::assemble(&Settings::default(), &shared);
    let claimer = core.claimer.clone();
    assert_eq!(claimer.queues().len(), 1);
    let due = store.db_now_ms().await.unwrap() - 100;
    let request = crate::base::record::NewRequest {
        queue: "clock-q",
        run_at: due,
        ..crate::store::fixture::new_request(&application, QUEUED.name, QUEUED.sign)
    };
    let ids = store.request_insert_many(&[request]).await.unwrap();
    assert_eq!(claimer.queues_with_due().await.unwrap(), vec![0]);
    for inserted in ids {
        if let Inserted::New(id) = inserted {
            store.request_delete(&application, id).await.unwrap();
        }
    }
}

#[cfg(feature = "sqlite")]
#[tokio::test]
async fn sqlite_the_probe_finds_what_is_due_by_the_databases_clock() {
    let dir = tempfile::tempdir().unwrap();
    let store = crate::store::fixture::sqlite(&dir).await;
    the_probe_finds_what_is_due_by_the_databases_clock(store).await;
}

#[cfg(feature = "postgres")]
#[tokio::test]
#[cfg_attr(
    not(async_exec_test_postgres),
    ignore = "set ASYNC_EXEC_TEST_POSTGRES_URL to run it"
)]
async fn postgres_the_probe_finds_what_is_due_by_the_databases_clock() {
    let url = std::env::var("ASYNC_EXEC_TEST_POSTGRES_URL").expect("ASYNC_EXEC_TEST_POSTGRES_URL");
    let store = crate::store::postgres::PostgresStore::connect(&url, 2)
        .await
        .expect("ASYNC_EXEC_TEST_POSTGRES_URL is set but unreachable");
    the_probe_finds_what_is_due_by_the_databases_clock(Arc::new(store)).await;
}

#[cfg(feature = "mysql")]
#[tokio::test]
#[cfg_attr(
    not(async_exec_test_mysql),
    ignore = "set ASYNC_EXEC_TEST_MYSQL_URL to run it"
)]
async fn mysql_the_probe_finds_what_is_due_by_the_databases_clock() {
    let url = std::env::var("ASYNC_EXEC_TEST_MYSQL_URL").expect("ASYNC_EXEC_TEST_MYSQL_URL");
    let store = crate::store::mysql::MySqlStore::connect(&url, 2)
        .await
        .expect("ASYNC_EXEC_TEST_MYSQL_URL is set but unreachable");
    the_probe_finds_what_is_due_by_the_databases_clock(Arc::new(store)).await;
}

#[cfg(feature = "sqlite")]
#[tokio::test]
async fn sqlite_what_a_claim_without_answer_took_is_handed_back() {
    let dir = tempfile::tempdir().unwrap();
    let store = crate::store::fixture::sqlite(&dir).await;
    what_a_claim_without_answer_took_is_handed_back(store).await;
}

#[cfg(feature = "postgres")]
#[tokio::test]
#[cfg_attr(
    not(async_exec_test_postgres),
    ignore = "set ASYNC_EXEC_TEST_POSTGRES_URL to run it"
)]
async fn postgres_what_a_claim_without_answer_took_is_handed_back() {
    let url = std::env::var("ASYNC_EXEC_TEST_POSTGRES_URL").expect("ASYNC_EXEC_TEST_POSTGRES_URL");
    let store = crate::store::postgres::PostgresStore::connect(&url, 2)
        .await
        .expect("ASYNC_EXEC_TEST_POSTGRES_URL is set but unreachable");
    what_a_claim_without_answer_took_is_handed_back(Arc::new(store)).await;
}

#[cfg(feature = "mysql")]
#[tokio::test]
#[cfg_attr(
    not(async_exec_test_mysql),
    ignore = "set ASYNC_EXEC_TEST_MYSQL_URL to run it"
)]
async fn mysql_what_a_claim_without_answer_took_is_handed_back() {
    let url = std::env::var("ASYNC_EXEC_TEST_MYSQL_URL").expect("ASYNC_EXEC_TEST_MYSQL_URL");
    let store = crate::store::mysql::MySqlStore::connect(&url, 2)
        .await
        .expect("ASYNC_EXEC_TEST_MYSQL_URL is set but unreachable");
    what_a_claim_without_answer_took_is_handed_back(Arc::new(store)).await;
}

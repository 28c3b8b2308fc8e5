//! The fencing of outcome writes, on each compiled backend: an outcome is written only
//! while its record is still `running` under the owner and attempt that produced it.
//! PostgreSQL and MySQL run when `ASYNC_EXEC_TEST_POSTGRES_URL` /
//! `ASYNC_EXEC_TEST_MYSQL_URL` name a database (and fail when it is unreachable); without
//! them they are reported as ignored. Each write says which outcomes it did not write.

use std::sync::Arc;

use super::{ClaimIds, Completion, CompletionResult, Store, Wrote};
use crate::base::record::{now_ms, Inserted, NewRequest, RequestId, Status};

fn new_request(application: &Arc<str>) -> NewRequest {
    super::fixture::new_request(application, "fence_test", "fence_test()")
}

fn done(id: RequestId, owner: &str, attempt: i32, result: CompletionResult) -> Completion {
    Completion {
        id,
        attempt,
        owner: Arc::from(owner),
        executor: "test",
        result,
        finished: now_ms(),
        log: None,
        result_json: None,
        subject: Default::default(),
    }
}

async fn status(store: &dyn Store, application: &str, id: RequestId) -> Option<Status> {
    store
        .request_get(application, id)
        .await
        .unwrap()
        .map(|r| r.status)
}

/// `n` new records of `application`, waiting.
async fn insert(store: &dyn Store, application: &Arc<str>, n: usize) -> Vec<RequestId> {
    let requests: Vec<NewRequest> = (0..n).map(|_| new_request(application)).collect();
    store
        .request_insert_many(&requests)
        .await
        .unwrap()
        .into_iter()
        .map(|i| match i {
            Inserted::New(id) => id,
            other => panic!("no key, no singleton, yet {other:?}"),
        })
        .collect()
}

/// `n` new records of `application`, claimed by `owner-a` at attempt 1.
async fn insert_claimed(store: &dyn Store, application: &Arc<str>, n: usize) -> Vec<RequestId> {
    let ids = insert(store, application, n).await;
    let claimed = store
        .request_claim_ids(ClaimIds {
            ids: &ids,
            owner: "owner-a",
            now: now_ms(),
            lease_ms: 60_000,
        })
        .await
        .unwrap();
    assert_eq!(claimed.len(), n);
    assert!(claimed.iter().all(|c| c.attempt == 1));
    ids
}

async fn outcomes_are_fenced_by_owner_and_attempt(store: &dyn Store) {
    store.migrate().await.unwrap();
    let application: Arc<str> = Arc::from(format!("fence-test-{}", now_ms()).as_str());
    let ids = insert_claimed(store, &application, 8).await;
    let now = now_ms();
    let [a, b, c, d, e, f, g, h] = ids[..] else {
        unreachable!()
    };

    // One owner, mixed attempts (the deletes' fast paths): only the current attempts go.
    let written = store
        .request_complete_many(&[
            done(a, "owner-a", 1, CompletionResult::Delete),
            done(c, "owner-a", 2, CompletionResult::Delete),
            done(d, "owner-a", 1, CompletionResult::Delete),
            done(a, "owner-a", 1, CompletionResult::Delete),
        ])
        .await
        .unwrap();
    assert_eq!(written.rows, 2, "a and d deleted; c is at attempt 1, not 2");
    assert!(
        [vec![1, 3], vec![0, 1]].contains(&written.unwritten),
        "c, and one of the two outcomes of a: {written:?}"
    );
    assert_eq!(status(store, &application, a).await, None);
    assert_eq!(status(store, &application, d).await, None);
    assert_eq!(status(store, &application, c).await, Some(Status::Running));

    // Two owners, deletes and updates: another owner's outcomes are ignored.
    let written = store
        .request_complete_many(&[
            done(b, "owner-b", 1, CompletionResult::Delete),
            done(
                c,
                "owner-a",
                1,
                CompletionResult::Failed {
                    error: "boom".into(),
                    run_at: now + 1_000,
                },
            ),
            done(e, "owner-b", 1, CompletionResult::Succeeded),
            done(e, "owner-a", 1, CompletionResult::Delete),
            done(
                f,
                "owner-a",
                1,
                CompletionResult::Dead {
                    error: "gave up".into(),
                },
            ),
        ])
        .await
        .unwrap();
    assert_eq!(
        written,
        Wrote {
            rows: 3,
            unwritten: vec![0, 2]
        },
        "c failed, e deleted, f dead; b and e are not owner-b's"
    );
    assert_eq!(status(store, &application, b).await, Some(Status::Running));
    assert_eq!(status(store, &application, c).await, Some(Status::Failed));
    assert_eq!(status(store, &application, e).await, None);
    let failed = store.request_get(&application, c).await.unwrap().unwrap();
    assert_eq!(failed.last_error.as_deref(), Some("boom"));
    assert_eq!(failed.run_at, now + 1_000);
    let dead = store.request_get(&application, f).await.unwrap().unwrap();
    assert_eq!(dead.status, Status::Dead);
    assert_eq!(dead.last_error.as_deref(), Some("gave up"));
    // A late outcome of c's first attempt, after it left `running`, changes nothing.
    let written = store
        .request_complete_many(&[done(c, "owner-a", 1, CompletionResult::Delete)])
        .await
        .unwrap();
    assert_eq!(
        written,
        Wrote {
            rows: 0,
            unwritten: vec![0]
        }
    );
    assert_eq!(status(store, &application, c).await, Some(Status::Failed));

    // Successes of one attempt (one statement on every backend) falling short: a record
    // still there is told apart from the one deleted...
    let written = store
        .request_complete_many(&[
            done(g, "owner-a", 1, CompletionResult::Delete),
            done(c, "owner-a", 1, CompletionResult::Delete),
        ])
        .await
        .unwrap();
    assert_eq!(
        written,
        Wrote {
            rows: 1,
            unwritten: vec![1]
        },
        "g deleted, c is not running"
    );
    // ... and a record gone before the write (another attempt succeeded first) is not
    // reported written; SQLite cannot tell it from the one it deleted, and reports neither.
    let written = store
        .request_complete_many(&[
            done(h, "owner-a", 1, CompletionResult::Delete),
            done(a, "owner-a", 1, CompletionResult::Delete),
        ])
        .await
        .unwrap();
    let unwritten = match store.backend_name() {
        "Sqlite" => vec![0, 1],
        _ => vec![1],
    };
    assert_eq!(written, Wrote { rows: 1, unwritten });
    assert_eq!(status(store, &application, h).await, None);
    for id in [b, c, f] {
        // Leave the shared test database as found (b is running: release it first).
        store
            .lease_release("owner-a", &[(id, 1)], now_ms())
            .await
            .unwrap();
        store.request_delete(&application, id).await.unwrap();
    }
}

/// A record handed back unstarted (shutdown, or a claim whose lease ran out before a
/// worker was free) that was asked to stop meanwhile (`rt.cancel` of a running request)
/// ends `cancelled`, not back to wait: a hand-back that put it to `init` let a later
/// claim run it after its cancel (seen so before the fix, on every backend). One not
/// asked goes back to `init`, its attempt uncounted.
async fn a_handed_back_record_asked_to_stop_ends_cancelled(store: &dyn Store) {
    store.migrate().await.unwrap();
    let application: Arc<str> = Arc::from(format!("handback-test-{}", now_ms()).as_str());
    let ids = insert_claimed(store, &application, 2).await;
    let (asked, other) = (ids[0], ids[1]);
    assert_eq!(
        store
            .request_cancel(&application, asked, now_ms())
            .await
            .unwrap(),
        Some(Status::Running),
        "a running record is asked to stop"
    );
    let released = store
        .lease_release("owner-a", &[(asked, 1), (other, 1)], now_ms())
        .await
        .unwrap();
    assert_eq!(released, 2);
    assert_eq!(
        status(store, &application, asked).await,
        Some(Status::Cancelled)
    );
    assert_eq!(status(store, &application, other).await, Some(Status::Init));
    for id in ids {
        store.request_delete(&application, id).await.unwrap();
    }
}

/// `lease_claimed_at` finds what claims of one owner made at the given times took, in
/// this application, while they are running under that owner: no other owner's, no
/// other time's, nothing handed back.
async fn the_records_a_claim_took_are_found_by_its_time(store: &dyn Store) {
    store.migrate().await.unwrap();
    let application: Arc<str> = Arc::from(format!("claimed-at-test-{}", now_ms()).as_str());
    let ids = insert(store, &application, 4).await;
    let (t1, t2) = (now_ms(), now_ms() + 7);
    for (claim, owner, now) in [
        (&ids[0..2], "owner-a", t1),
        (&ids[2..3], "owner-a", t2),
        (&ids[3..4], "owner-b", t1),
    ] {
        let claimed = store
            .request_claim_ids(ClaimIds {
                ids: claim,
                owner,
                now,
                lease_ms: 60_000,
            })
            .await
            .unwrap();
        assert_eq!(claimed.len(), claim.len());
    }
    let found = |times: Vec<i64>| {
        let application = application.clone();
        async move {
            store
                .lease_claimed_at(&application, "owner-a", &times)
                .await
                .unwrap()
        }
    };
    assert_eq!(found(vec![t1]).await, vec![(ids[0], 1), (ids[1], 1)]);
    assert_eq!(
        found(vec![t2, t1]).await,
        vec![(ids[0], 1), (ids[1], 1), (ids[2], 1)]
    );
    assert_eq!(found(vec![t1 - 1]).await, vec![]);
    assert_eq!(found(vec![]).await, vec![]);
    assert_eq!(
        store
            .lease_claimed_at("another-application", "owner-a", &[t1])
            .await
            .unwrap(),
        vec![]
    );
    // Handed back: no longer running under the owner.
    assert_eq!(
        store
            .lease_release("owner-a", &[(ids[0], 1)], now_ms())
            .await
            .unwrap(),
        1
    );
    assert_eq!(found(vec![t1]).await, vec![(ids[1], 1)]);
    assert_eq!(
        status(store, &application, ids[0]).await,
        Some(Status::Init)
    );
    for id in ids {
        store.request_delete(&application, id).await.unwrap();
    }
}

/// The probe of due queues names exactly the queues with `init` or `failed` records due
/// now: not a queue whose records wait for later, run, or belong to another application.
async fn the_probe_names_the_queues_with_due_records(store: &dyn Store) {
    store.migrate().await.unwrap();
    let application: Arc<str> = Arc::from(format!("probe-{}", now_ms()).as_str());
    let other: Arc<str> = Arc::from(format!("probe-other-{}", now_ms()).as_str());
    let now = now_ms();
    let record = |application: &Arc<str>, queue: &'static str, status, run_at| NewRequest {
        queue,
        status,
        exec_count: i32::from(status == Status::Failed),
        run_at,
        ..new_request(application)
    };
    store
        .request_insert_many(&[
            record(&application, "due-init", Status::Init, now - 1_000),
            record(&application, "due-failed", Status::Failed, now - 1_000),
            record(&application, "later", Status::Init, now + 3_600_000),
            record(&application, "later", Status::Failed, now + 3_600_000),
            record(&other, "elsewhere", Status::Init, now - 1_000),
            record(&application, "", Status::Init, now - 1_000),
        ])
        .await
        .unwrap();
    let names: Vec<String> = (0..1_200).map(|n| format!("idle-{n}")).collect();
    let mut asked: Vec<&str> = names.iter().map(String::as_str).collect();
    asked.extend(["due-init", "due-failed", "later", "elsewhere", "", "none"]);
    let mut due = store
        .ops()
        .queues_with_due(&application, &asked, now)
        .await
        .unwrap();
    due.sort();
    assert_eq!(due, ["", "due-failed", "due-init"]);
    assert!(store
        .ops()
        .queues_with_due(&application, &[], now)
        .await
        .unwrap()
        .is_empty());
}

/// The probe reads the claim index, not the table, on PostgreSQL, whatever a queue's
/// backlog makes of the column's statistics: with `EXISTS`, PostgreSQL read the whole
/// table for each name (a backlog of 100,000 rows in one queue: 55-80 s for 500 names).
/// (SQLite and MariaDB read the index with either form: measured, not tested here.)
async fn the_probe_reads_the_index_not_the_table(store: &dyn Store) {
    use crate::store::sql::{Col, Dialect};
    store.migrate().await.unwrap();
    if store.ops().dialect() != Dialect::Postgres {
        return;
    }
    let application: Arc<str> = Arc::from(format!("probe-plan-{}", now_ms()).as_str());
    // Failed requests due again (an outage's backlog): most of the table, most of it due.
    let due = now_ms() - 1_000;
    let backlog: Vec<NewRequest> = (0..20_000)
        .map(|_| NewRequest {
            queue: "backlog",
            status: Status::Failed,
            exec_count: 1,
            run_at: due,
            ..new_request(&application)
        })
        .collect();
    for chunk in backlog.chunks(2_000) {
        store.request_insert_many(chunk).await.unwrap();
    }
    let analyze = store.ops().sql("ANALYZE async_req");
    store.ops().execute(&analyze).await.unwrap();
    let names: Vec<String> = (0..20).map(|n| format!("idle-{n}")).collect();
    let mut asked: Vec<&str> = names.iter().map(String::as_str).collect();
    asked.push("backlog");
    let probe = store.ops().due_probe(&application, &asked, now_ms());
    let explain = probe.prefixed("EXPLAIN");
    let plan: Vec<String> = store
        .ops()
        .fetch_rows(&explain, &[Col::Text])
        .await
        .unwrap()
        .into_iter()
        .map(|mut row| row.text().unwrap())
        .collect();
    let mut forget = store
        .ops()
        .sql("DELETE FROM async_req WHERE application_name = ");
    forget.bind_text(&application);
    store.ops().execute(&forget).await.unwrap();
    let plan = plan.join("\n");
    assert!(!plan.contains("Seq Scan"), "{plan}");
    assert!(plan.contains("async_req_due"), "{plan}");
}

/// Runs the test `$name(&store)` on each compiled backend: SQLite in memory, PostgreSQL
/// and MySQL/MariaDB at `ASYNC_EXEC_TEST_POSTGRES_URL` / `ASYNC_EXEC_TEST_MYSQL_URL`
/// (ignored without them), as `$name::sqlite`, `$name::postgres`, `$name::mysql`.
macro_rules! on_each_store {
    ($($name:ident),* $(,)?) => {$(
        mod $name {
            #[cfg(feature = "sqlite")]
            #[tokio::test]
            async fn sqlite() {
                // sqlx names `sqlite::memory:` a shared-cache database: the pool's
                // connection and the store's writer connection see the same one.
                let store = crate::store::sqlite::SqliteStore::connect(
                    "sqlite::memory:",
                    1,
                    Default::default(),
                    std::time::Duration::from_secs(10),
                )
                .await
                .unwrap();
                super::$name(&store).await;
            }

            #[cfg(feature = "postgres")]
            #[tokio::test]
            #[cfg_attr(
                not(async_exec_test_postgres),
                ignore = "set ASYNC_EXEC_TEST_POSTGRES_URL to run it"
            )]
            async fn postgres() {
                let url = std::env::var("ASYNC_EXEC_TEST_POSTGRES_URL")
                    .expect("ASYNC_EXEC_TEST_POSTGRES_URL");
                let store = crate::store::postgres::PostgresStore::connect(&url, 2)
                    .await
                    .expect("ASYNC_EXEC_TEST_POSTGRES_URL is set but unreachable");
                super::$name(&store).await;
            }

            #[cfg(feature = "mysql")]
            #[tokio::test]
            #[cfg_attr(
                not(async_exec_test_mysql),
                ignore = "set ASYNC_EXEC_TEST_MYSQL_URL to run it"
            )]
            async fn mysql() {
                let url = std::env::var("ASYNC_EXEC_TEST_MYSQL_URL")
                    .expect("ASYNC_EXEC_TEST_MYSQL_URL");
                let store = crate::store::mysql::MySqlStore::connect(&url, 2)
                    .await
                    .expect("ASYNC_EXEC_TEST_MYSQL_URL is set but unreachable");
                super::$name(&store).await;
            }
        }
    )*};
}

on_each_store!(
    outcomes_are_fenced_by_owner_and_attempt,
    a_handed_back_record_asked_to_stop_ends_cancelled,
    the_records_a_claim_took_are_found_by_its_time,
    the_probe_names_the_queues_with_due_records,
    the_probe_reads_the_index_not_the_table,
);

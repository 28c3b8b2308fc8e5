//! Issue 20: policies changed while running. `rt.policy(name)` overrides, for a queue or an
//! executor in no queue, what the attribute and the builder say: paused, attempts,
//! backoff, timeout, priority boost (and a queue's limits); every instance applies a
//! change within about a second; bad values are refused with the range; changes are
//! audited.
#![allow(clippy::extra_unused_type_parameters)] // every test takes the backend, used or not

#[macro_use]
mod common;

use std::time::{Duration, Instant};

use async_exec::{async_exec, Backend, Error, Status};
use common::TestDb;

/// Always fails, and would retry 9 times a minute apart by its attribute.
#[async_exec(type = SaveAsync, name = "policies::flaky", max_attempts = 9)]
async fn flaky(n: i64) -> Result<(), String> {
    Err(format!("failed {n}"))
}

/// Takes a second, well within its attribute's timeout.
#[async_exec(type = SaveAsync, name = "policies::slow", timeout = "30s")]
async fn slow(n: i64) {
    let _ = n;
    tokio::time::sleep(Duration::from_secs(1)).await;
}

/// A mail, in the `mail` queue.
#[async_exec(type = SaveAsync, name = "policies::mail", queue = "mail")]
async fn mail(n: i64) {
    let _ = n;
}

async fn wait_until(what: &str, limit: Duration, mut check: impl AsyncFnMut() -> bool) {
    let start = Instant::now();
    while !check().await {
        assert!(start.elapsed() < limit, "{what}: not within {limit:?}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Attempts, backoff and timeout set on a policy decide for the executor's requests
/// instead of its attribute; a reset gives the attribute back.
async fn attempts_backoff_and_timeout_follow_the_policy<DB: Backend>(db: TestDb) {
    let rt = db
        .builder()
        .delete_on_success(false)
        .retry_base_delay(Duration::from_secs(60))
        .retry_max_delay(Duration::from_secs(60))
        .retry_interval(Duration::from_millis(50))
        .start()
        .await
        .unwrap();
    rt.policy("policies::flaky")
        .max_attempts(2)
        .backoff(Duration::from_millis(10), Duration::from_millis(10))
        .by("ops")
        .apply()
        .await
        .unwrap();
    let id = flaky(1).on(&rt).await.unwrap().id.unwrap();
    wait_until(
        "dead after the policy's 2 attempts",
        Duration::from_secs(5),
        async || rt.get(id).await.unwrap().unwrap().status == Status::Dead,
    )
    .await;
    let request = rt.get(id).await.unwrap().unwrap();
    assert_eq!((request.exec_count, request.max_attempts), (2, 2));

    rt.policy("policies::slow")
        .timeout(Duration::from_millis(200))
        .apply()
        .await
        .unwrap();
    let timed = slow(1).on(&rt).await.unwrap().id.unwrap();
    wait_until("the policy's timeout", Duration::from_secs(5), async || {
        rt.get(timed)
            .await
            .unwrap()
            .unwrap()
            .last_error
            .is_some_and(|e| e.contains("timed out after 200ms"))
    })
    .await;
    rt.policy("policies::slow").reset().apply().await.unwrap();
    let fine = slow(2).on(&rt).await.unwrap().id.unwrap();
    wait_until(
        "the attribute's timeout again",
        Duration::from_secs(5),
        async || rt.get(fine).await.unwrap().unwrap().status == Status::Success,
    )
    .await;
    let trail = rt.audit_trail(10).await.unwrap();
    let changes: Vec<_> = trail.iter().filter(|e| e.action == "policy").collect();
    assert_eq!(changes.len(), 3, "{trail:?}");
    assert!(changes
        .iter()
        .any(|e| e.actor == "ops" && e.target.contains("max_attempts")));
    rt.shutdown().await.unwrap();
}

/// A queue paused by a policy set on another instance holds within about a second, and
/// its requests run once it is let go; a boost raises the priority of new requests.
async fn another_instance_applies_a_change_within_a_second<DB: Backend>(db: TestDb) {
    let worker = db
        .builder()
        .delete_on_success(false)
        .poll_interval(Duration::from_millis(50))
        .start()
        .await
        .unwrap();
    let operator = db.builder().run_workers(false).start().await.unwrap();
    operator.policy("mail").paused(true).apply().await.unwrap();
    let changed = Instant::now();
    // Within about a second (two refreshes here, for a loaded machine) the worker leaves
    // new mails waiting.
    tokio::time::sleep(Duration::from_millis(2_000)).await;
    let held = mail(1).on(&operator).await.unwrap().id.unwrap();
    tokio::time::sleep(Duration::from_millis(600)).await;
    assert_eq!(
        worker.get(held).await.unwrap().unwrap().status,
        Status::Init,
        "ran {:?} after the pause",
        changed.elapsed()
    );
    operator
        .policy("mail")
        .paused(false)
        .priority_boost(7)
        .apply()
        .await
        .unwrap();
    wait_until(
        "the mail runs once let go",
        Duration::from_secs(3),
        async || worker.get(held).await.unwrap().unwrap().status == Status::Success,
    )
    .await;
    let boosted = mail(2).priority(3).on(&operator).await.unwrap().id.unwrap();
    assert_eq!(operator.get(boosted).await.unwrap().unwrap().priority, 10);
    let policies = operator.queue_policies().await.unwrap();
    let mail_policy = policies.iter().find(|p| p.queue == "mail").unwrap();
    assert!(!mail_policy.paused);
    assert_eq!(mail_policy.priority_boost, Some(7));
    operator.shutdown().await.unwrap();
    worker.shutdown().await.unwrap();
}

/// Values out of range, unknown names and limits on an executor in no queue are
/// refused, saying what to do, and nothing is written.
async fn bad_policies_are_refused<DB: Backend>(db: TestDb) {
    let rt = db.builder().start().await.unwrap();
    let refused = |result: Result<(), Error>, says: &str| {
        let error = result.unwrap_err().to_string();
        assert!(error.contains(says), "{error}");
    };
    refused(
        rt.policy("mail").max_attempts(0).apply().await,
        "between 1 and 2147483647, not 0",
    );
    refused(
        rt.policy("mail").timeout(Duration::ZERO).apply().await,
        "between 1ms and a year",
    );
    refused(
        rt.policy("mail")
            .backoff(Duration::from_secs(5), Duration::from_secs(1))
            .apply()
            .await,
        "no longer than the cap",
    );
    refused(
        rt.policy("mail").concurrency(0).apply().await,
        "between 1 and 100000",
    );
    // Issue 30: the lowest `i32` overflowed the range check (a panic in a debug build).
    refused(
        rt.policy("mail").priority_boost(i32::MIN).apply().await,
        "between -1000000 and 1000000, not -2147483648",
    );
    refused(
        rt.policy("mail").priority_boost(1_000_001).apply().await,
        "between -1000000 and 1000000",
    );
    refused(
        rt.policy("mial").paused(true).apply().await,
        "no queue or executor is named \"mial\"",
    );
    refused(
        rt.policy("policies::flaky").concurrency(2).apply().await,
        "give it `queue = \"...\"`",
    );
    let written = rt.queue_policies().await.unwrap();
    assert!(
        written.iter().all(|p| p.changed_by.is_none()),
        "nothing written: {written:?}"
    );
    rt.shutdown().await.unwrap();
}

backend_suite!(
    attempts_backoff_and_timeout_follow_the_policy,
    another_instance_applies_a_change_within_a_second,
    bad_policies_are_refused,
);

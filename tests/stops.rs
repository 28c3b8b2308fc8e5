//! Issue 20: a running request can be cancelled, from any instance, and a request can have
//! a deadline. The body's `Context` is told within about a second; a body that stops (or
//! fails, or overruns its timeout) after being told ends `cancelled`, for good; one that
//! succeeds is a success. A request not started by its deadline goes `dead` ("deadline
//! passed while it waited") without running; one running at it is told as a cancel is.
#![allow(clippy::extra_unused_type_parameters)] // every test takes the backend, used or not

#[macro_use]
mod common;

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use async_exec::{async_exec, Backend, CancelOutcome, Context, Error, Status, Tx};
use common::TestDb;

/// When each body (by its argument) saw its `Context` cancelled.
static TOLD: Mutex<Option<HashMap<i64, Instant>>> = Mutex::new(None);
/// The bodies (by argument) that started.
static STARTED: Mutex<Vec<i64>> = Mutex::new(Vec::new());

/// A fresh argument per test and backend (the tests of one binary run at once).
fn fresh() -> i64 {
    static NEXT: std::sync::atomic::AtomicI64 = std::sync::atomic::AtomicI64::new(1);
    NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
}

fn told_at(n: i64) -> Option<Instant> {
    TOLD.lock()
        .unwrap()
        .as_ref()
        .and_then(|m| m.get(&n).copied())
}

fn started(n: i64) -> bool {
    STARTED.lock().unwrap().contains(&n)
}

/// Works until told to stop (at most 30 s), then stops with an error.
#[async_exec(type = SaveAsync, max_attempts = 5)]
async fn patient(n: i64, ctx: Context) -> anyhow::Result<()> {
    STARTED.lock().unwrap().push(n);
    tokio::select! {
        _ = ctx.cancelled() => {
            TOLD.lock().unwrap().get_or_insert_with(HashMap::new).insert(n, Instant::now());
            anyhow::bail!("stopped as asked")
        }
        _ = tokio::time::sleep(Duration::from_secs(30)) => Ok(()),
    }
}

/// Notes the stop and finishes its work anyway, with success, a moment later.
#[async_exec(type = SaveAsync)]
async fn finisher(n: i64, ctx: Context) -> anyhow::Result<()> {
    STARTED.lock().unwrap().push(n);
    ctx.cancelled().await;
    TOLD.lock()
        .unwrap()
        .get_or_insert_with(HashMap::new)
        .insert(n, Instant::now());
    tokio::time::sleep(Duration::from_millis(100)).await;
    Ok(())
}

/// Ignores the stop; its timeout ends it.
#[async_exec(type = SaveAsync, timeout = "3s", max_attempts = 5)]
async fn stubborn(n: i64) -> anyhow::Result<()> {
    STARTED.lock().unwrap().push(n);
    tokio::time::sleep(Duration::from_secs(60)).await;
    Ok(())
}

/// Worth running within half a second of the call only.
#[async_exec(type = SaveAsync, deadline = "500ms")]
async fn fleeting(n: i64) {
    STARTED.lock().unwrap().push(n);
}

/// Holds its worker for 1.5 s.
#[async_exec(type = SaveAsync)]
async fn busy(n: i64) {
    STARTED.lock().unwrap().push(n);
    tokio::time::sleep(Duration::from_millis(1_500)).await;
}

/// Runs at once; takes no deadline (it is not `SaveAsync`).
#[async_exec(type = Async)]
async fn in_memory(n: i64) {
    let _ = n;
}

async fn wait_until(what: &str, limit: Duration, mut check: impl AsyncFnMut() -> bool) {
    let start = Instant::now();
    while !check().await {
        assert!(start.elapsed() < limit, "{what}: not within {limit:?}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

async fn status(rt: &async_exec::Runtime, id: i64) -> Status {
    rt.get(id)
        .await
        .unwrap()
        .expect("the record is kept")
        .status
}

/// Cancelled from another instance, a running body is told within about a second; it
/// stops, and its request is `cancelled` with why, not retried (attempts were left).
async fn a_running_request_is_cancelled_from_another_instance<DB: Backend>(db: TestDb) {
    let rt = db.builder().delete_on_success(false).start().await.unwrap();
    let other = db
        .builder()
        .delete_on_success(false)
        .run_workers(false)
        .start()
        .await
        .unwrap();
    let n = fresh();
    let id = patient(n).on(&rt).await.unwrap().id.unwrap();
    wait_until("the body starts", Duration::from_secs(5), async || {
        started(n)
    })
    .await;
    assert_eq!(status(&rt, id).await, Status::Running);
    let asked = Instant::now();
    // It says what it did: the request was running, so it is asked to stop.
    assert_eq!(other.cancel(id).await.unwrap(), CancelOutcome::StopAsked);
    wait_until("the body is told", Duration::from_secs(5), async || {
        told_at(n).is_some()
    })
    .await;
    let took = told_at(n).unwrap() - asked;
    assert!(
        took < Duration::from_millis(2_500),
        "told {took:?} after the cancel"
    );
    wait_until("the request ends", Duration::from_secs(5), async || {
        status(&rt, id).await == Status::Cancelled
    })
    .await;
    let request = rt.get(id).await.unwrap().unwrap();
    assert_eq!(request.exec_count, 1, "not retried");
    let error = request.last_error.unwrap_or_default();
    assert!(
        error.starts_with("cancelled while running: stopped as asked"),
        "{error}"
    );
    assert!(request.cancel_requested.is_some());
    // Final: a retry sweep does not take it, a second cancel is refused.
    rt.retrier().run_once().await.unwrap();
    assert_eq!(status(&rt, id).await, Status::Cancelled);
    assert!(matches!(
        rt.cancel(id).await,
        Err(Error::InvalidState { .. })
    ));
    println!("told {took:?} after the cancel");
    other.shutdown().await.unwrap();
    rt.shutdown().await.unwrap();
}

/// A body that finishes its work after the stop reached it is a success (the work was
/// done); one that ignores the stop is ended by its timeout and is `cancelled`.
async fn what_the_body_does_after_the_stop_decides<DB: Backend>(db: TestDb) {
    let rt = db.builder().delete_on_success(false).start().await.unwrap();
    let (a, b) = (fresh(), fresh());
    let finished = finisher(a).on(&rt).await.unwrap().id.unwrap();
    let ignored = stubborn(b).on(&rt).await.unwrap().id.unwrap();
    wait_until("both start", Duration::from_secs(5), async || {
        started(a) && started(b)
    })
    .await;
    let asked = Instant::now();
    rt.cancel(finished).await.unwrap();
    rt.cancel(ignored).await.unwrap();
    wait_until("the finisher ends", Duration::from_secs(5), async || {
        status(&rt, finished).await == Status::Success
    })
    .await;
    wait_until(
        "the stubborn one ends",
        Duration::from_secs(8),
        async || status(&rt, ignored).await == Status::Cancelled,
    )
    .await;
    let request = rt.get(ignored).await.unwrap().unwrap();
    let error = request.last_error.unwrap_or_default();
    assert!(
        error.starts_with("cancelled while running: timed out"),
        "{error}"
    );
    assert_eq!(request.exec_count, 1, "not retried");
    assert!(asked.elapsed() < Duration::from_secs(8));
    rt.shutdown().await.unwrap();
}

/// A cancel of a running request in the caller's transaction asks nothing when the
/// transaction rolls back, and asks it to stop when it commits.
async fn a_cancel_of_a_running_request_goes_with_the_transaction<DB: Backend>(db: TestDb) {
    let rt = db.builder().delete_on_success(false).start().await.unwrap();
    let n = fresh();
    let id = patient(n).on(&rt).await.unwrap().id.unwrap();
    wait_until("the body starts", Duration::from_secs(5), async || {
        started(n)
    })
    .await;
    let mut tx: Tx<DB> = rt.begin().await.unwrap();
    rt.cancel(id).within(&mut tx).await.unwrap();
    tx.rollback().await.unwrap();
    tokio::time::sleep(Duration::from_millis(2_200)).await;
    assert!(
        told_at(n).is_none(),
        "told of a cancel that was rolled back"
    );
    assert_eq!(status(&rt, id).await, Status::Running);
    assert_eq!(rt.get(id).await.unwrap().unwrap().cancel_requested, None);
    let mut tx: Tx<DB> = rt.begin().await.unwrap();
    assert_eq!(
        rt.cancel(id).within(&mut tx).await.unwrap(),
        CancelOutcome::StopAsked
    );
    tx.commit().await.unwrap();
    wait_until("the request ends", Duration::from_secs(5), async || {
        status(&rt, id).await == Status::Cancelled
    })
    .await;
    assert!(told_at(n).is_some());
    rt.shutdown().await.unwrap();
}

/// A request not started by its deadline goes `dead` without running, also when an
/// instance that could run it starts after the deadline; one running at its deadline is
/// told to stop and ends `cancelled`.
async fn deadlines_end_waiting_and_running_requests<DB: Backend>(db: TestDb) {
    // Written by an instance that runs nothing: nobody starts it in time.
    let writer = db.builder().run_workers(false).start().await.unwrap();
    let (late, running) = (fresh(), fresh());
    let missed = patient(late)
        .deadline(Duration::from_millis(300))
        .on(&writer)
        .await
        .unwrap()
        .id
        .unwrap();
    tokio::time::sleep(Duration::from_millis(600)).await;
    // It polls the store for due requests every 100 ms: none may start this one.
    let rt = db
        .builder()
        .delete_on_success(false)
        .poll_interval(Duration::from_millis(100))
        .start()
        .await
        .unwrap();
    wait_until(
        "the missed one is dead",
        Duration::from_secs(5),
        async || status(&rt, missed).await == Status::Dead,
    )
    .await;
    assert!(!started(late), "a request past its deadline started");
    let request = rt.get(missed).await.unwrap().unwrap();
    assert_eq!(
        request.last_error.as_deref(),
        Some("deadline passed while it waited")
    );
    assert_eq!(request.exec_count, 0);
    assert!(request.deadline_at.is_some());

    let id = patient(running)
        .deadline(Duration::from_millis(1_200))
        .on(&rt)
        .await
        .unwrap()
        .id
        .unwrap();
    let submitted = Instant::now();
    wait_until("the body starts", Duration::from_secs(5), async || {
        started(running)
    })
    .await;
    wait_until(
        "it ends at its deadline",
        Duration::from_secs(6),
        async || status(&rt, id).await == Status::Cancelled,
    )
    .await;
    let took = told_at(running).expect("told") - submitted;
    assert!(
        took >= Duration::from_millis(1_150) && took < Duration::from_millis(3_000),
        "told {took:?} after the call, its deadline 1.2 s"
    );
    let error = rt.get(id).await.unwrap().unwrap().last_error.unwrap();
    assert!(
        error.starts_with("deadline passed while running"),
        "{error}"
    );
    // A replay starts over, without the deadline.
    rt.retry_now(missed).await.unwrap();
    rt.retrier().run_once().await.unwrap();
    wait_until("the replay runs", Duration::from_secs(5), async || {
        started(late)
    })
    .await;
    assert_eq!(rt.get(missed).await.unwrap().unwrap().deadline_at, None);
    writer.shutdown().await.unwrap();
    rt.shutdown().await.unwrap();
}

/// A request due at once whose deadline passes while it waits for a worker (the only one
/// is busy) never starts, however it reached the instance (handed over at its commit or
/// claimed), and goes `dead` without an attempt counted. Whichever comes first stops it:
/// the stops sweep, or the check at the body's start.
async fn a_deadline_that_passes_while_waiting_for_a_worker_keeps_it_from_starting<DB: Backend>(
    db: TestDb,
) {
    let rt = db
        .builder()
        .delete_on_success(false)
        .concurrency(1)
        .poll_interval(Duration::from_millis(100))
        .start()
        .await
        .unwrap();
    let (holder, late) = (fresh(), fresh());
    busy(holder).on(&rt).await.unwrap();
    wait_until("the worker is taken", Duration::from_secs(5), async || {
        started(holder)
    })
    .await;
    let id = fleeting(late)
        .deadline(Duration::from_millis(300))
        .on(&rt)
        .await
        .unwrap()
        .id
        .unwrap();
    wait_until("it is dead", Duration::from_secs(6), async || {
        status(&rt, id).await == Status::Dead
    })
    .await;
    // The worker is free again (the holder's 1.5 s are over): still not started.
    tokio::time::sleep(Duration::from_millis(1_500)).await;
    assert!(!started(late), "started past its deadline");
    let request = rt.get(id).await.unwrap().unwrap();
    assert_eq!(request.status, Status::Dead, "{request:?}");
    assert_eq!(
        request.last_error.as_deref(),
        Some("deadline passed while it waited")
    );
    assert_eq!(request.exec_count, 0, "no attempt counted");
    rt.shutdown().await.unwrap();
}

/// Deadlines that cannot be kept are refused when the call is awaited, saying why.
async fn impossible_deadlines_are_refused<DB: Backend>(db: TestDb) {
    let rt = db.builder().start().await.unwrap();
    let refused = |result: Result<async_exec::Receipt, Error>, says: &str| {
        let error = result.unwrap_err();
        assert!(
            matches!(
                &error,
                Error::InvalidCall {
                    option: "deadline",
                    ..
                }
            ),
            "{error}"
        );
        assert!(error.to_string().contains(says), "{error}");
    };
    refused(
        patient(1).deadline(Duration::ZERO).on(&rt).await,
        "between 1ms",
    );
    refused(
        patient(1)
            .deadline(Duration::from_secs(400 * 86_400))
            .on(&rt)
            .await,
        "a year",
    );
    refused(
        patient(1)
            .delay(Duration::from_secs(60))
            .deadline(Duration::from_secs(60))
            .on(&rt)
            .await,
        "longer than the call's delay",
    );
    refused(
        in_memory(1).deadline(Duration::from_secs(60)).on(&rt).await,
        "only `SaveAsync`",
    );
    assert_eq!(db.count("async_req").await, 0, "nothing written");
    rt.shutdown().await.unwrap();
}

/// The attribute's `deadline` applies to every call; a call's own replaces it.
async fn the_attributes_deadline_applies_and_a_calls_own_replaces_it<DB: Backend>(db: TestDb) {
    let writer = db.builder().run_workers(false).start().await.unwrap();
    let (plain, given) = (fresh(), fresh());
    let at = common::now_ms();
    let missed = fleeting(plain).on(&writer).await.unwrap().id.unwrap();
    let kept = fleeting(given)
        .deadline(Duration::from_secs(60))
        .on(&writer)
        .await
        .unwrap()
        .id
        .unwrap();
    let deadline_of = async |id| writer.get(id).await.unwrap().unwrap().deadline_at.unwrap();
    let (a, b) = (deadline_of(missed).await - at, deadline_of(kept).await - at);
    assert!(
        (400..=1_500).contains(&a),
        "the attribute's: {a} ms after the call"
    );
    assert!(
        (59_000..=61_000).contains(&b),
        "the call's own: {b} ms after the call"
    );
    tokio::time::sleep(Duration::from_millis(800)).await;
    let rt = db
        .builder()
        .delete_on_success(false)
        .poll_interval(Duration::from_millis(100))
        .start()
        .await
        .unwrap();
    wait_until(
        "the one past its deadline is dead",
        Duration::from_secs(5),
        async || status(&rt, missed).await == Status::Dead,
    )
    .await;
    wait_until("the other one runs", Duration::from_secs(5), async || {
        status(&rt, kept).await == Status::Success
    })
    .await;
    assert!(!started(plain) && started(given));
    writer.shutdown().await.unwrap();
    rt.shutdown().await.unwrap();
}

/// A running request asked to stop whose instance died before it could tell the body:
/// the rescue makes it `cancelled`, not `failed` to run again.
async fn a_cancel_outlives_the_instance_that_ran_the_request<DB: Backend>(db: TestDb) {
    let rt = db
        .builder()
        .delete_on_success(false)
        .lease(Duration::from_secs(2))
        .heartbeat_interval(Duration::from_secs(1))
        .start()
        .await
        .unwrap();
    let id = patient(fresh())
        .delay(Duration::from_secs(3_600))
        .on(&rt)
        .await
        .unwrap()
        .id
        .unwrap();
    // As a dead instance leaves it: running, its lease long over, a cancel asked for.
    db.exec(&format!(
        "UPDATE async_req SET status = 'running', exec_count = 1, lease_owner = 'gone@x:1:0', \
         lease_until = 1000, cancel_requested = 2000 WHERE id = {id}"
    ))
    .await;
    let rescued = rt.rescuer().run_once().await.unwrap();
    assert_eq!(rescued.retried, vec![id], "{rescued:?}");
    let request = rt.get(id).await.unwrap().unwrap();
    assert_eq!(request.status, Status::Cancelled, "{request:?}");
    rt.shutdown().await.unwrap();
}

backend_suite!(
    a_cancel_outlives_the_instance_that_ran_the_request,
    the_attributes_deadline_applies_and_a_calls_own_replaces_it,
    a_running_request_is_cancelled_from_another_instance,
    what_the_body_does_after_the_stop_decides,
    a_cancel_of_a_running_request_goes_with_the_transaction,
    deadlines_end_waiting_and_running_requests,
    a_deadline_that_passes_while_waiting_for_a_worker_keeps_it_from_starting,
    impossible_deadlines_are_refused,
);

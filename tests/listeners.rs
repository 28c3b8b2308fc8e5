//! Issue 9: outcome listeners (`on_success`, `on_retry`, `on_dead`), on every backend:
//! each is called once its outcome is written (the listener reads the record back and
//! sees it), with the executor, remark, attempt, error, idempotency key, application and
//! the caller's baggage (a success whose record is deleted names its key too); a lease
//! that expired on the last attempt calls `on_dead` from the rescuer, with the same; an
//! attempt fenced off (its record claimed by another instance meanwhile) calls nothing,
//! and the others of its batch are still heard of; a panicking listener is logged and the
//! runtime and the other listeners go on.

#![allow(clippy::extra_unused_type_parameters)] // every test takes the backend, used or not

#[macro_use]
mod common;

use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_exec::{async_exec, with_baggage, Data, OutcomeEvent, OutcomeKind, Runtime, Status};
use common::{now_ms, refuse_failed_outcome_of, wait_for, TestDb};
use tokio::sync::Semaphore;

#[async_exec(type = SaveAsync, name = "listeners::fine", remark = "a fine call")]
async fn fine(n: i64) -> Result<(), String> {
    let _ = n;
    Ok(())
}

#[async_exec(type = SaveAsync, name = "listeners::flaky", max_attempts = 3, remark = "flaky")]
async fn flaky(n: i64) -> Result<(), String> {
    Err(format!("flaky {n}: try again"))
}

#[async_exec(type = SaveAsync, name = "listeners::doomed", max_attempts = 1)]
async fn doomed(n: i64) -> Result<(), String> {
    Err(format!("doomed {n}: refused"))
}

#[async_exec(type = SaveAsync, name = "listeners::gated", remark = "waits for the gate")]
async fn gated(n: i64, gate: Data<Gate>) -> Result<(), String> {
    let _ = n;
    gate.pass().await;
    Ok(())
}

#[async_exec(type = SaveAsync, name = "listeners::gated_declined", max_attempts = 3)]
async fn gated_declined(gate: Data<Gate>) -> Result<(), String> {
    gate.pass().await;
    Err("card declined".into())
}

/// Holds bodies until the test opens it.
#[derive(Clone)]
struct Gate(Arc<Semaphore>);

impl Default for Gate {
    fn default() -> Self {
        Gate(Arc::new(Semaphore::new(0)))
    }
}

impl Gate {
    async fn pass(&self) {
        let _permit = self.0.acquire().await.expect("the gate is never closed");
    }

    fn open(&self) {
        self.0.add_permits(Semaphore::MAX_PERMITS / 2);
    }
}

/// The test runtime's builder, with the gate `gated` takes.
fn builder(db: &TestDb, gate: &Gate) -> async_exec::Builder {
    db.builder().data(gate.clone())
}

/// The baggage an event carries, as pairs of `&str`.
fn baggage_of(event: &OutcomeEvent) -> Vec<(&str, &str)> {
    event
        .baggage
        .iter()
        .map(|(k, v)| (k.as_str(), v.as_str()))
        .collect()
}

#[async_exec(type = SaveAsync, name = "listeners::slow")]
async fn slow(n: i64) -> Result<(), String> {
    let _ = n;
    tokio::time::sleep(Duration::from_millis(800)).await;
    Ok(())
}

/// What the listeners saw: each event, with the record's status read back from the
/// database when the listener ran (`None`: the record was gone).
type Seen = Arc<Mutex<Vec<(OutcomeEvent, Option<Status>)>>>;

/// Listeners on all three outcomes that record what they see into `seen`, reading the
/// record back through `rt_slot` (set once the runtime is started).
fn listening(
    db: &TestDb,
    seen: &Seen,
    rt_slot: &Arc<Mutex<Option<Runtime>>>,
) -> async_exec::Builder {
    let handle = tokio::runtime::Handle::current();
    let recorder =
        |seen: Seen, rt_slot: Arc<Mutex<Option<Runtime>>>, handle: tokio::runtime::Handle| {
            move |event: &OutcomeEvent| {
                let rt = rt_slot.lock().unwrap().clone().expect("started");
                // The listeners' thread is not a runtime thread: it may block on one.
                let status = handle
                    .block_on(rt.get(event.id))
                    .unwrap()
                    .map(|record| record.status);
                seen.lock().unwrap().push((event.clone(), status));
            }
        };
    builder(db, &Gate::default())
        .delete_on_success(false)
        .on_success(recorder(seen.clone(), rt_slot.clone(), handle.clone()))
        .on_retry(recorder(seen.clone(), rt_slot.clone(), handle.clone()))
        .on_dead(recorder(seen.clone(), rt_slot.clone(), handle))
}

async fn wait_events(seen: &Seen, n: usize) {
    let seen = seen.clone();
    wait_for(move || {
        let seen = seen.clone();
        async move { seen.lock().unwrap().len() >= n }
    })
    .await;
}

/// Success, retry and dead: one event each, after the outcome is written, naming the
/// request: its key (keyed and unkeyed calls), remark, application, the caller's baggage.
async fn each_outcome_calls_its_listener_after_it_is_written<DB: async_exec::Backend>(db: TestDb) {
    let seen: Seen = Default::default();
    let slot = Arc::new(Mutex::new(None));
    let rt = listening(&db, &seen, &slot).start().await.unwrap();
    *slot.lock().unwrap() = Some(rt.clone());
    let ok = with_baggage(
        [("tenant", "acme"), ("traceparent", "00-abc-def-01")],
        async {
            fine(1)
                .key("listeners-ok")
                .on(&rt)
                .await
                .unwrap()
                .id
                .unwrap()
        },
    )
    .await;
    let retried = flaky(2).on(&rt).await.unwrap().id.unwrap();
    let dead = with_baggage([("tenant", "globex")], async {
        doomed(3)
            .key("listeners-dead")
            .on(&rt)
            .await
            .unwrap()
            .id
            .unwrap()
    })
    .await;
    wait_events(&seen, 3).await;
    tokio::time::sleep(Duration::from_millis(100)).await;
    let seen = seen.lock().unwrap().clone();
    assert_eq!(seen.len(), 3, "{seen:?}");
    let of = |id| seen.iter().find(|(e, _)| e.id == id).unwrap().clone();
    let (event, status) = of(ok);
    assert_eq!(
        (
            event.kind,
            event.executor,
            event.attempt,
            event.error.clone(),
            status
        ),
        (
            OutcomeKind::Success,
            "listeners::fine",
            1,
            None,
            Some(Status::Success)
        )
    );
    assert_eq!(
        (event.key.as_deref(), event.remark, &*event.application),
        (Some("listeners-ok"), "a fine call", "tests")
    );
    assert_eq!(
        baggage_of(&event),
        [("tenant", "acme"), ("traceparent", "00-abc-def-01")]
    );
    assert_eq!(event.baggage("traceparent"), Some("00-abc-def-01"));
    let (event, status) = of(retried);
    assert_eq!(
        (event.kind, event.executor, event.attempt),
        (OutcomeKind::Retry, "listeners::flaky", 1)
    );
    assert_eq!(
        (event.key.as_deref(), event.remark, &*event.application),
        (None, "flaky", "tests"),
        "an unkeyed call"
    );
    assert!(event.baggage.is_empty() && event.baggage("tenant").is_none());
    assert!(event.error.unwrap().contains("flaky 2: try again"));
    assert_eq!(
        status,
        Some(Status::Failed),
        "written before the listener ran"
    );
    let (event, status) = of(dead);
    assert_eq!(
        (event.kind, event.executor, event.attempt),
        (OutcomeKind::Dead, "listeners::doomed", 1)
    );
    assert_eq!(
        (event.key.as_deref(), event.remark, event.baggage("tenant")),
        (Some("listeners-dead"), "", Some("globex")),
        "no remark on `doomed`"
    );
    assert!(event.error.unwrap().contains("doomed 3: refused"));
    assert_eq!(status, Some(Status::Dead));
    rt.shutdown().await.unwrap();
}

/// With `delete_on_success` (the default) the record is gone when the listener runs: the
/// event still names its key, remark and baggage. A retry's next attempt, claimed from the
/// store, names them too.
async fn events_name_the_request_without_its_record<DB: async_exec::Backend>(db: TestDb) {
    let seen = Arc::new(Mutex::new(Vec::<OutcomeEvent>::new()));
    let record = |seen: &Arc<Mutex<Vec<OutcomeEvent>>>| {
        let seen = seen.clone();
        move |event: &OutcomeEvent| seen.lock().unwrap().push(event.clone())
    };
    let rt = builder(&db, &Gate::default())
        .on_success(record(&seen))
        .on_retry(record(&seen))
        .start()
        .await
        .unwrap();
    let (ok, retried) = with_baggage([("tenant", "initech")], async {
        (
            fine(7)
                .key("listeners-gone")
                .on(&rt)
                .await
                .unwrap()
                .id
                .unwrap(),
            flaky(8)
                .key("listeners-again")
                .on(&rt)
                .await
                .unwrap()
                .id
                .unwrap(),
        )
    })
    .await;
    let plain = fine(9).on(&rt).await.unwrap().id.unwrap();
    let count = |n: usize| {
        let seen = seen.clone();
        move || {
            let seen = seen.clone();
            async move { seen.lock().unwrap().len() >= n }
        }
    };
    wait_for(count(3)).await;
    // The retry is due after its backoff: the retrier claims it from the store.
    wait_for(|| {
        let (rt, seen) = (rt.clone(), seen.clone());
        async move {
            rt.retrier().run_once().await.unwrap();
            rt.wait_idle().await;
            tokio::time::sleep(Duration::from_millis(20)).await;
            seen.lock().unwrap().len() >= 4
        }
    })
    .await;
    let seen = seen.lock().unwrap().clone();
    let of = |id, attempt| {
        seen.iter()
            .find(|e| e.id == id && e.attempt == attempt)
            .unwrap_or_else(|| panic!("no event of {id} attempt {attempt}: {seen:?}"))
            .clone()
    };
    assert!(rt.get(ok).await.unwrap().is_none(), "deleted on success");
    let event = of(ok, 1);
    assert_eq!(
        (
            event.kind,
            event.key.as_deref(),
            event.remark,
            &*event.application
        ),
        (
            OutcomeKind::Success,
            Some("listeners-gone"),
            "a fine call",
            "tests"
        )
    );
    assert_eq!(baggage_of(&event), [("tenant", "initech")]);
    let event = of(plain, 1);
    assert_eq!((event.key, event.baggage.len()), (None, 0), "unkeyed");
    for attempt in [1, 2] {
        let event = of(retried, attempt);
        assert_eq!(
            (event.kind, event.key.as_deref(), event.remark),
            (OutcomeKind::Retry, Some("listeners-again"), "flaky"),
            "attempt {attempt}"
        );
        assert_eq!(
            baggage_of(&event),
            [("tenant", "initech")],
            "attempt {attempt}"
        );
    }
    rt.shutdown().await.unwrap();
}

/// Running records whose lease expired on their last attempt: the rescuer writes them
/// dead and calls `on_dead` with the executor, remark, attempt, error, key (a keyed and
/// an unkeyed one) and the caller's baggage, as stored.
async fn a_lease_lost_on_the_last_attempt_calls_on_dead<DB: async_exec::Backend>(db: TestDb) {
    let seen: Seen = Default::default();
    let slot = Arc::new(Mutex::new(None));
    let rt = listening(&db, &seen, &slot).start().await.unwrap();
    *slot.lock().unwrap() = Some(rt.clone());
    let past = now_ms() - 60_000;
    let key = format!("listeners-rescued-{past}");
    for (n, key, trace) in [
        (
            4,
            format!("'{key}'"),
            r#"'{"baggage":[["tenant","acme"]]}'"#,
        ),
        (5, "NULL".to_string(), "NULL"),
    ] {
        db.exec(&format!(
            "INSERT INTO async_req (application_name, executor, sign, strategy, status, exec_count, \
             max_attempts, param_json, remark, idempotency_key, trace_json, priority, run_at, \
             lease_owner, lease_until, create_time, update_time) VALUES ('tests', \
             'listeners::fine', '0', 'SaveAsync', 'running', 1, 1, '{{\"n\":{n}}}', '', {key}, \
             {trace}, 0, {past}, 'gone@1', {past}, {past}, {past})"
        ))
        .await;
    }
    let report = rt.rescuer().run_once().await.unwrap();
    assert_eq!(report.dead.len(), 2, "{report:?}");
    wait_events(&seen, 2).await;
    let seen = seen.lock().unwrap().clone();
    let mut keys = Vec::new();
    for (event, status) in &seen {
        assert!(report.dead.contains(&event.id), "{seen:?}");
        assert_eq!(
            (event.kind, event.executor, event.attempt, *status),
            (OutcomeKind::Dead, "listeners::fine", 1, Some(Status::Dead))
        );
        assert!(event.error.is_some(), "the lease's loss is the error");
        assert_eq!(
            (event.remark, &*event.application),
            ("a fine call", "tests")
        );
        match &event.key {
            Some(_) => assert_eq!(baggage_of(event), [("tenant", "acme")]),
            None => assert!(event.baggage.is_empty()),
        }
        keys.push(event.key.clone());
    }
    keys.sort();
    assert_eq!(keys, [None, Some(key)]);
    rt.shutdown().await.unwrap();
}

/// An attempt whose record was claimed by another instance while it ran is fenced off:
/// its success is not written, and no listener hears of it.
async fn a_success_fenced_off_calls_no_listener<DB: async_exec::Backend>(db: TestDb) {
    let seen: Seen = Default::default();
    let slot = Arc::new(Mutex::new(None));
    let rt = listening(&db, &seen, &slot).start().await.unwrap();
    *slot.lock().unwrap() = Some(rt.clone());
    let stolen = slow(5).on(&rt).await.unwrap().id.unwrap();
    let running = {
        let rt = rt.clone();
        move || {
            let rt = rt.clone();
            async move { rt.get(stolen).await.unwrap().unwrap().status == Status::Running }
        }
    };
    wait_for(running).await;
    // Another instance takes the record over (its lease expired, say) while the body runs.
    db.exec(&format!(
        "UPDATE async_req SET lease_owner = 'thief@1', exec_count = exec_count + 1 WHERE id = {stolen}"
    ))
    .await;
    rt.wait_idle().await;
    let record = rt.get(stolen).await.unwrap().unwrap();
    assert_eq!(
        record.status,
        Status::Running,
        "the fenced success is not written"
    );
    // Events are delivered in order: once the next call's arrives, the fenced one's would have.
    let next = fine(6).on(&rt).await.unwrap().id.unwrap();
    wait_events(&seen, 1).await;
    tokio::time::sleep(Duration::from_millis(100)).await;
    let ids: Vec<_> = seen.lock().unwrap().iter().map(|(e, _)| e.id).collect();
    assert_eq!(ids, vec![next], "only the written success is heard of");
    rt.abort();
}

/// A listener that panics is logged; the other listeners still hear of every outcome and
/// the runtime goes on running calls.
async fn a_panicking_listener_is_caught_and_the_runtime_goes_on<DB: async_exec::Backend>(
    db: TestDb,
) {
    let heard = Arc::new(Mutex::new(Vec::new()));
    let recorded = heard.clone();
    let rt = builder(&db, &Gate::default())
        .on_success(|event| panic!("listener refuses {}", event.id))
        .on_success(move |event| recorded.lock().unwrap().push(event.id))
        .start()
        .await
        .unwrap();
    let mut ids = Vec::new();
    for n in 0..3 {
        ids.push(fine(n).on(&rt).await.unwrap().id.unwrap());
        rt.wait_idle().await;
    }
    let heard_all = {
        let heard = heard.clone();
        move || {
            let heard = heard.clone();
            async move { heard.lock().unwrap().len() == 3 }
        }
    };
    wait_for(heard_all).await;
    assert_eq!(*heard.lock().unwrap(), ids);
    assert!(rt.health().await.is_ready(), "no part died of it");
    assert_eq!(rt.listener_drops(), 0);
    rt.shutdown().await.unwrap();
}

/// Issue 21, "reacting to outcomes": an async `on_dead` listener marks the order of a
/// payment that gave up as failed in the application's own table (no channel, no task of
/// the caller's), an async `on_success` one counts in the database too; one that panics
/// and one that never ends (on every event) hold up neither the runtime nor the others.
async fn async_listeners_write_to_the_database_and_a_stuck_one_holds_up_nothing<
    DB: async_exec::Backend,
>(
    db: TestDb,
) {
    // On SQLite the file does not exist yet: this pool makes it.
    let url = match db.kind {
        common::Kind::Sqlite => format!("{}?mode=rwc", db.url),
        _ => db.url.clone(),
    };
    let pool = sqlx::AnyPool::connect(&url).await.unwrap();
    db.exec("CREATE TABLE orders (order_key VARCHAR(40) PRIMARY KEY, state VARCHAR(40) NOT NULL)")
        .await;
    db.exec("INSERT INTO orders VALUES ('order-1', 'paying'), ('order-2', 'paying')")
        .await;
    db.exec("CREATE TABLE tally (n INTEGER NOT NULL)").await;
    db.exec("INSERT INTO tally VALUES (0)").await;
    let marking = pool.clone();
    let counting = pool.clone();
    let rt = builder(&db, &Gate::default())
        .on_dead_async(move |event| {
            let pool = marking.clone();
            async move {
                let Some(order) = event.key else { return };
                // The key is the test's own: no quoting needed.
                sqlx::query(&format!(
                    "UPDATE orders SET state = 'payment_failed' WHERE order_key = '{order}'"
                ))
                .execute(&pool)
                .await
                .unwrap();
            }
        })
        .on_success_async(|event| async move {
            if event.id % 2 == 0 {
                panic!("async listener refuses {}", event.id);
            }
        })
        .on_success_async(|_| std::future::pending::<()>())
        .on_success_async(move |_| {
            let pool = counting.clone();
            async move {
                sqlx::query("UPDATE tally SET n = n + 1")
                    .execute(&pool)
                    .await
                    .unwrap();
            }
        })
        .start()
        .await
        .unwrap();
    doomed(1).key("order-1").on(&rt).await.unwrap();
    for n in 0..40 {
        fine(n).on(&rt).await.unwrap();
    }
    rt.wait_idle().await;
    let marked = "orders WHERE state = 'payment_failed' AND order_key = 'order-1'";
    let tallied = "tally WHERE n = 40";
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while db.count(marked).await == 0 || db.count(tallied).await == 0 {
        assert!(
            std::time::Instant::now() < deadline,
            "marked {}, tally {}",
            db.count(marked).await,
            db.count(tallied).await
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(
        db.count("orders WHERE state = 'paying'").await,
        1,
        "order-2 untouched"
    );
    assert!(rt.health().await.is_ready(), "no part died of it");
    assert_eq!(rt.listener_drops(), 0);
    rt.shutdown().await.unwrap();
    pool.close().await;
}

/// One attempt of a batch of outcomes fenced off (its record claimed by another instance
/// while the bodies ran): the others of the batch are written, and each is heard of, with
/// its key; the fenced one is not. `deletes`: successes delete their records (one
/// statement per batch), else mark them `success`.
async fn a_fenced_attempt_leaves_the_rest_of_its_batch_heard(db: &TestDb, deletes: bool) {
    let seen = Arc::new(Mutex::new(Vec::<OutcomeEvent>::new()));
    let recorded = seen.clone();
    let gate = Gate::default();
    let rt = builder(db, &gate)
        .delete_on_success(deletes)
        .on_success(move |event| recorded.lock().unwrap().push(event.clone()))
        .start()
        .await
        .unwrap();
    let mut ids = Vec::new();
    for n in 0..6 {
        let call = gated(n);
        let call = match n % 2 {
            0 => call.key(format!("listeners-batch-{deletes}-{n}-{}", now_ms())),
            _ => call,
        };
        ids.push(call.on(&rt).await.unwrap().id.unwrap());
    }
    wait_running(&rt, &ids).await;
    let keys: Vec<Option<String>> = {
        let mut keys = Vec::new();
        for &id in &ids {
            keys.push(rt.get(id).await.unwrap().unwrap().idempotency_key);
        }
        keys
    };
    let stolen = ids[3];
    db.exec(&format!(
        "UPDATE async_req SET lease_owner = 'thief@1', exec_count = exec_count + 1 WHERE id = {stolen}"
    ))
    .await;
    // The bodies end together: their outcomes are written in one batch.
    gate.open();
    rt.wait_idle().await;
    let heard_five = {
        let seen = seen.clone();
        move || {
            let seen = seen.clone();
            async move { seen.lock().unwrap().len() >= 5 }
        }
    };
    wait_for(heard_five).await;
    tokio::time::sleep(Duration::from_millis(100)).await;
    let seen = seen.lock().unwrap().clone();
    let mut heard: Vec<_> = seen.iter().map(|e| (e.id, e.key.clone())).collect();
    heard.sort();
    let expected: Vec<_> = ids
        .iter()
        .copied()
        .zip(keys)
        .filter(|&(id, _)| id != stolen)
        .collect();
    assert_eq!(heard, expected, "every written success, and only those");
    assert!(seen
        .iter()
        .all(|e| e.remark == "waits for the gate" && e.attempt == 1));
    let record = rt.get(stolen).await.unwrap().unwrap();
    assert_eq!(
        (record.status, record.lease_owner.as_deref()),
        (Status::Running, Some("thief@1")),
        "the fenced success is not written"
    );
    rt.abort();
}

/// Waits until every record of `ids` is `running`.
async fn wait_running(rt: &Runtime, ids: &[i64]) {
    let (rt, ids) = (rt.clone(), ids.to_vec());
    wait_for(move || {
        let (rt, ids) = (rt.clone(), ids.clone());
        async move {
            for id in ids {
                if rt.get(id).await.unwrap().unwrap().status != Status::Running {
                    return false;
                }
            }
            true
        }
    })
    .await;
}

/// An outcome the database refuses, in a batch of successes: it is written `dead`
/// instead, and `on_dead` hears of it with the error written and its key; the successes
/// of its batch are heard of too.
async fn a_refused_outcome_is_heard_as_dead_and_the_rest_of_its_batch_too<
    DB: async_exec::Backend,
>(
    db: TestDb,
) {
    let seen = Arc::new(Mutex::new(Vec::<OutcomeEvent>::new()));
    let record = |seen: &Arc<Mutex<Vec<OutcomeEvent>>>| {
        let seen = seen.clone();
        move |event: &OutcomeEvent| seen.lock().unwrap().push(event.clone())
    };
    let gate = Gate::default();
    let rt = builder(&db, &gate)
        .on_success(record(&seen))
        .on_retry(record(&seen))
        .on_dead(record(&seen))
        .start()
        .await
        .unwrap();
    let mut ids = Vec::new();
    for n in 0..4 {
        ids.push(gated(n).on(&rt).await.unwrap().id.unwrap());
    }
    let declined = gated_declined()
        .key("listeners-declined")
        .on(&rt)
        .await
        .unwrap()
        .id
        .unwrap();
    let mut all = ids.clone();
    all.push(declined);
    wait_running(&rt, &all).await;
    refuse_failed_outcome_of(&db, declined).await;
    gate.open();
    rt.wait_idle().await;
    let heard_five = {
        let seen = seen.clone();
        move || {
            let seen = seen.clone();
            async move { seen.lock().unwrap().len() >= 5 }
        }
    };
    wait_for(heard_five).await;
    tokio::time::sleep(Duration::from_millis(100)).await;
    let seen = seen.lock().unwrap().clone();
    assert_eq!(seen.len(), 5, "{seen:?}");
    let mut succeeded: Vec<_> = seen
        .iter()
        .filter(|e| e.kind == OutcomeKind::Success)
        .map(|e| e.id)
        .collect();
    succeeded.sort();
    assert_eq!(succeeded, ids);
    let dead = seen
        .iter()
        .find(|e| e.id == declined)
        .expect("the refused one");
    assert_eq!(
        (dead.kind, dead.key.as_deref(), dead.executor),
        (
            OutcomeKind::Dead,
            Some("listeners-declined"),
            "listeners::gated_declined"
        )
    );
    let error = dead.error.as_deref().unwrap();
    assert!(error.contains("the database refused it"), "{error}");
    assert!(error.contains("card declined"), "{error}");
    let stored = rt.get(declined).await.unwrap().unwrap();
    assert_eq!(stored.status, Status::Dead);
    assert_eq!(
        stored.last_error.as_deref(),
        Some(error),
        "the error written"
    );
    rt.shutdown().await.unwrap();
}

async fn a_fenced_attempt_leaves_the_rest_of_a_batch_of_deletes_heard<DB: async_exec::Backend>(
    db: TestDb,
) {
    a_fenced_attempt_leaves_the_rest_of_its_batch_heard(&db, true).await;
}

async fn a_fenced_attempt_leaves_the_rest_of_a_batch_of_updates_heard<DB: async_exec::Backend>(
    db: TestDb,
) {
    a_fenced_attempt_leaves_the_rest_of_its_batch_heard(&db, false).await;
}

backend_suite!(
    each_outcome_calls_its_listener_after_it_is_written,
    events_name_the_request_without_its_record,
    a_lease_lost_on_the_last_attempt_calls_on_dead,
    a_success_fenced_off_calls_no_listener,
    a_panicking_listener_is_caught_and_the_runtime_goes_on,
    a_fenced_attempt_leaves_the_rest_of_a_batch_of_deletes_heard,
    a_fenced_attempt_leaves_the_rest_of_a_batch_of_updates_heard,
    a_refused_outcome_is_heard_as_dead_and_the_rest_of_its_batch_too,
    async_listeners_write_to_the_database_and_a_stuck_one_holds_up_nothing,
);

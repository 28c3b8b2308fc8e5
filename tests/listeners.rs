//! Issue 9: outcome listeners (`on_success`, `on_retry`, `on_dead`), on every backend:
//! each is called once its outcome is written (the listener reads the record back and
//! sees it), with the executor, attempt and error; a lease that expired on the last
//! attempt calls `on_dead` from the rescuer; an attempt fenced off (its record claimed by
//! another instance meanwhile) calls nothing; a panicking listener is logged and the
//! runtime and the other listeners go on.

#![allow(clippy::extra_unused_type_parameters)] // every test takes the backend, used or not

#[macro_use]
mod common;

use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_exec::{async_exec, OutcomeEvent, OutcomeKind, Runtime, Status};
use common::{now_ms, wait_for, TestDb};

#[async_exec(type = SaveAsync, name = "listeners::fine")]
async fn fine(n: i64) -> Result<(), String> {
    let _ = n;
    Ok(())
}

#[async_exec(type = SaveAsync, name = "listeners::flaky", max_attempts = 3)]
async fn flaky(n: i64) -> Result<(), String> {
    Err(format!("flaky {n}: try again"))
}

#[async_exec(type = SaveAsync, name = "listeners::doomed", max_attempts = 1)]
async fn doomed(n: i64) -> Result<(), String> {
    Err(format!("doomed {n}: refused"))
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
    db.builder()
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

/// Success, retry and dead: one event each, after the outcome is written.
async fn each_outcome_calls_its_listener_after_it_is_written<DB: async_exec::Backend>(db: TestDb) {
    let seen: Seen = Default::default();
    let slot = Arc::new(Mutex::new(None));
    let rt = listening(&db, &seen, &slot).start().await.unwrap();
    *slot.lock().unwrap() = Some(rt.clone());
    let ok = fine(1).on(&rt).await.unwrap().id.unwrap();
    let retried = flaky(2).on(&rt).await.unwrap().id.unwrap();
    let dead = doomed(3).on(&rt).await.unwrap().id.unwrap();
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
            event.error,
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
    let (event, status) = of(retried);
    assert_eq!(
        (event.kind, event.executor, event.attempt),
        (OutcomeKind::Retry, "listeners::flaky", 1)
    );
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
    assert!(event.error.unwrap().contains("doomed 3: refused"));
    assert_eq!(status, Some(Status::Dead));
    rt.shutdown().await.unwrap();
}

/// A running record whose lease expired on its last attempt: the rescuer writes it dead
/// and calls `on_dead` with its executor, attempt and error.
async fn a_lease_lost_on_the_last_attempt_calls_on_dead<DB: async_exec::Backend>(db: TestDb) {
    let seen: Seen = Default::default();
    let slot = Arc::new(Mutex::new(None));
    let rt = listening(&db, &seen, &slot).start().await.unwrap();
    *slot.lock().unwrap() = Some(rt.clone());
    let past = now_ms() - 60_000;
    db.exec(&format!(
        "INSERT INTO async_req (application_name, executor, sign, strategy, status, exec_count, \
         max_attempts, param_json, remark, priority, run_at, lease_owner, lease_until, create_time, \
         update_time) VALUES ('tests', 'listeners::fine', '0', 'SaveAsync', 'running', 1, 1, \
         '{{\"n\":4}}', '', 0, {past}, 'gone@1', {past}, {past}, {past})"
    ))
    .await;
    let report = rt.rescuer().run_once().await.unwrap();
    assert_eq!(report.dead.len(), 1, "{report:?}");
    wait_events(&seen, 1).await;
    let (event, status) = seen.lock().unwrap()[0].clone();
    assert_eq!(event.id, report.dead[0]);
    assert_eq!(
        (event.kind, event.executor, event.attempt, status),
        (OutcomeKind::Dead, "listeners::fine", 1, Some(Status::Dead))
    );
    assert!(event.error.is_some(), "the lease's loss is the error");
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
    let rt = db
        .builder()
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

backend_suite!(
    each_outcome_calls_its_listener_after_it_is_written,
    a_lease_lost_on_the_last_attempt_calls_on_dead,
    a_success_fenced_off_calls_no_listener,
    a_panicking_listener_is_caught_and_the_runtime_goes_on,
);

//! Issue 21, "durable steps": `ctx.step(name, work)` keeps each finished step's value
//! with the request, so that a retry resumes after the last finished step instead of
//! running it again; a body whose steps changed fails for good, saying which.
#![allow(clippy::extra_unused_type_parameters)] // every test takes the backend, used or not

#[macro_use]
mod common;

use std::time::Duration;

use async_exec::{async_exec, Backend, Context, Data, Status};
use common::{Probe, TestDb};

/// Three steps; the second fails on the first attempt. The first's value is a charge id
/// made of the attempt it ran in.
#[async_exec(type = SaveAsync, name = "steps::checkout", max_attempts = 3)]
async fn checkout(order: i64, ctx: Context, probe: Data<Probe>) -> anyhow::Result<()> {
    let attempt = ctx.attempt();
    let charge: String = ctx
        .step("charge", || async {
            probe.record("charge", attempt);
            Ok::<_, anyhow::Error>(format!("ch_{order}_{attempt}"))
        })
        .await?;
    ctx.step("ship", || async {
        probe.record("ship", attempt);
        if attempt == 1 {
            anyhow::bail!("the carrier timed out");
        }
        Ok(())
    })
    .await?;
    ctx.step("receipt", || async {
        probe.record(&format!("receipt for {charge}"), attempt);
        Ok::<_, anyhow::Error>(())
    })
    .await?;
    Ok(())
}

/// A body whose first step is renamed between its attempts.
#[async_exec(type = SaveAsync, name = "steps::renamed", max_attempts = 3)]
async fn renamed(ctx: Context) -> anyhow::Result<()> {
    let name = if ctx.attempt() == 1 {
        "reserve"
    } else {
        "hold"
    };
    ctx.step(name, || async { Ok::<_, anyhow::Error>(1) })
        .await?;
    anyhow::ensure!(ctx.attempt() > 1, "fails once");
    Ok(())
}

/// A step whose name is longer than the column that keeps it (255 characters).
#[async_exec(type = SaveAsync, name = "steps::long_name", max_attempts = 3)]
async fn long_name(ctx: Context, probe: Data<Probe>) -> anyhow::Result<()> {
    let attempt = ctx.attempt();
    ctx.step(&"charge-".repeat(40), || async {
        probe.record("long charge", attempt);
        Ok::<_, anyhow::Error>(1)
    })
    .await?;
    Ok(())
}

/// A runtime that retries within 100 ms.
async fn started(db: &TestDb) -> async_exec::Runtime {
    db.builder()
        .retry_interval(Duration::from_millis(100))
        .start()
        .await
        .unwrap()
}

/// Waits until request `id` is `dead`.
async fn renamed_dead(rt: &async_exec::Runtime, id: i64) {
    let dead = || {
        let rt = rt.clone();
        async move {
            rt.get(id)
                .await
                .unwrap()
                .is_some_and(|r| r.status == Status::Dead)
        }
    };
    common::wait_for(dead).await;
}

/// The retry runs the failed step and the one after it, not the first: its value (the
/// charge id of attempt 1) is read back.
async fn a_retry_resumes_after_the_last_finished_step<DB: Backend>(db: TestDb) {
    let rt = started(&db).await;
    let probe = rt.data::<Probe>().unwrap();
    checkout(7).on(&rt).await.unwrap();
    let done = || {
        let probe = probe.clone();
        async move { probe.runs("receipt for ch_7_1") == 1 }
    };
    common::wait_for(done).await;
    rt.wait_idle().await;
    assert_eq!(probe.attempts("charge"), [1], "charged once");
    assert_eq!(probe.attempts("ship"), [1, 2]);
    assert_eq!(probe.attempts("receipt for ch_7_1"), [2]);
    assert_eq!(probe.runs("receipt for ch_7_2"), 0);
    rt.shutdown().await.unwrap();
}

/// Steps that changed between attempts: `dead` at once, the message naming both.
async fn changed_steps_fail_for_good<DB: Backend>(db: TestDb) {
    let rt = started(&db).await;
    let id = renamed().on(&rt).await.unwrap().id.unwrap();
    renamed_dead(&rt, id).await;
    let record = rt.get(id).await.unwrap().unwrap();
    let error = record.last_error.unwrap_or_default();
    assert!(
        error.contains("step 1 was `reserve`") && error.contains("`hold` now"),
        "{error}"
    );
    assert_eq!(record.exec_count, 2, "not retried after the change");
    rt.shutdown().await.unwrap();
}

/// The kept steps of a request that is gone are deleted by the retention sweep.
async fn steps_of_deleted_requests_are_purged<DB: Backend>(db: TestDb) {
    let rt = started(&db).await;
    let probe = rt.data::<Probe>().unwrap();
    checkout(8).on(&rt).await.unwrap();
    let done = || {
        let probe = probe.clone();
        async move { probe.runs("receipt for ch_8_1") == 1 }
    };
    common::wait_for(done).await;
    rt.wait_idle().await;
    assert_eq!(db.count("async_req").await, 0, "deleted on success");
    assert_eq!(db.count("async_step").await, 3, "left behind");
    // Older than the retention (7 days by default).
    db.exec("UPDATE async_step SET create_time = 1").await;
    rt.retention().run_once().await.unwrap();
    assert_eq!(db.count("async_step").await, 0);
    rt.shutdown().await.unwrap();
}

/// Issue 30, M8: a step name longer than the column that keeps it (255 characters) is
/// refused before its work runs, for good, saying so: its side effect never runs (before,
/// on PostgreSQL and MariaDB, the work ran, its value could not be written, and every
/// attempt ran it again: seen failing, `long charge` ran 3 times).
async fn a_step_name_too_long_is_refused_before_its_work<DB: Backend>(db: TestDb) {
    let rt = started(&db).await;
    let probe = rt.data::<Probe>().unwrap();
    let id = long_name().on(&rt).await.unwrap().id.unwrap();
    renamed_dead(&rt, id).await;
    assert_eq!(probe.runs("long charge"), 0, "the step's work never ran");
    let request = rt.get(id).await.unwrap().unwrap();
    assert_eq!(
        request.exec_count, 1,
        "refused for good at its first attempt"
    );
    let error = request.last_error.unwrap_or_default();
    assert!(
        error.contains("280 characters") && error.contains("255"),
        "{error}"
    );
    rt.shutdown().await.unwrap();
}

/// Issue 30: a replay keeps the request's durable steps (their work does not run again),
/// and `rt.replay_from_start(id)` forgets them in the replay's transaction, so that every
/// step runs again. (Before, there was no way to reset them short of deleting the request
/// and calling it again.)
async fn a_replay_from_the_start_runs_the_steps_again<DB: Backend>(db: TestDb) {
    let rt = db
        .builder()
        .delete_on_success(false)
        .retry_interval(Duration::from_millis(100))
        .start()
        .await
        .unwrap();
    let probe = rt.data::<Probe>().unwrap();
    let id = checkout(9).on(&rt).await.unwrap().id.unwrap();
    let done = |exec_count: i32| {
        let rt = rt.clone();
        async move {
            rt.get(id)
                .await
                .unwrap()
                .is_some_and(|r| r.status == Status::Success && r.exec_count == exec_count)
        }
    };
    common::wait_for(|| done(2)).await;
    assert_eq!((probe.runs("charge"), probe.runs("ship")), (1, 2));

    // A replay: the kept steps are read back, none runs again.
    rt.replay(id).await.unwrap();
    common::wait_for(|| done(1)).await;
    assert_eq!((probe.runs("charge"), probe.runs("ship")), (1, 2));
    assert_eq!(rt.steps(id).await.unwrap().len(), 3);

    // From the start: the steps are forgotten, and run again (the ship fails on the
    // replay's first attempt, as on the first run).
    rt.replay_from_start(id).await.unwrap();
    common::wait_for(|| done(2)).await;
    assert_eq!((probe.runs("charge"), probe.runs("ship")), (2, 4));
    assert_eq!(rt.steps(id).await.unwrap().len(), 3);
    // Refused as a replay is, and nothing forgotten then.
    let waiting = checkout(10)
        .delay(Duration::from_secs(3_600))
        .on(&rt)
        .await
        .unwrap()
        .id
        .unwrap();
    let refused = rt.replay_from_start(waiting).await.unwrap_err();
    assert!(
        matches!(refused, async_exec::Error::InvalidState { .. }),
        "{refused}"
    );
    rt.shutdown().await.unwrap();
}

backend_suite!(
    a_replay_from_the_start_runs_the_steps_again,
    a_step_name_too_long_is_refused_before_its_work,
    a_retry_resumes_after_the_last_finished_step,
    changed_steps_fail_for_good,
    steps_of_deleted_requests_are_purged,
);

/// The console's request page and `rt.steps` show the steps a request kept.
#[cfg(feature = "console")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_console_shows_the_kept_steps() {
    use common::console::{get, login, mounted, Auth};
    let db = TestDb::new(common::Kind::Sqlite).await;
    let rt = started(&db).await;
    let id = renamed().on(&rt).await.unwrap().id.unwrap();
    renamed_dead(&rt, id).await;
    let steps = rt.steps(id).await.unwrap();
    assert_eq!(steps.len(), 1);
    assert_eq!(
        (steps[0].name.as_str(), steps[0].value_json.as_str()),
        ("reserve", "1")
    );
    let app = mounted(&rt);
    let (cookie, _) = login(&app, "alice", "operator pass").await;
    let page = get(&app, &format!("/requests/{id}"), Auth::Cookie(&cookie)).await;
    assert!(page.body.contains("id=\"request-steps\""), "{}", page.body);
    assert!(page.body.contains("reserve"), "{}", page.body);
    rt.shutdown().await.unwrap();
}

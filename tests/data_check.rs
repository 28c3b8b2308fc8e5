//! Issue 8 item 10: a `Data<T>` that no executor can get is an error at `start()`, naming
//! the executor and the type, for every executor the runtime runs in its own process; a
//! type declined with `.without_data::<T>()` is let through, and a request that needs it
//! goes `dead` naming it.
#![allow(clippy::extra_unused_type_parameters)] // every test takes the backend, used or not

#[macro_use]
mod common;

use async_exec::{async_exec, Backend, Context, Data, Error, Status, TestMode};
use common::{Probe, TestDb};

struct Mailer;
struct Psp;

#[async_exec(type = SaveAsync)]
async fn mail(_to: String, _mailer: Data<Mailer>) {}

#[async_exec(type = SyncSave)]
async fn charge(_cents: i64, _psp: Data<Psp>) {}

#[async_exec(type = SaveAsync)]
async fn ok_job(label: String, probe: Data<Probe>, ctx: Context) {
    probe.record(&label, ctx.attempt());
}

fn missing_of(error: Error) -> String {
    match error {
        Error::MissingData { missing } => missing,
        other => panic!("expected MissingData, got {other:?}"),
    }
}

async fn start_fails_naming_each_executor_and_type<DB: Backend>(db: TestDb) {
    let error = db.builder().start().await.unwrap_err();
    let message = error.to_string();
    assert!(
        message.contains(".data(value)") && message.contains(".without_data::<T>()"),
        "{message}"
    );
    let missing = missing_of(error);
    assert!(
        missing.contains("`data_check::mail` takes `Data<data_check::Mailer>`"),
        "{missing}"
    );
    assert!(
        missing.contains("`data_check::charge` takes `Data<data_check::Psp>`"),
        "{missing}"
    );
    assert!(
        !missing.contains("ok_job"),
        "Probe is registered: {missing}"
    );
    // A test mode runs every body here too.
    let error = db
        .builder()
        .data(Psp)
        .test_mode(TestMode::Hold)
        .start()
        .await
        .unwrap_err();
    assert_eq!(
        missing_of(error),
        "`data_check::mail` takes `Data<data_check::Mailer>`"
    );
    // Registered, it starts.
    let rt = db.builder().data(Mailer).data(Psp).start().await.unwrap();
    rt.shutdown().await.unwrap();
}

/// A submit-only runtime runs `SyncSave`, `AsyncSave`, `Async` and `Thread` bodies itself,
/// not `SaveAsync` ones: only the former are checked, until it starts workers.
async fn submit_only_checks_the_bodies_it_runs<DB: Backend>(db: TestDb) {
    let error = db.builder().run_workers(false).start().await.unwrap_err();
    assert_eq!(
        missing_of(error),
        "`data_check::charge` takes `Data<data_check::Psp>`"
    );
    let rt = db
        .builder()
        .run_workers(false)
        .data(Psp)
        .start()
        .await
        .unwrap();
    let error = rt.start_workers().unwrap_err();
    assert_eq!(
        missing_of(error),
        "`data_check::mail` takes `Data<data_check::Mailer>`"
    );
    rt.shutdown().await.unwrap();
}

/// Declined on purpose, the runtime starts; a request that needs the value goes `dead`
/// with a message that names it, and the others run.
async fn declined_data_starts_and_its_requests_go_dead<DB: Backend>(db: TestDb) {
    let rt = db
        .builder()
        .test_mode(TestMode::Hold)
        .without_data::<Mailer>()
        .without_data::<Psp>()
        .start()
        .await
        .unwrap();
    ok_job("data".into()).on(&rt).await.unwrap();
    let id = mail("a@b.c".into()).on(&rt).await.unwrap().id.unwrap();
    // Drained until both ran: a record is due by the database's clock, which the
    // runtime's may trail by a few milliseconds.
    common::wait_for(|| {
        let rt = rt.clone();
        async move {
            rt.drain().await.unwrap();
            let dead = rt
                .get(id)
                .await
                .unwrap()
                .is_some_and(|r| r.status == Status::Dead);
            dead && rt.data::<Probe>().unwrap().runs("data") == 1
        }
    })
    .await;
    let record = rt.get(id).await.unwrap().unwrap();
    let error = record.last_error.unwrap();
    assert!(
        error.contains("Data<data_check::Mailer>") && error.contains(".data(value)"),
        "{error}"
    );
    rt.shutdown().await.unwrap();
}

backend_suite!(
    start_fails_naming_each_executor_and_type,
    submit_only_checks_the_bodies_it_runs,
    declined_data_starts_and_its_requests_go_dead,
);

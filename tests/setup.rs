//! Issue 8 item 12 (set-up): a runtime on the application's own PostgreSQL or MySQL pool,
//! and a submit-only runtime that starts its workers later; what a starting instance knows
//! before its first claim (issue 9: an executor paused by an operator stays paused).
#![allow(clippy::extra_unused_type_parameters)] // every test takes the backend, used or not

#[macro_use]
mod common;

use std::time::Duration;

use async_exec::{async_exec, Backend, Context, Data, Status};
use common::{Kind, Probe, TestDb};

#[async_exec(type = SaveAsync)]
async fn noted(label: String, probe: Data<Probe>, ctx: Context) {
    probe.record(&label, ctx.attempt());
}

async fn a_runtime_on_the_applications_pool<DB: Backend>(db: TestDb) {
    // The URL is not used to connect when a pool is handed in: make it unreachable.
    let builder = db
        .builder()
        .database_url("postgres://nobody@127.0.0.1:1/unreachable");
    let builder = match db.kind {
        Kind::Sqlite => {
            let options: sqlx::sqlite::SqliteConnectOptions = db.url.parse().unwrap();
            let pool = sqlx::SqlitePool::connect_with(options.create_if_missing(true))
                .await
                .unwrap();
            builder.sqlite_pool(pool)
        }
        Kind::Postgres => builder.postgres_pool(sqlx::PgPool::connect(&db.url).await.unwrap()),
        Kind::MySql => builder.mysql_pool(sqlx::MySqlPool::connect(&db.url).await.unwrap()),
    };
    let rt = builder
        .start()
        .await
        .expect("start on the application's pool");
    noted("pooled".into()).on(&rt).await.unwrap();
    rt.data::<Probe>().unwrap().wait_runs("pooled", 1).await;
    rt.shutdown().await.unwrap();
}

async fn a_submit_only_runtime_starts_its_workers<DB: Backend>(db: TestDb) {
    let rt = db.builder().run_workers(false).start().await.unwrap();
    let receipt = noted("later".into()).on(&rt).await.unwrap();
    tokio::time::sleep(Duration::from_millis(200)).await;
    let probe = rt.data::<Probe>().unwrap();
    assert_eq!(probe.runs("later"), 0, "no workers yet");
    let id = receipt.id.unwrap();
    assert_eq!(rt.get(id).await.unwrap().unwrap().status, Status::Init);
    rt.start_workers().unwrap();
    rt.start_workers().unwrap(); // a second call changes nothing
    probe.wait_runs("later", 1).await;
    noted("after".into()).on(&rt).await.unwrap();
    probe.wait_runs("after", 1).await;
    rt.shutdown().await.unwrap();
}

/// Several instances started at once on an empty database (a deploy of three replicas):
/// each migrates, and one waits for the other. Found on MariaDB: sqlx's migration lock
/// (`GET_LOCK(name, -1)`) takes no lock there (MariaDB answers NULL to a negative
/// timeout), so two instances ran the first migration twice ("Duplicate entry
/// '20261130000001'") or found it half done (`Dirty`), and did not start.
async fn instances_started_at_once_on_an_empty_database_all_start<DB: Backend>(db: TestDb) {
    let mut starts = tokio::task::JoinSet::new();
    for i in 0..4 {
        let builder = db
            .builder()
            .application_name(format!("replica-{i}"))
            .run_workers(false);
        starts.spawn(async move { (i, builder.start().await) });
    }
    while let Some(joined) = starts.join_next().await {
        let (i, started) = joined.unwrap();
        let rt = started.unwrap_or_else(|e| panic!("replica {i} did not start: {e}"));
        rt.shutdown().await.unwrap();
    }
}

/// An operator paused an executor; an instance that starts (a deploy, a restart) claims
/// none of its waiting records: the pauses are read before the first claim, not beside it.
async fn an_instance_starting_claims_nothing_of_a_paused_executor<DB: Backend>(db: TestDb) {
    let front = db.builder().run_workers(false).start().await.unwrap();
    front.pause_executor("setup::noted", "ops").await.unwrap();
    for n in 0..20 {
        noted(format!("paused {n}")).on(&front).await.unwrap();
    }
    let worker = db.builder().start().await.unwrap();
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let probe = worker.data::<Probe>().unwrap();
    let ran: usize = (0..20).map(|n| probe.runs(&format!("paused {n}"))).sum();
    assert_eq!(
        ran, 0,
        "records of a paused executor ran on a starting instance"
    );
    front.resume_executor("setup::noted", "ops").await.unwrap();
    for n in 0..20 {
        probe
            .wait_runs_within(&format!("paused {n}"), 1, Duration::from_secs(10))
            .await;
    }
    worker.shutdown().await.unwrap();
    front.shutdown().await.unwrap();
}

backend_suite!(
    an_instance_starting_claims_nothing_of_a_paused_executor,
    a_runtime_on_the_applications_pool,
    a_submit_only_runtime_starts_its_workers,
    instances_started_at_once_on_an_empty_database_all_start,
);

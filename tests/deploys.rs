//! Issue 8 item 7: rolling deploys. Instances announce themselves and their executors'
//! signatures in `async_instance`; a record whose signature this binary does not have is
//! left for a live instance that has it, and decoded here (compatible: runs; else dead
//! naming both signatures) only when no such instance is alive. The rescuer leaves
//! `running` records of executors it does not know alone.
#![allow(clippy::extra_unused_type_parameters)] // every test takes the backend, used or not

#[macro_use]
mod common;

use std::time::Duration;

use async_exec::{async_exec, Backend, Data, Status};
use common::{now_ms, wait_for, Probe, TestDb};

/// This build's signature: `label` and a newer optional parameter.
#[async_exec(type = SaveAsync, name = "deploys::versioned")]
async fn versioned(label: String, extra: Option<u32>, probe: Data<Probe>) {
    probe.record(&format!("{label}:extra={extra:?}"), 1);
}

/// Writes the announcement of another instance of application `tests`, `seen_ago_ms`
/// ago, that runs workers and links `deploys::versioned` with `sign`.
async fn announce_other(db: &TestDb, name: &str, sign: &str, seen_ago_ms: i64) {
    let seen = now_ms() - seen_ago_ms;
    db.exec(&format!(
        "INSERT INTO async_instance (owner, application_name, workers, started, seen, executors) \
         VALUES ('{name}', 'tests', TRUE, {seen}, {seen}, '[{{\"name\":\"deploys::versioned\",\"sign\":\"{sign}\"}}]')"
    ))
    .await;
}

async fn instances_announce_themselves<DB: Backend>(db: TestDb) {
    let first = db.builder().start().await.unwrap();
    let second = db.builder().run_workers(false).start().await.unwrap();
    let listed = second.instances().await.unwrap();
    let names: Vec<&str> = listed.iter().map(|i| i.name.as_str()).collect();
    assert!(names.contains(&first.instance()), "{names:?}");
    assert!(names.contains(&second.instance()), "{names:?}");
    let me = listed.iter().find(|i| i.name == first.instance()).unwrap();
    assert!(me.workers);
    assert!(me.last_seen >= me.started);
    assert!(
        me.executors.iter().any(|e| e.name == "deploys::versioned"),
        "{:?}",
        me.executors
    );
    let submitter = listed.iter().find(|i| i.name == second.instance()).unwrap();
    assert!(!submitter.workers, "a submit-only instance says so");
    first.shutdown().await.unwrap();
    let after: Vec<String> = second
        .instances()
        .await
        .unwrap()
        .into_iter()
        .map(|i| i.name)
        .collect();
    assert!(
        !after.iter().any(|n| n == first.instance()),
        "a stopped instance removes its announcement: {after:?}"
    );
    second.shutdown().await.unwrap();
}

async fn a_record_of_another_signature_waits_for_the_instance_that_has_it<DB: Backend>(db: TestDb) {
    // Migrate first, so that the announcement of the newer instance can be written.
    db.builder()
        .start()
        .await
        .unwrap()
        .shutdown()
        .await
        .unwrap();
    announce_other(&db, "newer@1:0001", "00000000000000aa", 0).await;
    let rt = db
        .builder()
        .stale_after(Duration::from_millis(1))
        .lease(Duration::from_secs(2))
        .heartbeat_interval(Duration::from_millis(100))
        .start()
        .await
        .unwrap();
    let id = db
        .insert_raw(
            "deploys::versioned",
            "00000000000000aa",
            r#"{"label":"v2"}"#,
        )
        .await;
    tokio::time::sleep(Duration::from_millis(20)).await;
    assert_eq!(rt.compensator().run_once().await.unwrap().started, 0);
    let record = rt.get(id).await.unwrap().unwrap();
    assert_eq!(record.status, Status::Init, "left for the newer instance");
    assert_eq!(record.exec_count, 0);
    // The newer instance is gone (not seen for longer than the lease): decoded here, and
    // compatible (the newer build lacked `extra`), so it runs.
    db.exec("UPDATE async_instance SET seen = seen - 3600000 WHERE owner = 'newer@1:0001'")
        .await;
    let probe = rt.data::<Probe>().unwrap();
    wait_for(|| async {
        let _ = rt.compensator().run_once().await;
        probe.runs("v2:extra=None") == 1
    })
    .await;
    rt.shutdown().await.unwrap();
}

/// Issue 18 item 5: a newer instance announces itself after this one last read the live
/// instances, and writes a record at once: this instance's skip list does not know the
/// newer signature yet, so its claim takes the record; it must read the live instances
/// again before running it, and hand it back (its attempt not counted) to the instance
/// that has the signature.
async fn a_record_written_just_after_a_newer_instance_announced_itself_is_left_to_it<
    DB: Backend,
>(
    db: TestDb,
) {
    let rt = db
        .builder()
        .stale_after(Duration::from_millis(1))
        .lease(Duration::from_secs(30))
        .heartbeat_interval(Duration::from_secs(10))
        .start()
        .await
        .unwrap();
    // The skip list was read at the start; the next read is 10 s away.
    announce_other(&db, "newer@1:0004", "00000000000000cc", 0).await;
    let id = db
        .insert_raw(
            "deploys::versioned",
            "00000000000000cc",
            r#"{"label":"v3"}"#,
        )
        .await;
    tokio::time::sleep(Duration::from_millis(20)).await;
    rt.compensator().run_once().await.unwrap();
    rt.wait_idle().await;
    let probe = rt.data::<Probe>().unwrap();
    assert_eq!(probe.runs("v3:extra=None"), 0, "an older instance ran it");
    let record = rt.get(id).await.unwrap().unwrap();
    assert_eq!(record.status, Status::Init, "left for the newer instance");
    assert_eq!(
        record.exec_count, 0,
        "no attempt counted for a claim handed back"
    );
    // Claimed again by the next sweep? No: the list read for the claim says who has it.
    rt.compensator().run_once().await.unwrap();
    rt.wait_idle().await;
    assert_eq!(probe.runs("v3:extra=None"), 0);
    // The newer instance is gone: this one runs it (compatible) once its next read of the
    // live instances (every heartbeat interval, 10 s) says so.
    db.exec("UPDATE async_instance SET seen = seen - 3600000 WHERE owner = 'newer@1:0004'")
        .await;
    let deadline = std::time::Instant::now() + Duration::from_secs(15);
    while probe.runs("v3:extra=None") == 0 {
        assert!(
            std::time::Instant::now() < deadline,
            "not run 15 s after the newer instance went"
        );
        let _ = rt.compensator().run_once().await;
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(probe.runs("v3:extra=None"), 1);
    rt.shutdown().await.unwrap();
}

async fn a_submit_only_instance_does_not_hold_records_back<DB: Backend>(db: TestDb) {
    db.builder()
        .start()
        .await
        .unwrap()
        .shutdown()
        .await
        .unwrap();
    db.exec(
        "INSERT INTO async_instance (owner, application_name, workers, started, seen, executors) \
         VALUES ('front@1:0002', 'tests', FALSE, 0, 0, '[]')",
    )
    .await;
    announce_other(&db, "gone@1:0003", "00000000000000bb", 3_600_000).await;
    db.exec(&format!(
        "UPDATE async_instance SET seen = {}, workers = FALSE WHERE owner = 'gone@1:0003'",
        now_ms()
    ))
    .await;
    let rt = db
        .builder()
        .stale_after(Duration::from_millis(1))
        .start()
        .await
        .unwrap();
    let id = db
        .insert_raw("deploys::versioned", "00000000000000bb", r#"{"label":7}"#)
        .await;
    tokio::time::sleep(Duration::from_millis(20)).await;
    rt.compensator().run_once().await.unwrap();
    rt.wait_idle().await;
    let record = rt.get(id).await.unwrap().unwrap();
    assert_eq!(
        record.status,
        Status::Dead,
        "incompatible, and no worker has its signature"
    );
    let error = record.last_error.unwrap();
    assert!(
        error.contains("00000000000000bb"),
        "names the stored signature: {error}"
    );
    rt.shutdown().await.unwrap();
}

async fn the_rescuer_leaves_running_records_of_unknown_executors_alone<DB: Backend>(db: TestDb) {
    let rt = db.builder().start().await.unwrap();
    let id = db
        .insert_raw("other_service::job", "0123456789abcdef", "{}")
        .await;
    db.exec(&format!(
        "UPDATE async_req SET status = 'running', exec_count = 1, lease_owner = 'ghost', \
         lease_until = 1 WHERE id = {id}"
    ))
    .await;
    let report = rt.rescuer().run_once().await.unwrap();
    assert_eq!(report, Default::default());
    let record = rt.get(id).await.unwrap().unwrap();
    assert_eq!(record.status, Status::Running);
    rt.shutdown().await.unwrap();
}

backend_suite!(
    instances_announce_themselves,
    a_record_of_another_signature_waits_for_the_instance_that_has_it,
    a_record_written_just_after_a_newer_instance_announced_itself_is_left_to_it,
    a_submit_only_instance_does_not_hold_records_back,
    the_rescuer_leaves_running_records_of_unknown_executors_alone,
);

/// PostgreSQL and MariaDB only: they announce on a connection of their own.
mod busy_pool {
    use super::*;
    use common::Kind;

    /// Issue 18 item 5: an instance whose pool is taken (the application's transactions hold
    /// every connection for longer than a lease) still announces itself, on a connection of
    /// its own: it does not look gone to the others.
    #[cfg_attr(
        not(any(async_exec_test_postgres, async_exec_test_mysql)),
        allow(dead_code)
    )]
    async fn a_busy_pool_does_not_make_a_live_instance_look_gone(db: TestDb) {
        let rt = db
            .builder()
            .max_connections(2)
            .lease(Duration::from_secs(2))
            .heartbeat_interval(Duration::from_millis(200))
            .start()
            .await
            .unwrap();
        let held: Box<dyn Send> = match db.kind {
            Kind::Postgres => Box::new((
                rt.begin::<sqlx::Postgres>().await.unwrap(),
                rt.begin::<sqlx::Postgres>().await.unwrap(),
            )),
            Kind::MySql => Box::new((
                rt.begin::<sqlx::MySql>().await.unwrap(),
                rt.begin::<sqlx::MySql>().await.unwrap(),
            )),
            Kind::Sqlite => unreachable!("a network suite"),
        };
        tokio::time::sleep(Duration::from_millis(2_500)).await;
        let recently = now_ms() - 1_000;
        assert_eq!(
            db.count(&format!(
                "async_instance WHERE owner = '{}' AND seen >= {recently}",
                rt.instance()
            ))
            .await,
            1,
            "the instance stopped announcing itself while its pool was busy"
        );
        drop(held);
        rt.shutdown().await.unwrap();
    }

    network_suite!(a_busy_pool_does_not_make_a_live_instance_look_gone);
}

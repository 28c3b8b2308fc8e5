//! Issue 9: `Runtime::health` and the `/health` route, on every backend: a running
//! runtime is ready with every part alive; an old due backlog degrades it (delayed
//! requests and other applications' do not count); a runtime shut down is down, and the
//! route answers 503; a database that stops answering (PostgreSQL, MariaDB, through a
//! proxy) is reported within the probe's timeout.

#![allow(clippy::extra_unused_type_parameters)] // every test takes the backend, used or not

#[macro_use]
mod common;

use std::time::{Duration, Instant};

use async_exec::{HealthStatus, HEALTH_PROBE_TIMEOUT};
use common::{now_ms, TestDb};

/// Inserts an `init` record of an executor no runtime here knows, due at `run_at`.
async fn waiting(db: &TestDb, application: &str, run_at: i64) {
    db.exec(&format!(
        "INSERT INTO async_req (application_name, executor, sign, strategy, status, exec_count, \
         max_attempts, param_json, remark, priority, run_at, create_time, update_time) \
         VALUES ('{application}', 'health::elsewhere', '0', 'SaveAsync', 'init', 0, 5, '{{}}', '', 0, \
         {run_at}, {run_at}, {run_at})"
    ))
    .await;
}

const PARTS: [&str; 12] = [
    "completer",
    "clock",
    "presence",
    "producer",
    "retrier",
    "compensator",
    "retention",
    "heartbeat",
    "queue sampler",
    "flow history",
    "stops",
    "control",
];

/// A running runtime: ok, ready, every part alive and none stale, nothing waiting.
async fn a_running_runtime_is_ready_with_every_part_alive<DB: async_exec::Backend>(db: TestDb) {
    let rt = db.builder().start().await.unwrap();
    let health = rt.health().await;
    assert_eq!(health.status, HealthStatus::Ok, "{health:#?}");
    assert!(health.is_ready());
    assert!(health.store.reachable && health.store.error.is_none());
    assert_eq!(health.instance, rt.instance());
    let mut names: Vec<&str> = health.parts.iter().map(|p| p.name.as_str()).collect();
    names.sort();
    let mut expected = PARTS.to_vec();
    // The quotas' recount (issue 30) runs where a call reserves a place in a statement
    // of its own: PostgreSQL and MySQL/MariaDB (SQLite counts in the call's transaction).
    if db.kind != common::Kind::Sqlite {
        expected.push("quotas");
    }
    expected.sort();
    assert_eq!(names, expected);
    assert!(
        health.parts.iter().all(|p| p.alive && !p.stale),
        "{health:#?}"
    );
    assert!(health.backlog.checked);
    assert_eq!(health.backlog.oldest_due_age_ms, None);
    let json = serde_json::to_value(&health).unwrap();
    assert_eq!(json["status"], "ok");
    assert_eq!(json["store"]["reachable"], true);
    rt.shutdown().await.unwrap();
}

/// A due request waiting longer than the threshold degrades the report (still ready); a
/// request due later, and another application's old one, do not.
async fn an_old_backlog_degrades_and_only_due_requests_of_this_application_count<
    DB: async_exec::Backend,
>(
    db: TestDb,
) {
    let rt = db
        .builder()
        .run_workers(false)
        .health_backlog_threshold(Duration::from_secs(60))
        .start()
        .await
        .unwrap();
    let now = now_ms();
    waiting(&db, "tests", now + 3_600_000).await; // delayed: not due yet
    waiting(&db, "another-app", now - 3_600_000).await;
    let health = rt.health().await;
    assert_eq!(health.status, HealthStatus::Ok, "{health:#?}");
    assert_eq!(health.backlog.oldest_due_age_ms, None);
    assert_eq!(health.backlog.threshold_ms, 60_000);

    waiting(&db, "tests", now - 30_000).await;
    let health = rt.health().await;
    let age = health
        .backlog
        .oldest_due_age_ms
        .expect("a due request waits");
    assert!((30_000..60_000).contains(&age), "{health:#?}");
    assert_eq!(health.status, HealthStatus::Ok);

    waiting(&db, "tests", now - 600_000).await;
    let health = rt.health().await;
    assert!(health.backlog.oldest_due_age_ms.unwrap() >= 600_000);
    assert!(health.backlog.over_threshold);
    assert_eq!(health.status, HealthStatus::Degraded, "{health:#?}");
    assert!(
        health.is_ready(),
        "a backlog degrades, it does not take the instance down"
    );
    rt.shutdown().await.unwrap();
}

/// After shutdown: down, not ready, every part ended.
async fn a_runtime_shut_down_is_not_ready<DB: async_exec::Backend>(db: TestDb) {
    let rt = db.builder().start().await.unwrap();
    rt.shutdown().await.unwrap();
    let health = rt.health().await;
    assert_eq!(health.status, HealthStatus::Down, "{health:#?}");
    assert!(!health.is_ready());
    assert!(health.shut_down);
    assert!(health.parts.iter().all(|p| !p.alive), "{health:#?}");
}

/// The route answers the report: 200 while ready (also under the console's path,
/// without a login), 503 after shutdown.
#[cfg(feature = "console")]
async fn the_health_route_answers_200_when_ready_and_503_when_not<DB: async_exec::Backend>(
    db: TestDb,
) {
    use axum::body::Body;
    use axum::http::{Request, StatusCode};
    use http_body_util::BodyExt;
    use tower::ServiceExt;

    let rt = db.builder().start().await.unwrap();
    let app = axum::Router::new()
        .merge(async_exec::console::health_router(&rt))
        .merge(common::console::mounted(&rt));
    let get = |path: &'static str| {
        let app = app.clone();
        async move {
            let request = Request::get(path).body(Body::empty()).unwrap();
            let response = app.oneshot(request).await.unwrap();
            let status = response.status();
            let body = response.into_body().collect().await.unwrap().to_bytes();
            let json: serde_json::Value = serde_json::from_slice(&body).unwrap();
            (status, json)
        }
    };
    let (status, json) = get("/health").await;
    assert_eq!(status, StatusCode::OK, "{json}");
    assert_eq!(json["status"], "ok");
    assert_eq!(json["instance"], rt.instance());
    let under_console = format!("{}/health", common::console::MOUNT);
    let under_console: &'static str = Box::leak(under_console.into_boxed_str());
    let (status, json) = get(under_console).await;
    assert_eq!(status, StatusCode::OK, "no login needed: {json}");

    rt.shutdown().await.unwrap();
    let (status, json) = get("/health").await;
    assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE);
    assert_eq!(json["status"], "down");
    assert_eq!(json["shut_down"], true);
}

#[cfg(not(feature = "console"))]
async fn the_health_route_answers_200_when_ready_and_503_when_not<DB: async_exec::Backend>(
    _db: TestDb,
) {
}

backend_suite!(
    a_running_runtime_is_ready_with_every_part_alive,
    an_old_backlog_degrades_and_only_due_requests_of_this_application_count,
    a_runtime_shut_down_is_not_ready,
    the_health_route_answers_200_when_ready_and_503_when_not,
);

/// A database that stops answering (every byte held by a proxy) is reported unreachable
/// within the probe's timeout, and the report is down; when it answers again, ready.
// Without a server URL set, the suites are ignored and the test below unused.
#[cfg_attr(
    not(any(async_exec_test_postgres, async_exec_test_mysql)),
    allow(dead_code, unused_imports)
)]
mod network {
    use super::*;
    use common::proxy::Proxy;

    pub(super) async fn a_database_that_does_not_answer_is_reported_within_the_timeout(db: TestDb) {
        let (proxy, url) = Proxy::for_url(&db.url).await;
        let rt = db.builder().database_url(&url).start().await.unwrap();
        assert!(rt.health().await.is_ready());
        proxy.stall();
        let began = Instant::now();
        let health = rt.health().await;
        let took = began.elapsed();
        assert_eq!(health.status, HealthStatus::Down, "{health:#?}");
        assert!(!health.store.reachable);
        assert!(!health.backlog.checked);
        let error = health.store.error.as_deref().unwrap();
        assert!(error.contains("no answer within"), "{error}");
        assert!(
            took >= HEALTH_PROBE_TIMEOUT && took < HEALTH_PROBE_TIMEOUT * 2,
            "{took:?}"
        );
        proxy.restore();
        let deadline = Instant::now() + Duration::from_secs(30);
        while !rt.health().await.is_ready() {
            assert!(
                Instant::now() < deadline,
                "not ready again after the database came back"
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        rt.abort();
    }

    network_suite!(a_database_that_does_not_answer_is_reported_within_the_timeout);
}

//! The wishes service (`examples/wishes.rs`) over HTTP, on every backend: its router
//! (`examples/wishes/service.rs`, included here) sent requests with `oneshot`. Create, an
//! idempotent repeat, a wish granted through a failed first attempt, a FAILED wish and its
//! retry, 409 on a retry that is not allowed, 400 naming the field, 404, `/metrics`.
#![cfg(feature = "console")]
#![allow(clippy::extra_unused_type_parameters)] // every test takes the backend, used or not

#[macro_use]
mod common;

#[path = "../examples/wishes/service.rs"]
#[allow(dead_code)]
mod service;

use std::sync::OnceLock;
use std::time::Duration;

use async_exec::{Backend, Runtime};
use axum::body::Body;
use axum::http::{header, Request, StatusCode};
use axum::Router;
use common::{Kind, TestDb};
use http_body_util::BodyExt;
use metrics_exporter_prometheus::{PrometheusBuilder, PrometheusHandle};
use serde_json::{json, Value};
use tower::ServiceExt;

/// The recorder is global: installed once for the test binary.
fn metrics() -> PrometheusHandle {
    static HANDLE: OnceLock<PrometheusHandle> = OnceLock::new();
    HANDLE
        .get_or_init(|| PrometheusBuilder::new().install_recorder().unwrap())
        .clone()
}

async fn start(db: &TestDb) -> (Runtime, Router) {
    let rt = db
        .builder()
        .application_name("wishes")
        .delete_on_success(false)
        .log_success(true)
        .retry_interval(Duration::from_millis(100))
        .retry_base_delay(Duration::from_millis(50))
        .retry_max_delay(Duration::from_millis(200))
        .queue_sample_interval(Duration::from_millis(100))
        .start()
        .await
        .unwrap();
    let backend = match db.kind {
        Kind::Sqlite => service::Backend::Sqlite,
        Kind::Postgres => service::Backend::Postgres,
        Kind::MySql => service::Backend::MySql,
    };
    assert_eq!(service::Backend::of_url(&db.url).unwrap(), backend);
    let app = service::Service::new(rt.clone(), backend, metrics())
        .await
        .unwrap()
        .router();
    (rt, app)
}

async fn send(app: &Router, method: &str, path: &str, body: Option<&str>) -> (StatusCode, String) {
    let mut request = Request::builder().method(method).uri(path);
    if body.is_some() {
        request = request.header(header::CONTENT_TYPE, "application/json");
    }
    let request = request
        .body(body.map_or_else(Body::empty, |b| Body::from(b.to_string())))
        .unwrap();
    let response = app.clone().oneshot(request).await.unwrap();
    let status = response.status();
    let bytes = response.into_body().collect().await.unwrap().to_bytes();
    (status, String::from_utf8(bytes.to_vec()).unwrap())
}

async fn send_json(
    app: &Router,
    method: &str,
    path: &str,
    body: Option<Value>,
) -> (StatusCode, Value) {
    let text = body.map(|b| b.to_string());
    let (status, reply) = send(app, method, path, text.as_deref()).await;
    let value = serde_json::from_str(&reply).unwrap_or_else(|e| panic!("{e}: {reply}"));
    (status, value)
}

/// Polls `GET /api/wishes/{id}` until its status is `want` (at most 10 s).
async fn wait_status(app: &Router, request_id: &str, want: &str) -> Value {
    let mut last = Value::Null;
    for _ in 0..200 {
        let (status, wish) =
            send_json(app, "GET", &format!("/api/wishes/{request_id}"), None).await;
        assert_eq!(status, StatusCode::OK, "{wish}");
        if wish["status"] == want {
            return wish;
        }
        last = wish;
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    panic!("wish {request_id} did not become {want}: {last}");
}

/// A `requestId` with this prefix whose first attempt fails (or not).
fn request_id(prefix: &str, fails_first: bool) -> String {
    (0..)
        .map(|i| format!("{prefix}-{i}"))
        .find(|id| service::first_attempt_fails(id) == fails_first)
        .unwrap()
}

async fn create_repeat_and_grant<DB: Backend>(db: TestDb) {
    let (rt, app) = start(&db).await;
    let id = request_id("lamp", false);
    let body = json!({"requestId": id, "wish": "a flying carpet"});
    let (status, created) = send_json(&app, "POST", "/api/wishes", Some(body.clone())).await;
    assert_eq!(status, StatusCode::ACCEPTED, "{created}");
    assert_eq!(created["requestId"], id.as_str());
    assert_eq!(created["wish"], "a flying carpet");
    assert!(
        ["PENDING", "PROCESSING", "SUCCESS"].contains(&created["status"].as_str().unwrap()),
        "{created}"
    );
    // The repeat returns the same wish and adds nothing.
    let (status, repeated) = send_json(&app, "POST", "/api/wishes", Some(body)).await;
    assert_eq!(status, StatusCode::OK, "{repeated}");
    assert_eq!(repeated["requestId"], id.as_str());
    let granted = wait_status(&app, &id, "SUCCESS").await;
    assert_eq!(granted["attempts"], 1, "{granted}");
    assert_eq!(granted["history"][0]["outcome"], "success", "{granted}");
    assert_eq!(db.count("wishes").await, 1);
    assert_eq!(db.count("async_req").await, 1);
    // The same requestId with another wish is refused.
    let (status, other) = send_json(
        &app,
        "POST",
        "/api/wishes",
        Some(json!({"requestId": id, "wish": "a palace"})),
    )
    .await;
    assert_eq!(status, StatusCode::CONFLICT, "{other}");
    assert_eq!(other["field"], "requestId");
    rt.shutdown().await.unwrap();
}

async fn a_failed_first_attempt_is_retried_to_success<DB: Backend>(db: TestDb) {
    let (rt, app) = start(&db).await;
    let id = request_id("rub", true);
    let (status, _) = send_json(
        &app,
        "POST",
        "/api/wishes",
        Some(json!({"requestId": id, "wish": "a cup of tea"})),
    )
    .await;
    assert_eq!(status, StatusCode::ACCEPTED);
    let granted = wait_status(&app, &id, "SUCCESS").await;
    assert_eq!(granted["attempts"], 2, "{granted}");
    assert_eq!(granted["history"][0]["outcome"], "error", "{granted}");
    assert_eq!(granted["lastError"], Value::Null, "{granted}");
    assert!(
        granted["history"][0]["error"]
            .as_str()
            .unwrap()
            .contains("still cold"),
        "{granted}"
    );
    assert_eq!(granted["history"][1]["outcome"], "success", "{granted}");
    // A granted wish cannot be retried.
    let (status, refused) = send_json(&app, "POST", &format!("/api/wishes/{id}/retry"), None).await;
    assert_eq!(status, StatusCode::CONFLICT, "{refused}");
    assert!(
        refused["error"].as_str().unwrap().contains("SUCCESS"),
        "{refused}"
    );
    rt.shutdown().await.unwrap();
}

async fn a_failed_wish_is_retried_on_request<DB: Backend>(db: TestDb) {
    let (rt, app) = start(&db).await;
    let id = request_id("greedy", false);
    let (status, _) = send_json(
        &app,
        "POST",
        "/api/wishes",
        Some(json!({"requestId": id, "wish": "three More Wishes"})),
    )
    .await;
    assert_eq!(status, StatusCode::ACCEPTED);
    let failed = wait_status(&app, &id, "FAILED").await;
    assert_eq!(failed["attempts"], 1, "{failed}");
    assert!(
        failed["lastError"]
            .as_str()
            .unwrap()
            .contains("never grants"),
        "{failed}"
    );
    let (status, retried) = send_json(&app, "POST", &format!("/api/wishes/{id}/retry"), None).await;
    assert_eq!(status, StatusCode::ACCEPTED, "{retried}");
    assert_ne!(retried["status"], "FAILED", "{retried}");
    // The genie refuses again: a second attempt is logged, and it is FAILED again.
    let mut again = Value::Null;
    for _ in 0..200 {
        again = wait_status(&app, &id, "FAILED").await;
        if again["attempts"] == 2 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(again["attempts"], 2, "{again}");
    // A wish that is not FAILED cannot be retried: 409 with a JSON body.
    let waiting = request_id("patient", false);
    send_json(
        &app,
        "POST",
        "/api/wishes",
        Some(json!({"requestId": waiting, "wish": "a quiet evening"})),
    )
    .await;
    wait_status(&app, &waiting, "SUCCESS").await;
    let (status, conflict) =
        send_json(&app, "POST", &format!("/api/wishes/{waiting}/retry"), None).await;
    assert_eq!(status, StatusCode::CONFLICT, "{conflict}");
    assert!(
        conflict["error"]
            .as_str()
            .unwrap()
            .contains("only a FAILED wish can be retried"),
        "{conflict}"
    );
    rt.shutdown().await.unwrap();
}

async fn bad_requests_name_the_field_and_unknown_ids_are_404<DB: Backend>(db: TestDb) {
    let (rt, app) = start(&db).await;
    let long_id = "x".repeat(service::MAX_REQUEST_ID + 1);
    let long_wish = "w".repeat(service::MAX_WISH + 1);
    for (body, field) in [
        ("not json".to_string(), "body"),
        (json!({"wish": "gold"}).to_string(), "requestId"),
        (
            json!({"requestId": "", "wish": "gold"}).to_string(),
            "requestId",
        ),
        (
            json!({"requestId": 7, "wish": "gold"}).to_string(),
            "requestId",
        ),
        (
            json!({"requestId": "a b'; --", "wish": "gold"}).to_string(),
            "requestId",
        ),
        (
            json!({"requestId": long_id, "wish": "gold"}).to_string(),
            "requestId",
        ),
        (json!({"requestId": "ok-1"}).to_string(), "wish"),
        (
            json!({"requestId": "ok-1", "wish": "   "}).to_string(),
            "wish",
        ),
        (
            json!({"requestId": "ok-1", "wish": long_wish}).to_string(),
            "wish",
        ),
    ] {
        let (status, reply) = send(&app, "POST", "/api/wishes", Some(&body)).await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{body}: {reply}");
        let reply: Value = serde_json::from_str(&reply).unwrap();
        assert_eq!(reply["field"], field, "{body}: {reply}");
        assert!(!reply["error"].as_str().unwrap().is_empty());
    }
    assert_eq!(db.count("wishes").await, 0);
    assert_eq!(db.count("async_req").await, 0);
    for (method, path) in [
        ("GET", "/api/wishes/nobody-asked"),
        ("POST", "/api/wishes/nobody-asked/retry"),
    ] {
        let (status, reply) = send_json(&app, method, path, None).await;
        assert_eq!(status, StatusCode::NOT_FOUND, "{path}: {reply}");
        assert!(reply["error"].as_str().unwrap().contains("nobody-asked"));
    }
    let (status, reply) = send_json(&app, "GET", "/api/wishes/bad%20id", None).await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{reply}");
    assert_eq!(reply["field"], "requestId");
    rt.shutdown().await.unwrap();
}

async fn metrics_are_prometheus_text<DB: Backend>(db: TestDb) {
    let (rt, app) = start(&db).await;
    let id = request_id("counted", false);
    send_json(
        &app,
        "POST",
        "/api/wishes",
        Some(json!({"requestId": id, "wish": "a counter"})),
    )
    .await;
    wait_status(&app, &id, "SUCCESS").await;
    let (status, text) = send(&app, "GET", "/metrics", None).await;
    assert_eq!(status, StatusCode::OK);
    for name in ["wishes_submitted_total", "wishes_granted_total"] {
        assert!(
            text.lines()
                .any(|line| line.starts_with(&format!("{name} "))),
            "{name} missing: {text}"
        );
    }
    // The runtime's own, labelled (the queue gauges once sampled, within a second).
    let runtime_names = [
        "async_exec_submitted_total",
        "async_exec_started_total",
        "async_exec_finished_total",
        "async_exec_duration_seconds",
        "async_exec_start_latency_seconds",
        "async_exec_leases_total",
        "async_exec_sweep_records_total",
        "async_exec_queue_depth",
        "async_exec_oldest_waiting_seconds",
    ];
    let mut missing = Vec::new();
    for _ in 0..50 {
        let (_, text) = send(&app, "GET", "/metrics", None).await;
        missing = runtime_names
            .iter()
            .filter(|name| {
                !text
                    .lines()
                    .any(|line| line.starts_with(&format!("{name}{{")))
            })
            .collect();
        if missing.is_empty() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert!(missing.is_empty(), "missing from /metrics: {missing:?}");
    rt.shutdown().await.unwrap();
}

backend_suite!(
    create_repeat_and_grant,
    a_failed_first_attempt_is_retried_to_success,
    a_failed_wish_is_retried_on_request,
    bad_requests_name_the_field_and_unknown_ids_are_404,
    metrics_are_prometheus_text,
);

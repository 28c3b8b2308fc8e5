//! Issue 9: the operations console over HTTP (`tower::ServiceExt::oneshot` on the router
//! mounted under `/ops/console`), on every backend: who gets in. Logins and their limit,
//! the session cookie, roles, CSRF tokens, bearer tokens, every page and API route, the
//! OpenAPI document, and the refusal to start open on a public address. What operators
//! do is in `console_actions.rs`.
#![cfg(feature = "console")]
#![allow(clippy::extra_unused_type_parameters)] // every test takes the backend, used or not

#[macro_use]
mod common;

use std::net::SocketAddr;

use async_exec::console::{self, ConsoleConfig, Role};
use async_exec::{async_exec, Backend, Context, Data, Status, TestMode};
use axum::body::Body;
use axum::extract::ConnectInfo;
use axum::http::{header, StatusCode};
use axum::Router;
use common::console::*;
use common::{wait_for, Probe, TestDb};
use serde_json::json;

#[async_exec(type = SaveAsync, name = "console::doomed", max_attempts = 1)]
async fn doomed(label: String) -> anyhow::Result<()> {
    anyhow::bail!("boom: {label}")
}

#[async_exec(type = SaveAsync, name = "console::fine")]
async fn fine(label: String, probe: Data<Probe>) {
    probe.record(&label, 1);
}

/// Fails its first attempt, then succeeds.
#[async_exec(type = SaveAsync, name = "console::second_time", max_attempts = 3)]
async fn second_time(ctx: Context) -> anyhow::Result<()> {
    if ctx.attempt() == 1 {
        anyhow::bail!("flaky: the first attempt fails");
    }
    Ok(())
}

/// A request that succeeded after a failure shows that failure in its attempts, not as
/// its last error (a success clears `last_error`, issue 18 item 11); attempts that took
/// under a second show milliseconds.
async fn a_succeeded_request_shows_its_earlier_error_as_history<DB: Backend>(db: TestDb) {
    let rt = db
        .builder()
        .test_mode(TestMode::Hold)
        .delete_on_success(false)
        .log_success(true)
        .start()
        .await
        .unwrap();
    let id = second_time().on(&rt).await.unwrap().id.unwrap();
    let report = rt.run_due().await.unwrap();
    assert_eq!((report.succeeded, report.failed), (1, 1), "{report:?}");
    let app = mounted(&rt);
    let (cookie, _) = login(&app, "victor", "viewer pass").await;
    let detail = get(&app, &format!("/requests/{id}"), Auth::Cookie(&cookie)).await;
    assert_eq!(detail.status, StatusCode::OK);
    let body = &detail.body;
    assert!(body.contains(r#"data-status="success""#), "{body}");
    assert!(!body.contains("last error"), "last error");
    assert!(!body.contains(r#"id="request-error""#), "{body}");
    assert!(!body.contains(r#"id="request-earlier-error""#), "{body}");
    let attempts = body.split(r#"id="attempts""#).nth(1).expect("the attempts");
    assert!(
        attempts.contains("flaky: the first attempt fails"),
        "{body}"
    );
    // Both attempts are logged; neither took a second, and none shows as `0s`.
    let took: Vec<&str> = body
        .split("took ")
        .skip(1)
        .map(|rest| rest.split(['<', '\n']).next().unwrap().trim())
        .collect();
    assert_eq!(took.len(), 2, "{body}");
    for t in &took {
        // `<1ms` (escaped `&lt;1ms`) or `12ms`: milliseconds, never `0s`.
        let digits = t.trim_start_matches("&lt;").trim_end_matches("ms");
        assert!(
            t.ends_with("ms") && digits.chars().all(|c| c.is_ascii_digit()),
            "took {t}"
        );
    }
    // A failed request still says `last error`.
    let failed = doomed("still failing".into())
        .on(&rt)
        .await
        .unwrap()
        .id
        .unwrap();
    rt.drain().await.unwrap();
    let detail = get(&app, &format!("/requests/{failed}"), Auth::Cookie(&cookie)).await;
    assert!(detail.body.contains("last error"), "{}", detail.body);
    assert!(
        detail.body.contains(r#"id="request-error""#),
        "{}",
        detail.body
    );
    rt.shutdown().await.unwrap();
}

async fn unauthenticated_requests_are_refused<DB: Backend>(db: TestDb) {
    let rt = db.builder().start().await.unwrap();
    let app = mounted(&rt);
    for page in [
        "",
        "/requests",
        "/requests/1",
        "/executors",
        "/instances",
        "/audit",
    ] {
        let reply = get(&app, page, Auth::None).await;
        assert_eq!(reply.status, StatusCode::SEE_OTHER, "{page}");
        // To the login, which comes back to the page asked for.
        let location = reply.location.unwrap_or_default();
        let back = match page {
            "" => String::new(),
            page => format!("?next={}", page.replace('/', "%2F")),
        };
        assert_eq!(location, format!("/ops/console/login{back}"), "{page}");
    }
    for form in [
        "/actions",
        "/executors/pause",
        "/executors/resume",
        "/logout",
    ] {
        let reply = post_form(&app, form, Auth::None, &[("action", "delete")]).await;
        assert_eq!(reply.status, StatusCode::SEE_OTHER, "{form}");
    }
    for api in [
        "/api/session",
        "/api/overview",
        "/api/requests",
        "/api/requests/1",
        "/api/executors",
        "/api/instances",
        "/api/audit",
        "/api/actions/count?action=delete",
    ] {
        let reply = get(&app, api, Auth::None).await;
        assert_eq!(reply.status, StatusCode::UNAUTHORIZED, "{api}");
        assert!(reply.json()["error"].as_str().unwrap().contains("Bearer"));
    }
    for api in [
        "/api/actions",
        "/api/executors/pause",
        "/api/executors/resume",
    ] {
        let reply = post_json(&app, api, Auth::None, None, json!({})).await;
        assert_eq!(reply.status, StatusCode::UNAUTHORIZED, "{api}");
    }
    let forged = get(
        &app,
        "/api/requests",
        Auth::Cookie("async_exec_console=forged"),
    )
    .await;
    assert_eq!(forged.status, StatusCode::UNAUTHORIZED);
    let wrong_token = get(&app, "/api/requests", Auth::Bearer("not-a-token")).await;
    assert_eq!(wrong_token.status, StatusCode::UNAUTHORIZED);
    // The login page and the stylesheet are served without a login.
    let login_page = get(&app, "/login", Auth::None).await;
    assert_eq!(login_page.status, StatusCode::OK);
    assert!(login_page.body.contains(r#"id="login-user""#));
    assert!(login_page.body.contains(r#"action="/ops/console/login""#));
    let css = get(&app, "/assets/console.css", Auth::None).await;
    assert_eq!(css.status, StatusCode::OK);
    rt.shutdown().await.unwrap();
}

async fn wrong_passwords_are_refused_then_limited<DB: Backend>(db: TestDb) {
    let rt = db.builder().start().await.unwrap();
    let app = mounted(&rt);
    let from = |ip: &str, user: &str, password: &str| {
        let body = serde_urlencoded::to_string([("user", user), ("password", password)]).unwrap();
        let mut request = request("POST", "/login", Auth::None)
            .header(header::CONTENT_TYPE, "application/x-www-form-urlencoded")
            .body(Body::from(body))
            .unwrap();
        let address: SocketAddr = format!("{ip}:40000").parse().unwrap();
        request.extensions_mut().insert(ConnectInfo(address));
        request
    };
    for _ in 0..5 {
        let reply = send(&app, from("10.0.0.1", "alice", "wrong")).await;
        assert_eq!(reply.status, StatusCode::UNAUTHORIZED);
        assert!(reply.body.contains("wrong user name or password"));
        assert!(reply.set_cookie.is_none());
    }
    // Limited per (address, user) pair: that address waits before trying alice again...
    let limited = send(&app, from("10.0.0.1", "alice", "operator pass")).await;
    assert_eq!(limited.status, StatusCode::TOO_MANY_REQUESTS, "the pair");
    assert!(limited.body.contains("wait 1 s"), "{}", limited.body);
    // ...but alice logs in from elsewhere, and others from that address.
    let elsewhere = send(&app, from("10.0.0.2", "alice", "operator pass")).await;
    assert_eq!(
        elsewhere.status,
        StatusCode::SEE_OTHER,
        "{}",
        elsewhere.body
    );
    let same_address = send(&app, from("10.0.0.1", "victor", "viewer pass")).await;
    assert_eq!(same_address.status, StatusCode::SEE_OTHER);
    let unknown_user = send(&app, from("10.0.0.4", "mallory", "operator pass")).await;
    assert_eq!(unknown_user.status, StatusCode::UNAUTHORIZED);
    // The JSON login says the same.
    let api = post_json(
        &app,
        "/api/login",
        Auth::None,
        None,
        json!({"user": "victor", "password": "nope"}),
    )
    .await;
    assert_eq!(api.status, StatusCode::UNAUTHORIZED);
    // Behind a TLS proxy the cookie is `Secure`.
    let mut behind_tls = from("10.0.0.5", "victor", "viewer pass");
    behind_tls
        .headers_mut()
        .insert("x-forwarded-proto", "https".parse().unwrap());
    let cookie = send(&app, behind_tls).await.set_cookie.unwrap();
    assert!(cookie.contains("; Secure"), "{cookie}");
    rt.shutdown().await.unwrap();
}

async fn every_page_renders_and_viewers_cannot_act<DB: Backend>(db: TestDb) {
    let rt = db.builder().start().await.unwrap();
    let dead = doomed("page".into()).on(&rt).await.unwrap().id.unwrap();
    wait_status(&rt, Status::Dead, 1).await;
    let app = mounted(&rt);
    let (cookie, csrf) = login(&app, "victor", "viewer pass").await;
    let auth = Auth::Cookie(&cookie);
    let overview = get(&app, "", auth).await;
    assert_eq!(overview.status, StatusCode::OK);
    for id in [
        "count-dead",
        "chart-hour",
        "chart-day",
        "chart-depth",
        "executor-counts",
    ] {
        assert!(overview.body.contains(&format!(r#"id="{id}""#)), "{id}");
    }
    assert!(overview.body.contains(r#"data-count="1""#));
    assert!(overview.body.contains("<svg"));
    assert_eq!(
        overview.frame_options.as_deref(),
        Some("DENY"),
        "no framing"
    );
    assert!(overview.body.contains(r#"href="/ops/console/requests""#));
    let list = get(&app, "/requests?status=dead", auth).await;
    assert_eq!(list.status, StatusCode::OK);
    assert!(list.body.contains(&format!(r#"data-request-id="{dead}""#)));
    assert!(
        !list.body.contains(r#"id="action-form""#),
        "no actions for viewers"
    );
    let detail = get(&app, &format!("/requests/{dead}"), auth).await;
    assert_eq!(detail.status, StatusCode::OK);
    assert!(detail.body.contains("boom: page"));
    assert!(detail.body.contains(r#"id="attempts""#));
    assert!(
        detail.body.contains(r#"data-outcome="error""#),
        "{}",
        detail.body
    );
    assert!(
        detail.body.contains("&quot;label&quot;: &quot;page&quot;"),
        "pretty JSON"
    );
    let missing = get(&app, "/requests/999999", auth).await;
    assert_eq!(missing.status, StatusCode::NOT_FOUND);
    let executors = get(&app, "/executors", auth).await;
    assert_eq!(executors.status, StatusCode::OK);
    assert!(executors
        .body
        .contains(r#"data-executor="console::doomed""#));
    let instances = get(&app, "/instances", auth).await;
    assert_eq!(instances.status, StatusCode::OK);
    assert!(instances.body.contains(rt.instance()));
    assert_eq!(get(&app, "/audit", auth).await.status, StatusCode::OK);
    // The API, every read.
    for api in [
        "/api/overview",
        "/api/requests?status=dead",
        &format!("/api/requests/{dead}"),
        "/api/executors",
        "/api/instances",
        "/api/audit",
        "/api/actions/count?action=retry&status=dead",
    ] {
        let reply = get(&app, api, auth).await;
        assert_eq!(reply.status, StatusCode::OK, "{api}: {}", reply.body);
    }
    let detail = get(&app, &format!("/api/requests/{dead}"), auth)
        .await
        .json();
    assert_eq!(detail["arguments"]["label"], "page");
    assert_eq!(detail["attempts"][0]["outcome"], "error");
    let counted = get(&app, "/api/actions/count?action=retry&status=dead", auth).await;
    assert_eq!(counted.json()["count"], 1);
    // Viewers are refused every action, CSRF token or not.
    let id = dead.to_string();
    let fields = [
        ("csrf", csrf.as_str()),
        ("action", "retry"),
        ("id", &id),
        ("confirm", "yes"),
    ];
    assert_eq!(
        post_form(&app, "/actions", auth, &fields).await.status,
        StatusCode::FORBIDDEN
    );
    let pause = [("csrf", csrf.as_str()), ("executor", "console::doomed")];
    assert_eq!(
        post_form(&app, "/executors/pause", auth, &pause)
            .await
            .status,
        StatusCode::FORBIDDEN
    );
    let body = json!({"action": "retry", "filter": {"id": dead}, "up_to": 1});
    let api = post_json(&app, "/api/actions", auth, Some(&csrf), body.clone()).await;
    assert_eq!(api.status, StatusCode::FORBIDDEN);
    let api = post_json(
        &app,
        "/api/executors/pause",
        auth,
        Some(&csrf),
        json!({"executor": "x"}),
    )
    .await;
    assert_eq!(api.status, StatusCode::FORBIDDEN);
    let token = post_json(&app, "/api/actions", Auth::Bearer(VIEWER_TOKEN), None, body).await;
    assert_eq!(token.status, StatusCode::FORBIDDEN);
    assert_eq!(
        db.count("async_audit WHERE action NOT LIKE 'login%'").await,
        0,
        "nothing refused is audited"
    );
    assert_eq!(rt.get(dead).await.unwrap().unwrap().status, Status::Dead);
    // Logging out ends the session.
    let out = post_form(&app, "/logout", auth, &[("csrf", csrf.as_str())]).await;
    assert_eq!(out.status, StatusCode::SEE_OTHER);
    assert!(out.set_cookie.unwrap().contains("Max-Age=0"));
    assert_eq!(get(&app, "", auth).await.status, StatusCode::SEE_OTHER);
    rt.shutdown().await.unwrap();
}

async fn actions_without_the_csrf_token_are_refused<DB: Backend>(db: TestDb) {
    let rt = db.builder().start().await.unwrap();
    let dead = doomed("csrf".into()).on(&rt).await.unwrap().id.unwrap();
    wait_status(&rt, Status::Dead, 1).await;
    let app = mounted(&rt);
    let (cookie, csrf) = login(&app, "alice", "operator pass").await;
    let auth = Auth::Cookie(&cookie);
    let id = dead.to_string();
    for token in [None, Some("0000"), Some("")] {
        let mut fields = vec![
            ("action", "delete"),
            ("id", id.as_str()),
            ("confirm", "yes"),
        ];
        if let Some(token) = token {
            fields.push(("csrf", token));
        }
        let reply = post_form(&app, "/actions", auth, &fields).await;
        assert_eq!(reply.status, StatusCode::FORBIDDEN, "{token:?}");
        assert!(reply.body.contains("CSRF"));
    }
    let pause = post_form(
        &app,
        "/executors/pause",
        auth,
        &[("executor", "console::doomed")],
    )
    .await;
    assert_eq!(pause.status, StatusCode::FORBIDDEN);
    let body = json!({"action": "delete", "filter": {"id": dead}, "up_to": 1});
    for token in [None, Some("wrong")] {
        let reply = post_json(&app, "/api/actions", auth, token, body.clone()).await;
        assert_eq!(reply.status, StatusCode::FORBIDDEN, "{token:?}");
    }
    let logout = post_form(&app, "/logout", auth, &[]).await;
    assert_eq!(logout.status, StatusCode::FORBIDDEN);
    assert!(rt.get(dead).await.unwrap().is_some(), "nothing was deleted");
    assert_eq!(
        db.count("async_audit WHERE action NOT LIKE 'login%'").await,
        0
    );
    // With the token, the same delete goes through.
    let fields = [
        ("csrf", csrf.as_str()),
        ("action", "delete"),
        ("id", &id),
        ("confirm", "yes"),
        ("up_to", "1"),
    ];
    let reply = post_form(&app, "/actions", auth, &fields).await;
    assert_eq!(reply.status, StatusCode::SEE_OTHER, "{}", reply.body);
    assert!(rt.get(dead).await.unwrap().is_none());
    rt.shutdown().await.unwrap();
}

async fn bearer_tokens_and_the_openapi_document<DB: Backend>(db: TestDb) {
    let rt = db.builder().start().await.unwrap();
    let dead = doomed("token".into()).on(&rt).await.unwrap().id.unwrap();
    for i in 0..3 {
        fine(format!("ok {i}")).on(&rt).await.unwrap();
    }
    wait_status(&rt, Status::Dead, 1).await;
    let app = mounted(&rt);
    let viewer = get(
        &app,
        "/api/requests?status=dead",
        Auth::Bearer(VIEWER_TOKEN),
    )
    .await;
    assert_eq!(viewer.status, StatusCode::OK);
    assert_eq!(viewer.json()["requests"][0]["id"], dead);
    let session = get(&app, "/api/session", Auth::Bearer(OPERATOR_TOKEN))
        .await
        .json();
    assert_eq!(
        (session["user"].as_str(), session["role"].as_str()),
        (Some("ops-bot"), Some("operator"))
    );
    assert!(
        session["csrf"].is_null(),
        "a bearer token needs no CSRF token"
    );
    let body = json!({"action": "retry", "filter": {"status": "dead"}, "up_to": 1});
    let retried = post_json(
        &app,
        "/api/actions",
        Auth::Bearer(OPERATOR_TOKEN),
        None,
        body,
    )
    .await;
    assert_eq!(retried.status, StatusCode::OK, "{}", retried.body);
    assert_eq!(retried.json()["changed"], 1);
    assert_eq!(rt.audit_trail(1).await.unwrap()[0].actor, "ops-bot");
    // Finished counts reach async_stat although successes are deleted.
    wait_for(|| async {
        let overview = get(&app, "/api/overview", Auth::Bearer(VIEWER_TOKEN))
            .await
            .json();
        let finished = overview["finished_per_minute"].as_array().unwrap().clone();
        let ok: i64 = finished
            .iter()
            .map(|m| m["succeeded"].as_i64().unwrap())
            .sum();
        ok == 3
    })
    .await;
    let doc = get(&app, "/api/openapi.json", Auth::None).await;
    assert_eq!(doc.status, StatusCode::OK);
    let doc = doc.json();
    assert_eq!(doc["servers"][0]["url"], MOUNT);
    for path in [
        "/api/requests",
        "/api/requests/{id}",
        "/api/actions",
        "/api/actions/count",
        "/api/executors/pause",
        "/api/overview",
        "/api/instances",
        "/api/audit",
        "/api/policies",
    ] {
        assert!(doc["paths"][path].is_object(), "{path} documented");
    }
    assert!(doc["components"]["securitySchemes"]["bearer"].is_object());
    assert!(doc["components"]["schemas"]["Request"].is_object());
    rt.shutdown().await.unwrap();
}

async fn the_console_refuses_to_start_open_on_a_public_address<DB: Backend>(db: TestDb) {
    let rt = db.builder().start().await.unwrap();
    let public = ConsoleConfig::new().listen("0.0.0.0:8080".parse().unwrap());
    let error = console::router(&rt, public).unwrap_err().to_string();
    assert!(
        error.contains("not a loopback address") && error.contains("ASYNC_EXEC_CONSOLE_USERS"),
        "{error}"
    );
    let unsaid = console::router(&rt, ConsoleConfig::new())
        .unwrap_err()
        .to_string();
    assert!(unsaid.contains("no user is configured"), "{unsaid}");
    let bad_hash = ConsoleConfig::new().user("alice", Role::Operator, "plaintext");
    assert!(console::router(&rt, bad_hash)
        .unwrap_err()
        .to_string()
        .contains("hash_password"));
    // On a loopback address without users: open, every visitor an operator named `local`.
    let local = ConsoleConfig::new().listen("127.0.0.1:8080".parse().unwrap());
    let app = Router::new().nest(MOUNT, console::router(&rt, local).unwrap());
    let (cookie, csrf) = login(&app, "", "").await;
    let session = get(&app, "/api/session", Auth::Cookie(&cookie))
        .await
        .json();
    assert_eq!(session["user"], "local");
    let pause = [("csrf", csrf.as_str()), ("executor", "console::fine")];
    assert_eq!(
        post_form(&app, "/executors/pause", Auth::Cookie(&cookie), &pause)
            .await
            .status,
        StatusCode::SEE_OTHER
    );
    assert_eq!(rt.paused().await.unwrap()[0].paused_by, "local");
    rt.shutdown().await.unwrap();
}

backend_suite!(
    unauthenticated_requests_are_refused,
    wrong_passwords_are_refused_then_limited,
    every_page_renders_and_viewers_cannot_act,
    actions_without_the_csrf_token_are_refused,
    bearer_tokens_and_the_openapi_document,
    the_console_refuses_to_start_open_on_a_public_address,
    a_succeeded_request_shows_its_earlier_error_as_history,
);

//! Issue 9: the operations console, over HTTP (`tower::ServiceExt::oneshot` on the router
//! mounted under `/ops/console`), on every backend: logins and their limit, roles, CSRF,
//! every page and API route, filters with SQL metacharacters and odd Unicode, actions on
//! a filter with the count shown first, the audit trail, pauses obeyed by another
//! instance within seconds, bearer tokens, the OpenAPI document.
#![cfg(feature = "console")]
#![allow(clippy::extra_unused_type_parameters)] // every test takes the backend, used or not

#[macro_use]
mod common;

use std::net::SocketAddr;
use std::sync::OnceLock;
use std::time::Duration;

use async_exec::console::{self, token_digest, ConsoleConfig, Role};
use async_exec::{async_exec, Backend, Data, RequestQuery, Runtime, Status};
use axum::body::Body;
use axum::extract::ConnectInfo;
use axum::http::{header, Request, StatusCode};
use axum::Router;
use common::{wait_for, Probe, TestDb};
use http_body_util::BodyExt;
use serde_json::{json, Value};
use tower::ServiceExt;

const MOUNT: &str = "/ops/console";
const OPERATOR_TOKEN: &str = "operator-token-0123456789abcdef0123456789abcdef";
const VIEWER_TOKEN: &str = "viewer-token-0123456789abcdef0123456789abcdef";

#[async_exec(type = SaveAsync, name = "console::doomed", max_attempts = 1)]
async fn doomed(label: String) -> anyhow::Result<()> {
    anyhow::bail!("boom: {label}")
}

#[async_exec(type = SaveAsync, name = "console::fine")]
async fn fine(label: String, probe: Data<Probe>) {
    probe.record(&label, 1);
}

/// Password hashes, made once (argon2).
fn hashes() -> &'static (String, String) {
    static HASHES: OnceLock<(String, String)> = OnceLock::new();
    HASHES.get_or_init(|| {
        (
            console::hash_password("operator pass").unwrap(),
            console::hash_password("viewer pass").unwrap(),
        )
    })
}

fn config() -> ConsoleConfig {
    let (operator, viewer) = hashes();
    ConsoleConfig::new()
        .user("alice", Role::Operator, operator)
        .user("victor", Role::Viewer, viewer)
        .api_token_sha256("ops-bot", Role::Operator, &token_digest(OPERATOR_TOKEN))
        .api_token_sha256("dash", Role::Viewer, &token_digest(VIEWER_TOKEN))
}

fn mounted(rt: &Runtime) -> Router {
    Router::new().nest(MOUNT, console::router(rt, config()).unwrap())
}

struct Reply {
    status: StatusCode,
    location: Option<String>,
    set_cookie: Option<String>,
    body: String,
}

impl Reply {
    fn json(&self) -> Value {
        serde_json::from_str(&self.body).unwrap_or_else(|e| panic!("{e}: {}", self.body))
    }
}

async fn send(app: &Router, request: Request<Body>) -> Reply {
    let response = app.clone().oneshot(request).await.unwrap();
    let header = |name| {
        response
            .headers()
            .get(name)
            .map(|v: &header::HeaderValue| v.to_str().unwrap().to_string())
    };
    let (status, location, set_cookie) = (
        response.status(),
        header(header::LOCATION),
        header(header::SET_COOKIE),
    );
    let bytes = response.into_body().collect().await.unwrap().to_bytes();
    Reply {
        status,
        location,
        set_cookie,
        body: String::from_utf8(bytes.to_vec()).unwrap(),
    }
}

/// How a request proves who sends it.
#[derive(Clone, Copy)]
enum Auth<'a> {
    None,
    Cookie(&'a str),
    Bearer(&'a str),
}

fn request(method: &str, path: &str, auth: Auth<'_>) -> axum::http::request::Builder {
    let builder = Request::builder()
        .method(method)
        .uri(format!("{MOUNT}{path}"));
    match auth {
        Auth::None => builder,
        Auth::Cookie(cookie) => builder.header(header::COOKIE, cookie),
        Auth::Bearer(token) => builder.header(header::AUTHORIZATION, format!("Bearer {token}")),
    }
}

async fn get(app: &Router, path: &str, auth: Auth<'_>) -> Reply {
    send(app, request("GET", path, auth).body(Body::empty()).unwrap()).await
}

async fn post_form(app: &Router, path: &str, auth: Auth<'_>, fields: &[(&str, &str)]) -> Reply {
    let body = serde_urlencoded::to_string(fields).unwrap();
    let request = request("POST", path, auth)
        .header(header::CONTENT_TYPE, "application/x-www-form-urlencoded")
        .body(Body::from(body))
        .unwrap();
    send(app, request).await
}

async fn post_json(
    app: &Router,
    path: &str,
    auth: Auth<'_>,
    csrf: Option<&str>,
    body: Value,
) -> Reply {
    let mut builder = request("POST", path, auth).header(header::CONTENT_TYPE, "application/json");
    if let Some(csrf) = csrf {
        builder = builder.header("x-csrf-token", csrf);
    }
    send(app, builder.body(Body::from(body.to_string())).unwrap()).await
}

/// Logs in through the form; the session cookie and its CSRF token.
async fn login(app: &Router, user: &str, password: &str) -> (String, String) {
    let reply = post_form(
        app,
        "/login",
        Auth::None,
        &[("user", user), ("password", password)],
    )
    .await;
    assert_eq!(reply.status, StatusCode::SEE_OTHER, "{}", reply.body);
    assert_eq!(reply.location.as_deref(), Some("/ops/console"));
    let set_cookie = reply.set_cookie.unwrap();
    for attribute in ["HttpOnly", "SameSite=Strict", "Path=/ops/console"] {
        assert!(set_cookie.contains(attribute), "{set_cookie}");
    }
    assert!(!set_cookie.contains("Secure"), "plain HTTP: {set_cookie}");
    let cookie = set_cookie.split(';').next().unwrap().to_string();
    let session = get(app, "/api/session", Auth::Cookie(&cookie)).await;
    assert_eq!(session.status, StatusCode::OK);
    let csrf = session.json()["csrf"].as_str().unwrap().to_string();
    (cookie, csrf)
}

async fn wait_status(rt: &Runtime, status: Status, n: i64) {
    let query = RequestQuery::default().status(status);
    wait_for(|| {
        let query = query.clone();
        async move { rt.count_matching(&query).await.unwrap() == n }
    })
    .await;
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
        assert_eq!(
            reply.location.as_deref(),
            Some("/ops/console/login"),
            "{page}"
        );
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
    let limited = send(&app, from("10.0.0.2", "alice", "operator pass")).await;
    assert_eq!(limited.status, StatusCode::TOO_MANY_REQUESTS, "per user");
    assert!(limited.body.contains("wait 15 minutes"));
    let same_address = send(&app, from("10.0.0.1", "victor", "viewer pass")).await;
    assert_eq!(
        same_address.status,
        StatusCode::TOO_MANY_REQUESTS,
        "per address"
    );
    let elsewhere = send(&app, from("10.0.0.3", "victor", "viewer pass")).await;
    assert_eq!(elsewhere.status, StatusCode::SEE_OTHER);
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
    let body = json!({"action": "retry", "query": {"id": dead}});
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
        db.count("async_audit").await,
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
    let body = json!({"action": "delete", "query": {"id": dead}});
    for token in [None, Some("wrong")] {
        let reply = post_json(&app, "/api/actions", auth, token, body.clone()).await;
        assert_eq!(reply.status, StatusCode::FORBIDDEN, "{token:?}");
    }
    let logout = post_form(&app, "/logout", auth, &[]).await;
    assert_eq!(logout.status, StatusCode::FORBIDDEN);
    assert!(rt.get(dead).await.unwrap().is_some(), "nothing was deleted");
    assert_eq!(db.count("async_audit").await, 0);
    // With the token, the same delete goes through.
    let fields = [
        ("csrf", csrf.as_str()),
        ("action", "delete"),
        ("id", &id),
        ("confirm", "yes"),
    ];
    let reply = post_form(&app, "/actions", auth, &fields).await;
    assert_eq!(reply.status, StatusCode::SEE_OTHER, "{}", reply.body);
    assert!(rt.get(dead).await.unwrap().is_none());
    rt.shutdown().await.unwrap();
}

/// Texts that would break a query built by pasting, or a careless encoder.
const ODD: [&str; 9] = [
    "' OR 1=1 --",
    "%",
    "_",
    "\\",
    "50%_off\\",
    "\u{200f}rtl\u{202e}mark",
    "🦀 emoji",
    "nul\0byte",
    "\"; DROP TABLE async_req; --",
];

async fn filters_with_metacharacters_and_odd_unicode_return_normal_results<DB: Backend>(
    db: TestDb,
) {
    let rt = db.builder().start().await.unwrap();
    doomed("plain".into()).on(&rt).await.unwrap();
    doomed("50%_off\\ sale".into()).on(&rt).await.unwrap();
    doomed("🦀 emoji \u{200f}rtl\u{202e}mark".into())
        .on(&rt)
        .await
        .unwrap();
    fine("keyed".into())
        .key("k' OR 1=1 --%_\\🦀")
        .delay(Duration::from_secs(3600))
        .on(&rt)
        .await
        .unwrap();
    wait_status(&rt, Status::Dead, 3).await;
    let app = mounted(&rt);
    let (cookie, _) = login(&app, "victor", "viewer pass").await;
    let auth = Auth::Cookie(&cookie);
    let expect = |needle: &str| -> usize {
        [
            "plain",
            "50%_off\\ sale",
            "🦀 emoji \u{200f}rtl\u{202e}mark",
        ]
        .iter()
        .filter(|label| format!("boom: {label}").contains(needle))
        .count()
    };
    for needle in ODD {
        let qs = serde_urlencoded::to_string([("error", needle)]).unwrap();
        let reply = get(&app, &format!("/api/requests?{qs}"), auth).await;
        assert_eq!(reply.status, StatusCode::OK, "{needle:?}: {}", reply.body);
        let found = reply.json()["requests"].as_array().unwrap().len();
        assert_eq!(found, expect(needle), "error contains {needle:?}");
        let page = get(&app, &format!("/requests?{qs}"), auth).await;
        assert_eq!(page.status, StatusCode::OK, "{needle:?}");
        assert_eq!(
            page.body.matches("data-request-id=").count(),
            found,
            "{needle:?}"
        );
        for field in ["executor", "key", "remark", "application"] {
            let qs = serde_urlencoded::to_string([(field, needle)]).unwrap();
            let reply = get(&app, &format!("/api/requests?{qs}"), auth).await;
            assert_eq!(
                reply.status,
                StatusCode::OK,
                "{field} = {needle:?}: {}",
                reply.body
            );
            assert_eq!(
                reply.json()["requests"].as_array().unwrap().len(),
                0,
                "{field} = {needle:?}"
            );
        }
    }
    // Each metacharacter stands for itself.
    let percent = get(&app, "/api/requests?error=0%25_o", auth).await.json();
    assert_eq!(percent["requests"].as_array().unwrap().len(), 1);
    let key = serde_urlencoded::to_string([("key", "k' OR 1=1 --%_\\🦀")]).unwrap();
    let keyed = get(&app, &format!("/api/requests?{key}"), auth)
        .await
        .json();
    assert_eq!(
        keyed["requests"][0]["idempotency_key"],
        "k' OR 1=1 --%_\\🦀"
    );
    let unicode = serde_urlencoded::to_string([("error", "\u{200f}rtl\u{202e}")]).unwrap();
    let page = get(&app, &format!("/requests?{unicode}"), auth).await;
    assert!(
        page.body.contains("🦀 emoji \u{200f}rtl\u{202e}mark"),
        "shown as it is"
    );
    // Bad fields are explained, not failed.
    let bad = get(&app, "/api/requests?status=deadd", auth).await;
    assert_eq!(bad.status, StatusCode::BAD_REQUEST);
    assert!(bad.json()["error"]
        .as_str()
        .unwrap()
        .contains("dead, cancelled"));
    let bad_page = get(&app, "/requests?id=abc", auth).await;
    assert_eq!(bad_page.status, StatusCode::BAD_REQUEST);
    assert_eq!(db.count("async_req").await, 4, "nothing dropped");
    rt.shutdown().await.unwrap();
}

async fn actions_on_a_filter_show_the_count_then_act_and_are_audited<DB: Backend>(db: TestDb) {
    let rt = db.builder().start().await.unwrap();
    for i in 0..3 {
        doomed(format!("batch {i}")).on(&rt).await.unwrap();
    }
    let other = doomed("other".into()).on(&rt).await.unwrap().id.unwrap();
    let waiting = fine("later".into())
        .delay(Duration::from_secs(3600))
        .on(&rt)
        .await
        .unwrap()
        .id
        .unwrap();
    wait_status(&rt, Status::Dead, 4).await;
    let app = mounted(&rt);
    let (cookie, csrf) = login(&app, "alice", "operator pass").await;
    let auth = Auth::Cookie(&cookie);
    let list = get(&app, "/requests?status=dead&error=batch", auth).await;
    assert!(list.body.contains(r#"id="action-form""#));
    // First the count.
    let review = [
        ("csrf", csrf.as_str()),
        ("action", "replay_dead"),
        ("status", "dead"),
        ("error", "batch"),
    ];
    let confirm = post_form(&app, "/actions", auth, &review).await;
    assert_eq!(confirm.status, StatusCode::OK, "{}", confirm.body);
    assert!(
        confirm
            .body
            .contains(r#"id="confirm-count" data-count="3""#),
        "{}",
        confirm.body
    );
    assert!(confirm.body.contains(r#"id="confirm-submit""#));
    assert_eq!(db.count("async_audit").await, 0, "not yet");
    // Then the action.
    let mut go = review.to_vec();
    go.push(("confirm", "yes"));
    let done = post_form(&app, "/actions", auth, &go).await;
    assert_eq!(done.status, StatusCode::SEE_OTHER);
    let location = done.location.unwrap();
    assert!(location.starts_with("/ops/console/requests?"), "{location}");
    assert!(location.contains("notice="));
    // Replayed: fresh attempts, so each ran once more and is dead again.
    wait_for(|| async {
        let batch = RequestQuery::default().error_contains("batch");
        let page = rt.query(&batch, &Default::default()).await.unwrap();
        let mut replayed = page.len() == 3;
        for r in &page {
            replayed &= r.status == Status::Dead && rt.attempts(r.id).await.unwrap().len() == 2;
        }
        replayed
    })
    .await;
    let trail = rt.audit_trail(10).await.unwrap();
    assert_eq!(trail.len(), 1);
    assert_eq!(
        (
            trail[0].actor.as_str(),
            trail[0].action.as_str(),
            trail[0].affected
        ),
        ("alice", "replay_dead", 3)
    );
    assert!(trail[0].target.contains("batch"), "{}", trail[0].target);
    assert_eq!(
        rt.attempts(other).await.unwrap().len(),
        1,
        "outside the filter: untouched"
    );
    // One request: cancel the waiting one through the API, with the session's token.
    let cancel = json!({"action": "cancel", "query": {"id": waiting}});
    let reply = post_json(&app, "/api/actions", auth, Some(&csrf), cancel).await;
    assert_eq!(reply.status, StatusCode::OK, "{}", reply.body);
    assert_eq!(reply.json()["changed"], 1);
    assert_eq!(
        rt.get(waiting).await.unwrap().unwrap().status,
        Status::Cancelled
    );
    // Retry by the detail page's button; then delete every cancelled one.
    let id = other.to_string();
    let retry = [
        ("csrf", csrf.as_str()),
        ("action", "retry"),
        ("id", &id),
        ("confirm", "yes"),
        ("back", &format!("/requests/{other}")),
    ];
    let reply = post_form(&app, "/actions", auth, &retry).await;
    assert_eq!(
        reply
            .location
            .as_deref()
            .map(|l| l.starts_with(&format!("/ops/console/requests/{other}?notice="))),
        Some(true)
    );
    let delete = [
        ("csrf", csrf.as_str()),
        ("action", "delete"),
        ("status", "cancelled"),
        ("confirm", "yes"),
    ];
    assert_eq!(
        post_form(&app, "/actions", auth, &delete).await.status,
        StatusCode::SEE_OTHER
    );
    assert!(rt.get(waiting).await.unwrap().is_none());
    let actions: Vec<String> = rt
        .audit_trail(10)
        .await
        .unwrap()
        .into_iter()
        .map(|e| e.action)
        .collect();
    assert_eq!(actions, ["delete", "retry", "cancel", "replay_dead"]);
    let audit_page = get(&app, "/audit", auth).await;
    assert_eq!(audit_page.body.matches("data-audit-id=").count(), 4);
    rt.shutdown().await.unwrap();
}

async fn pausing_stops_claims_on_other_instances_within_seconds<DB: Backend>(db: TestDb) {
    // A worker instance polls the store; the console runs on a submit-only instance.
    let worker = db
        .builder()
        .poll_interval(Duration::from_millis(200))
        .start()
        .await
        .unwrap();
    let front = db.builder().run_workers(false).start().await.unwrap();
    let app = mounted(&front);
    let bot = Auth::Bearer(OPERATOR_TOKEN);
    let paused = post_json(
        &app,
        "/api/executors/pause",
        bot,
        None,
        json!({"executor": "console::fine"}),
    )
    .await;
    assert_eq!(paused.status, StatusCode::OK, "{}", paused.body);
    tokio::time::sleep(Duration::from_millis(2500)).await; // the worker re-reads every second
    let id = fine("while paused".into())
        .on(&front)
        .await
        .unwrap()
        .id
        .unwrap();
    tokio::time::sleep(Duration::from_secs(2)).await;
    let probe = worker.data::<Probe>().unwrap();
    assert_eq!(probe.runs("while paused"), 0, "paused: not claimed");
    assert_eq!(front.get(id).await.unwrap().unwrap().status, Status::Init);
    let executors = get(&app, "/api/executors", bot).await.json();
    let fine_view = executors
        .as_array()
        .unwrap()
        .iter()
        .find(|e| e["name"] == "console::fine")
        .unwrap();
    assert_eq!(fine_view["paused_by"], "ops-bot");
    let resumed = post_json(
        &app,
        "/api/executors/resume",
        bot,
        None,
        json!({"executor": "console::fine"}),
    )
    .await;
    assert_eq!(resumed.status, StatusCode::OK);
    probe
        .wait_runs_within("while paused", 1, Duration::from_secs(5))
        .await;
    let actions: Vec<String> = front
        .audit_trail(10)
        .await
        .unwrap()
        .into_iter()
        .map(|e| e.action)
        .collect();
    assert_eq!(actions, ["resume", "pause"]);
    front.shutdown().await.unwrap();
    worker.shutdown().await.unwrap();
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
    let body = json!({"action": "retry", "query": {"status": "dead"}});
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

async fn keyset_pages_cover_every_request_once_in_either_order<DB: Backend>(db: TestDb) {
    let rt = db.builder().start().await.unwrap();
    // Seven records, several created in the same millisecond.
    for (i, created) in [1000, 1000, 1000, 2000, 2000, 3000, 3000]
        .iter()
        .enumerate()
    {
        db.exec(&format!(
            "INSERT INTO async_req (application_name, executor, sign, strategy, status, exec_count, \
             max_attempts, param_json, remark, priority, run_at, create_time, update_time) \
             VALUES ('tests', 'console::old', 's', 'SaveAsync', 'dead', 1, 1, '{{\"n\":{i}}}', '', 0, \
             {created}, {created}, {created})"
        ))
        .await;
    }
    let app = mounted(&rt);
    let auth = Auth::Bearer(VIEWER_TOKEN);
    for order in ["newest", "oldest"] {
        let mut seen: Vec<(i64, i64)> = Vec::new();
        let mut after = String::new();
        loop {
            let path =
                format!("/api/requests?executor=console::old&order={order}&limit=2&after={after}");
            let page = get(&app, &path, auth).await.json();
            for r in page["requests"].as_array().unwrap() {
                seen.push((
                    r["create_time"].as_i64().unwrap(),
                    r["id"].as_i64().unwrap(),
                ));
            }
            match page["next"].as_str() {
                Some(next) => after = next.to_string(),
                None => break,
            }
        }
        let mut sorted = seen.clone();
        sorted.sort();
        if order == "newest" {
            sorted.reverse();
        }
        assert_eq!(seen, sorted, "{order}: in order");
        sorted.dedup();
        assert_eq!(sorted.len(), 7, "{order}: each once: {seen:?}");
    }
    // The page links to the next one with the same filter.
    let (cookie, _) = login(&app, "victor", "viewer pass").await;
    let first = get(
        &app,
        "/requests?executor=console::old&limit=3",
        Auth::Cookie(&cookie),
    )
    .await;
    assert_eq!(first.body.matches("data-request-id=").count(), 3);
    let next = first
        .body
        .split(r#"id="next-page" href=""#)
        .nth(1)
        .unwrap()
        .split('"')
        .next()
        .unwrap();
    let next = next.replace("&amp;", "&");
    assert!(
        next.starts_with("/ops/console/requests?executor=console%3A%3Aold&"),
        "{next}"
    );
    let second = get(&app, next.trim_start_matches(MOUNT), Auth::Cookie(&cookie)).await;
    assert_eq!(second.body.matches("data-request-id=").count(), 3);
    rt.shutdown().await.unwrap();
}

backend_suite!(
    unauthenticated_requests_are_refused,
    wrong_passwords_are_refused_then_limited,
    every_page_renders_and_viewers_cannot_act,
    actions_without_the_csrf_token_are_refused,
    filters_with_metacharacters_and_odd_unicode_return_normal_results,
    actions_on_a_filter_show_the_count_then_act_and_are_audited,
    pausing_stops_claims_on_other_instances_within_seconds,
    bearer_tokens_and_the_openapi_document,
    the_console_refuses_to_start_open_on_a_public_address,
    keyset_pages_cover_every_request_once_in_either_order,
);

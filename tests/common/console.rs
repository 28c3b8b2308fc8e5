//! What the console tests share: the router mounted under [`MOUNT`] with two users and two
//! tokens, requests sent with `oneshot`, a login. (The executors are in each test file:
//! here they would be linked into every test binary.)

use std::sync::OnceLock;

use async_exec::console::{self, token_digest, ConsoleConfig, Role};
use async_exec::{RequestQuery, Runtime, Status};
use axum::body::Body;
use axum::http::{header, Request, StatusCode};
use axum::Router;
use http_body_util::BodyExt;
use serde_json::Value;
use tower::ServiceExt;

use super::wait_for;

pub const MOUNT: &str = "/ops/console";
pub const OPERATOR_TOKEN: &str = "operator-token-0123456789abcdef0123456789abcdef";
pub const VIEWER_TOKEN: &str = "viewer-token-0123456789abcdef0123456789abcdef";

/// Password hashes, made once (argon2).
pub fn hashes() -> &'static (String, String) {
    static HASHES: OnceLock<(String, String)> = OnceLock::new();
    HASHES.get_or_init(|| {
        (
            console::hash_password("operator pass").unwrap(),
            console::hash_password("viewer pass").unwrap(),
        )
    })
}

pub fn config() -> ConsoleConfig {
    let (operator, viewer) = hashes();
    ConsoleConfig::new()
        .user("alice", Role::Operator, operator)
        .user("victor", Role::Viewer, viewer)
        .api_token_sha256("ops-bot", Role::Operator, &token_digest(OPERATOR_TOKEN))
        .api_token_sha256("dash", Role::Viewer, &token_digest(VIEWER_TOKEN))
}

pub fn mounted(rt: &Runtime) -> Router {
    Router::new().nest(MOUNT, console::router(rt, config()).unwrap())
}

pub struct Reply {
    pub status: StatusCode,
    pub location: Option<String>,
    pub set_cookie: Option<String>,
    pub frame_options: Option<String>,
    pub body: String,
}

impl Reply {
    pub fn json(&self) -> Value {
        serde_json::from_str(&self.body).unwrap_or_else(|e| panic!("{e}: {}", self.body))
    }
}

pub async fn send(app: &Router, request: Request<Body>) -> Reply {
    let response = app.clone().oneshot(request).await.unwrap();
    let header = |name| {
        response
            .headers()
            .get(name)
            .map(|v: &header::HeaderValue| v.to_str().unwrap().to_string())
    };
    let (status, location, set_cookie, frame_options) = (
        response.status(),
        header(header::LOCATION),
        header(header::SET_COOKIE),
        header(header::X_FRAME_OPTIONS),
    );
    let bytes = response.into_body().collect().await.unwrap().to_bytes();
    Reply {
        status,
        location,
        set_cookie,
        frame_options,
        body: String::from_utf8(bytes.to_vec()).unwrap(),
    }
}

/// How a request proves who sends it.
#[derive(Clone, Copy)]
pub enum Auth<'a> {
    None,
    Cookie(&'a str),
    Bearer(&'a str),
}

pub fn request(method: &str, path: &str, auth: Auth<'_>) -> axum::http::request::Builder {
    let builder = Request::builder()
        .method(method)
        .uri(format!("{MOUNT}{path}"));
    match auth {
        Auth::None => builder,
        Auth::Cookie(cookie) => builder.header(header::COOKIE, cookie),
        Auth::Bearer(token) => builder.header(header::AUTHORIZATION, format!("Bearer {token}")),
    }
}

pub async fn get(app: &Router, path: &str, auth: Auth<'_>) -> Reply {
    send(app, request("GET", path, auth).body(Body::empty()).unwrap()).await
}

pub async fn post_form(app: &Router, path: &str, auth: Auth<'_>, fields: &[(&str, &str)]) -> Reply {
    let body = serde_urlencoded::to_string(fields).unwrap();
    let request = request("POST", path, auth)
        .header(header::CONTENT_TYPE, "application/x-www-form-urlencoded")
        .body(Body::from(body))
        .unwrap();
    send(app, request).await
}

pub async fn post_json(
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
pub async fn login(app: &Router, user: &str, password: &str) -> (String, String) {
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

pub async fn wait_status(rt: &Runtime, status: Status, n: i64) {
    let query = RequestQuery::default().status(status);
    wait_for(|| {
        let query = query.clone();
        async move { rt.count_matching(&query).await.unwrap() == n }
    })
    .await;
}

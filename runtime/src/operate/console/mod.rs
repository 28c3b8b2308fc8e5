//! The operations console (cargo feature `console`): an axum [`Router`] with login,
//! server-rendered pages (overview with charts, requests, request detail, executors,
//! instances, audit trail), actions on one request or every request matching a filter,
//! and a JSON API with its OpenAPI document at `api/openapi.json`; and `health`, the
//! unauthenticated health report ([`health_router`], also [`crate::operate::http::health_router`],
//! serves it alone).
//!
//! Mount it under any path; every link and form follows it:
//!
//! ```no_run
//! # async fn demo(rt: async_exec::Runtime) -> anyhow::Result<()> {
//! use async_exec::console::{self, ConsoleConfig, Role};
//! let config = ConsoleConfig::new()
//!     .user("alice", Role::Operator, &console::hash_password("a long passphrase")?)
//!     .from_env(); // and ASYNC_EXEC_CONSOLE_USERS / _TOKENS
//! let app = axum::Router::new().merge(console::mount("/console", console::router(&rt, config)?));
//! let listener = tokio::net::TcpListener::bind("127.0.0.1:8080").await?;
//! axum::serve(listener, app.into_make_service_with_connect_info::<std::net::SocketAddr>())
//!     .await?;
//! # Ok(()) }
//! ```
//!
//! Serve it with `into_make_service_with_connect_info::<SocketAddr>()` so that failed
//! logins are limited per client address (behind a reverse proxy, name it in
//! [`ConsoleConfig::trusted_proxies`]); without it every client shares one address,
//! and only browsers that logged in as a user before (a device cookie) count apart.
//! Request bodies are refused past 16 KiB (`413`).

mod actions;
mod api;
mod api_changes;
mod auth;
mod charts;
mod config;
mod device;
mod filter;
mod fleet;
mod flow;
mod flow_page;
mod gate;
mod guard;
mod limiter;
mod login;
mod overview;
mod pages;
mod partitions;
mod policies;
mod queues;
mod reads;
mod views;

use std::sync::Arc;

use axum::http::{header, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::Router;

pub use auth::{hash_password, token_digest};
pub use config::{
    ConsoleConfig, Role, DEFAULT_COUNTS_MAX_AGE, DEFAULT_IDLE_TIMEOUT, SECURE_COOKIE_VAR,
    TOKENS_VAR, USERS_VAR,
};

use crate::base::error::Result;
use crate::runtime::Runtime;

/// What every handler shares.
pub(crate) struct State {
    pub(crate) rt: Runtime,
    pub(crate) config: ConsoleConfig,
    /// `false` for the open console on a loopback address without users.
    pub(crate) login_required: bool,
    pub(crate) sessions: auth::Sessions,
    pub(crate) limiter: limiter::Limiter,
    /// How many refused logins are logged and audited each second.
    pub(crate) told: limiter::Told,
    /// Device cookies: logins from a browser that logged in before count apart.
    pub(crate) devices: device::Devices,
    /// Password checks, off the async workers and a few at a time.
    pub(crate) gate: gate::Gate,
    /// The overview's counts, with their age.
    pub(crate) counts: overview::CountCache,
}

/// The console's stylesheet, embedded.
const CSS: &str = include_str!("assets/console.css");

/// The console for `rt`'s database, to mount under a path of the application's choosing
/// (`Router::new().merge(console::mount("/console", router))`, which also redirects
/// `/console/`; or `Router::new().nest("/console", router)`).
///
/// Refuses (with a message saying what to change) a configuration with errors, and one
/// without users or tokens unless [`ConsoleConfig::listen`] names a loopback address.
///
/// ```
/// use async_exec::console::ConsoleConfig;
/// # async fn demo(rt: async_exec::Runtime) {
/// let refused = async_exec::console::router(&rt, ConsoleConfig::new().listen("0.0.0.0:80".parse().unwrap()));
/// assert!(refused.unwrap_err().to_string().contains("not a loopback address"));
/// # }
/// ```
pub fn router(rt: &Runtime, config: ConsoleConfig) -> Result<Router> {
    let login_required = config.check()?;
    let state = Arc::new(State {
        rt: rt.clone(),
        counts: overview::CountCache::new(config.counts_max_age),
        config,
        login_required,
        sessions: Default::default(),
        limiter: Default::default(),
        told: Default::default(),
        devices: Default::default(),
        gate: Default::default(),
    });
    Ok(Router::new()
        .route("/", get(pages::overview))
        .route("/login", get(login::login_form).post(login::login))
        .route("/logout", post(actions::logout))
        .route("/requests", get(pages::requests))
        .route("/requests/{id}", get(pages::request_detail))
        .route("/requests/{id}/cancel", post(actions::cancel_running))
        .route("/actions", post(actions::action))
        .route("/actions/selected", post(actions::act_on_selected))
        .route("/executors", get(fleet::executors))
        .route("/executors/pause", post(actions::pause))
        .route("/executors/resume", post(actions::resume))
        .route("/instances", get(fleet::instances))
        .route("/policies", get(policies::policies).post(policies::apply))
        .route("/queues/{name}/flow", get(flow_page::flow_page))
        .route("/queues/{name}/partitions", post(flow_page::apply))
        .route("/queues", get(queues::queues))
        .route("/queues/{name}", get(queues::queue))
        .route("/audit", get(fleet::audit))
        .route("/assets/console.css", get(css))
        .route("/assets/console.js", get(js))
        .route("/health", get(health_of_state))
        .merge(api::routes())
        .layer(axum::extract::DefaultBodyLimit::max(guard::MAX_BODY))
        .layer(axum::middleware::map_response(guard::safe_headers))
        .layer(axum::middleware::from_fn_with_state(
            Arc::clone(&state),
            guard::check_host,
        ))
        .with_state(state))
}

/// `console` nested under `path` (such as `/console`), with `path/` redirected to `path`
/// (`308`, the query string kept): merge it into the application's router. axum's
/// `Router::nest(path, console)` alone serves `path` and what is under it, and answers
/// `404` for `path/`, which people type.
///
/// ```no_run
/// # async fn demo(rt: async_exec::Runtime) -> anyhow::Result<()> {
/// use async_exec::console::{self, ConsoleConfig};
/// let console = console::router(&rt, ConsoleConfig::new().from_env())?;
/// let app = axum::Router::new().merge(console::mount("/console", console));
/// # Ok(()) }
/// ```
///
/// # Panics
///
/// As `Router::nest` does: when `path` is empty, `/`, or does not start with `/`.
pub fn mount(path: &str, console: Router) -> Router {
    let path = path.trim_end_matches('/');
    Router::new()
        .nest(path, console)
        .route(&format!("{path}/"), get(to_without_slash))
}

/// `GET path/?query`: `308` to `path?query`, on the path as the client sent it (the
/// application's router may be nested itself).
async fn to_without_slash(axum::extract::OriginalUri(uri): axum::extract::OriginalUri) -> Response {
    let path = uri.path().trim_end_matches('/');
    let location = match uri.query() {
        Some(query) => format!("{path}?{query}"),
        None => path.to_string(),
    };
    (
        StatusCode::PERMANENT_REDIRECT,
        [(header::LOCATION, location)],
    )
        .into_response()
}

/// The `/health` route alone, without the console: the same as
/// [`http::health_router`](crate::operate::http::health_router) (feature `http`, which `console`
/// implies), kept here for code written before it.
pub use crate::operate::http::health_router;

/// The console's `health`: the whole report for a logged-in caller (session or token),
/// only `{"ready": ...}` for others (the report names the instance and its parts).
async fn health_of_state(
    axum::extract::State(state): axum::extract::State<Arc<State>>,
    parts: axum::http::request::Parts,
) -> Response {
    if auth::caller(&parts, &state).is_some() || !state.login_required {
        return crate::operate::http::health_response(&state.rt).await;
    }
    let ready = state.rt.health().await.is_ready();
    let status = if ready {
        StatusCode::OK
    } else {
        StatusCode::SERVICE_UNAVAILABLE
    };
    (
        status,
        [(header::CACHE_CONTROL, "no-store")],
        axum::Json(serde_json::json!({ "ready": ready })),
    )
        .into_response()
}

/// The console's one script: pages that refresh themselves while open.
const JS: &str = include_str!("assets/console.js");

async fn js() -> impl IntoResponse {
    (
        [
            (header::CONTENT_TYPE, "text/javascript; charset=utf-8"),
            (header::CACHE_CONTROL, "max-age=3600"),
        ],
        JS,
    )
}

async fn css() -> impl IntoResponse {
    (
        [
            (header::CONTENT_TYPE, "text/css; charset=utf-8"),
            (header::CACHE_CONTROL, "max-age=3600"),
        ],
        CSS,
    )
}

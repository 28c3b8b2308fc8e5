//! Routers for an application's own axum server (cargo feature `http`, axum only): the
//! health report at `GET /health` ([`health_router`]) and, with the feature
//! `prometheus`, the metrics at `GET /metrics` (`metrics_router`). Neither needs the
//! console; both are unauthenticated, for probes and scrapers, and show no records.
//!
//! ```no_run
//! # async fn demo(rt: async_exec::Runtime) -> anyhow::Result<()> {
//! let app = axum::Router::new().merge(async_exec::http::health_router(&rt));
//! let listener = tokio::net::TcpListener::bind("0.0.0.0:8080").await?;
//! axum::serve(listener, app)
//!     .with_graceful_shutdown(async_exec::shutdown_signal())
//!     .await?;
//! rt.shutdown().await?;
//! # Ok(()) }
//! ```

use axum::http::{header, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::Router;

use crate::runtime::Runtime;

#[cfg(feature = "prometheus")]
mod prometheus;
#[cfg(feature = "prometheus")]
pub use prometheus::metrics_router;

/// The `/health` route alone, to merge into an application's router at its root:
/// `GET /health` answers [`Runtime::health`] as JSON, `200 OK` when the runtime is ready
/// and `503 Service Unavailable` when not. Unauthenticated, as is `health` under the
/// console's own path: a load balancer or an orchestrator's probe calls it. The report
/// names the application, the instance and its parts, never records or secrets.
///
/// ```no_run
/// # async fn demo(rt: async_exec::Runtime) -> anyhow::Result<()> {
/// let app = axum::Router::new().merge(async_exec::http::health_router(&rt));
/// let listener = tokio::net::TcpListener::bind("0.0.0.0:8080").await?;
/// axum::serve(listener, app).await?;
/// # Ok(()) }
/// ```
pub fn health_router(rt: &Runtime) -> Router {
    Router::new()
        .route("/health", get(health))
        .with_state(rt.clone())
}

/// The health report as JSON: 200 when ready, 503 when not.
async fn health(axum::extract::State(rt): axum::extract::State<Runtime>) -> Response {
    health_response(&rt).await
}

/// `rt`'s whole health report as JSON, `200` when ready and `503` when not; never cached.
pub(crate) async fn health_response(rt: &Runtime) -> Response {
    let health = rt.health().await;
    let status = if health.is_ready() {
        StatusCode::OK
    } else {
        StatusCode::SERVICE_UNAVAILABLE
    };
    (
        status,
        [(header::CACHE_CONTROL, "no-store")],
        axum::Json(health),
    )
        .into_response()
}

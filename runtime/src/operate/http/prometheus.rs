//! `metrics_router`: the Prometheus recorder and `GET /metrics` (cargo feature
//! `prometheus`).

use std::sync::Mutex;

use axum::http::header;
use axum::response::IntoResponse;
use axum::routing::get;
use axum::Router;
use metrics_exporter_prometheus::{BuildError, PrometheusBuilder, PrometheusHandle};

use crate::base::error::{Error, Result};

/// The recorder this module installed, once per process.
static INSTALLED: Mutex<Option<PrometheusHandle>> = Mutex::new(None);

/// `GET /metrics` in the Prometheus text format (`text/plain; version=0.0.4`), to merge
/// into an application's router at its root: everything recorded through the
/// [`metrics`](https://docs.rs/metrics/0.24) facade, the runtime's own series
/// (`async_exec_submitted_total`, `async_exec_duration_seconds`, the queue gauges, ...)
/// and the application's.
///
/// The first call installs a [`metrics-exporter-prometheus`] recorder as the process's
/// global recorder (histograms render as summaries); later calls serve the same one.
/// Call it before the runtime starts, or as soon as you can: what was recorded before a
/// recorder was installed is lost (the runtime registers its series again under the new
/// recorder, so they appear from then on).
///
/// Fails with [`Error::MetricsRecorder`] when another global recorder is installed
/// already (by your code or a library: a process has one): then serve that recorder's
/// output yourself instead, or remove the other installation.
///
/// ```no_run
/// # async fn demo() -> anyhow::Result<()> {
/// let metrics = async_exec::http::metrics_router()?; // before the runtime starts
/// let rt = async_exec::Runtime::builder().database_url("sqlite:app.db").start().await?;
/// let app = axum::Router::new()
///     .merge(async_exec::http::health_router(&rt))
///     .merge(metrics);
/// # Ok(()) }
/// ```
///
/// [`metrics-exporter-prometheus`]: https://docs.rs/metrics-exporter-prometheus/0.17
pub fn metrics_router() -> Result<Router> {
    let handle = {
        let mut installed = INSTALLED.lock().unwrap_or_else(|p| p.into_inner());
        match &*installed {
            Some(handle) => handle.clone(),
            None => {
                let handle = PrometheusBuilder::new()
                    .install_recorder()
                    .map_err(|e| match e {
                        BuildError::FailedToSetGlobalRecorder(_) => Error::MetricsRecorder(
                            "another global metrics recorder is installed already (a process \
                             has one): serve that recorder's output at /metrics yourself \
                             instead of calling `metrics_router()`, or do not install the \
                             other one"
                                .into(),
                        ),
                        other => Error::MetricsRecorder(other.to_string()),
                    })?;
                *installed = Some(handle.clone());
                // The recorder's histograms gather samples until drained: rendering
                // drains them, and so does this when nobody scrapes (as the exporter's
                // own `install` does).
                let upkeep = handle.clone();
                std::thread::Builder::new()
                    .name("async-exec-metrics-upkeep".into())
                    .spawn(move || loop {
                        std::thread::sleep(std::time::Duration::from_secs(5));
                        upkeep.run_upkeep();
                    })
                    .map_err(|e| {
                        Error::MetricsRecorder(format!("could not start its upkeep thread: {e}"))
                    })?;
                handle
            }
        }
    };
    Ok(Router::new().route(
        "/metrics",
        get(move || {
            let text = handle.render();
            std::future::ready(
                (
                    [
                        (
                            header::CONTENT_TYPE,
                            "text/plain; version=0.0.4; charset=utf-8",
                        ),
                        (header::CACHE_CONTROL, "no-store"),
                    ],
                    text,
                )
                    .into_response(),
            )
        }),
    ))
}

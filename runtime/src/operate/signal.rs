//! [`shutdown_signal`]: the moment a service is asked to stop.

/// Resolves when the process is asked to stop: Ctrl-C (`SIGINT`) or, on Unix, `SIGTERM`
/// (what `docker stop`, Kubernetes and systemd send). Hand it to axum's graceful shutdown,
/// then shut the runtime down, so that calls made by the last requests are handed over
/// and the bodies running finish (or are left to their lease) before the process exits:
///
/// ```no_run
/// # async fn demo(rt: async_exec::Runtime, app: axum::Router) -> anyhow::Result<()> {
/// let listener = tokio::net::TcpListener::bind("0.0.0.0:8080").await?;
/// axum::serve(listener, app)
///     .with_graceful_shutdown(async_exec::shutdown_signal())
///     .await?;
/// rt.shutdown().await?;
/// # Ok(()) }
/// ```
///
/// Needs a Tokio runtime with its I/O driver (`#[tokio::main]` has one). If a signal
/// handler cannot be installed (no I/O driver, or the platform refuses), that is logged
/// and the future waits for the other signal only; with neither it never resolves.
pub async fn shutdown_signal() {
    let ctrl_c = async {
        if let Err(error) = tokio::signal::ctrl_c().await {
            crate::log::warn!(error = %crate::log::escaped(&error), "shutdown_signal: cannot listen for Ctrl-C");
            std::future::pending::<()>().await;
        }
    };
    #[cfg(unix)]
    let terminate = async {
        use tokio::signal::unix::{signal, SignalKind};
        match signal(SignalKind::terminate()) {
            Ok(mut term) => {
                term.recv().await;
            }
            Err(error) => {
                crate::log::warn!(error = %crate::log::escaped(&error), "shutdown_signal: cannot listen for SIGTERM");
                std::future::pending::<()>().await;
            }
        }
    };
    #[cfg(not(unix))]
    let terminate = std::future::pending::<()>();
    tokio::select! {
        () = ctrl_c => crate::log::info!("shutdown_signal: Ctrl-C received, shutting down"),
        () = terminate => crate::log::info!("shutdown_signal: SIGTERM received, shutting down"),
    }
}

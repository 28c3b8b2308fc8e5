//! The wishes service ("Lamp & Genie"): a small REST service whose wishes are granted
//! after the commit by an `#[async_exec]` function, with the console and Prometheus
//! metrics mounted next to its API.
//!
//!     cargo run --features console --example wishes                      # SQLite, 127.0.0.1:3000
//!     cargo run --all-features --example wishes -- --url postgres://postgres@127.0.0.1:5432/test
//!
//! Routes: `POST /api/wishes` (`{"requestId": "...", "wish": "..."}`, idempotent on the
//! `requestId`), `GET /api/wishes/{requestId}`, `POST /api/wishes/{requestId}/retry` (only
//! a `FAILED` wish), `/console` (the operations console), `/metrics` (Prometheus text),
//! `/health` (the runtime's health as JSON: 200 when ready, 503 when not; no login).
//! Console users come from `ASYNC_EXEC_CONSOLE_USERS`; without them, on a loopback
//! address, a demo operator `genie` with a fresh random password is made and printed.

#[path = "wishes/service.rs"]
mod service;

use std::net::SocketAddr;
use std::time::Duration;

use async_exec::console::{self, ConsoleConfig, Role};
use async_exec::Runtime;
use clap::Parser;
use metrics_exporter_prometheus::PrometheusBuilder;
use rand::distributions::{Alphanumeric, DistString};
use service::{Backend, Service};

#[derive(Parser, Debug)]
struct Args {
    /// Database URL (`sqlite:`, `postgres://`, `mysql://`).
    #[arg(long, default_value = "sqlite:wishes.db")]
    url: String,
    /// Address to serve on.
    #[arg(long, default_value = "127.0.0.1:3000")]
    listen: SocketAddr,
    /// The application name of the requests (the console shows this application).
    #[arg(long, default_value = "wishes")]
    app: String,
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| "info".into()),
        )
        .init();
    let args = Args::parse();
    let metrics = PrometheusBuilder::new().install_recorder()?;
    let backend = Backend::of_url(&args.url)?;
    let rt = Runtime::builder()
        .database_url(&args.url)
        .application_name(&args.app)
        // Kept, so that a granted wish still shows SUCCESS and its attempts.
        .delete_on_success(false)
        .log_success(true)
        .retry_interval(Duration::from_millis(250))
        .retry_base_delay(Duration::from_millis(200))
        .retry_max_delay(Duration::from_secs(2))
        .start()
        .await?;
    let service = Service::new(rt.clone(), backend, metrics).await?;

    let mut config = ConsoleConfig::new().listen(args.listen).from_env();
    let users_given = std::env::var(console::USERS_VAR).is_ok_and(|v| !v.trim().is_empty());
    if !users_given && args.listen.ip().is_loopback() {
        let password = Alphanumeric.sample_string(&mut rand::thread_rng(), 16);
        config = config.user("genie", Role::Operator, &console::hash_password(&password)?);
        println!(
            "console demo user: genie / {password} (set {} to choose users)",
            console::USERS_VAR
        );
    }
    let app = service
        .router()
        .nest("/console", console::router(&rt, config)?)
        .merge(console::health_router(&rt));
    let listener = tokio::net::TcpListener::bind(args.listen).await?;
    println!(
        "wishes on http://{} (console: /console, metrics: /metrics, health: /health)",
        listener.local_addr()?
    );
    axum::serve(
        listener,
        app.into_make_service_with_connect_info::<SocketAddr>(),
    )
    .with_graceful_shutdown(async {
        let _ = tokio::signal::ctrl_c().await;
    })
    .await?;
    rt.shutdown().await?;
    Ok(())
}

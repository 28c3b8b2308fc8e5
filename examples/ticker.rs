//! One async-exec instance that keeps a one-second schedule (`every = "1s"`) and writes
//! each tick it runs to a table `tick_runs` (tick, instance, attempt), until SIGTERM.
//! `tests/instances.rs` starts three of these on one database, kills one with SIGKILL,
//! and checks that each tick ran once.
//!
//!     cargo run --all-features --example ticker -- --url postgres://postgres@127.0.0.1/test

use std::time::Duration;

use async_exec::{async_exec, Context, Data, Runtime};
use clap::Parser;
use sqlx::AnyPool;

#[derive(Parser, Debug)]
struct Args {
    /// Database URL (`sqlite:`, `postgres:`, `mysql:`).
    #[arg(long)]
    url: String,
    /// Application name shared by the instances.
    #[arg(long, default_value = "ticker")]
    app: String,
    /// This instance's name in `tick_runs`.
    #[arg(long)]
    instance: String,
}

/// Where the tick's body writes.
struct TickLog {
    pool: AnyPool,
    instance: String,
}

/// Writes the tick it runs for.
#[async_exec(type = SaveAsync, name = "ticker::second", every = "1s")]
async fn second(ctx: Context, log: Data<TickLog>) -> anyhow::Result<()> {
    let tick = ctx.tick().expect("called by its schedule");
    sqlx::query(&format!(
        "INSERT INTO tick_runs (tick, instance, attempt) VALUES ({tick}, '{}', {})",
        log.instance,
        ctx.attempt()
    ))
    .execute(&log.pool)
    .await?;
    Ok(())
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| "async_exec=info".into()),
        )
        .with_writer(std::io::stderr)
        .init();
    let args = Args::parse();
    sqlx::any::install_default_drivers();
    let pool = AnyPool::connect(&args.url).await?;
    sqlx::query(
        "CREATE TABLE IF NOT EXISTS tick_runs (tick BIGINT NOT NULL, \
         instance VARCHAR(100) NOT NULL, attempt INTEGER NOT NULL)",
    )
    .execute(&pool)
    .await?;
    let rt = Runtime::builder()
        .database_url(&args.url)
        .application_name(&args.app)
        // A killed instance's claim is taken over within about three seconds.
        .lease(Duration::from_secs(2))
        .heartbeat_interval(Duration::from_millis(500))
        .compensate_interval(Duration::from_secs(1))
        .poll_interval(Duration::from_millis(200))
        .data(TickLog {
            pool,
            instance: args.instance.clone(),
        })
        .start()
        .await?;
    println!("ready {}", args.instance);
    let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())?;
    term.recv().await;
    rt.shutdown().await?;
    println!("stopped {}", args.instance);
    Ok(())
}

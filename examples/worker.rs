//! One async-exec instance: joins a database and runs its requests until SIGTERM; or, with
//! `--submit N`, submits N requests (a submit-only instance) and exits.
//!
//!     cargo run --all-features --example worker -- --url postgres://postgres@127.0.0.1/test
//!     cargo run --all-features --example worker -- --url postgres://postgres@127.0.0.1/test --submit 3000
//!
//! Each execution is written to a table `worker_runs` (request id, instance, attempt, start
//! and finish), so that a test can check what ran where, and when. With `--queued`, the
//! requests are of the queue `limited`, whose limits `--queue-concurrency` and
//! `--queue-per-instance` set. The multi-process
//! tests in `tests/instances.rs` start several of these and kill some.

use std::time::Duration;

use async_exec::{async_exec, Backend, Context, Data, Runtime, Tx};
use clap::Parser;
use sqlx::AnyPool;

#[derive(Parser, Debug)]
struct Args {
    /// Database URL (`sqlite:`, `postgres:`, `mysql:`).
    #[arg(long)]
    url: String,
    /// Application name shared by the instances.
    #[arg(long, default_value = "worker")]
    app: String,
    /// This instance's name in `worker_runs`.
    #[arg(long, default_value = "worker")]
    instance: String,
    /// Bodies at once.
    #[arg(long, default_value_t = 8)]
    concurrency: usize,
    /// Lease length, ms.
    #[arg(long, default_value_t = 30_000)]
    lease_ms: u64,
    /// Heartbeat interval, ms.
    #[arg(long, default_value_t = 10_000)]
    heartbeat_ms: u64,
    /// Interval of the compensation and rescue sweeps, ms.
    #[arg(long, default_value_t = 30_000)]
    compensate_ms: u64,
    /// How long each body works, ms.
    #[arg(long, default_value_t = 5)]
    work_ms: u64,
    /// Shutdown grace period, ms.
    #[arg(long, default_value_t = 10_000)]
    grace_ms: u64,
    /// Submit this many requests instead of running workers, then exit.
    #[arg(long)]
    submit: Option<i64>,
    /// Requests per submitting transaction.
    #[arg(long, default_value_t = 100)]
    batch: i64,
    /// How often to look in the store for requests, ms (default: the backend's).
    #[arg(long)]
    poll_ms: Option<u64>,
    /// Submit (with --submit) to `worker::record_queued`, of the queue `limited`.
    #[arg(long)]
    queued: bool,
    /// Submit (with --submit) to `worker::three_steps` (durable steps; the second works
    /// `--work-ms`).
    #[arg(long)]
    steps: bool,
    /// At most this many requests of the queue `limited` at once, over every instance.
    #[arg(long)]
    queue_concurrency: Option<u32>,
    /// At most this many requests of the queue `limited` at once on this instance.
    #[arg(long)]
    queue_per_instance: Option<u32>,
    /// At most this many requests of each partition of the queue `limited` at once.
    #[arg(long)]
    queue_per_partition: Option<u32>,
    /// Submit (with --submit --queued) request `n` in partition `p{n % partitions}`.
    #[arg(long)]
    partitions: Option<i64>,
}

/// Where bodies write what they did.
struct RunLog {
    pool: AnyPool,
    instance: String,
    work: Duration,
}

#[async_exec(type = SaveAsync, name = "worker::record", remark = "record one execution")]
async fn record(n: i64, ctx: Context, log: Data<RunLog>) -> anyhow::Result<()> {
    run(n, &ctx, &log).await
}

/// The same, in the queue `limited` (its limits: `--queue-concurrency`,
/// `--queue-per-instance`).
#[async_exec(
    type = SaveAsync,
    name = "worker::record_queued",
    remark = "record one execution, within the queue's limits",
    queue = "limited"
)]
async fn record_queued(n: i64, ctx: Context, log: Data<RunLog>) -> anyhow::Result<()> {
    run(n, &ctx, &log).await
}

/// Three durable steps, each written to `step_runs` as it starts; the second works
/// `--work-ms` (a test kills the process in it).
#[async_exec(type = SaveAsync, name = "worker::three_steps", max_attempts = 5)]
async fn three_steps(n: i64, ctx: Context, log: Data<RunLog>) -> anyhow::Result<()> {
    for (step, slow) in [("one", false), ("two", true), ("three", false)] {
        ctx.step(step, || async {
            sqlx::query(&format!(
                "INSERT INTO step_runs (n, step, instance, attempt) VALUES ({n}, '{step}', '{}', {})",
                log.instance,
                ctx.attempt()
            ))
            .execute(&log.pool)
            .await?;
            if slow {
                tokio::time::sleep(log.work).await;
            }
            Ok::<_, anyhow::Error>(())
        })
        .await?;
    }
    Ok(())
}

/// Writes the execution's start to `worker_runs`, works, writes its finish.
async fn run(n: i64, ctx: &Context, log: &RunLog) -> anyhow::Result<()> {
    let id = ctx.request_id().unwrap_or_default();
    let attempt = ctx.attempt();
    sqlx::query(&format!(
        "INSERT INTO worker_runs (request_id, n, instance, attempt, started) VALUES ({id}, {n}, '{}', {attempt}, {})",
        log.instance,
        now_ms()
    ))
    .execute(&log.pool)
    .await?;
    tokio::time::sleep(log.work).await;
    sqlx::query(&format!(
        "UPDATE worker_runs SET finished = {} WHERE request_id = {id} AND instance = '{}' AND attempt = {attempt}",
        now_ms(),
        log.instance
    ))
    .execute(&log.pool)
    .await?;
    Ok(())
}

fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as i64
}

async fn submit<DB: Backend>(
    rt: &Runtime,
    total: i64,
    batch: i64,
    args: &Args,
) -> anyhow::Result<()> {
    let mut n = 0;
    while n < total {
        let mut tx: Tx<DB> = rt.begin().await?;
        for _ in 0..batch.min(total - n) {
            let call = if args.steps {
                three_steps(n)
            } else if args.queued {
                match args.partitions {
                    Some(p) => record_queued(n).partition(format!("p{}", n % p.max(1))),
                    None => record_queued(n),
                }
            } else {
                record(n)
            };
            call.within(&mut tx).await?;
            n += 1;
        }
        tx.commit().await?;
    }
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
    let bigint = if args.url.starts_with("sqlite") {
        "INTEGER"
    } else {
        "BIGINT"
    };
    sqlx::query(&format!(
        "CREATE TABLE IF NOT EXISTS worker_runs (request_id {bigint} NOT NULL, n {bigint} NOT NULL, \
         instance VARCHAR(100) NOT NULL, attempt INTEGER NOT NULL, started {bigint} NOT NULL, finished {bigint})"
    ))
    .execute(&pool)
    .await?;
    sqlx::query(
        "CREATE TABLE IF NOT EXISTS step_runs (n BIGINT NOT NULL, step VARCHAR(20) NOT NULL, \
         instance VARCHAR(100) NOT NULL, attempt INTEGER NOT NULL)",
    )
    .execute(&pool)
    .await?;

    let mut limits = async_exec::QueueLimits::new();
    if let Some(n) = args.queue_concurrency {
        limits = limits.concurrency(n);
    }
    if let Some(n) = args.queue_per_instance {
        limits = limits.per_instance(n);
    }
    if let Some(n) = args.queue_per_partition {
        limits = limits.per_partition(n);
    }
    let mut builder = Runtime::builder();
    if let Some(ms) = args.poll_ms {
        builder = builder.poll_interval(Duration::from_millis(ms));
    }
    if limits != async_exec::QueueLimits::new() {
        builder = builder.queue("limited", limits);
    }
    let rt = builder
        .database_url(&args.url)
        .application_name(&args.app)
        .concurrency(args.concurrency)
        .lease(Duration::from_millis(args.lease_ms))
        .heartbeat_interval(Duration::from_millis(args.heartbeat_ms))
        .compensate_interval(Duration::from_millis(args.compensate_ms))
        .stale_after(Duration::from_millis(args.compensate_ms))
        .shutdown_grace(Duration::from_millis(args.grace_ms))
        .run_workers(args.submit.is_none())
        .data(RunLog {
            pool,
            instance: args.instance.clone(),
            work: Duration::from_millis(args.work_ms),
        })
        .start()
        .await?;

    if let Some(total) = args.submit {
        let scheme = args.url.split(':').next().unwrap_or_default();
        match scheme {
            "sqlite" => submit::<async_exec::Sqlite>(&rt, total, args.batch, &args).await?,
            "postgres" | "postgresql" => {
                submit::<async_exec::Postgres>(&rt, total, args.batch, &args).await?
            }
            _ => submit::<async_exec::MySql>(&rt, total, args.batch, &args).await?,
        }
        rt.shutdown().await?;
        println!("submitted {total}");
        return Ok(());
    }

    println!("ready {}", args.instance);
    let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())?;
    tokio::select! {
        _ = term.recv() => {}
        _ = tokio::signal::ctrl_c() => {}
    }
    let report = rt.shutdown().await?;
    println!(
        "stopped finished={} released={}",
        report.finished, report.released
    );
    Ok(())
}

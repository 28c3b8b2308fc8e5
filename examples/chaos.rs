//! The chaos test's processes (`tests/chaos.rs`): one program, three modes.
//!
//!     # the history and receipt tables, once, before the others start
//!     cargo run --all-features --example chaos -- --url $URL --setup
//!     # a worker instance (its runtime's connections may go through a fault proxy)
//!     cargo run --all-features --example chaos -- --url $PROXIED --history-url $URL --instance w1.g1
//!     # a submitter: a steady stream of calls until SIGTERM
//!     cargo run --all-features --example chaos -- --url $URL --submit --seed 7
//!
//! A worker runs `chaos::work`, a body that writes one row per execution to
//! `chaos_history` (request id, key, instance, attempt, start and end in ms of the real
//! wall clock, outcome) through a connection of its own to `--history-url` (never through
//! the proxy), works for a few ms to a few hundred ms, and stops early, recording its end
//! then, when its lease is lost (`ctx.cancelled()`). `--clock-offset-ms` skews the
//! runtime's clock (`Builder::simulated_clock_offset`). On SIGUSR1 it submits
//! `--probe-count` calls of its own, to show that it still works: most run here (a fresh
//! request goes to the instance that committed it), but on PostgreSQL the other
//! instances, woken by `NOTIFY`, race for each one and win some (a third to a half in
//! the runs seen), so 32 of them, not 8: an instance that lost all 8 races once failed
//! the check that it worked. SIGTERM stops it gracefully. With `--memory-calls` it also
//! makes in-memory calls (`AsyncSave`, `Async`, `Thread`) of its own until SIGUSR2
//! (`chaos/memory.rs`).
//!
//! The submitter (`chaos/submitter.rs`) makes keyed and unkeyed calls, in transactions
//! and in autocommit, some keys twice (one after the other, or from two calls at once),
//! some transactions rolled back, some transaction scopes with a scope opened inside them
//! (refused: the outer scope rolls back), some calls to `chaos::work3` (`max_attempts =
//! 3`, failing on planned attempts), some to `chaos::stepped` (three durable steps, each
//! recorded in `chaos_steps` when its work runs and when the body sees its value), some
//! to `chaos::limited` (a queue of two over every instance), some delayed or with a
//! deadline, some transactions of keyed `SyncSave` calls, and
//! records every receipt in `chaos_receipts` after its transaction ended (with the
//! call's deadline); now and then it cancels a request it committed, and records the
//! answer in `chaos_cancels`.

#[path = "chaos/memory.rs"]
mod memory;
#[path = "chaos/receipts.rs"]
mod receipts;
#[path = "chaos/submitter.rs"]
mod submitter;

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use async_exec::{async_exec, Context, Data, QueueLimits, Runtime};
use clap::Parser;
use receipts::Receipts;
use sqlx::AnyPool;

#[derive(Parser, Debug)]
struct Args {
    /// The runtime's database URL (a worker's may point at a fault proxy).
    #[arg(long)]
    url: String,
    /// Where history rows and receipts go (default: `--url`); never through a proxy.
    #[arg(long)]
    history_url: Option<String>,
    /// Create the history and receipt tables, then exit.
    #[arg(long)]
    setup: bool,
    /// Submit calls until SIGTERM instead of running workers.
    #[arg(long)]
    submit: bool,
    /// The submitter's random seed.
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Application name shared by the instances.
    #[arg(long, default_value = "chaos")]
    app: String,
    /// This process's name in the history (`w1.g2`: instance w1, second start).
    #[arg(long, default_value = "worker")]
    instance: String,
    /// Pretend this process's clock is off by this many ms (negative: behind).
    #[arg(long, default_value_t = 0, allow_hyphen_values = true)]
    clock_offset_ms: i64,
    /// Bodies at once.
    #[arg(long, default_value_t = 8)]
    concurrency: usize,
    /// Lease length, ms.
    #[arg(long, default_value_t = 3_000)]
    lease_ms: u64,
    /// Heartbeat interval, ms.
    #[arg(long, default_value_t = 500)]
    heartbeat_ms: u64,
    /// Interval of the rescue, compensation and retry sweeps, ms.
    #[arg(long, default_value_t = 500)]
    sweep_ms: u64,
    /// Shutdown grace period, ms.
    #[arg(long, default_value_t = 1_000)]
    grace_ms: u64,
    /// Longest body, ms (the submitter draws each call's work up to this).
    #[arg(long, default_value_t = 400)]
    max_work_ms: u64,
    /// Calls a worker submits on SIGUSR1.
    #[arg(long, default_value_t = 32)]
    probe_count: u64,
    /// A worker makes in-memory calls (`AsyncSave`, `Async`, `Thread`) until SIGUSR2.
    #[arg(long)]
    memory_calls: bool,
}

/// Where bodies write what they did.
struct History {
    pool: AnyPool,
    instance: String,
    runs: AtomicU64,
    insert: String,
    update: String,
    /// A row of `chaos_steps`: a step of `chaos::stepped` ran, or its value was seen.
    step_insert: String,
    /// The in-memory and `SyncSave` bodies' statements (`chaos_mem_runs`).
    mem_insert: String,
    mem_update: String,
}

/// What a body gives up with when its history row could not be written, even after
/// tries for a few seconds (the history pool never goes through a proxy, but the database
/// itself can stall): the checker accepts an attempt logged with this error.
pub const HISTORY_NOT_WRITTEN: &str = "history not written";

impl History {
    /// Runs a history statement (built by `query`), trying again for about 5 s.
    async fn write<'q>(
        &self,
        query: impl Fn() -> sqlx::query::Query<'q, sqlx::Any, sqlx::any::AnyArguments<'q>>,
    ) -> anyhow::Result<()> {
        let mut tries = 0;
        loop {
            match query().execute(&self.pool).await {
                Ok(_) => return Ok(()),
                // A try whose answer was lost may have written the row already.
                Err(error) if tries > 0 && is_duplicate(&error) => return Ok(()),
                Err(error) if tries >= 50 => {
                    anyhow::bail!("{HISTORY_NOT_WRITTEN} ({tries} tries): {error}")
                }
                Err(_) => {
                    tries += 1;
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
            }
        }
    }

    fn new(pool: AnyPool, url: &str, instance: &str) -> History {
        let (mem_insert, mem_update) = memory::run_statements(url);
        History {
            mem_insert,
            mem_update,
            pool,
            instance: instance.to_string(),
            runs: AtomicU64::new(0),
            insert: dialect(
                url,
                "INSERT INTO chaos_history (run_id, request_id, req_key, instance, attempt, started, plan, outcome) \
                 VALUES ($1, $2, $3, $4, $5, $6, $7, 'running')",
            ),
            update: dialect(
                url,
                "UPDATE chaos_history SET ended = $1, outcome = $2 WHERE run_id = $3",
            ),
            step_insert: dialect(
                url,
                "INSERT INTO chaos_steps (run_id, request_id, step, kind, nonce, at) \
                 VALUES ($1, $2, $3, $4, $5, $6)",
            ),
        }
    }
}

/// Stops early (and fails, to be retried) when the lease is lost; fails its first
/// attempt when `fail_first`.
#[async_exec(type = SaveAsync, name = "chaos::work", remark = "one execution in the history", max_attempts = 1000, timeout = "30s")]
async fn work(
    key: Option<String>,
    work_ms: u64,
    fail_first: bool,
    ctx: Context,
    history: Data<History>,
) -> anyhow::Result<()> {
    let fail_on: &[u32] = if fail_first { &[1] } else { &[] };
    run_work(key, work_ms, fail_on, None, ctx, &history).await
}

/// [`work`] with three attempts: fails on purpose on the attempts in `fail_on` (some
/// requests on every attempt, so they go `dead`; the checker reads the plan from the
/// history, as `3:1,2`).
#[async_exec(type = SaveAsync, name = "chaos::work3", remark = "three attempts at most", max_attempts = 3, timeout = "30s")]
async fn work3(
    key: Option<String>,
    work_ms: u64,
    fail_on: Vec<u32>,
    ctx: Context,
    history: Data<History>,
) -> anyhow::Result<()> {
    let plan = format!(
        "3:{}",
        fail_on
            .iter()
            .map(u32::to_string)
            .collect::<Vec<_>>()
            .join(",")
    );
    run_work(key, work_ms, &fail_on, Some(plan), ctx, &history).await
}

/// The queue whose limit the checker holds the history to: at most this many of its
/// bodies at once over every instance (`chaos::limited`).
pub const LIMITED_QUEUE: &str = "chaos_limited";
pub const LIMITED_CONCURRENCY: u32 = 2;

/// [`work`] in a queue of [`LIMITED_CONCURRENCY`] over every instance (the plan
/// `limited` in the history).
#[async_exec(type = SaveAsync, name = "chaos::limited", remark = "a queue of two", queue = "chaos_limited", max_attempts = 1000, timeout = "30s")]
async fn limited(
    key: Option<String>,
    work_ms: u64,
    fail_first: bool,
    ctx: Context,
    history: Data<History>,
) -> anyhow::Result<()> {
    let fail_on: &[u32] = if fail_first { &[1] } else { &[] };
    run_work(key, work_ms, fail_on, Some("limited".into()), ctx, &history).await
}

/// The steps of a `chaos::stepped` body, in order.
pub const STEPS: [&str; 3] = ["reserve", "charge", "ship"];

/// [`work`] in three durable steps (`ctx.step`): each step writes a `ran` row with a
/// fresh random value when its work runs, and the body a `saw` row with the value each
/// step returned (run now, or kept by an earlier attempt). With `fail_first`, the first
/// attempt fails after the second step, so that the retry resumes at the third.
#[async_exec(type = SaveAsync, name = "chaos::stepped", remark = "three durable steps", max_attempts = 1000, timeout = "30s")]
async fn stepped(
    key: Option<String>,
    work_ms: u64,
    fail_first: bool,
    ctx: Context,
    history: Data<History>,
) -> anyhow::Result<()> {
    let id = ctx.request_id().unwrap_or_default();
    let attempt = ctx.attempt();
    let run_id = history.start(id, key, attempt, None).await?;
    let mut outcome = "ok";
    for (position, step) in STEPS.into_iter().enumerate() {
        let value = ctx
            .step(step, || async {
                let nonce = rand::random::<i64>() & i64::MAX;
                history.step_row(&run_id, id, step, "ran", nonce).await?;
                tokio::select! {
                    _ = tokio::time::sleep(Duration::from_millis(work_ms / 3)) => Ok(nonce),
                    _ = ctx.cancelled() => Err(anyhow::anyhow!("the lease was lost: stopped early")),
                }
            })
            .await;
        match value {
            Ok(nonce) => history.step_row(&run_id, id, step, "saw", nonce).await?,
            // A lost lease, or a value that could not be kept (the database cut off).
            Err(_) if ctx.is_cancelled() => {
                outcome = "cancelled";
                break;
            }
            Err(_) => {
                outcome = "step_error";
                break;
            }
        }
        if fail_first && attempt == 1 && position == 1 {
            outcome = "failed";
            break;
        }
    }
    history.end(&run_id, outcome).await?;
    match outcome {
        "ok" => Ok(()),
        "failed" => anyhow::bail!("attempt {attempt} fails on purpose after two steps"),
        other => anyhow::bail!("stopped early: {other}"),
    }
}

impl History {
    /// Writes the `running` row of an execution; its run id.
    async fn start(
        &self,
        id: i64,
        key: Option<String>,
        attempt: u32,
        plan: Option<String>,
    ) -> anyhow::Result<String> {
        let run_id = format!(
            "{}-{}",
            self.instance,
            self.runs.fetch_add(1, Ordering::Relaxed)
        );
        let started = now_ms();
        self.write(|| {
            sqlx::query(&self.insert)
                .bind(run_id.clone())
                .bind(id)
                .bind(key.clone())
                .bind(self.instance.clone())
                .bind(attempt as i32)
                .bind(started)
                .bind(plan.clone())
        })
        .await?;
        Ok(run_id)
    }

    /// Writes the end of an execution.
    async fn end(&self, run_id: &str, outcome: &str) -> anyhow::Result<()> {
        let ended = now_ms();
        self.write(|| {
            sqlx::query(&self.update)
                .bind(ended)
                .bind(outcome.to_string())
                .bind(run_id.to_string())
        })
        .await
    }

    /// Writes a `chaos_steps` row.
    async fn step_row(
        &self,
        run_id: &str,
        id: i64,
        step: &str,
        kind: &str,
        nonce: i64,
    ) -> anyhow::Result<()> {
        let at = now_ms();
        self.write(|| {
            sqlx::query(&self.step_insert)
                .bind(run_id.to_string())
                .bind(id)
                .bind(step.to_string())
                .bind(kind.to_string())
                .bind(nonce)
                .bind(at)
        })
        .await
    }
}

/// One execution: a history row written first, the work, its end written last.
async fn run_work(
    key: Option<String>,
    work_ms: u64,
    fail_on: &[u32],
    plan: Option<String>,
    ctx: Context,
    history: &History,
) -> anyhow::Result<()> {
    let id = ctx.request_id().unwrap_or_default();
    let attempt = ctx.attempt();
    let run_id = history.start(id, key, attempt, plan).await?;
    let outcome = tokio::select! {
        _ = tokio::time::sleep(Duration::from_millis(work_ms)) => {
            if fail_on.contains(&attempt) { "failed" } else { "ok" }
        }
        _ = ctx.cancelled() => "cancelled",
    };
    history.end(&run_id, outcome).await?;
    match outcome {
        "ok" => Ok(()),
        "failed" => anyhow::bail!("attempt {attempt} fails on purpose"),
        _ => anyhow::bail!("the lease was lost: stopped early"),
    }
}

fn is_duplicate(error: &sqlx::Error) -> bool {
    let text = error.to_string().to_lowercase();
    text.contains("duplicate") || text.contains("unique")
}

fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as i64
}

/// `$1` placeholders for PostgreSQL and SQLite, `?` for MySQL.
fn dialect(url: &str, sql: &str) -> String {
    if url.starts_with("mysql") || url.starts_with("mariadb") {
        let mut out = String::with_capacity(sql.len());
        let mut chars = sql.chars().peekable();
        while let Some(c) = chars.next() {
            if c == '$' {
                while chars.peek().is_some_and(char::is_ascii_digit) {
                    chars.next();
                }
                out.push('?');
            } else {
                out.push(c);
            }
        }
        out
    } else {
        sql.to_string()
    }
}

async fn setup(pool: &AnyPool, url: &str) -> anyhow::Result<()> {
    let bigint = if url.starts_with("sqlite") {
        "INTEGER"
    } else {
        "BIGINT"
    };
    for sql in [
        format!(
            "CREATE TABLE IF NOT EXISTS chaos_history (run_id VARCHAR(100) NOT NULL PRIMARY KEY, \
             request_id {bigint} NOT NULL, req_key VARCHAR(200), instance VARCHAR(100) NOT NULL, \
             attempt INTEGER NOT NULL, started {bigint} NOT NULL, ended {bigint}, plan VARCHAR(20), \
             outcome VARCHAR(20) NOT NULL)"
        ),
        format!(
            "CREATE TABLE IF NOT EXISTS chaos_receipts (request_id {bigint}, req_key VARCHAR(200), \
             outcome VARCHAR(20) NOT NULL, via VARCHAR(20) NOT NULL, source VARCHAR(100) NOT NULL, \
             recorded {bigint} NOT NULL, deadline_ms {bigint})"
        ),
        // A row per cancel the submitter asked, with its answer.
        format!(
            "CREATE TABLE IF NOT EXISTS chaos_cancels (request_id {bigint} NOT NULL, \
             asked {bigint} NOT NULL, answered {bigint} NOT NULL, outcome VARCHAR(20) NOT NULL)"
        ),
        // A row per step's work run (`ran`) and per step's value seen by the body (`saw`).
        format!(
            "CREATE TABLE IF NOT EXISTS chaos_steps (run_id VARCHAR(100) NOT NULL, \
             request_id {bigint} NOT NULL, step VARCHAR(20) NOT NULL, kind VARCHAR(10) NOT NULL, \
             nonce {bigint} NOT NULL, at {bigint} NOT NULL, PRIMARY KEY (run_id, step, kind))"
        ),
        memory::CREATE_CALLS.replace("{bigint}", bigint),
        memory::CREATE_RUNS.replace("{bigint}", bigint),
    ] {
        sqlx::query(&sql).execute(pool).await?;
    }
    Ok(())
}

/// Runs until SIGTERM; on SIGUSR1 submits `probe_count` calls of its own.
async fn serve(
    rt: &Runtime,
    receipts: Receipts,
    args: &Args,
    pool: AnyPool,
    url: &str,
) -> anyhow::Result<()> {
    use tokio::signal::unix::{signal, SignalKind};
    let mut term = signal(SignalKind::terminate())?;
    let mut probe = signal(SignalKind::user_defined1())?;
    let mut stop_memory = signal(SignalKind::user_defined2())?;
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    if args.memory_calls {
        let calls = memory::Calls::new(pool, url, &args.instance);
        let (rt, stop) = (rt.clone(), stop.clone());
        let scheme = args.url.split(':').next().unwrap_or_default();
        match scheme {
            "sqlite" => tokio::spawn(memory::memory_calls::<async_exec::Sqlite>(rt, calls, stop)),
            "postgres" | "postgresql" => tokio::spawn(
                memory::memory_calls::<async_exec::Postgres>(rt, calls, stop),
            ),
            _ => tokio::spawn(memory::memory_calls::<async_exec::MySql>(rt, calls, stop)),
        };
    }
    println!("ready {}", args.instance);
    tokio::spawn(watch_scheduling());
    loop {
        tokio::select! {
            _ = term.recv() => {
                stop.store(true, Ordering::Release);
                return Ok(());
            }
            _ = stop_memory.recv() => stop.store(true, Ordering::Release),
            _ = probe.recv() => {
                let mut queued = 0;
                for _ in 0..args.probe_count {
                    match work(None, 20, false).on(rt).await {
                        Ok(receipt) => {
                            receipts.receipt(&receipt, None, "probe").await;
                            queued += 1;
                        }
                        Err(error) => {
                            eprintln!("probe call failed: {error}");
                            // Written, maybe: the request may run, without a receipt.
                            if let async_exec::Error::Unconfirmed { .. } = error {
                                receipts.record(None, None, "unconfirmed", "probe").await;
                            }
                        }
                    }
                }
                println!("probed {queued}");
            }
        }
    }
}

/// Logs a warning when this process's timers fire late by half a second or more: a
/// process the machine did not schedule cannot renew its leases either, and a failed
/// chaos run prints these lines.
async fn watch_scheduling() {
    const TICK: Duration = Duration::from_millis(100);
    loop {
        let asked = std::time::Instant::now();
        tokio::time::sleep(TICK).await;
        let late = asked.elapsed().saturating_sub(TICK);
        if late >= Duration::from_millis(500) {
            tracing::warn!(
                late_ms = late.as_millis() as u64,
                "this process was not scheduled"
            );
        }
    }
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
    let history_url = args.history_url.clone().unwrap_or_else(|| args.url.clone());
    let pool = AnyPool::connect(&history_url).await?;
    if args.setup {
        setup(&pool, &history_url).await?;
        println!("set up");
        return Ok(());
    }
    let source = if args.submit {
        "submitter"
    } else {
        &args.instance
    };
    let receipts = Receipts::new(pool.clone(), &history_url, source);
    let rt = Runtime::builder()
        .database_url(&args.url)
        .application_name(&args.app)
        .install_global(false)
        .concurrency(args.concurrency)
        .lease(Duration::from_millis(args.lease_ms))
        .heartbeat_interval(Duration::from_millis(args.heartbeat_ms))
        .compensate_interval(Duration::from_millis(args.sweep_ms))
        .retry_interval(Duration::from_millis(args.sweep_ms))
        .poll_interval(Duration::from_millis(args.sweep_ms))
        .stale_after(Duration::from_millis(args.lease_ms))
        .retry_base_delay(Duration::from_millis(100))
        .retry_max_delay(Duration::from_secs(1))
        .shutdown_grace(Duration::from_millis(args.grace_ms))
        .simulated_clock_offset(args.clock_offset_ms)
        .run_workers(!args.submit)
        .queue(
            LIMITED_QUEUE,
            QueueLimits::new().concurrency(LIMITED_CONCURRENCY),
        )
        .data(History::new(pool.clone(), &history_url, &args.instance))
        .start()
        .await?;

    if args.submit {
        println!("ready submitter");
        let scheme = args.url.split(':').next().unwrap_or_default();
        let sync_calls = memory::Calls::new(pool.clone(), &history_url, "submitter");
        let calls = match scheme {
            "sqlite" => {
                submitter::submit::<async_exec::Sqlite>(&rt, receipts, sync_calls, &args).await?
            }
            "postgres" | "postgresql" => {
                submitter::submit::<async_exec::Postgres>(&rt, receipts, sync_calls, &args).await?
            }
            _ => submitter::submit::<async_exec::MySql>(&rt, receipts, sync_calls, &args).await?,
        };
        rt.shutdown().await?;
        println!("submitted {calls}");
        return Ok(());
    }

    serve(&rt, receipts, &args, pool.clone(), &history_url).await?;
    match rt.shutdown().await {
        Ok(report) => println!(
            "stopped finished={} released={} unwritten={}",
            report.finished, report.released, report.unwritten
        ),
        // Shutdown returned within its bound but could not hand the records back: the
        // database did not answer in time (a stall, or locks held by a session that went
        // silent). It stopped all the same; the records run again once their leases end.
        Err(error) => println!("stopped without handing records back: {error}"),
    }
    Ok(())
}

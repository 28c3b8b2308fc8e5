//! Throughput benchmark (issue 4): async-exec against a small hand-written SQL queue doing
//! the same work in the same run, on SQLite, PostgreSQL and MariaDB/MySQL.
//!
//! ```sh
//! cargo bench --bench throughput --all-features                       # everything, defaults
//! cargo bench --bench throughput --all-features -- --backend sqlite --n 2000 --reps 1 --backlog 20000
//! ```
//!
//! Phases (`--phases submit,drain,latency,overhead,backlog`), for async-exec and for the
//! baseline queue, repetitions interleaved (library, baseline, baseline, library, ...: in
//! the drain and latency phases the two take turns going first; `--baseline-first` starts
//! with the baseline):
//!
//! 1. `submit`: `--n` SaveAsync calls with the workers stopped: one call per transaction
//!    (`submit_tx1`; baseline: one INSERT per transaction), transactions of 1000 calls
//!    (`submit_tx1000`; baseline: 1000 INSERTs per transaction), the batch API in chunks of
//!    1000 (`submit_batch`; baseline: one multi-row INSERT per 1000). calls/s.
//! 2. `drain`: workers started on those records; time until every body has run, each
//!    exactly once (checked). jobs/s; `drain_first_body`: ms from start to the first body.
//! 3. `latency`: workers running, queue empty, calls one transaction each, 10 ms apart;
//!    from the caller's `commit()` returning to the body starting. On PostgreSQL also
//!    `latency_other_*`: a submit-only runtime commits, another runtime runs (`NOTIFY`).
//! 4. `overhead`: a transaction inserting one business row with one call in it, over the
//!    same transaction without (median over median; the baseline adds one queue INSERT).
//! 5. `backlog`: `--backlog` queued records drained by a child process (this binary,
//!    `--phase backlog`): its peak RSS (`VmHWM`).
//! 6. `scale` (only when named): `--n` calls committed at once, drained by 1, 2, 3
//!    (`--instances`) worker processes on one database (this binary, `--phase scale`):
//!    jobs/s from the commit to the last body, each call run exactly once (checked).
//! 7. `soak` (only when named): `--soak-rate` calls a second for `--soak-minutes`, on one
//!    runtime; per minute: commit-to-start p50/p99/max, rows in the table, the RSS.
//! 8. `flow` (only when named): the drain of `--n` records in no queue, in a queue limited
//!    to 100 at once, and in one limited to 100 and 4 per partition (50 partitions), with
//!    the baseline's drain: jobs/s and the ratios to the drain in no queue.
//! 9. `neighbour` (only when named): one queue limited per partition, calls at a steady
//!    rate, 90 % of one partition: the 49 small partitions' commit-to-start p50/p95, with
//!    the noisy partition and without it (see `phases/neighbour.rs`).
//! 10. `crowd` (only when named): a quiet queue's calls beside another queue's backlog of
//!     100,000 waiting records, and alone (see `phases/crowd.rs`).
//!
//! Each backend gets a fresh database (a temporary SQLite file; `ae_bench_<pid>` on the
//! servers, dropped at the end). Output: one JSON line per result on stdout, then one per
//! phase median with its ratio to the baseline, then a table. Progress goes to stderr.

use std::collections::BTreeMap;
use std::future::Future;
use std::ops::Range;
use std::str::FromStr;
use std::sync::atomic::{AtomicU64, AtomicU8, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{anyhow, bail, ensure, Context as _, Result};
use async_exec::{async_exec, Backend, Data, MySql, Postgres, Runtime, Sqlite, Tx};
use clap::Parser;
use serde::{Deserialize, Serialize};
use serde_json::json;
use sqlx::mysql::{MySqlPool, MySqlPoolOptions};
use sqlx::postgres::{PgPool, PgPoolOptions};
use sqlx::sqlite::{SqliteConnectOptions, SqliteJournalMode, SqlitePoolOptions, SqliteSynchronous};
use sqlx::SqlitePool;
use tokio::sync::{mpsc, watch, Notify, Semaphore};

/// Calls per transaction, per batch and per multi-row INSERT.
const CHUNK: usize = 1000;
/// Rows the baseline claims at once.
const CLAIM_BATCH: i64 = 64;
/// Ids the baseline deletes at once, at most.
const DELETE_BATCH: usize = 1000;
/// Time between two latency calls.
const LATENCY_GAP: Duration = Duration::from_millis(10);
/// A drain that makes no progress for this long fails.
const STALL: Duration = Duration::from_secs(60);
/// The runtime's application name.
const APP: &str = "bench";

#[derive(Parser, Debug, Clone)]
#[command(about = "async-exec against a hand-written SQL queue")]
struct Args {
    /// sqlite, postgres, mysql or all.
    #[arg(long, default_value = "all")]
    backend: String,
    /// Calls submitted and drained per repetition.
    #[arg(long, default_value_t = 20_000)]
    n: usize,
    /// Bodies running at once (both implementations).
    #[arg(long, default_value_t = 8)]
    concurrency: usize,
    /// Repetitions, interleaved; medians are reported.
    #[arg(long, default_value_t = 3)]
    reps: usize,
    /// Records in the backlog phase (0 skips it).
    #[arg(long, default_value_t = 1_000_000)]
    backlog: usize,
    /// Repetitions of the backlog phase (it is long, and memory is not noisy).
    #[arg(long, default_value_t = 1)]
    backlog_reps: usize,
    /// Calls in the latency phase.
    #[arg(long, default_value_t = 300)]
    latency_calls: usize,
    /// Transactions of each kind in the overhead phase.
    #[arg(long, default_value_t = 2000)]
    overhead_n: usize,
    /// Comma-separated: submit, drain, latency, overhead, backlog, scale, soak, flow,
    /// neighbour, crowd (the last five only when named: see `phases/scale.rs`,
    /// `phases/soak.rs`, `phases/flow.rs`, `phases/neighbour.rs` and `phases/crowd.rs`).
    #[arg(long, default_value = "submit,drain,latency,overhead,backlog")]
    phases: String,
    /// Worker processes in the scale phase, comma-separated (each from 1 to 8).
    #[arg(long, value_delimiter = ',', default_value = "1,2,3")]
    instances: Vec<usize>,
    /// A limit over every queue (`Builder::global_concurrency`) on the library's
    /// runtimes: what the limited queues' claim path costs (the benchmarked executor is
    /// in no queue and is then claimed as the queue `(all)`; set above `--concurrency`,
    /// the limit holds nothing back).
    #[arg(long)]
    global_limit: Option<u32>,
    /// Calls a second in the soak phase.
    #[arg(long, default_value_t = 5000)]
    soak_rate: usize,
    /// Calls in each of the soak's transactions.
    #[arg(long, default_value_t = 10)]
    soak_per_tx: usize,
    /// Minutes the soak lasts.
    #[arg(long, default_value_t = 10)]
    soak_minutes: usize,
    /// Calls a second in the neighbour phase (nine in ten of the noisy partition).
    #[arg(long, default_value_t = 400)]
    neighbour_rate: usize,
    /// Seconds of calls in each run of the neighbour phase.
    #[arg(long, default_value_t = 10)]
    neighbour_seconds: usize,
    /// How long each body of the neighbour phase works (ms): it holds its worker and its
    /// partition's place that long.
    #[arg(long, default_value_t = 10)]
    neighbour_work_ms: u64,
    /// Records waiting in the busy queue of the crowd phase.
    #[arg(long, default_value_t = 100_000)]
    crowd_backlog: usize,
    /// Comma-separated submit modes timed in the submit phase: tx1, tx1000, batch.
    #[arg(long, default_value = "tx1,batch,tx1000")]
    submit_modes: String,
    /// SQLite's `synchronous` for both async-exec and the queue: `full` (the library's
    /// default) or `normal`.
    #[arg(long, default_value = "full")]
    sqlite_synchronous: String,
    /// A PostgreSQL database to connect to; the benchmark creates its own beside it.
    #[arg(long, default_value = "postgres://postgres@127.0.0.1:5432/test")]
    postgres_url: String,
    /// A MySQL/MariaDB database to connect to; the benchmark creates its own beside it.
    #[arg(long, default_value = "mysql://root@127.0.0.1:3306/test")]
    mysql_url: String,
    /// Start the drain and latency phases of the first repetition with the baseline (the
    /// two implementations take turns going first; this flips the turns, for series of
    /// one-repetition runs).
    #[arg(long)]
    baseline_first: bool,
    /// Internal: run one phase in this process (`backlog` or `scale`, as a child of the
    /// benchmark).
    #[arg(long, hide = true)]
    phase: Option<String>,
    /// Internal: the child's implementation (`async-exec` or `baseline`).
    #[arg(long = "impl", hide = true)]
    implementation: Option<String>,
    /// Internal: the child's database URL.
    #[arg(long, hide = true)]
    url: Option<String>,
    /// Passed by `cargo bench`; ignored.
    #[arg(long, hide = true)]
    bench: bool,
}

mod backends;
#[path = "../common/database.rs"]
mod database;
#[macro_use]
mod baseline;
mod hits;
mod phases;
mod results;

use backends::*;
use baseline::*;
use database::{Database, Kind};
use hits::*;
use phases::*;
use results::*;

/// SQLite's `synchronous` for this run, as the queue's and the library's setting.
static SQLITE_SYNCHRONOUS: std::sync::OnceLock<(SqliteSynchronous, async_exec::SqliteSynchronous)> =
    std::sync::OnceLock::new();

fn sqlite_synchronous() -> (SqliteSynchronous, async_exec::SqliteSynchronous) {
    *SQLITE_SYNCHRONOUS.get().expect("set in main")
}

#[tokio::main]
async fn main() -> Result<()> {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| "warn".into()),
        )
        .with_writer(std::io::stderr)
        .init();
    let args = Args::parse();
    let level = match args.sqlite_synchronous.as_str() {
        "full" => (SqliteSynchronous::Full, async_exec::SqliteSynchronous::Full),
        "normal" => (
            SqliteSynchronous::Normal,
            async_exec::SqliteSynchronous::Normal,
        ),
        other => bail!("--sqlite-synchronous full|normal, not {other:?}"),
    };
    SQLITE_SYNCHRONOUS
        .set(level)
        .map_err(|_| anyhow!("set twice"))?;
    match args.phase.as_deref() {
        None => {}
        Some("backlog") => return backlog_child(&args).await,
        Some("scale") => return scale_child(&args).await,
        Some(other) => bail!("--phase backlog|scale, not `{other}`"),
    }
    let phases: Vec<&str> = args.phases.split(',').map(str::trim).collect();
    for phase in &phases {
        ensure!(
            [
                "submit",
                "drain",
                "latency",
                "overhead",
                "backlog",
                "scale",
                "soak",
                "flow",
                "neighbour",
                "crowd"
            ]
            .contains(phase),
            "unknown phase `{phase}`: submit, drain, latency, overhead, backlog, scale, soak, \
             flow, neighbour, crowd"
        );
    }
    let kinds: Vec<Kind> = match args.backend.as_str() {
        "all" => vec![Kind::Sqlite, Kind::Postgres, Kind::Mysql],
        other => other.split(',').map(str::parse).collect::<Result<_>>()?,
    };
    let mut results = Results::default();
    for kind in kinds {
        let started = Instant::now();
        let db = Database::create(kind, "bench", &args.postgres_url, &args.mysql_url).await?;
        eprintln!("[{}] database {}", kind.name(), db.url);
        let outcome = run_backend(&args, kind, &db.url, &phases, &mut results).await;
        let dropped = db.drop_database().await;
        outcome.with_context(|| format!("backend {}", kind.name()))?;
        dropped?;
        eprintln!(
            "[{}] done in {:.0} s",
            kind.name(),
            started.elapsed().as_secs_f64()
        );
    }
    results.print_summary();
    Ok(())
}

async fn run_backend(
    args: &Args,
    kind: Kind,
    url: &str,
    phases: &[&str],
    results: &mut Results,
) -> Result<()> {
    let pool = Pool::connect(kind, url).await?;
    let mut bench = Bench {
        args,
        kind,
        url: url.to_string(),
        queue: Queue {
            kind,
            pool: pool.clone(),
        },
        results,
    };
    let outcome = match kind {
        Kind::Sqlite => bench.run::<Sqlite>(phases).await,
        Kind::Postgres => bench.run::<Postgres>(phases).await,
        Kind::Mysql => bench.run::<MySql>(phases).await,
    };
    pool.close().await;
    outcome
}

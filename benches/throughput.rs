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
use sqlx::{Connection, SqlitePool};
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
    /// Comma-separated: submit, drain, latency, overhead, backlog.
    #[arg(long, default_value = "submit,drain,latency,overhead,backlog")]
    phases: String,
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
    /// Internal: run one phase in this process (`backlog`, as a child of the benchmark).
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

// ---------------------------------------------------------------------------------------
// What the bodies record

/// Which bodies ran, how often and when: one slot per call number.
#[derive(Debug)]
struct Hits {
    epoch: Instant,
    runs: Vec<AtomicU8>,
    /// Nanoseconds after `epoch` that each body started (latency phases only).
    started: Vec<AtomicU64>,
    first: AtomicU64,
    done: AtomicUsize,
    out_of_range: AtomicUsize,
    progress: Notify,
}

impl Hits {
    fn new(n: usize) -> Arc<Hits> {
        Self::build(n, false)
    }

    fn timed(n: usize) -> Arc<Hits> {
        Self::build(n, true)
    }

    fn build(n: usize, timed: bool) -> Arc<Hits> {
        Arc::new(Hits {
            epoch: Instant::now(),
            runs: (0..n).map(|_| AtomicU8::new(0)).collect(),
            started: (0..if timed { n } else { 0 })
                .map(|_| AtomicU64::new(0))
                .collect(),
            first: AtomicU64::new(0),
            done: AtomicUsize::new(0),
            out_of_range: AtomicUsize::new(0),
            progress: Notify::new(),
        })
    }

    fn now_ns(&self) -> u64 {
        (self.epoch.elapsed().as_nanos() as u64).max(1)
    }

    /// What every body does, in both implementations.
    fn hit(&self, n: i64) {
        let now = self.now_ns();
        let _ = self
            .first
            .compare_exchange(0, now, Ordering::AcqRel, Ordering::Acquire);
        if let Some(started) = self.started.get(n as usize) {
            started.store(now, Ordering::Release);
        }
        match self.runs.get(n as usize) {
            Some(runs) => {
                let _ = runs.fetch_update(Ordering::AcqRel, Ordering::Acquire, |r| {
                    Some(r.saturating_add(1))
                });
            }
            None => {
                self.out_of_range.fetch_add(1, Ordering::AcqRel);
            }
        }
        self.done.fetch_add(1, Ordering::AcqRel);
        self.progress.notify_one();
    }

    fn done(&self) -> usize {
        self.done.load(Ordering::Acquire)
    }

    /// Waits until `target` bodies have run; fails when nothing runs for [`STALL`].
    async fn wait_for(&self, target: usize, what: &str) -> Result<()> {
        let mut seen = self.done();
        while seen < target {
            if tokio::time::timeout(STALL, self.progress.notified())
                .await
                .is_err()
            {
                let now = self.done();
                ensure!(
                    now > seen,
                    "{what}: stalled, {now} of {target} bodies ran, none in the last {STALL:?}"
                );
            }
            seen = self.done();
        }
        Ok(())
    }

    /// Every call ran exactly once, and nothing else ran.
    fn check_exactly_once(&self, what: &str) -> Result<()> {
        let mut never = Vec::new();
        let mut twice = Vec::new();
        for (n, runs) in self.runs.iter().enumerate() {
            match runs.load(Ordering::Acquire) {
                1 => {}
                0 => never.push(n),
                _ => twice.push(n),
            }
        }
        let stray = self.out_of_range.load(Ordering::Acquire);
        ensure!(
            never.is_empty() && twice.is_empty() && stray == 0,
            "{what}: NOT EXACTLY ONCE: {} calls never ran (first {:?}), {} ran more than once \
             (first {:?}), {stray} bodies of unknown calls",
            never.len(),
            &never[..never.len().min(10)],
            twice.len(),
            &twice[..twice.len().min(10)],
        );
        Ok(())
    }

    fn first_body(&self) -> Duration {
        Duration::from_nanos(self.first.load(Ordering::Acquire))
    }

    fn started_ns(&self, n: usize) -> u64 {
        self.started[n].load(Ordering::Acquire)
    }
}

/// The benchmarked function: marks its call number.
#[async_exec(type = SaveAsync, name = "bench::job")]
async fn job(n: i64, hits: Data<Hits>) {
    hits.hit(n);
}

/// The baseline's payload, JSON as the library's arguments are.
#[derive(Serialize, Deserialize)]
struct Payload {
    n: i64,
}

fn payload(n: i64) -> String {
    serde_json::to_string(&Payload { n }).expect("a payload serializes")
}

// ---------------------------------------------------------------------------------------
// Backends and databases

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Kind {
    Sqlite,
    Postgres,
    Mysql,
}

impl Kind {
    fn name(self) -> &'static str {
        match self {
            Kind::Sqlite => "sqlite",
            Kind::Postgres => "postgres",
            Kind::Mysql => "mysql",
        }
    }

    /// The `i`-th (from 1) bind placeholder.
    fn placeholder(self, i: usize) -> String {
        match self {
            Kind::Postgres => format!("${i}"),
            Kind::Sqlite | Kind::Mysql => "?".into(),
        }
    }

    /// `(p, p, ...)`, `count` placeholders numbered from `from`.
    fn tuple(self, from: usize, count: usize) -> String {
        let items: Vec<String> = (from..from + count).map(|i| self.placeholder(i)).collect();
        format!("({})", items.join(", "))
    }
}

impl FromStr for Kind {
    type Err = anyhow::Error;
    fn from_str(s: &str) -> Result<Kind> {
        match s {
            "sqlite" => Ok(Kind::Sqlite),
            "postgres" | "postgresql" => Ok(Kind::Postgres),
            "mysql" | "mariadb" => Ok(Kind::Mysql),
            _ => bail!("unknown backend `{s}`: sqlite, postgres, mysql or all"),
        }
    }
}

/// The benchmark's own database: a temporary SQLite file, or `ae_bench_<pid>` on a server.
struct Database {
    kind: Kind,
    url: String,
    /// The server database to connect to for `DROP DATABASE`, and the name to drop.
    server: Option<(String, String)>,
    _dir: Option<tempfile::TempDir>,
}

impl Database {
    async fn create(kind: Kind, args: &Args) -> Result<Database> {
        let name = format!("ae_bench_{}", std::process::id());
        match kind {
            Kind::Sqlite => {
                let dir = tempfile::tempdir()?;
                let url = format!("sqlite:{}", dir.path().join("bench.db").display());
                Ok(Database {
                    kind,
                    url,
                    server: None,
                    _dir: Some(dir),
                })
            }
            Kind::Postgres | Kind::Mysql => {
                let admin = match kind {
                    Kind::Postgres => &args.postgres_url,
                    _ => &args.mysql_url,
                };
                admin_execute(kind, admin, &format!("CREATE DATABASE {name}")).await?;
                let (base, _) = admin
                    .rsplit_once('/')
                    .ok_or_else(|| anyhow!("no database name in `{admin}`"))?;
                Ok(Database {
                    kind,
                    url: format!("{base}/{name}"),
                    server: Some((admin.clone(), name)),
                    _dir: None,
                })
            }
        }
    }

    async fn drop_database(self) -> Result<()> {
        if let Some((admin, name)) = &self.server {
            let sql = match self.kind {
                Kind::Postgres => format!("DROP DATABASE IF EXISTS {name} WITH (FORCE)"),
                _ => format!("DROP DATABASE IF EXISTS {name}"),
            };
            admin_execute(self.kind, admin, &sql).await?;
        }
        Ok(())
    }
}

async fn admin_execute(kind: Kind, url: &str, sql: &str) -> Result<()> {
    match kind {
        Kind::Postgres => {
            let mut conn = sqlx::PgConnection::connect(url).await?;
            sqlx::query(sql).execute(&mut conn).await?;
            conn.close().await?;
        }
        Kind::Mysql => {
            let mut conn = sqlx::MySqlConnection::connect(url).await?;
            sqlx::query(sql).execute(&mut conn).await?;
            conn.close().await?;
        }
        Kind::Sqlite => unreachable!("a SQLite database is a file"),
    }
    Ok(())
}

/// The backend's sqlx types, for the statements the benchmark runs in a library `Tx`.
trait BenchDb: Backend {
    /// The caller's own row.
    async fn business_insert(conn: &mut Self::Connection, n: i64) -> sqlx::Result<()>;
    /// What the baseline queue writes for one call.
    async fn queue_insert(conn: &mut Self::Connection, n: i64) -> sqlx::Result<()>;
}

macro_rules! bench_db {
    ($db:ty, $business:literal, $queue:literal) => {
        impl BenchDb for $db {
            async fn business_insert(
                conn: &mut <$db as sqlx::Database>::Connection,
                n: i64,
            ) -> sqlx::Result<()> {
                sqlx::query($business)
                    .bind(n)
                    .bind("order for a customer")
                    .execute(conn)
                    .await
                    .map(drop)
            }

            async fn queue_insert(
                conn: &mut <$db as sqlx::Database>::Connection,
                n: i64,
            ) -> sqlx::Result<()> {
                sqlx::query($queue)
                    .bind(payload(n))
                    .execute(conn)
                    .await
                    .map(drop)
            }
        }
    };
}

bench_db!(
    Sqlite,
    "INSERT INTO bench_business (n, note) VALUES (?, ?)",
    "INSERT INTO bench_queue (status, payload) VALUES ('init', ?)"
);
bench_db!(
    Postgres,
    "INSERT INTO bench_business (n, note) VALUES ($1, $2)",
    "INSERT INTO bench_queue (status, payload) VALUES ('init', $1)"
);
bench_db!(
    MySql,
    "INSERT INTO bench_business (n, note) VALUES (?, ?)",
    "INSERT INTO bench_queue (status, payload) VALUES ('init', ?)"
);

// ---------------------------------------------------------------------------------------
// The baseline: a hand-written SQL queue

/// A pool of the backend in use.
#[derive(Clone)]
enum Pool {
    Sqlite(SqlitePool),
    Postgres(PgPool),
    Mysql(MySqlPool),
}

/// Runs the same code on whichever pool it is.
macro_rules! on_pool {
    ($pool:expr, |$p:ident| $body:expr) => {
        match $pool {
            Pool::Sqlite($p) => $body,
            Pool::Postgres($p) => $body,
            Pool::Mysql($p) => $body,
        }
    };
}

impl Pool {
    /// Connects as the library does (SQLite: WAL, `synchronous` as `--sqlite-synchronous`
    /// says, the same for both; 8 connections).
    async fn connect(kind: Kind, url: &str) -> Result<Pool> {
        Ok(match kind {
            Kind::Sqlite => {
                let options = SqliteConnectOptions::from_str(url)?
                    .create_if_missing(true)
                    .journal_mode(SqliteJournalMode::Wal)
                    .synchronous(sqlite_synchronous().0)
                    .busy_timeout(Duration::from_secs(10));
                Pool::Sqlite(
                    SqlitePoolOptions::new()
                        .max_connections(8)
                        .connect_with(options)
                        .await?,
                )
            }
            Kind::Postgres => {
                Pool::Postgres(PgPoolOptions::new().max_connections(8).connect(url).await?)
            }
            Kind::Mysql => Pool::Mysql(
                MySqlPoolOptions::new()
                    .max_connections(8)
                    .connect(url)
                    .await?,
            ),
        })
    }

    async fn execute(&self, sql: &str) -> Result<u64> {
        Ok(on_pool!(self, |p| sqlx::query(sql)
            .execute(p)
            .await?
            .rows_affected()))
    }

    async fn count(&self, table: &str) -> Result<i64> {
        let sql = format!("SELECT COUNT(*) FROM {table}");
        Ok(on_pool!(self, |p| sqlx::query_as::<_, (i64,)>(&sql)
            .fetch_one(p)
            .await?
            .0))
    }

    /// Empties a table between phases.
    async fn clear(&self, table: &str) -> Result<()> {
        match self {
            Pool::Sqlite(_) => self.execute(&format!("DELETE FROM {table}")).await?,
            _ => self.execute(&format!("TRUNCATE TABLE {table}")).await?,
        };
        Ok(())
    }

    /// Waits until a table is empty (completions are written after the bodies ran).
    async fn wait_empty(&self, table: &str, what: &str) -> Result<()> {
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            let left = self.count(table).await?;
            if left == 0 {
                return Ok(());
            }
            ensure!(
                Instant::now() < deadline,
                "{what}: {left} rows left in {table} after every body ran"
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    async fn close(&self) {
        on_pool!(self, |p| p.close().await)
    }
}

/// The hand-written queue: a table, INSERTs, batched claims and batched DELETEs.
#[derive(Clone)]
struct Queue {
    kind: Kind,
    pool: Pool,
}

impl Queue {
    async fn setup(&self) -> Result<()> {
        let statements: &[&str] = match self.kind {
            Kind::Sqlite => &[
                "CREATE TABLE IF NOT EXISTS bench_queue (id INTEGER PRIMARY KEY, \
                 status TEXT NOT NULL, payload TEXT NOT NULL, locked_until INTEGER)",
                "CREATE INDEX IF NOT EXISTS bench_queue_status ON bench_queue (status, id)",
                "CREATE TABLE IF NOT EXISTS bench_business (id INTEGER PRIMARY KEY, \
                 n INTEGER NOT NULL, note TEXT NOT NULL)",
            ],
            Kind::Postgres => &[
                "CREATE TABLE IF NOT EXISTS bench_queue (id BIGSERIAL PRIMARY KEY, \
                 status TEXT NOT NULL, payload TEXT NOT NULL, locked_until BIGINT)",
                "CREATE INDEX IF NOT EXISTS bench_queue_status ON bench_queue (status, id)",
                "CREATE TABLE IF NOT EXISTS bench_business (id BIGSERIAL PRIMARY KEY, \
                 n BIGINT NOT NULL, note TEXT NOT NULL)",
            ],
            Kind::Mysql => &[
                "CREATE TABLE IF NOT EXISTS bench_queue (id BIGINT NOT NULL AUTO_INCREMENT \
                 PRIMARY KEY, status VARCHAR(16) NOT NULL, payload TEXT NOT NULL, \
                 locked_until BIGINT, KEY bench_queue_status (status, id)) ENGINE = InnoDB",
                "CREATE TABLE IF NOT EXISTS bench_business (id BIGINT NOT NULL AUTO_INCREMENT \
                 PRIMARY KEY, n BIGINT NOT NULL, note TEXT NOT NULL) ENGINE = InnoDB",
            ],
        };
        for sql in statements {
            self.pool.execute(sql).await?;
        }
        Ok(())
    }

    fn insert_sql(&self) -> String {
        format!(
            "INSERT INTO bench_queue (status, payload) VALUES ('init', {})",
            self.kind.placeholder(1)
        )
    }

    /// One INSERT in its own transaction.
    async fn insert_one(&self, n: i64) -> Result<()> {
        let sql = self.insert_sql();
        on_pool!(&self.pool, |p| {
            let mut tx = p.begin().await?;
            sqlx::query(&sql).bind(payload(n)).execute(&mut *tx).await?;
            tx.commit().await?;
        });
        Ok(())
    }

    /// One INSERT per call, all in one transaction.
    async fn insert_each(&self, ns: Range<i64>) -> Result<()> {
        let sql = self.insert_sql();
        on_pool!(&self.pool, |p| {
            let mut tx = p.begin().await?;
            for n in ns {
                sqlx::query(&sql).bind(payload(n)).execute(&mut *tx).await?;
            }
            tx.commit().await?;
        });
        Ok(())
    }

    /// One multi-row INSERT, in one transaction.
    async fn insert_multi(&self, ns: Range<i64>) -> Result<()> {
        let rows: Vec<String> = (1..=ns.clone().count())
            .map(|i| format!("('init', {})", self.kind.placeholder(i)))
            .collect();
        let sql = format!(
            "INSERT INTO bench_queue (status, payload) VALUES {}",
            rows.join(", ")
        );
        on_pool!(&self.pool, |p| {
            let mut tx = p.begin().await?;
            let mut query = sqlx::query(&sql);
            for n in ns {
                query = query.bind(payload(n));
            }
            query.execute(&mut *tx).await?;
            tx.commit().await?;
        });
        Ok(())
    }

    /// Claims up to `limit` rows in one statement (MySQL: a locking read and an UPDATE
    /// in one transaction).
    async fn claim(&self, limit: i64) -> Result<Vec<(i64, String)>> {
        retry_conflicts(|| self.claim_once(limit)).await
    }

    async fn claim_once(&self, limit: i64) -> Result<Vec<(i64, String)>> {
        let lease_until = now_ms() + 30_000;
        Ok(match &self.pool {
            Pool::Sqlite(p) => {
                sqlx::query_as(
                    "UPDATE bench_queue SET status = 'running', locked_until = ? WHERE id IN \
                     (SELECT id FROM bench_queue WHERE status = 'init' ORDER BY id LIMIT ?) \
                     RETURNING id, payload",
                )
                .bind(lease_until)
                .bind(limit)
                .fetch_all(p)
                .await?
            }
            Pool::Postgres(p) => {
                sqlx::query_as(
                    "UPDATE bench_queue SET status = 'running', locked_until = $1 WHERE id IN \
                     (SELECT id FROM bench_queue WHERE status = 'init' ORDER BY id LIMIT $2 \
                     FOR UPDATE SKIP LOCKED) RETURNING id, payload",
                )
                .bind(lease_until)
                .bind(limit)
                .fetch_all(p)
                .await?
            }
            Pool::Mysql(p) => {
                let mut tx = p.begin().await?;
                let rows: Vec<(i64, String)> = sqlx::query_as(
                    "SELECT id, payload FROM bench_queue WHERE status = 'init' ORDER BY id \
                     LIMIT ? FOR UPDATE SKIP LOCKED",
                )
                .bind(limit)
                .fetch_all(&mut *tx)
                .await?;
                if !rows.is_empty() {
                    let sql = format!(
                        "UPDATE bench_queue SET status = 'running', locked_until = ? \
                         WHERE id IN {}",
                        self.kind.tuple(2, rows.len())
                    );
                    let mut query = sqlx::query(&sql).bind(lease_until);
                    for (id, _) in &rows {
                        query = query.bind(id);
                    }
                    query.execute(&mut *tx).await?;
                }
                tx.commit().await?;
                rows
            }
        })
    }

    async fn delete(&self, ids: &[i64]) -> Result<()> {
        retry_conflicts(|| self.delete_once(ids)).await
    }

    async fn delete_once(&self, ids: &[i64]) -> Result<()> {
        let sql = format!(
            "DELETE FROM bench_queue WHERE id IN {}",
            self.kind.tuple(1, ids.len())
        );
        on_pool!(&self.pool, |p| {
            let mut query = sqlx::query(&sql);
            for id in ids {
                query = query.bind(id);
            }
            query.execute(p).await?;
        });
        Ok(())
    }
}

/// Runs `op` again when the database reports a deadlock or a serialization failure
/// (SQLSTATE 40001): MariaDB's claims and deletes of neighbouring rows deadlock now and then.
async fn retry_conflicts<T, Fut>(mut op: impl FnMut() -> Fut) -> Result<T>
where
    Fut: Future<Output = Result<T>>,
{
    let mut conflicts = 0;
    loop {
        match op().await {
            Err(error) if conflicts < 20 && is_conflict(&error) => conflicts += 1,
            outcome => return outcome,
        }
    }
}

fn is_conflict(error: &anyhow::Error) -> bool {
    matches!(error.downcast_ref::<sqlx::Error>(),
        Some(sqlx::Error::Database(e)) if e.code().as_deref() == Some("40001"))
}

/// The baseline's workers: one claimer that claims in batches and runs `concurrency`
/// bodies at once, and one task that deletes completed ids in batches.
struct QueueWorker {
    wake: Arc<Notify>,
    stop: watch::Sender<bool>,
    task: tokio::task::JoinHandle<Result<()>>,
}

impl QueueWorker {
    fn start(queue: Queue, hits: Arc<Hits>, concurrency: usize) -> QueueWorker {
        let wake = Arc::new(Notify::new());
        let (stop, stopped) = watch::channel(false);
        let task = tokio::spawn(Self::run(queue, hits, concurrency, wake.clone(), stopped));
        QueueWorker { wake, stop, task }
    }

    async fn run(
        queue: Queue,
        hits: Arc<Hits>,
        concurrency: usize,
        wake: Arc<Notify>,
        mut stopped: watch::Receiver<bool>,
    ) -> Result<()> {
        let permits = Arc::new(Semaphore::new(concurrency));
        let (done_tx, mut done_rx) = mpsc::unbounded_channel::<i64>();
        let deleter = tokio::spawn({
            let queue = queue.clone();
            async move {
                let mut ids = Vec::with_capacity(DELETE_BATCH);
                while done_rx.recv_many(&mut ids, DELETE_BATCH).await > 0 {
                    queue.delete(&ids).await?;
                    ids.clear();
                }
                anyhow::Ok(())
            }
        });
        loop {
            if *stopped.borrow() {
                break;
            }
            let rows = queue.claim(CLAIM_BATCH).await?;
            if rows.is_empty() {
                tokio::select! {
                    _ = wake.notified() => {}
                    _ = tokio::time::sleep(Duration::from_secs(1)) => {}
                    _ = stopped.changed() => {}
                }
                continue;
            }
            for (id, json) in rows {
                let permit = permits.clone().acquire_owned().await?;
                let hits = hits.clone();
                let done = done_tx.clone();
                tokio::spawn(async move {
                    let Payload { n } = serde_json::from_str(&json).expect("a baseline payload");
                    hits.hit(n);
                    let _ = done.send(id);
                    drop(permit);
                });
            }
        }
        let _ = permits.acquire_many(concurrency as u32).await?;
        drop(done_tx);
        deleter.await??;
        Ok(())
    }

    /// Tells the claimer that a row was committed (the in-process wake-up).
    fn notify(&self) {
        self.wake.notify_one();
    }

    /// Finishes the bodies started, deletes their rows, and stops.
    async fn stop(self) -> Result<()> {
        let _ = self.stop.send(true);
        self.task.await?
    }
}

// ---------------------------------------------------------------------------------------
// Results

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Impl {
    Lib,
    Baseline,
    /// The overhead phase's transaction without any call.
    Plain,
}

impl Impl {
    fn name(self) -> &'static str {
        match self {
            Impl::Lib => "async-exec",
            Impl::Baseline => "baseline",
            Impl::Plain => "plain",
        }
    }
}

/// Where a result goes in the table: backend, phase order, phase, implementation.
type ResultKey = (Kind, usize, &'static str, Impl);

/// Every result, printed as it comes.
#[derive(Default)]
struct Results {
    /// The unit and the values of each repetition.
    values: BTreeMap<ResultKey, (&'static str, Vec<f64>)>,
}

impl Results {
    fn record(
        &mut self,
        kind: Kind,
        phase: &'static str,
        implementation: Impl,
        rep: usize,
        value: f64,
        unit: &'static str,
    ) {
        println!(
            "{}",
            json!({"backend": kind.name(), "phase": phase, "impl": implementation.name(),
                   "rep": rep, "value": round(value), "unit": unit})
        );
        eprintln!(
            "[{}] rep {rep} {phase} {}: {} {unit}",
            kind.name(),
            implementation.name(),
            round(value)
        );
        let order = PHASE_ORDER
            .iter()
            .position(|p| *p == phase)
            .unwrap_or(PHASE_ORDER.len());
        self.values
            .entry((kind, order, phase, implementation))
            .or_insert((unit, Vec::new()))
            .1
            .push(value);
    }

    fn median(&self, kind: Kind, order: usize, phase: &'static str, i: Impl) -> Option<f64> {
        self.values
            .get(&(kind, order, phase, i))
            .map(|(_, values)| median(values))
    }

    /// One JSON line per median, with its ratio to the baseline, then a table.
    fn print_summary(&self) {
        let mut rows = Vec::new();
        for (&(kind, order, phase, implementation), (unit, values)) in &self.values {
            let value = median(values);
            let ratio = match implementation {
                Impl::Baseline => None,
                _ => self
                    .median(kind, order, phase, Impl::Baseline)
                    .filter(|b| *b != 0.0)
                    .map(|b| value / b),
            };
            println!(
                "{}",
                json!({"backend": kind.name(), "phase": phase, "impl": implementation.name(),
                       "median": round(value), "unit": unit, "reps": values.len(),
                       "ratio": ratio.map(round)})
            );
            if implementation == Impl::Baseline {
                continue;
            }
            let baseline = self.median(kind, order, phase, Impl::Baseline);
            rows.push([
                kind.name().to_string(),
                phase.to_string(),
                format!("{} ({})", implementation.name(), values.len()),
                format!("{} {unit}", round(value)),
                baseline.map_or("-".into(), |b| format!("{} {unit}", round(b))),
                ratio.map_or("-".into(), |r| format!("{:.2}x", r)),
                better(unit).into(),
            ]);
        }
        let header = [
            "backend",
            "phase",
            "impl (reps)",
            "median",
            "baseline",
            "ratio",
            "better",
        ]
        .map(String::from);
        let mut widths = header.clone().map(|h| h.len());
        for row in &rows {
            for (w, cell) in widths.iter_mut().zip(row) {
                *w = (*w).max(cell.len());
            }
        }
        println!();
        for row in std::iter::once(&header).chain(&rows) {
            let cells: Vec<String> = row
                .iter()
                .zip(&widths)
                .map(|(cell, w)| format!("{cell:<w$}"))
                .collect();
            println!("{}", cells.join("  ").trim_end());
        }
    }
}

/// Result phases, in the order of the table.
const PHASE_ORDER: &[&str] = &[
    "submit_tx1",
    "submit_tx1000",
    "submit_batch",
    "drain",
    "drain_first_body",
    "latency_p50",
    "latency_p99",
    "latency_max",
    "latency_other_p50",
    "latency_other_p99",
    "latency_other_max",
    "overhead",
    "overhead_tx",
    "overhead_plain_tx",
    "backlog_peak_rss",
    "backlog_drain",
];

fn better(unit: &str) -> &'static str {
    if unit.ends_with("/s") {
        "higher"
    } else {
        "lower"
    }
}

fn median(values: &[f64]) -> f64 {
    let mut sorted = values.to_vec();
    sorted.sort_by(f64::total_cmp);
    let mid = sorted.len() / 2;
    if sorted.len() % 2 == 0 {
        (sorted[mid - 1] + sorted[mid]) / 2.0
    } else {
        sorted[mid]
    }
}

/// The `q`-quantile of sorted values (nearest rank).
fn quantile(sorted: &[f64], q: f64) -> f64 {
    let rank = ((q * sorted.len() as f64).ceil() as usize).clamp(1, sorted.len());
    sorted[rank - 1]
}

fn round(value: f64) -> f64 {
    let digits = if value.abs() >= 100.0 { 1.0 } else { 1000.0 };
    (value * digits).round() / digits
}

fn per_second(count: usize, elapsed: Duration) -> f64 {
    count as f64 / elapsed.as_secs_f64()
}

fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as i64)
}

fn chunks(n: usize) -> impl Iterator<Item = Range<i64>> {
    (0..n)
        .step_by(CHUNK)
        .map(move |start| start as i64..(start + CHUNK).min(n) as i64)
}

// ---------------------------------------------------------------------------------------
// The phases

/// Everything one backend's phases share.
struct Bench<'a> {
    args: &'a Args,
    kind: Kind,
    url: String,
    queue: Queue,
    results: &'a mut Results,
}

#[derive(Debug, Clone, Copy)]
enum Submit {
    /// One call (baseline: one INSERT) per transaction.
    PerTx,
    /// [`CHUNK`] calls (baseline: INSERTs) per transaction.
    Tx1000,
    /// The batch API (baseline: one multi-row INSERT) per [`CHUNK`] calls.
    Batch,
}

impl Submit {
    fn phase(self) -> &'static str {
        match self {
            Submit::PerTx => "submit_tx1",
            Submit::Tx1000 => "submit_tx1000",
            Submit::Batch => "submit_batch",
        }
    }
}

impl Bench<'_> {
    fn builder(&self) -> async_exec::Builder {
        Runtime::builder()
            .database_url(self.url.clone())
            .application_name(APP)
            .install_global(false)
            .concurrency(self.args.concurrency)
            .sqlite_synchronous(sqlite_synchronous().1)
    }

    async fn submit_only(&self) -> Result<Runtime> {
        Ok(self.builder().run_workers(false).start().await?)
    }

    async fn run<DB: BenchDb>(&mut self, phases: &[&str]) -> Result<()> {
        self.queue.setup().await?;
        // Creates the library's tables.
        self.submit_only().await?.shutdown().await?;
        let has = |p: &str| phases.contains(&p);
        for rep in 1..=self.args.reps {
            if has("submit") || has("drain") {
                self.submit_phases::<DB>(rep, has("submit")).await?;
            }
            // The two take turns going first: what one leaves in the database (WAL to
            // flush, pages to write back) slows the one after it.
            let library_first = (rep % 2 == 1) != self.args.baseline_first;
            if has("drain") {
                if library_first {
                    self.drain_lib(rep).await?;
                    self.drain_baseline(rep).await?;
                } else {
                    self.drain_baseline(rep).await?;
                    self.drain_lib(rep).await?;
                }
            }
            if has("latency") {
                self.clear_queues().await?;
                if library_first {
                    self.latency_lib::<DB>(rep).await?;
                    self.latency_baseline(rep).await?;
                } else {
                    self.latency_baseline(rep).await?;
                    self.latency_lib::<DB>(rep).await?;
                }
                if self.kind == Kind::Postgres {
                    self.latency_other_instance::<DB>(rep).await?;
                }
            }
            if has("overhead") {
                self.overhead::<DB>(rep).await?;
            }
        }
        if has("backlog") && self.args.backlog > 0 {
            for rep in 1..=self.args.backlog_reps {
                self.backlog(rep, Impl::Lib).await?;
                self.backlog(rep, Impl::Baseline).await?;
            }
        }
        Ok(())
    }

    /// The three submit modes, timed when `timed`; leaves `n` records of each
    /// implementation for the drain.
    async fn submit_phases<DB: BenchDb>(&mut self, rep: usize, timed: bool) -> Result<()> {
        let pool = self.queue.pool.clone();
        pool.clear("async_req").await?;
        pool.clear("bench_queue").await?;
        let modes: &[Submit] = if timed {
            &[Submit::PerTx, Submit::Batch, Submit::Tx1000]
        } else {
            &[Submit::Tx1000]
        };
        let n = self.args.n;
        let rt = self.submit_only().await?;
        for (i, &mode) in modes.iter().enumerate() {
            let started = Instant::now();
            submit_lib::<DB>(&rt, mode, n).await?;
            let lib = per_second(n, started.elapsed());
            let started = Instant::now();
            self.submit_baseline(mode, n).await?;
            let baseline = per_second(n, started.elapsed());
            let (lib_rows, baseline_rows) = (
                pool.count("async_req").await?,
                pool.count("bench_queue").await?,
            );
            ensure!(
                lib_rows == n as i64 && baseline_rows == n as i64,
                "{}: {lib_rows} library records and {baseline_rows} queue rows, not {n}",
                mode.phase()
            );
            if timed {
                self.results
                    .record(self.kind, mode.phase(), Impl::Lib, rep, lib, "calls/s");
                self.results.record(
                    self.kind,
                    mode.phase(),
                    Impl::Baseline,
                    rep,
                    baseline,
                    "calls/s",
                );
            }
            if i + 1 < modes.len() {
                pool.clear("async_req").await?;
                pool.clear("bench_queue").await?;
            }
        }
        rt.shutdown().await?;
        Ok(())
    }

    async fn submit_baseline(&self, mode: Submit, n: usize) -> Result<()> {
        match mode {
            Submit::PerTx => {
                for i in 0..n as i64 {
                    self.queue.insert_one(i).await?;
                }
            }
            Submit::Tx1000 => {
                for chunk in chunks(n) {
                    self.queue.insert_each(chunk).await?;
                }
            }
            Submit::Batch => {
                for chunk in chunks(n) {
                    self.queue.insert_multi(chunk).await?;
                }
            }
        }
        Ok(())
    }

    /// Starts workers on the `n` records left by the submit phase.
    async fn drain_lib(&mut self, rep: usize) -> Result<()> {
        let n = self.args.n;
        let hits = Hits::new(n);
        let rt = self.builder().data_arc(hits.clone()).start().await?;
        hits.wait_for(n, "drain (async-exec)").await?;
        let elapsed = hits.epoch.elapsed();
        rt.wait_idle().await;
        self.queue
            .pool
            .wait_empty("async_req", "drain (async-exec)")
            .await?;
        rt.shutdown().await?;
        hits.check_exactly_once("drain (async-exec)")?;
        self.record_drain(rep, Impl::Lib, n, elapsed, hits.first_body());
        Ok(())
    }

    async fn drain_baseline(&mut self, rep: usize) -> Result<()> {
        let n = self.args.n;
        let hits = Hits::new(n);
        let worker = QueueWorker::start(self.queue.clone(), hits.clone(), self.args.concurrency);
        hits.wait_for(n, "drain (baseline)").await?;
        let elapsed = hits.epoch.elapsed();
        worker.stop().await?;
        self.queue
            .pool
            .wait_empty("bench_queue", "drain (baseline)")
            .await?;
        hits.check_exactly_once("drain (baseline)")?;
        self.record_drain(rep, Impl::Baseline, n, elapsed, hits.first_body());
        Ok(())
    }

    fn record_drain(&mut self, rep: usize, i: Impl, n: usize, all: Duration, first: Duration) {
        let kind = self.kind;
        let results = &mut *self.results;
        results.record(kind, "drain", i, rep, per_second(n, all), "jobs/s");
        results.record(kind, "drain_first_body", i, rep, ms(first), "ms");
    }

    /// Empties both queues (what a submit phase left when the drain did not run).
    async fn clear_queues(&self) -> Result<()> {
        self.queue.pool.clear("async_req").await?;
        self.queue.pool.clear("bench_queue").await
    }

    /// Calls one transaction each, [`LATENCY_GAP`] apart, on a runtime whose workers run.
    async fn latency_lib<DB: BenchDb>(&mut self, rep: usize) -> Result<()> {
        let calls = self.args.latency_calls;
        let hits = Hits::timed(calls);
        let rt = self.builder().data_arc(hits.clone()).start().await?;
        let committed = paced(&hits, calls, |n| {
            let rt = rt.clone();
            async move {
                let mut tx: Tx<DB> = rt.begin().await?;
                job(n).within(&mut tx).await?;
                tx.commit().await?;
                Ok(())
            }
        })
        .await?;
        hits.wait_for(calls, "latency (async-exec)").await?;
        rt.shutdown().await?;
        hits.check_exactly_once("latency (async-exec)")?;
        self.record_latency(rep, Impl::Lib, "latency", &hits, &committed);
        Ok(())
    }

    /// The same, the baseline woken in process after its commit.
    async fn latency_baseline(&mut self, rep: usize) -> Result<()> {
        let calls = self.args.latency_calls;
        let hits = Hits::timed(calls);
        let worker = Arc::new(QueueWorker::start(
            self.queue.clone(),
            hits.clone(),
            self.args.concurrency,
        ));
        let committed = paced(&hits, calls, |n| {
            let queue = self.queue.clone();
            let worker = worker.clone();
            async move {
                queue.insert_one(n).await?;
                worker.notify();
                Ok(())
            }
        })
        .await?;
        hits.wait_for(calls, "latency (baseline)").await?;
        let worker = Arc::into_inner(worker).expect("the worker is no longer shared");
        worker.stop().await?;
        hits.check_exactly_once("latency (baseline)")?;
        self.record_latency(rep, Impl::Baseline, "latency", &hits, &committed);
        Ok(())
    }

    /// PostgreSQL: a submit-only runtime commits, another one (workers on) runs the body,
    /// woken by `NOTIFY`.
    async fn latency_other_instance<DB: BenchDb>(&mut self, rep: usize) -> Result<()> {
        let calls = self.args.latency_calls;
        let hits = Hits::timed(calls);
        let worker = self.builder().data_arc(hits.clone()).start().await?;
        let submitter = self.submit_only().await?;
        let committed = paced(&hits, calls, |n| {
            let rt = submitter.clone();
            async move {
                let mut tx: Tx<DB> = rt.begin().await?;
                job(n).within(&mut tx).await?;
                tx.commit().await?;
                Ok(())
            }
        })
        .await?;
        hits.wait_for(calls, "latency, other instance").await?;
        submitter.shutdown().await?;
        worker.shutdown().await?;
        hits.check_exactly_once("latency, other instance")?;
        self.record_latency(rep, Impl::Lib, "latency_other", &hits, &committed);
        Ok(())
    }

    fn record_latency(
        &mut self,
        rep: usize,
        i: Impl,
        prefix: &str,
        hits: &Hits,
        committed: &[u64],
    ) {
        // A body that started before `commit()` returned counts as 0.
        let mut latencies: Vec<f64> = committed
            .iter()
            .enumerate()
            .map(|(n, &at)| hits.started_ns(n).saturating_sub(at) as f64 / 1e6)
            .collect();
        latencies.sort_by(f64::total_cmp);
        let phases: [(&'static str, f64); 3] = match prefix {
            "latency" => [
                ("latency_p50", 0.5),
                ("latency_p99", 0.99),
                ("latency_max", 1.0),
            ],
            _ => [
                ("latency_other_p50", 0.5),
                ("latency_other_p99", 0.99),
                ("latency_other_max", 1.0),
            ],
        };
        for (phase, q) in phases {
            let value = quantile(&latencies, q);
            self.results.record(self.kind, phase, i, rep, value, "ms");
        }
    }

    /// A business transaction alone, with one call, and with one baseline INSERT,
    /// interleaved; workers of both implementations run meanwhile.
    async fn overhead<DB: BenchDb>(&mut self, rep: usize) -> Result<()> {
        // A submit phase without the drain leaves its records: they are not this phase's.
        self.clear_queues().await?;
        let count = self.args.overhead_n;
        let lib_hits = Hits::new(count);
        let baseline_hits = Hits::new(count);
        let rt = self.builder().data_arc(lib_hits.clone()).start().await?;
        let worker = QueueWorker::start(
            self.queue.clone(),
            baseline_hits.clone(),
            self.args.concurrency,
        );
        let kinds = [Impl::Plain, Impl::Lib, Impl::Baseline];
        let mut times: BTreeMap<Impl, Vec<f64>> = BTreeMap::new();
        for n in 0..count as i64 {
            for k in 0..kinds.len() {
                // Rotate the order so that none always follows another.
                let implementation = kinds[(k + n as usize) % kinds.len()];
                let started = Instant::now();
                // As an application would, run the transaction again on a deadlock (MariaDB's
                // baseline queue meets them; the time includes the retries).
                retry_conflicts(|| async {
                    let mut tx: Tx<DB> = rt.begin().await?;
                    DB::business_insert(&mut **tx.transaction(), n).await?;
                    match implementation {
                        Impl::Lib => {
                            job(n).within(&mut tx).await?;
                        }
                        Impl::Baseline => DB::queue_insert(&mut **tx.transaction(), n).await?,
                        Impl::Plain => {}
                    }
                    tx.commit().await?;
                    Ok(())
                })
                .await?;
                if implementation == Impl::Baseline {
                    worker.notify();
                }
                times
                    .entry(implementation)
                    .or_default()
                    .push(started.elapsed().as_secs_f64() * 1e6);
            }
        }
        lib_hits.wait_for(count, "overhead (async-exec)").await?;
        baseline_hits.wait_for(count, "overhead (baseline)").await?;
        rt.shutdown().await?;
        worker.stop().await?;
        lib_hits.check_exactly_once("overhead (async-exec)")?;
        baseline_hits.check_exactly_once("overhead (baseline)")?;
        self.queue.pool.clear("bench_business").await?;
        let plain = median(&times[&Impl::Plain]);
        let kind = self.kind;
        let results = &mut *self.results;
        results.record(kind, "overhead_plain_tx", Impl::Plain, rep, plain, "us");
        for i in [Impl::Lib, Impl::Baseline] {
            let with = median(&times[&i]);
            results.record(kind, "overhead_tx", i, rep, with, "us");
            results.record(kind, "overhead", i, rep, with / plain, "x");
        }
        Ok(())
    }

    /// Queues `--backlog` records with raw SQL, then drains them in a child process and
    /// reports the child's peak RSS.
    async fn backlog(&mut self, rep: usize, i: Impl) -> Result<()> {
        let m = self.args.backlog;
        let started = Instant::now();
        match i {
            Impl::Lib => self.fill_async_req(m).await?,
            _ => {
                for chunk in chunks(m) {
                    self.queue.insert_multi(chunk).await?;
                }
            }
        }
        eprintln!(
            "[{}] backlog: {m} {} records queued in {:.1} s",
            self.kind.name(),
            i.name(),
            started.elapsed().as_secs_f64()
        );
        let exe = std::env::current_exe()?;
        let output = tokio::process::Command::new(exe)
            .args(["--phase", "backlog", "--impl", i.name(), "--url", &self.url])
            .args(["--backend", self.kind.name()])
            .args(["--backlog", &m.to_string()])
            .args(["--concurrency", &self.args.concurrency.to_string()])
            .args(["--sqlite-synchronous", &self.args.sqlite_synchronous])
            .stderr(std::process::Stdio::inherit())
            .output()
            .await?;
        let stdout = String::from_utf8_lossy(&output.stdout);
        ensure!(
            output.status.success(),
            "the backlog child ({}) failed: {}; stdout: {stdout}",
            i.name(),
            output.status
        );
        let report: BacklogReport = serde_json::from_str(
            stdout
                .lines()
                .last()
                .ok_or_else(|| anyhow!("the backlog child printed nothing"))?,
        )?;
        let kind = self.kind;
        self.results
            .record(kind, "backlog_peak_rss", i, rep, report.peak_rss_mb, "MB");
        self.results
            .record(kind, "backlog_drain", i, rep, report.jobs_per_s, "jobs/s");
        Ok(())
    }

    /// Inserts `m` `init` records as the runtime writes them (columns copied from one
    /// written by a call), with multi-row INSERTs.
    async fn fill_async_req(&self, m: usize) -> Result<()> {
        let rt = self.submit_only().await?;
        let receipt = job(0).on(&rt).await?;
        let id = receipt
            .id
            .ok_or_else(|| anyhow!("no record for a SaveAsync call"))?;
        let template = rt
            .get(id)
            .await?
            .ok_or_else(|| anyhow!("the record just written is gone"))?;
        rt.shutdown().await?;
        self.queue.pool.clear("async_req").await?;
        ensure!(
            template.param_json == payload(0),
            "the runtime writes arguments as {}, not as {}",
            template.param_json,
            payload(0)
        );
        const PER_ROW: usize = 11;
        let kind = self.kind;
        for chunk in chunks(m) {
            let rows: Vec<String> = (0..chunk.clone().count())
                .map(|r| {
                    let p = |k: usize| kind.placeholder(r * PER_ROW + k);
                    format!(
                        "({}, {}, {}, {}, 'init', 0, {}, {}, {}, NULL, 0, {}, NULL, {}, {}, {})",
                        p(1),
                        p(2),
                        p(3),
                        p(4),
                        p(5),
                        p(6),
                        p(7),
                        p(8),
                        p(9),
                        p(10),
                        p(11)
                    )
                })
                .collect();
            let sql = format!(
                "INSERT INTO async_req (application_name, executor, sign, strategy, status, \
                 exec_count, max_attempts, param_json, remark, idempotency_key, priority, run_at, \
                 last_error, trace_json, create_time, update_time) VALUES {}",
                rows.join(", ")
            );
            let now = now_ms();
            on_pool!(&self.queue.pool, |p| {
                let mut query = sqlx::query(&sql);
                for n in chunk {
                    query = query
                        .bind(&template.application_name)
                        .bind(&template.executor)
                        .bind(&template.sign)
                        .bind(&template.strategy)
                        .bind(template.max_attempts)
                        .bind(payload(n))
                        .bind(&template.remark)
                        .bind(now)
                        .bind(&template.trace_json)
                        .bind(now)
                        .bind(now);
                }
                query.execute(p).await?;
            });
        }
        Ok(())
    }
}

/// Makes `calls` calls [`LATENCY_GAP`] apart; returns when each `call` returned
/// (nanoseconds on the clock of `hits`).
async fn paced<F, Fut>(hits: &Hits, calls: usize, call: F) -> Result<Vec<u64>>
where
    F: Fn(i64) -> Fut,
    Fut: Future<Output = Result<()>>,
{
    // Let the workers (and a PostgreSQL listener) settle first.
    tokio::time::sleep(Duration::from_millis(200)).await;
    let start = tokio::time::Instant::now();
    let mut committed = Vec::with_capacity(calls);
    for n in 0..calls {
        tokio::time::sleep_until(start + LATENCY_GAP * n as u32).await;
        call(n as i64).await?;
        committed.push(hits.now_ns());
    }
    Ok(committed)
}

fn ms(duration: Duration) -> f64 {
    duration.as_secs_f64() * 1e3
}

async fn submit_lib<DB: BenchDb>(rt: &Runtime, mode: Submit, n: usize) -> Result<()> {
    match mode {
        Submit::PerTx => {
            for i in 0..n as i64 {
                let mut tx: Tx<DB> = rt.begin().await?;
                job(i).within(&mut tx).await?;
                tx.commit().await?;
            }
        }
        Submit::Tx1000 => {
            for chunk in chunks(n) {
                let mut tx: Tx<DB> = rt.begin().await?;
                for i in chunk {
                    job(i).within(&mut tx).await?;
                }
                tx.commit().await?;
            }
        }
        Submit::Batch => {
            for chunk in chunks(n) {
                let mut tx: Tx<DB> = rt.begin().await?;
                async_exec::batch(chunk.map(job)).within(&mut tx).await?;
                tx.commit().await?;
            }
        }
    }
    Ok(())
}

// ---------------------------------------------------------------------------------------
// The backlog child

#[derive(Serialize, Deserialize)]
struct BacklogReport {
    peak_rss_mb: f64,
    jobs_per_s: f64,
}

/// Drains the backlog (`--backlog` records) with one implementation, checks that each ran
/// exactly once, and prints its peak RSS.
async fn backlog_child(args: &Args) -> Result<()> {
    let url = args.url.clone().context("--url")?;
    let kind: Kind = args.backend.parse()?;
    let m = args.backlog;
    let hits = Hits::new(m);
    let pool = Pool::connect(kind, &url).await?;
    match args.implementation.as_deref() {
        Some("async-exec") => {
            let rt = Runtime::builder()
                .database_url(url)
                .application_name(APP)
                .install_global(false)
                .concurrency(args.concurrency)
                .sqlite_synchronous(sqlite_synchronous().1)
                .data_arc(hits.clone())
                .start()
                .await?;
            hits.wait_for(m, "backlog (async-exec)").await?;
            rt.wait_idle().await;
            pool.wait_empty("async_req", "backlog (async-exec)").await?;
            rt.shutdown().await?;
        }
        Some("baseline") => {
            let queue = Queue {
                kind,
                pool: pool.clone(),
            };
            let worker = QueueWorker::start(queue, hits.clone(), args.concurrency);
            hits.wait_for(m, "backlog (baseline)").await?;
            worker.stop().await?;
            pool.wait_empty("bench_queue", "backlog (baseline)").await?;
        }
        other => bail!("--impl async-exec|baseline, not {other:?}"),
    }
    let elapsed = hits.epoch.elapsed();
    pool.close().await;
    hits.check_exactly_once("backlog")?;
    let report = BacklogReport {
        peak_rss_mb: peak_rss_kb()? as f64 / 1024.0,
        jobs_per_s: per_second(m, elapsed),
    };
    println!("{}", serde_json::to_string(&report)?);
    Ok(())
}

/// This process's peak resident set size (`VmHWM`), in kB.
fn peak_rss_kb() -> Result<u64> {
    let status = std::fs::read_to_string("/proc/self/status")?;
    status
        .lines()
        .find_map(|line| line.strip_prefix("VmHWM:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .ok_or_else(|| anyhow!("no VmHWM in /proc/self/status"))
}

// ---------------------------------------------------------------------------------------

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
    if let Some(phase) = &args.phase {
        ensure!(phase == "backlog", "--phase backlog, not `{phase}`");
        return backlog_child(&args).await;
    }
    let phases: Vec<&str> = args.phases.split(',').map(str::trim).collect();
    for phase in &phases {
        ensure!(
            ["submit", "drain", "latency", "overhead", "backlog"].contains(phase),
            "unknown phase `{phase}`: submit, drain, latency, overhead, backlog"
        );
    }
    let kinds: Vec<Kind> = match args.backend.as_str() {
        "all" => vec![Kind::Sqlite, Kind::Postgres, Kind::Mysql],
        other => other.split(',').map(str::parse).collect::<Result<_>>()?,
    };
    let mut results = Results::default();
    for kind in kinds {
        let started = Instant::now();
        let db = Database::create(kind, &args).await?;
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

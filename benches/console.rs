//! The console's list page at 1,000,000 rows (issue 9): response times of the requests
//! page (HTML) and its JSON endpoint, first page and a deep page, unfiltered and with the
//! common filters, and of the overview, on SQLite, PostgreSQL and MariaDB/MySQL.
//!
//! ```sh
//! cargo bench --bench console --all-features                                  # every backend
//! cargo bench --bench console --all-features -- --backend postgres --rows 200000 --requests 50
//! ```
//!
//! Each backend gets a database of its own (a temporary SQLite file; `ae_console_<pid>` on
//! the servers, dropped at the end), filled by one set-based `INSERT ... SELECT` in the
//! engine (a recursive CTE; `generate_series` on PostgreSQL): statuses mostly success,
//! failed, dead and init, eight executors, three applications, a key on one record in
//! five, creation times spread over 30 days, an error on every failed and dead record,
//! one attempt log for one in four of those. Then `ANALYZE`, a login, and `--requests`
//! rounds, each sending every case once through the router (`tower::ServiceExt::oneshot`).
//! Output: one JSON line per case and backend on stdout, then a table of p50/p95/p99 (ms).
//! Error-text search (a substring of every row it looks at, 20,000 rows a page at most:
//! `ConsoleConfig::search_window`) is reported apart, as
//! `search_*` (from the newest, with a status, and from a cursor at 90 % depth); it and
//! the overview (counts over every record) are timed in the first `--slow-requests`
//! rounds only.

use std::time::{Duration, Instant};

use anyhow::{anyhow, bail, ensure, Context as _, Result};
use async_exec::console::{self, ConsoleConfig, Role};
use async_exec::Runtime;
use axum::body::Body;
use axum::http::{header, Request, StatusCode};
use axum::Router;
use clap::Parser;
use http_body_util::BodyExt;
use serde_json::{json, Value};
use tower::ServiceExt;

#[path = "common/database.rs"]
mod database;

use database::{Database, Kind};

/// The application the console shows (80 % of the rows).
const APP: &str = "bench";
/// Creation times span this many days back from now.
const DAYS: i64 = 30;
const DAY_MS: i64 = 24 * 3600 * 1000;
const PASSWORD: &str = "bench console pass";
/// The p95 the issue asks for.
const TARGET_P95_MS: f64 = 100.0;

#[derive(Parser, Debug)]
#[command(about = "Console list page and JSON endpoint at 1,000,000 rows, per backend")]
struct Args {
    /// `sqlite`, `postgres`, `mysql` or `all`.
    #[arg(long, default_value = "all")]
    backend: String,
    /// Rows in async_req.
    #[arg(long, default_value_t = 1_000_000)]
    rows: i64,
    /// Timed rounds; each round sends every case once.
    #[arg(long, default_value_t = 200)]
    requests: usize,
    /// Of those rounds, how many also time the overview and the error-text search (each
    /// reads every record of the application: seconds at 1,000,000 rows).
    #[arg(long, default_value_t = 10)]
    slow_requests: usize,
    /// Server to create the PostgreSQL database on.
    #[arg(long, default_value = "postgres://postgres@127.0.0.1:5432/test")]
    postgres_url: String,
    /// Server to create the MariaDB/MySQL database on.
    #[arg(long, default_value = "mysql://root@127.0.0.1:3306/test")]
    mysql_url: String,
    /// Leave the filled PostgreSQL/MariaDB database (and say where) instead of dropping
    /// it, to look at query plans afterwards (a SQLite file is temporary either way).
    #[arg(long)]
    keep_database: bool,
    /// Accepted for `cargo bench` (libtest's flag); ignored.
    #[arg(long, hide = true)]
    bench: bool,
}

impl Kind {
    fn parse_list(text: &str) -> Result<Vec<Kind>> {
        match text {
            "all" => Ok(vec![Kind::Sqlite, Kind::Postgres, Kind::Mysql]),
            "sqlite" => Ok(vec![Kind::Sqlite]),
            "postgres" | "postgresql" => Ok(vec![Kind::Postgres]),
            "mysql" | "mariadb" => Ok(vec![Kind::Mysql]),
            other => bail!("unknown backend `{other}`: sqlite, postgres, mysql or all"),
        }
    }

    /// `a || b` in the dialect.
    fn concat(self, a: &str, b: &str) -> String {
        match self {
            Kind::Mysql => format!("CONCAT({a}, {b})"),
            _ => format!("(({a}) || ({b}))"),
        }
    }
}

/// Runs statements on the benchmark's database (the fill, ANALYZE, the cursors).
enum Pool {
    Sqlite(sqlx::SqlitePool),
    Postgres(sqlx::PgPool),
    Mysql(sqlx::MySqlPool),
}

impl Pool {
    async fn connect(kind: Kind, url: &str) -> Result<Pool> {
        Ok(match kind {
            Kind::Sqlite => Pool::Sqlite(sqlx::SqlitePool::connect(url).await?),
            Kind::Postgres => Pool::Postgres(sqlx::PgPool::connect(url).await?),
            Kind::Mysql => Pool::Mysql(sqlx::MySqlPool::connect(url).await?),
        })
    }

    async fn execute(&self, sql: &str) -> Result<u64> {
        let done = match self {
            Pool::Sqlite(p) => sqlx::query(sql).execute(p).await?.rows_affected(),
            Pool::Postgres(p) => sqlx::query(sql).execute(p).await?.rows_affected(),
            Pool::Mysql(p) => sqlx::query(sql).execute(p).await?.rows_affected(),
        };
        Ok(done)
    }

    /// Two integers of the first row.
    async fn pair(&self, sql: &str) -> Result<(i64, i64)> {
        Ok(match self {
            Pool::Sqlite(p) => sqlx::query_as(sql).fetch_one(p).await?,
            Pool::Postgres(p) => sqlx::query_as(sql).fetch_one(p).await?,
            Pool::Mysql(p) => sqlx::query_as(sql).fetch_one(p).await?,
        })
    }

    async fn close(&self) {
        match self {
            Pool::Sqlite(p) => p.close().await,
            Pool::Postgres(p) => p.close().await,
            Pool::Mysql(p) => p.close().await,
        }
    }
}

/// `i` from 1 to `rows`, as a FROM clause with column `i`.
fn numbers(kind: Kind, rows: i64) -> String {
    match kind {
        Kind::Postgres => format!("generate_series(1::bigint, {rows}::bigint) AS g(i)"),
        // A thousand by a thousand: MySQL stops recursion at 1,000 levels by default.
        Kind::Sqlite | Kind::Mysql => {
            let side = ((rows as f64).sqrt().ceil() as i64).max(1);
            format!(
                "(WITH RECURSIVE d(n) AS (SELECT 0 UNION ALL SELECT n + 1 FROM d WHERE n < {last}) \
                 SELECT a.n * {side} + b.n + 1 AS i FROM d a CROSS JOIN d b) AS g \
                 WHERE i <= {rows}",
                last = side - 1
            )
        }
    }
}

/// One `INSERT ... SELECT` of `rows` records: the mix the module doc describes.
fn fill_sql(kind: Kind, rows: i64, now: i64) -> String {
    let start = now - DAYS * DAY_MS;
    let span = DAYS * DAY_MS;
    let pct = "(i % 100)";
    let status = format!(
        "CASE WHEN {pct} < 40 THEN 'success' WHEN {pct} < 60 THEN 'failed' \
         WHEN {pct} < 78 THEN 'dead' WHEN {pct} < 95 THEN 'init' \
         WHEN {pct} < 97 THEN 'running' ELSE 'cancelled' END"
    );
    // Times grow with the id, with a jitter and ties (i % 7 apart of the ramp).
    let created = format!("({start} + (i * {span}) / {rows} + (i % 7) * 3)");
    let error = kind.concat(
        "'upstream timeout after 30 s: connection reset by peer (order '",
        &kind.concat("i", "')'"),
    );
    let failing = format!("{pct} >= 40 AND {pct} < 78");
    format!(
        "INSERT INTO async_req (id, application_name, executor, sign, strategy, status, \
           exec_count, max_attempts, param_json, remark, idempotency_key, priority, run_at, \
           lease_owner, lease_until, last_error, trace_json, create_time, update_time) \
         SELECT i, \
           CASE WHEN i % 10 < 8 THEN '{APP}' WHEN i % 10 = 8 THEN 'billing' ELSE 'search' END, \
           {executor}, 'fn(order: i64)', 'SaveAsync', {status}, \
           CASE WHEN {failing} THEN 1 + i % 5 ELSE 1 END, 5, {params}, '', \
           CASE WHEN i % 5 = 0 THEN {key} ELSE NULL END, 0, \
           {created} + CASE WHEN {pct} >= 78 AND {pct} < 95 THEN 60000 ELSE 1000 END, \
           CASE WHEN {pct} >= 95 AND {pct} < 97 THEN 'instance-1' ELSE NULL END, \
           CASE WHEN {pct} >= 95 AND {pct} < 97 THEN {lease} ELSE NULL END, \
           CASE WHEN {failing} THEN {error} ELSE NULL END, NULL, {created}, {created} \
         FROM {from}",
        executor = kind.concat("'executor_'", "i % 8"),
        params = kind.concat("'{\"order\": '", &kind.concat("i", "'}'")),
        key = kind.concat("'order-'", "i"),
        lease = now + 60_000,
        from = numbers(kind, rows),
    )
}

/// One attempt log for one failed or dead record in four.
const LOG_SQL: &str =
    "INSERT INTO async_log (req_id, attempt, worker, started, finished, outcome, error) \
     SELECT id, exec_count, 'instance-1', update_time, update_time + 120, 'failed', last_error \
     FROM async_req WHERE status IN ('failed', 'dead') AND id % 4 = 0";

async fn fill(kind: Kind, pool: &Pool, rows: i64) -> Result<()> {
    let now = now_ms();
    let started = Instant::now();
    let inserted = pool
        .execute(&fill_sql(kind, rows, now))
        .await
        .context("filling async_req")?;
    ensure!(
        inserted as i64 == rows,
        "inserted {inserted} of {rows} rows"
    );
    let logs = pool.execute(LOG_SQL).await.context("filling async_log")?;
    match kind {
        Kind::Postgres => {
            pool.execute("SELECT setval('async_req_id_seq', (SELECT MAX(id) FROM async_req))")
                .await?;
            pool.execute("ANALYZE async_req").await?;
            pool.execute("ANALYZE async_log").await?;
        }
        Kind::Mysql => {
            pool.execute("ANALYZE TABLE async_req, async_log").await?;
        }
        Kind::Sqlite => {
            pool.execute("ANALYZE").await?;
        }
    }
    eprintln!(
        "{}: {rows} requests and {logs} attempt logs written and analyzed in {:.1} s",
        kind.name(),
        started.elapsed().as_secs_f64()
    );
    Ok(())
}

/// A case: a name and the path (under the mount) it requests.
struct Case {
    name: String,
    path: String,
    /// Error-text search: reported apart.
    search: bool,
    /// Reads every record (overview, search): timed in `--slow-requests` rounds only.
    slow: bool,
}

/// A cursor (an id) at the `fraction` of the application's records, newest first.
async fn cursor_at(pool: &Pool, filter: &str, rows: i64, fraction: f64) -> Result<String> {
    let offset = ((rows as f64) * 0.8 * fraction) as i64;
    let sql = format!(
        "SELECT id, id FROM async_req WHERE application_name = '{APP}'{filter} \
         ORDER BY id DESC LIMIT 1 OFFSET {offset}"
    );
    let (id, _) = pool.pair(&sql).await.with_context(|| sql.clone())?;
    Ok(id.to_string())
}

async fn cases(pool: &Pool, rows: i64) -> Result<Vec<Case>> {
    let deep = cursor_at(pool, "", rows, 0.9).await?;
    // 18 % of the rows are dead, an eighth have an executor.
    let deep_dead = cursor_at(pool, " AND status = 'dead'", rows * 18 / 100, 0.9).await?;
    let deep_exec = cursor_at(pool, " AND executor = 'executor_3'", rows / 8, 0.9).await?;
    let key_id = (rows / 2) / 10 * 10; // a multiple of 10: keyed, in the bench application
    let now = now_ms();
    let (from, to) = (now - 12 * DAY_MS, now - 11 * DAY_MS);
    let mut list = Vec::new();
    let mut add = |name: &str, query: String, search: bool| {
        for (kind, path) in [("html", "/requests"), ("json", "/api/requests")] {
            let sep = if query.is_empty() { "" } else { "?" };
            list.push(Case {
                name: format!("{kind}_{name}"),
                path: format!("{path}{sep}{query}"),
                search,
                slow: search,
            });
        }
    };
    add("first", String::new(), false);
    add("deep", format!("after={deep}"), false);
    add("oldest_first", "order=oldest".into(), false);
    add("dead_first", "status=dead".into(), false);
    add("dead_deep", format!("status=dead&after={deep_dead}"), false);
    add("executor_first", "executor=executor_3".into(), false);
    add(
        "executor_deep",
        format!("executor=executor_3&after={deep_exec}"),
        false,
    );
    add("key", format!("key=order-{key_id}"), false);
    add("day_range", format!("from={from}&to={to}"), false);
    add(
        "dead_day_range",
        format!("status=dead&from={from}&to={to}"),
        false,
    );
    add("search_error", "error=order+4265)".into(), true);
    add(
        "search_error_dead",
        "status=dead&error=order+4265)".into(),
        true,
    );
    add(
        "search_error_deep",
        format!("error=order+4265)&after={deep}"),
        true,
    );
    list.push(Case {
        name: "html_overview".into(),
        path: String::new(),
        search: false,
        slow: true,
    });
    list.push(Case {
        name: "json_overview".into(),
        path: "/api/overview".into(),
        search: false,
        slow: true,
    });
    Ok(list)
}

async fn login(app: &Router) -> Result<String> {
    let request = Request::post("/console/api/login")
        .header(header::CONTENT_TYPE, "application/json")
        .body(Body::from(
            json!({"user": "bench", "password": PASSWORD}).to_string(),
        ))?;
    let response = app.clone().oneshot(request).await?;
    ensure!(
        response.status() == StatusCode::OK,
        "login: {}",
        response.status()
    );
    let cookie = response
        .headers()
        .get(header::SET_COOKIE)
        .ok_or_else(|| anyhow!("login set no cookie"))?
        .to_str()?;
    Ok(cookie.split(';').next().unwrap_or_default().to_string())
}

/// Sends one request; its time to the last body byte, and the body.
async fn timed(app: &Router, cookie: &str, path: &str) -> Result<(Duration, Vec<u8>)> {
    let request = Request::get(path)
        .header(header::COOKIE, cookie)
        .body(Body::empty())?;
    let started = Instant::now();
    let response = app.clone().oneshot(request).await?;
    let status = response.status();
    let body = response.into_body().collect().await?.to_bytes();
    let elapsed = started.elapsed();
    ensure!(
        status == StatusCode::OK,
        "{path}: {status}: {}",
        String::from_utf8_lossy(&body)
    );
    Ok((elapsed, body.to_vec()))
}

/// Rows a JSON list answer holds, to check that every case finds something.
fn rows_in(body: &[u8]) -> Option<usize> {
    let value: Value = serde_json::from_slice(body).ok()?;
    Some(value.get("requests")?.as_array()?.len())
}

struct Measured {
    backend: &'static str,
    case: String,
    search: bool,
    rows_returned: Option<usize>,
    /// Milliseconds, sorted.
    times: Vec<f64>,
}

impl Measured {
    fn quantile(&self, q: f64) -> f64 {
        let i = ((self.times.len() as f64 - 1.0) * q).round() as usize;
        self.times[i.min(self.times.len() - 1)]
    }
}

async fn run_backend(kind: Kind, args: &Args, hash: &str) -> Result<Vec<Measured>> {
    let database = Database::create(kind, "console", &args.postgres_url, &args.mysql_url).await?;
    let result = measure(kind, &database, args, hash).await;
    if args.keep_database {
        eprintln!("[{}] kept the database: {}", kind.name(), database.url);
    } else {
        database.drop_database().await?;
    }
    result
}

async fn measure(
    kind: Kind,
    database: &Database,
    args: &Args,
    hash: &str,
) -> Result<Vec<Measured>> {
    let rt = Runtime::builder()
        .database_url(database.url.clone())
        .application_name(APP)
        .install_global(false)
        .run_workers(false)
        .start()
        .await?;
    let pool = Pool::connect(kind, &database.url).await?;
    fill(kind, &pool, args.rows).await?;
    let cases = cases(&pool, args.rows).await?;
    let config = ConsoleConfig::new().user("bench", Role::Operator, hash);
    let app = Router::new().nest("/console", console::router(&rt, config)?);
    let cookie = login(&app).await?;
    let mut measured: Vec<Measured> = cases
        .iter()
        .map(|case| Measured {
            backend: kind.name(),
            case: case.name.clone(),
            search: case.search,
            rows_returned: None,
            times: Vec::with_capacity(args.requests),
        })
        .collect();
    // One warm-up round, then the timed rounds, every case once a round.
    for round in 0..=args.requests {
        for (case, m) in cases.iter().zip(measured.iter_mut()) {
            if case.slow && round > args.slow_requests {
                continue;
            }
            let (elapsed, body) = timed(&app, &cookie, &format!("/console{}", case.path)).await?;
            if round == 0 {
                m.rows_returned = rows_in(&body);
            } else {
                m.times.push(elapsed.as_secs_f64() * 1000.0);
            }
        }
    }
    for m in &mut measured {
        m.times.sort_by(f64::total_cmp);
    }
    pool.close().await;
    rt.shutdown().await?;
    Ok(measured)
}

fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as i64)
}

fn print(all: &[Measured], args: &Args) {
    for m in all {
        println!(
            "{}",
            json!({
                "backend": m.backend,
                "case": m.case,
                "search": m.search,
                "rows": args.rows,
                "requests": m.times.len(),
                "page_rows": m.rows_returned,
                "p50_ms": round(m.quantile(0.50)),
                "p95_ms": round(m.quantile(0.95)),
                "p99_ms": round(m.quantile(0.99)),
            })
        );
    }
    println!();
    println!(
        "{:<9} {:<26} {:>9} {:>9} {:>9} {:>6}",
        "backend", "case", "p50 ms", "p95 ms", "p99 ms", "rows"
    );
    for m in all {
        let p95 = m.quantile(0.95);
        let mark = if p95 < TARGET_P95_MS || m.search {
            ""
        } else {
            "  > 100 ms"
        };
        println!(
            "{:<9} {:<26} {:>9.2} {:>9.2} {:>9.2} {:>6}{mark}",
            m.backend,
            m.case,
            m.quantile(0.50),
            p95,
            m.quantile(0.99),
            m.rows_returned.map_or("-".into(), |n| n.to_string()),
        );
    }
}

fn round(value: f64) -> f64 {
    (value * 100.0).round() / 100.0
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
    ensure!(args.rows >= 1000, "--rows: at least 1,000");
    ensure!(args.requests >= 1, "--requests: at least 1");
    ensure!(args.slow_requests >= 1, "--slow-requests: at least 1");
    let kinds = Kind::parse_list(&args.backend)?;
    let hash = console::hash_password(PASSWORD)?;
    let mut all = Vec::new();
    for kind in kinds {
        let measured = run_backend(kind, &args, &hash)
            .await
            .with_context(|| format!("backend {}", kind.name()))?;
        all.extend(measured);
    }
    print(&all, &args);
    Ok(())
}

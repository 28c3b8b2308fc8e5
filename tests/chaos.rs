//! Issue 8, proof by fault injection: three worker processes (`examples/chaos.rs`), each
//! behind a TCP fault proxy of its own, and a fourth process submitting a steady stream of
//! calls, while a seeded schedule SIGKILLs and SIGTERMs instances and restarts them, cuts
//! (refuses) and stalls an instance's database connections for less and for more than the
//! lease, black-holes them (those open go silent for ever, new ones pass; the server
//! notices after one to three leases), resets them, adds latency, and restarts an instance with its clock
//! off by more than the lease. Some requests have `max_attempts = 3` and fail on planned
//! attempts; the instances make in-memory calls (`AsyncSave`, `Async`, `Thread`) of their
//! own, and the submitter keyed `SyncSave` calls in transactions. Then everything is
//! restored, the queue drains, and every instance runs requests of its own. The checker
//! (`tests/chaos/checker.rs`, with `bounded.rs` and `memory.rs`) reads the bodies'
//! history, the receipts and calls, what is left in `async_req` and `async_log`, and the
//! fault log, and proves the promises held.
//!
//! `ASYNC_EXEC_CHAOS_SEED` repeats a run (the seed is printed); `ASYNC_EXEC_CHAOS_SECS`
//! sets how long faults are injected (default 45 s per backend). PostgreSQL and MariaDB
//! only (the suites are compiled in when their server URL is set, see
//! `tests/common/mod.rs`); one backend at a time.
#![allow(dead_code, unused_imports)]

#[macro_use]
mod common;
#[path = "chaos/checker.rs"]
mod checker;
#[path = "chaos/cluster.rs"]
mod cluster;
#[path = "chaos/probe.rs"]
mod probe;
#[path = "chaos/schedule.rs"]
mod schedule;

use std::time::{Duration, Instant};

use checker::{AttemptLog, Execution, Left, MemCall, MemRun, ReceiptRow, Run};
use cluster::{start_process, Cluster, LEASE_MS};
use common::{now_ms, Kind, TestDb};
use sqlx::AnyPool;

/// One chaos run at a time: they share two cores with everything else.
static ONE_AT_A_TIME: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

const DEFAULT_SECS: u64 = 45;

fn seed() -> u64 {
    std::env::var("ASYNC_EXEC_CHAOS_SEED")
        .ok()
        .map(|s| {
            s.parse()
                .unwrap_or_else(|_| panic!("ASYNC_EXEC_CHAOS_SEED={s} is not a number"))
        })
        .unwrap_or_else(rand::random::<u32>)
        .into()
}

fn secs() -> u64 {
    std::env::var("ASYNC_EXEC_CHAOS_SECS")
        .ok()
        .map(|s| {
            s.parse()
                .unwrap_or_else(|_| panic!("ASYNC_EXEC_CHAOS_SECS={s} is not a number of seconds"))
        })
        .unwrap_or(DEFAULT_SECS)
}

async fn scalar(pool: &AnyPool, sql: &str) -> i64 {
    let (n,): (i64,) = sqlx::query_as(sql)
        .fetch_one(pool)
        .await
        .unwrap_or_else(|e| panic!("{sql}: {e}"));
    n
}

/// Committed requests without a successful execution (or a final record: `dead`, as
/// three-attempt ones and those past their deadline end, or `cancelled`), records left in
/// `async_req` but final ones (the checker says whether each should have ended so), and
/// in-memory calls committed by the `alive` processes that have not run yet (an
/// `AsyncSave` that failed in memory is waited for as its retry record).
async fn outstanding(pool: &AnyPool, alive: &[String]) -> (i64, i64, i64) {
    let unrun = scalar(
        pool,
        "SELECT COUNT(*) FROM chaos_receipts r WHERE r.outcome = 'queued' AND NOT EXISTS \
         (SELECT 1 FROM chaos_history h WHERE h.request_id = r.request_id AND h.outcome = 'ok') \
         AND NOT EXISTS (SELECT 1 FROM async_req q WHERE q.id = r.request_id \
           AND q.status IN ('dead', 'cancelled'))",
    )
    .await;
    let left = scalar(
        pool,
        "SELECT COUNT(*) FROM async_req WHERE status NOT IN ('dead', 'cancelled')",
    )
    .await;
    let memory = if alive.is_empty() {
        0
    } else {
        let names: Vec<String> = alive.iter().map(|n| format!("'{n}'")).collect();
        scalar(
            pool,
            &format!(
                "SELECT COUNT(*) FROM chaos_mem_calls c WHERE c.state = 'committed' \
                 AND c.source IN ({}) AND c.strategy IN ('AsyncSave', 'Async', 'Thread') \
                 AND NOT EXISTS (SELECT 1 FROM chaos_mem_runs m WHERE m.call_id = c.call_id \
                   AND m.ended IS NOT NULL)",
                names.join(", ")
            ),
        )
        .await
    };
    (unrun, left, memory)
}

/// Waits until every committed request ran, the queue is empty and the in-memory calls
/// of the `alive` processes ran; `false` after `limit` (the checker then names what is
/// missing).
async fn drain(pool: &AnyPool, kind: Kind, limit: Duration, alive: &[String]) -> bool {
    let deadline = Instant::now() + limit;
    loop {
        let (unrun, left, memory) = outstanding(pool, alive).await;
        if unrun == 0 && left == 0 && memory == 0 {
            return true;
        }
        if Instant::now() > deadline {
            println!(
                "not drained after {limit:?}: {unrun} committed requests not run, {left} records left, \
                 {memory} in-memory calls not run"
            );
            print_stuck(pool, kind).await;
            return false;
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}

/// Prints what holds the records left after a drain timed out: each record's state against
/// the database's clock and, on MariaDB, the open transactions and who waits for whom, so
/// that a failed run in CI says why without its database.
async fn print_stuck(pool: &AnyPool, kind: Kind) {
    let now = match kind {
        Kind::MySql => "CAST(UNIX_TIMESTAMP(NOW(3)) * 1000 AS SIGNED)",
        Kind::Postgres => "CAST(EXTRACT(EPOCH FROM clock_timestamp()) * 1000 AS BIGINT)",
        Kind::Sqlite => "CAST(unixepoch('subsec') * 1000 AS INTEGER)",
    };
    let sql = format!(
        "SELECT CONCAT('id=', id, ' executor=', executor, ' status=', status, ' exec_count=', exec_count, \
         ' owner=', COALESCE(lease_owner, '-'), ' lease_left_ms=', COALESCE(lease_until - {now}, 0), \
         ' due_in_ms=', run_at - {now}, ' created_ago_ms=', {now} - create_time, \
         ' updated_ago_ms=', {now} - update_time) FROM async_req ORDER BY id LIMIT 20"
    );
    print_rows(pool, "left", &sql).await;
    if kind == Kind::MySql {
        print_rows(
            pool,
            "open transaction",
            "SELECT CONCAT('trx ', trx_id, ' thread ', trx_mysql_thread_id, ' state ', trx_state, \
             ' since ', trx_started, ' rows locked ', trx_rows_locked, ' query ', \
             COALESCE(trx_query, '-')) FROM information_schema.innodb_trx",
        )
        .await;
        print_rows(
            pool,
            "lock wait",
            "SELECT CONCAT('trx ', requesting_trx_id, ' waits for ', blocking_trx_id) \
             FROM information_schema.innodb_lock_waits",
        )
        .await;
        print_rows(
            pool,
            "connection",
            "SELECT CONCAT('thread ', id, ' ', COALESCE(command, '-'), ' ', time, ' s ', \
             COALESCE(state, '-'), ' ', COALESCE(LEFT(info, 200), '-')) \
             FROM information_schema.processlist WHERE command <> 'Sleep' OR time > 10",
        )
        .await;
    }
}

/// Prints each row of a one-text-column query: text, or bytes where MariaDB answers a
/// binary-collated text so (its information_schema answers text).
async fn print_rows(pool: &AnyPool, label: &str, sql: &str) {
    use sqlx::Row as _;
    match sqlx::query(sql).fetch_all(pool).await {
        Ok(rows) => {
            for row in rows {
                let text = row.try_get::<String, _>(0).or_else(|_| {
                    row.try_get::<Vec<u8>, _>(0)
                        .map(|bytes| String::from_utf8_lossy(&bytes).into_owned())
                });
                match text {
                    Ok(text) => println!("{label}: {text}"),
                    Err(error) => println!("{label}: could not read ({error})"),
                }
            }
        }
        Err(error) => println!("{label}: could not read ({error})"),
    }
}

/// Waits until each of `processes` has a successful execution started at or after
/// `since`.
async fn each_ran_since(pool: &AnyPool, processes: &[String], since: i64, limit: Duration) {
    let deadline = Instant::now() + limit;
    for name in processes {
        let sql = format!(
            "SELECT COUNT(*) FROM chaos_history WHERE instance = '{name}' AND outcome = 'ok' AND started >= {since}"
        );
        while scalar(pool, &sql).await == 0 && Instant::now() < deadline {
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
}

async fn read_run(pool: &AnyPool, kind: Kind, run: &mut Run) {
    type HistoryRow = (
        String,
        i64,
        Option<String>,
        String,
        i32,
        i64,
        Option<i64>,
        String,
        Option<String>,
    );
    let rows: Vec<HistoryRow> = sqlx::query_as(
        "SELECT run_id, request_id, req_key, instance, attempt, started, ended, outcome, plan FROM chaos_history",
    )
    .fetch_all(pool)
    .await
    .expect("read the history");
    run.executions = rows
        .into_iter()
        .map(
            |(run_id, request_id, key, process, attempt, started, ended, outcome, plan)| {
                Execution {
                    run_id,
                    request_id,
                    key,
                    process,
                    attempt,
                    started,
                    ended,
                    outcome,
                    plan,
                }
            },
        )
        .collect();
    type ReceiptTuple = (
        Option<i64>,
        Option<String>,
        String,
        String,
        String,
        i64,
        Option<i64>,
    );
    let rows: Vec<ReceiptTuple> = sqlx::query_as(
        "SELECT request_id, req_key, outcome, via, source, recorded, deadline_ms FROM chaos_receipts",
    )
    .fetch_all(pool)
    .await
    .expect("read the receipts");
    run.receipts = rows
        .into_iter()
        .map(
            |(request_id, key, outcome, via, source, recorded, deadline_ms)| ReceiptRow {
                request_id,
                key,
                outcome,
                via,
                source,
                recorded,
                deadline_ms,
            },
        )
        .collect();
    let rows: Vec<(i64, i64, i64, String)> =
        sqlx::query_as("SELECT request_id, asked, answered, outcome FROM chaos_cancels")
            .fetch_all(pool)
            .await
            .expect("read chaos_cancels");
    run.cancels = rows
        .into_iter()
        .map(
            |(request_id, asked, answered, outcome)| checker::controls::CancelRow {
                request_id,
                asked,
                answered,
                outcome,
            },
        )
        .collect();
    use sqlx::Row as _;
    let rows = sqlx::query("SELECT id, executor, status, exec_count, last_error FROM async_req")
        .fetch_all(pool)
        .await
        .expect("read async_req");
    run.left_in_queue = rows
        .iter()
        .map(|row| Left {
            id: row.get(0),
            executor: text(row, 1).unwrap_or_default(),
            status: text(row, 2).unwrap_or_default(),
            exec_count: row.get(3),
            last_error: text(row, 4),
        })
        .collect();
    let rows = sqlx::query("SELECT run_id, request_id, step, kind, nonce, at FROM chaos_steps")
        .fetch_all(pool)
        .await
        .expect("read chaos_steps");
    run.steps = rows
        .iter()
        .map(|row| checker::steps::StepRow {
            run_id: text(row, 0).unwrap_or_default(),
            request_id: row.get(1),
            step: text(row, 2).unwrap_or_default(),
            kind: text(row, 3).unwrap_or_default(),
            nonce: row.get(4),
            at: row.get(5),
        })
        .collect();
    let rows = sqlx::query(
        "SELECT l.req_id, l.attempt, l.outcome, l.error FROM async_log l \
         JOIN async_req r ON r.id = l.req_id WHERE r.status = 'dead'",
    )
    .fetch_all(pool)
    .await
    .expect("read async_log");
    run.attempt_logs = rows
        .iter()
        .map(|row| AttemptLog {
            request_id: row.get(0),
            attempt: row.get(1),
            outcome: text(row, 2).unwrap_or_default(),
            error: text(row, 3),
        })
        .collect();
    type CallRow = (
        String,
        String,
        Option<String>,
        i64,
        Option<String>,
        String,
        Option<String>,
        Option<i64>,
        String,
    );
    let rows: Vec<CallRow> = sqlx::query_as(
        "SELECT call_id, strategy, req_key, seq, tx_id, state, receipt, receipt_id, source FROM chaos_mem_calls",
    )
    .fetch_all(pool)
    .await
    .expect("read chaos_mem_calls");
    run.mem_calls = rows
        .into_iter()
        .map(
            |(call_id, strategy, key, seq, tx_id, state, receipt, receipt_id, source)| MemCall {
                call_id,
                strategy,
                key,
                seq,
                tx_id,
                state,
                receipt,
                receipt_id,
                source,
            },
        )
        .collect();
    type RunRow = (
        String,
        String,
        String,
        Option<i64>,
        String,
        i32,
        i64,
        Option<i64>,
        String,
    );
    let rows: Vec<RunRow> = sqlx::query_as(
        "SELECT run_id, call_id, strategy, request_id, instance, attempt, started, ended, outcome FROM chaos_mem_runs",
    )
    .fetch_all(pool)
    .await
    .expect("read chaos_mem_runs");
    run.mem_runs = rows
        .into_iter()
        .map(
            |(run_id, call_id, strategy, request_id, process, attempt, started, ended, outcome)| {
                MemRun {
                    run_id,
                    call_id,
                    strategy,
                    request_id,
                    process,
                    attempt,
                    started,
                    ended,
                    outcome,
                }
            },
        )
        .collect();
    let _ = kind;
}

/// A text column: MariaDB answers binary-collated text (`utf8mb4_bin`, as the runtime's
/// tables are) as bytes to the Any driver, whatever it is converted to.
fn text(row: &sqlx::any::AnyRow, i: usize) -> Option<String> {
    use sqlx::Row as _;
    row.try_get::<Option<String>, _>(i).unwrap_or_else(|_| {
        row.try_get::<Option<Vec<u8>>, _>(i)
            .ok()
            .flatten()
            .map(|bytes| String::from_utf8_lossy(&bytes).into_owned())
    })
}

/// The calls whose process logged that the retry record of their failed in-memory run
/// could not be written: the runtime's line says "it is lost" and quotes the failure,
/// which names the call (`planned failure of call w1.g2-m17`).
fn lost_memory_calls(text: &str) -> Vec<String> {
    const NAMED: &str = "planned failure of call ";
    text.lines()
        .filter(|l| l.contains("it is lost"))
        .filter_map(|l| {
            let at = l.find(NAMED)? + NAMED.len();
            let id: String = l[at..]
                .chars()
                .take_while(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '-' | '_'))
                .collect();
            (!id.is_empty()).then_some(id)
        })
        .collect()
}

async fn chaos(kind: Kind) {
    let _one = ONE_AT_A_TIME.lock().await;
    let (seed, secs) = (seed(), secs());
    let backend = format!("{kind:?}");
    println!(
        "chaos {backend}: seed {seed}, {secs} s of faults \
         (repeat with ASYNC_EXEC_CHAOS_SEED={seed} ASYNC_EXEC_CHAOS_SECS={secs})"
    );
    let db = TestDb::new(kind).await;
    let pool = AnyPool::connect(&db.url).await.expect("connect");
    let setup = tokio::process::Command::new(cluster::chaos_binary())
        .args(["--url", &db.url, "--setup"])
        .output()
        .await
        .expect("run the chaos example");
    assert!(
        setup.status.success(),
        "{}",
        String::from_utf8_lossy(&setup.stderr)
    );

    let probe = probe::Probe::start(&pool).await;
    let cluster = Cluster::start(&db.url).await;
    let submitter_args: Vec<String> = [
        "--url",
        &db.url,
        "--submit",
        "--seed",
        &seed.to_string(),
        "--max-work-ms",
        "400",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    let mut submitter = start_process("submitter", &submitter_args, cluster.logs_dir()).await;

    let plan = schedule::plan(seed, secs, LEASE_MS);
    println!(
        "chaos {backend}: {} faults planned, the first: {:?}",
        plan.len(),
        &plan[..plan.len().min(9)]
    );
    let started = tokio::time::Instant::now();
    let mut faults = tokio::task::JoinSet::new();
    for planned in plan {
        tokio::time::sleep_until(started + Duration::from_millis(planned.at_ms)).await;
        let cluster = cluster.clone();
        faults.spawn(async move { cluster.apply(planned).await });
    }
    tokio::time::sleep_until(started + Duration::from_secs(secs)).await;
    while let Some(done) = faults.join_next().await {
        done.expect("a fault task panicked");
    }
    cluster.restore_all().await;
    cluster.stop_memory_calls().await;

    // Stop submitting, drain, then show that every instance works.
    cluster::signal(&submitter.child, "TERM").await;
    let status = tokio::time::timeout(Duration::from_secs(60), submitter.child.wait())
        .await
        .expect("the submitter did not stop within 60 s of SIGTERM")
        .expect("wait");
    assert!(
        status.success(),
        "submitter: {}",
        cluster::read(&submitter.log)
    );
    let current = cluster.current().await;
    let drained = drain(&pool, kind, Duration::from_secs(120), &current).await;
    let final_phase_start = now_ms();
    cluster.probe_all().await;
    each_ran_since(&pool, &current, final_phase_start, Duration::from_secs(60)).await;
    let drained = drain(&pool, kind, Duration::from_secs(60), &current).await && drained;
    cluster.stop_all().await;
    let db_stalls = probe.stop().await;

    let mut run = Run {
        backend: backend.clone(),
        seed,
        secs,
        final_phase_start,
        db_stalls,
        ..Run::default()
    };
    read_run(&pool, kind, &mut run).await;
    {
        let log = cluster.log.lock().unwrap();
        run.faults = log.faults.clone();
        run.processes = log.processes.clone();
        run.panics = log.incidents.clone();
        for path in log.logs.iter().chain([&submitter.log]) {
            let text = cluster::read(path);
            for line in text.lines().filter(|l| l.contains("panicked")) {
                run.panics.push(format!("{}: {line}", path.display()));
            }
            run.lost_memory_calls.extend(lost_memory_calls(&text));
        }
    }
    pool.close().await;
    let logs: Vec<std::path::PathBuf> = {
        let log = cluster.log.lock().unwrap();
        log.logs.iter().chain([&submitter.log]).cloned().collect()
    };
    match checker::check(&run) {
        Ok(summary) => {
            println!("{summary}");
            assert!(drained, "the checker passed, but the queue did not drain in time");
            let _ = std::fs::remove_dir_all(cluster.logs_dir());
        }
        Err(violations) => panic!(
            "chaos {backend} (ASYNC_EXEC_CHAOS_SEED={seed} ASYNC_EXEC_CHAOS_SECS={secs} repeats it): \
             {violations}\ndatabase stalls seen by the probe: {:?}\n{}\nprocess logs kept in {}",
            run.db_stalls,
            warnings(&logs),
            cluster.logs_dir().display()
        ),
    }
}

/// The warnings and errors the processes logged (the first 40 of each), so that a failed
/// run in CI can be read without the log files.
fn warnings(logs: &[std::path::PathBuf]) -> String {
    let mut out = String::from("warnings and errors the processes logged:");
    for path in logs {
        let text = cluster::read(path);
        let lines: Vec<&str> = text
            .lines()
            // The level is between colour codes: `\x1b[33m WARN\x1b[0m`.
            .filter(|l| l.contains(" WARN") || l.contains("ERROR"))
            .collect();
        if lines.is_empty() {
            continue;
        }
        let name = path.file_name().unwrap_or_default().to_string_lossy();
        out.push_str(&format!("\n== {name}: {} line(s)", lines.len()));
        for line in lines.iter().take(40) {
            let line: String = line.chars().take(400).collect();
            out.push_str(&format!("\n{name}: {line}"));
        }
    }
    out
}

macro_rules! chaos_suite {
    ($cfg:meta, $kind:expr, $module:ident, $skip:literal) => {
        #[cfg($cfg)]
        mod $module {
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn chaos() {
                super::chaos($kind).await;
            }
        }

        #[cfg(not($cfg))]
        mod $module {
            #[test]
            #[ignore = $skip]
            fn chaos() {}
        }
    };
}

chaos_suite!(
    all(feature = "postgres", feature = "mysql", async_exec_test_postgres),
    super::Kind::Postgres,
    postgres,
    "PostgreSQL chaos test skipped: set ASYNC_EXEC_TEST_POSTGRES_URL=postgres://postgres@127.0.0.1:5432/test and use --all-features"
);
chaos_suite!(
    all(feature = "postgres", feature = "mysql", async_exec_test_mysql),
    super::Kind::MySql,
    mysql,
    "MySQL/MariaDB chaos test skipped: set ASYNC_EXEC_TEST_MYSQL_URL=mysql://root@127.0.0.1:3306/test and use --all-features"
);

//! The chaos run's in-memory strategies (`AsyncSave`, `Async`, `Thread`, called by the
//! worker instances, so that they run in a process that runs workers and is faulted) and
//! its keyed `SyncSave` calls in transactions (called by the submitter).
//!
//! Each call has an id of its own (`w1.g2-m17`, `submitter-s4`), recorded in
//! `chaos_mem_calls` *before* the call (`pending`: a process killed before it settled
//! leaves it so) and settled after its transaction ended (`committed`, `rolled_back`,
//! `commit_error`, `error`), with the receipt it got. Each body writes one row per run to
//! `chaos_mem_runs` (its call id, the request id when it runs from a record: a failed
//! `AsyncSave` or `SyncSave` written for retry), through the history connection.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use async_exec::{async_exec, Backend, Context, Data, Outcome, Runtime, Tx};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use sqlx::AnyPool;

use super::{dialect, now_ms, History};

/// The calls, as their callers saw them (`{bigint}` is the backend's 64-bit type).
pub const CREATE_CALLS: &str = "CREATE TABLE IF NOT EXISTS chaos_mem_calls (\
    call_id VARCHAR(100) NOT NULL PRIMARY KEY, strategy VARCHAR(20) NOT NULL, \
    req_key VARCHAR(200), seq {bigint} NOT NULL, tx_id VARCHAR(100), \
    state VARCHAR(20) NOT NULL, receipt VARCHAR(20), receipt_id {bigint}, \
    source VARCHAR(100) NOT NULL)";

/// The bodies' runs.
pub const CREATE_RUNS: &str = "CREATE TABLE IF NOT EXISTS chaos_mem_runs (\
    run_id VARCHAR(100) NOT NULL PRIMARY KEY, call_id VARCHAR(100) NOT NULL, \
    strategy VARCHAR(20) NOT NULL, request_id {bigint}, instance VARCHAR(100) NOT NULL, \
    attempt INTEGER NOT NULL, started {bigint} NOT NULL, ended {bigint}, \
    outcome VARCHAR(20) NOT NULL)";

/// What a body's planned failure says; the runtime logs it with "it is lost" when the
/// retry record of a failed `AsyncSave` could not be written, and the test reads the
/// call id from that line.
pub const PLANNED: &str = "planned failure of call";

/// In memory; a failure is written for retry by the workers.
#[async_exec(type = AsyncSave, name = "chaos::mem_save", max_attempts = 1000, timeout = "30s")]
async fn mem_save(
    call_id: String,
    work_ms: u64,
    fail_first: bool,
    ctx: Context,
    history: Data<History>,
) -> anyhow::Result<()> {
    body(&call_id, "AsyncSave", work_ms, fail_first, ctx, &history).await
}

/// In memory, through the worker channel; a failure is only logged.
#[async_exec(type = Async, name = "chaos::mem_async", timeout = "30s")]
async fn mem_async(
    call_id: String,
    work_ms: u64,
    fail_first: bool,
    ctx: Context,
    history: Data<History>,
) -> anyhow::Result<()> {
    body(&call_id, "Async", work_ms, fail_first, ctx, &history).await
}

/// In memory, spawned on tokio; a failure is only logged.
#[async_exec(type = Thread, name = "chaos::mem_thread", timeout = "30s")]
async fn mem_thread(
    call_id: String,
    work_ms: u64,
    fail_first: bool,
    ctx: Context,
    history: Data<History>,
) -> anyhow::Result<()> {
    body(&call_id, "Thread", work_ms, fail_first, ctx, &history).await
}

/// Inline at the call; a failure is written (with its key) for retry by the workers.
#[async_exec(type = SyncSave, name = "chaos::sync_save", max_attempts = 1000, timeout = "30s")]
async fn sync_save(
    call_id: String,
    work_ms: u64,
    fail_first: bool,
    ctx: Context,
    history: Data<History>,
) -> anyhow::Result<()> {
    body(&call_id, "SyncSave", work_ms, fail_first, ctx, &history).await
}

async fn body(
    call_id: &str,
    strategy: &str,
    work_ms: u64,
    fail_first: bool,
    ctx: Context,
    history: &History,
) -> anyhow::Result<()> {
    let attempt = ctx.attempt();
    let run_id = format!(
        "{}-r{}",
        history.instance,
        history.runs.fetch_add(1, Ordering::Relaxed)
    );
    let started = now_ms();
    history
        .write(|| {
            sqlx::query(&history.mem_insert)
                .bind(run_id.clone())
                .bind(call_id.to_string())
                .bind(strategy.to_string())
                .bind(ctx.request_id())
                .bind(history.instance.clone())
                .bind(attempt as i32)
                .bind(started)
        })
        .await?;
    tokio::time::sleep(Duration::from_millis(work_ms)).await;
    let failed = fail_first && attempt == 1;
    let ended = now_ms();
    history
        .write(|| {
            sqlx::query(&history.mem_update)
                .bind(ended)
                .bind(if failed { "failed" } else { "ok" })
                .bind(run_id.clone())
        })
        .await?;
    if failed {
        anyhow::bail!("{PLANNED} {call_id}");
    }
    Ok(())
}

/// The SQL of the body's two history statements, in the backend's dialect.
pub fn run_statements(url: &str) -> (String, String) {
    (
        dialect(
            url,
            "INSERT INTO chaos_mem_runs (run_id, call_id, strategy, request_id, instance, attempt, started, outcome) \
             VALUES ($1, $2, $3, $4, $5, $6, $7, 'running')",
        ),
        dialect(
            url,
            "UPDATE chaos_mem_runs SET ended = $1, outcome = $2 WHERE run_id = $3",
        ),
    )
}

/// Where the calls are recorded, before and after.
pub struct Calls {
    pool: AnyPool,
    insert: String,
    settle: String,
    source: String,
    next: AtomicU64,
}

/// One call to make.
struct Planned {
    call_id: String,
    /// This process's count of calls: the order it made them in.
    seq: u64,
    strategy: &'static str,
    key: Option<String>,
    work_ms: u64,
    fail_first: bool,
}

impl Calls {
    pub fn new(pool: AnyPool, url: &str, source: &str) -> Calls {
        Calls {
            pool,
            insert: dialect(
                url,
                "INSERT INTO chaos_mem_calls (call_id, strategy, req_key, seq, tx_id, state, source) \
                 VALUES ($1, $2, $3, $4, $5, 'pending', $6)",
            ),
            settle: dialect(
                url,
                "UPDATE chaos_mem_calls SET state = $1, receipt = $2, receipt_id = $3 WHERE call_id = $4",
            ),
            source: source.to_string(),
            next: AtomicU64::new(0),
        }
    }

    fn plan(
        &self,
        rng: &mut StdRng,
        strategy: &'static str,
        key: Option<String>,
        fail: f64,
    ) -> Planned {
        let n = self.next.fetch_add(1, Ordering::Relaxed);
        let letter = if strategy == "SyncSave" { 's' } else { 'm' };
        Planned {
            call_id: format!("{}-{letter}{n}", self.source),
            seq: n,
            strategy,
            key,
            work_ms: rng.gen_range(5..=40),
            fail_first: rng.gen_bool(fail),
        }
    }

    /// Runs a statement of the test's own, trying again for a while (this connection
    /// never goes through a proxy: a failure here is the test's, and stops the process).
    async fn run<'q>(
        &self,
        query: impl Fn() -> sqlx::query::Query<'q, sqlx::Any, sqlx::any::AnyArguments<'q>>,
    ) {
        let mut tries = 0;
        loop {
            match query().execute(&self.pool).await {
                Ok(_) => return,
                Err(error) if tries > 0 && super::is_duplicate(&error) => return,
                Err(error) if tries < 50 => {
                    tries += 1;
                    eprintln!("call record not written ({error}); again");
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
                Err(error) => panic!("call record not written: {error}"),
            }
        }
    }

    async fn intend(&self, call: &Planned, tx_id: Option<&str>) {
        self.run(|| {
            sqlx::query(&self.insert)
                .bind(call.call_id.clone())
                .bind(call.strategy)
                .bind(call.key.clone())
                .bind(call.seq as i64)
                .bind(tx_id.map(str::to_string))
                .bind(self.source.clone())
        })
        .await
    }

    async fn settle(&self, call_id: &str, state: &str, receipt: Option<&async_exec::Receipt>) {
        let (name, id) = match receipt {
            None => (None, None),
            Some(r) => (
                Some(match r.outcome {
                    Outcome::InMemory => "in_memory",
                    Outcome::Ran => "ran",
                    Outcome::Deferred { .. } => "deferred",
                    Outcome::Existing => "existing",
                    _ => "other",
                }),
                r.id,
            ),
        };
        self.run(|| {
            sqlx::query(&self.settle)
                .bind(state.to_string())
                .bind(name)
                .bind(id)
                .bind(call_id.to_string())
        })
        .await
    }
}

fn call_of(call: &Planned) -> async_exec::Call {
    let (id, ms, fail) = (call.call_id.clone(), call.work_ms, call.fail_first);
    let made = match call.strategy {
        "AsyncSave" => mem_save(id, ms, fail),
        "Async" => mem_async(id, ms, fail),
        "Thread" => mem_thread(id, ms, fail),
        _ => sync_save(id, ms, fail),
    };
    match &call.key {
        Some(key) => made.key(key.clone()),
        None => made,
    }
}

/// Makes in-memory calls until `stop`: one alone (autocommit), or one to three in a
/// transaction that commits, or rolls back (three in ten).
pub async fn memory_calls<DB: Backend>(rt: Runtime, calls: Calls, stop: Arc<AtomicBool>) {
    let mut rng = StdRng::from_entropy();
    let mut made = 0u64;
    while !stop.load(Ordering::Acquire) {
        let n = rng.gen_range(1..=3);
        let planned: Vec<Planned> = (0..n)
            .map(|_| {
                let strategy = ["AsyncSave", "Async", "Thread"][rng.gen_range(0..3)];
                calls.plan(&mut rng, strategy, None, 0.15)
            })
            .collect();
        made += n as u64;
        if rng.gen_bool(0.25) {
            let call = &planned[0];
            calls.intend(call, None).await;
            match call_of(call).on(&rt).await {
                Ok(receipt) => {
                    calls
                        .settle(&call.call_id, "committed", Some(&receipt))
                        .await
                }
                Err(error) => {
                    eprintln!("in-memory call failed: {error}");
                    calls.settle(&call.call_id, "error", None).await
                }
            }
        } else {
            let rollback = rng.gen_bool(0.3);
            let tx_id = planned[0].call_id.clone();
            for call in &planned {
                calls.intend(call, Some(&tx_id)).await;
            }
            in_transaction::<DB>(&rt, &calls, &planned, rollback).await;
        }
        tokio::time::sleep(Duration::from_millis(rng.gen_range(100..=300))).await;
    }
    println!("in-memory calls made {made}");
}

/// The calls in one transaction, committed or rolled back; each settled after it ended.
async fn in_transaction<DB: Backend>(
    rt: &Runtime,
    calls: &Calls,
    planned: &[Planned],
    rollback: bool,
) {
    let mut tx: Tx<DB> = match rt.begin().await {
        Ok(tx) => tx,
        Err(error) => {
            eprintln!("begin failed: {error}");
            for call in planned {
                calls.settle(&call.call_id, "error", None).await;
            }
            return;
        }
    };
    let mut receipts = Vec::new();
    let mut failed = false;
    for call in planned {
        match call_of(call).within(&mut tx).await {
            Ok(receipt) => receipts.push(receipt),
            Err(error) => {
                eprintln!("call in a transaction failed: {error}");
                failed = true;
                break;
            }
        }
    }
    let state = if rollback || failed {
        let _ = tx.rollback().await;
        "rolled_back"
    } else {
        match tx.commit().await {
            Ok(()) => "committed",
            Err(error) => {
                // Whether it committed is unknown.
                eprintln!("commit failed: {error}");
                "commit_error"
            }
        }
    };
    for (i, call) in planned.iter().enumerate() {
        let receipt = receipts.get(i);
        let state = if receipt.is_none() { "error" } else { state };
        // A call refused before its receipt ran nothing, in no transaction that
        // committed it: recorded as an error (and, being unsettled, nothing may run).
        calls.settle(&call.call_id, state, receipt).await;
    }
}

/// The keys of the submitter's `SyncSave` calls.
#[derive(Default)]
pub struct SyncKeys {
    keys: Vec<String>,
    next: u64,
}

/// A transaction of one or two keyed `SyncSave` calls (a new key, or one used before;
/// sometimes one key twice), committed or (one in four) rolled back. Their bodies run at
/// the call; a failure is written with the key, in the transaction.
pub async fn sync_keyed<DB: Backend>(
    rt: &Runtime,
    calls: &Calls,
    rng: &mut StdRng,
    keys: &mut SyncKeys,
    seed: u64,
) {
    let n = rng.gen_range(1..=2);
    let mut planned = Vec::new();
    for i in 0..n {
        let key = if i == 1 && rng.gen_bool(0.3) {
            planned
                .first()
                .and_then(|p: &Planned| p.key.clone())
                .expect("a first key")
        } else if keys.keys.is_empty() || rng.gen_bool(0.5) {
            keys.next += 1;
            let key = format!("s{seed}-{}", keys.next);
            keys.keys.push(key.clone());
            key
        } else {
            keys.keys[rng.gen_range(0..keys.keys.len())].clone()
        };
        planned.push(calls.plan(rng, "SyncSave", Some(key), 0.2));
    }
    let rollback = rng.gen_bool(0.25);
    let tx_id = planned[0].call_id.clone();
    for call in &planned {
        calls.intend(call, Some(&tx_id)).await;
    }
    in_transaction::<DB>(rt, calls, &planned, rollback).await;
}

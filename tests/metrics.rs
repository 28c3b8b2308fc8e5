//! Counters, histograms and gauges through the `metrics` facade (issue 9): what a
//! submitted request that runs, and one that fails, record; the start latency; lease
//! renewals, losses and rescues; sweep rounds; a poisoned outcome; the sampled queue
//! gauges. A recorder of this file's own counts them; the tests take turns (one global
//! recorder) and compare counts before and after.

#![allow(clippy::extra_unused_type_parameters)] // every test takes the backend, used or not

#[macro_use]
mod common;

use std::collections::HashMap;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use async_exec::{async_exec, Builder, Context, Data, Status};
use common::{Probe, TestDb};
use metrics::{
    Counter, CounterFn, Gauge, GaugeFn, Histogram, HistogramFn, Key, KeyName, Metadata, Recorder,
    SharedString, Unit,
};
use tokio::sync::Semaphore;

#[async_exec(type = SaveAsync)]
async fn metered_ok(n: i64) -> Result<(), String> {
    let _ = n;
    Ok(())
}

#[async_exec(type = SaveAsync, max_attempts = 1)]
async fn metered_fails(n: i64) -> Result<(), String> {
    Err(format!("{n}: refused"))
}

#[async_exec(type = SaveAsync)]
async fn metered_later(n: i64) -> Result<(), String> {
    let _ = n;
    Ok(())
}

#[async_exec(type = SaveAsync, max_attempts = 3)]
async fn metered_gated(n: i64, gate: Data<Gate>, probe: Data<Probe>, ctx: Context) {
    let _ = n;
    probe.record("gated", ctx.attempt());
    gate.pass().await;
}

#[async_exec(type = SaveAsync, max_attempts = 1)]
async fn metered_gated_last(n: i64, gate: Data<Gate>, probe: Data<Probe>, ctx: Context) {
    let _ = n;
    probe.record("gated", ctx.attempt());
    gate.pass().await;
}

#[async_exec(type = SaveAsync, max_attempts = 3)]
async fn metered_refused(gate: Data<Gate>, probe: Data<Probe>, ctx: Context) -> Result<(), String> {
    probe.record("refused", ctx.attempt());
    gate.pass().await;
    Err("declined".into())
}

#[async_exec(type = SaveAsync, max_attempts = 3)]
async fn metered_flaky(n: i64, ctx: Context) -> Result<(), String> {
    match ctx.attempt() {
        1 => Err(format!("{n}: not yet")),
        _ => Ok(()),
    }
}

/// Holds bodies until the test opens it.
struct Gate(Semaphore);

impl Default for Gate {
    fn default() -> Self {
        Gate(Semaphore::new(0))
    }
}

impl Gate {
    async fn pass(&self) {
        let _permit = self.0.acquire().await.expect("the gate is never closed");
    }

    fn open(&self) {
        self.0.add_permits(Semaphore::MAX_PERMITS / 2);
    }
}

/// Snoozes on its first attempt, then succeeds.
#[async_exec(type = SaveAsync, max_attempts = 1)]
async fn metered_snoozes(n: i64, ctx: Context) -> anyhow::Result<()> {
    let _ = n;
    if ctx.attempt() == 1 {
        return Err(async_exec::Snooze::new(Duration::ZERO, "the API said 429").into());
    }
    Ok(())
}

/// The test runtime's builder, with the gate the executors here take.
fn builder(db: &TestDb) -> Builder {
    db.builder().data(Gate::default())
}

/// One series: how many increments (counters) or records (histograms) it saw, or its
/// value (gauges); and the values a histogram recorded.
#[derive(Default)]
struct Series(Mutex<f64>, Mutex<Vec<f64>>);

impl CounterFn for Series {
    fn increment(&self, value: u64) {
        *self.0.lock().unwrap() += value as f64;
    }
    fn absolute(&self, value: u64) {
        *self.0.lock().unwrap() = value as f64;
    }
}

impl GaugeFn for Series {
    fn increment(&self, value: f64) {
        *self.0.lock().unwrap() += value;
    }
    fn decrement(&self, value: f64) {
        *self.0.lock().unwrap() -= value;
    }
    fn set(&self, value: f64) {
        *self.0.lock().unwrap() = value;
    }
}

impl HistogramFn for Series {
    fn record(&self, value: f64) {
        *self.0.lock().unwrap() += 1.0;
        self.1.lock().unwrap().push(value);
    }
}

/// Series by `name{label=value,...}` (labels sorted).
#[derive(Default)]
struct Counts(Mutex<HashMap<String, Arc<Series>>>);

impl Counts {
    fn series(&self, key: &Key) -> Arc<Series> {
        let mut labels: Vec<String> = key
            .labels()
            .map(|l| format!("{}={}", l.key(), l.value()))
            .collect();
        labels.sort();
        let name = format!("{}{{{}}}", key.name(), labels.join(","));
        self.0.lock().unwrap().entry(name).or_default().clone()
    }

    fn get(&self, name: &str) -> f64 {
        self.0
            .lock()
            .unwrap()
            .get(name)
            .map_or(0.0, |s| *s.0.lock().unwrap())
    }

    /// The values a histogram recorded.
    fn values(&self, name: &str) -> Vec<f64> {
        self.0
            .lock()
            .unwrap()
            .get(name)
            .map_or_else(Vec::new, |s| s.1.lock().unwrap().clone())
    }

    /// Whether a series was registered.
    fn has(&self, name: &str) -> bool {
        self.0.lock().unwrap().contains_key(name)
    }
}

/// What `series` count now.
fn snapshot(series: &[String]) -> Vec<f64> {
    series.iter().map(|s| counts().get(s)).collect()
}

/// What `series` counted since `before`.
fn since(series: &[String], before: &[f64]) -> Vec<f64> {
    series
        .iter()
        .zip(before)
        .map(|(s, b)| counts().get(s) - b)
        .collect()
}

struct Recording(&'static Counts);

impl Recorder for Recording {
    fn describe_counter(&self, _: KeyName, _: Option<Unit>, _: SharedString) {}
    fn describe_gauge(&self, _: KeyName, _: Option<Unit>, _: SharedString) {}
    fn describe_histogram(&self, _: KeyName, _: Option<Unit>, _: SharedString) {}
    fn register_counter(&self, key: &Key, _: &Metadata<'_>) -> Counter {
        Counter::from_arc(self.0.series(key))
    }
    fn register_gauge(&self, key: &Key, _: &Metadata<'_>) -> Gauge {
        Gauge::from_arc(self.0.series(key))
    }
    fn register_histogram(&self, key: &Key, _: &Metadata<'_>) -> Histogram {
        Histogram::from_arc(self.0.series(key))
    }
}

/// The process's recorder, installed once; and the turn the tests take.
fn counts() -> &'static Counts {
    static COUNTS: OnceLock<&'static Counts> = OnceLock::new();
    COUNTS.get_or_init(|| {
        let counts: &'static Counts = Box::leak(Box::default());
        metrics::set_global_recorder(Recording(counts)).expect("one recorder per test binary");
        counts
    })
}

static TURN: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

const OK: &str = "metrics::metered_ok";
const FAILS: &str = "metrics::metered_fails";
const LATER: &str = "metrics::metered_later";
const GATED: &str = "metrics::metered_gated";

async fn a_run_and_a_failure_are_counted<DB: async_exec::Backend>(db: common::TestDb) {
    let _turn = TURN.lock().await;
    let counts = counts();
    let series = [
        format!("async_exec_submitted_total{{executor={OK},strategy=SaveAsync}}"),
        format!("async_exec_started_total{{executor={OK}}}"),
        format!("async_exec_finished_total{{executor={OK},outcome=success}}"),
        format!("async_exec_duration_seconds{{executor={OK}}}"),
        format!("async_exec_submitted_total{{executor={FAILS},strategy=SaveAsync}}"),
        format!("async_exec_started_total{{executor={FAILS}}}"),
        format!("async_exec_finished_total{{executor={FAILS},outcome=failure}}"),
        format!("async_exec_finished_total{{executor={FAILS},outcome=success}}"),
    ];
    let before: Vec<f64> = series.iter().map(|s| counts.get(s)).collect();

    let rt = builder(&db).delete_on_success(false).start().await.unwrap();
    let ok = metered_ok(1).on(&rt).await.unwrap().id.unwrap();
    let fails = metered_fails(2).on(&rt).await.unwrap().id.unwrap();
    common::wait_for(|| {
        let rt = rt.clone();
        async move {
            rt.get(ok).await.unwrap().unwrap().status == Status::Success
                && rt.get(fails).await.unwrap().unwrap().status == Status::Dead
        }
    })
    .await;

    let delta: Vec<f64> = series
        .iter()
        .zip(&before)
        .map(|(s, b)| counts.get(s) - b)
        .collect();
    assert_eq!(
        delta,
        vec![1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 0.0],
        "series: {series:?}"
    );
    rt.shutdown().await.unwrap();
}

/// What the retention sweep prunes is counted, by table.
async fn retention_prunes_are_counted<DB: async_exec::Backend>(db: common::TestDb) {
    let _turn = TURN.lock().await;
    let counts = counts();
    let series = [
        "async_exec_retention_pruned_total{table=async_req}",
        "async_exec_retention_pruned_total{table=async_log}",
        "async_exec_retention_pruned_total{table=async_audit}",
    ];
    let before: Vec<f64> = series.iter().map(|s| counts.get(s)).collect();
    let rt = db
        .builder()
        .run_workers(false)
        .retention(Some(std::time::Duration::from_secs(86_400)))
        .start()
        .await
        .unwrap();
    let old = common::now_ms() - 2 * 86_400_000;
    db.exec(&format!(
        "INSERT INTO async_req (application_name, executor, sign, strategy, status, exec_count, \
         max_attempts, param_json, remark, priority, run_at, create_time, update_time) \
         VALUES ('tests', 'metrics::gone', '0', 'SaveAsync', 'success', 1, 5, '{{}}', '', 0, \
         {old}, {old}, {old})"
    ))
    .await;
    for req in [999_999_101, 999_999_102] {
        db.exec(&format!(
            "INSERT INTO async_log (req_id, attempt, worker, started, finished, outcome, error) \
             VALUES ({req}, 1, 'tests@host:1:00', {old}, {old}, 'error', 'e')"
        ))
        .await;
    }
    // An audit row past the default audit retention (90 days).
    let long_ago = common::now_ms() - 100 * 86_400_000;
    db.exec(&format!(
        "INSERT INTO async_audit (application_name, actor, action, target, affected, \
         create_time) VALUES ('tests', 'alice', 'retry', '{{}}', 1, {long_ago})"
    ))
    .await;
    let report = rt.retention().run_once().await.unwrap();
    assert_eq!((report.requests, report.attempt_logs), (1, 2));
    assert_eq!(report.audit_rows, 1);
    let delta: Vec<f64> = series
        .iter()
        .zip(&before)
        .map(|(s, b)| counts.get(s) - b)
        .collect();
    assert_eq!(delta, vec![1.0, 2.0, 1.0], "series: {series:?}");
    rt.shutdown().await.unwrap();
}

/// The start latency counts from the commit (a call made now) or from the due time (a
/// delayed call, which starts after its delay of 1.5 s and is counted well under that).
async fn start_latency_counts_from_the_commit_or_the_due_time<DB: async_exec::Backend>(
    db: common::TestDb,
) {
    let _turn = TURN.lock().await;
    let name = format!("async_exec_start_latency_seconds{{executor={LATER}}}");
    let before = counts().values(&name).len();
    let rt = builder(&db)
        .delete_on_success(false)
        .retry_interval(Duration::from_millis(100))
        .start()
        .await
        .unwrap();
    let now = metered_later(1).on(&rt).await.unwrap().id.unwrap();
    let later = metered_later(2)
        .delay(Duration::from_millis(1500))
        .on(&rt)
        .await
        .unwrap()
        .id
        .unwrap();
    for id in [now, later] {
        common::wait_for(|| {
            let rt = rt.clone();
            async move { rt.get(id).await.unwrap().unwrap().status == Status::Success }
        })
        .await;
    }
    let latencies = counts().values(&name)[before..].to_vec();
    assert_eq!(latencies.len(), 2, "{latencies:?}");
    assert!(
        latencies.iter().all(|&s| (0.0..1.0).contains(&s)),
        "each start within a second of its commit or due time: {latencies:?}"
    );
    rt.shutdown().await.unwrap();
}

/// Renewed leases; two leases taken over (one record with attempts left, one on its last),
/// found lost by the heartbeat; then rescued by the rescuer: one back to the queue, one dead.
async fn lost_leases_and_their_rescue_are_counted<DB: async_exec::Backend>(db: common::TestDb) {
    let _turn = TURN.lock().await;
    let series = [
        "async_exec_leases_total{result=renewed}".to_string(),
        "async_exec_leases_total{result=lost}".to_string(),
        "async_exec_sweep_records_total{result=rescued,sweep=rescuer}".to_string(),
        "async_exec_sweep_records_total{result=dead,sweep=rescuer}".to_string(),
    ];
    let before = snapshot(&series);
    let rt = builder(&db).start().await.unwrap();
    let keeps = metered_gated(1).on(&rt).await.unwrap().id.unwrap();
    let last = metered_gated_last(2).on(&rt).await.unwrap().id.unwrap();
    rt.data::<Probe>().unwrap().wait_runs("gated", 2).await;
    assert_eq!(rt.heartbeat().run_once().await.unwrap().renewed, 2);

    // Another instance holds them now, on leases already over.
    db.exec(&format!(
        "UPDATE async_req SET lease_owner = 'thief', lease_until = 1 WHERE id IN ({keeps}, {last})"
    ))
    .await;
    rt.heartbeat().run_once().await.unwrap();
    let report = rt.rescuer().run_once().await.unwrap();
    assert_eq!((report.retried, report.dead), (vec![keeps], vec![last]));
    let delta = since(&series, &before);
    assert!(delta[0] >= 2.0, "renewed: {delta:?}");
    assert_eq!(
        delta[1..],
        [2.0, 1.0, 1.0],
        "lost, rescued, dead: {series:?}"
    );
    rt.data::<Gate>().unwrap().open();
    rt.shutdown().await.unwrap();
}

/// An outcome the database refuses is written `dead` instead, and counted `poisoned`.
async fn a_refused_outcome_is_counted_as_poisoned<DB: async_exec::Backend>(db: common::TestDb) {
    let _turn = TURN.lock().await;
    let series = [
        "async_exec_outcome_write_failures_total{result=poisoned}".to_string(),
        "async_exec_outcome_write_failures_total{result=unwritable}".to_string(),
    ];
    let before = snapshot(&series);
    let rt = builder(&db).delete_on_success(false).start().await.unwrap();
    let id = metered_refused().on(&rt).await.unwrap().id.unwrap();
    rt.data::<Probe>().unwrap().wait_runs("refused", 1).await;
    common::refuse_failed_outcome_of(&db, id).await;
    rt.data::<Gate>().unwrap().open();
    common::wait_for(|| {
        let rt = rt.clone();
        async move { rt.get(id).await.unwrap().unwrap().status == Status::Dead }
    })
    .await;
    assert_eq!(since(&series, &before), [1.0, 0.0], "{series:?}");
    rt.shutdown().await.unwrap();
}

/// Sweep rounds count what they did: the retrier's claimed retry, the keys expired, and a
/// round that failed (its table gone for a moment).
async fn sweep_rounds_are_counted<DB: async_exec::Backend>(db: common::TestDb) {
    let _turn = TURN.lock().await;
    let series = [
        "async_exec_sweep_records_total{result=claimed,sweep=retrier}".to_string(),
        "async_exec_sweep_records_total{result=expired,sweep=keys}".to_string(),
        "async_exec_sweep_records_total{result=claimed,sweep=compensator}".to_string(),
        "async_exec_sweep_failures_total{sweep=rescuer}".to_string(),
    ];
    let before = snapshot(&series);
    let rt = builder(&db)
        .delete_on_success(false)
        .key_retention(Duration::from_millis(1))
        .start()
        .await
        .unwrap();
    let flaky = metered_flaky(1).on(&rt).await.unwrap().id.unwrap();
    common::wait_for(|| {
        let rt = rt.clone();
        async move { rt.get(flaky).await.unwrap().unwrap().status == Status::Failed }
    })
    .await;
    let started = Arc::new(Mutex::new(0));
    common::wait_for(|| {
        let (rt, started) = (rt.clone(), started.clone());
        async move {
            let n = rt.retrier().run_once().await.unwrap().started;
            *started.lock().unwrap() += n;
            n > 0
        }
    })
    .await;
    let started = *started.lock().unwrap() as f64;

    metered_ok(7).key("metrics-key").on(&rt).await.unwrap();
    tokio::time::sleep(Duration::from_millis(20)).await;
    let compensated = rt.compensator().run_once().await.unwrap();
    assert!(compensated.keys_expired >= 1, "{compensated:?}");

    db.exec("ALTER TABLE async_req RENAME TO async_req_away")
        .await;
    let failed = rt.rescuer().run_once().await;
    db.exec("ALTER TABLE async_req_away RENAME TO async_req")
        .await;
    assert!(failed.is_err(), "the rescue of a missing table fails");

    assert_eq!(
        since(&series, &before),
        [
            started,
            compensated.keys_expired as f64,
            compensated.started as f64,
            1.0
        ],
        "{series:?}"
    );
    rt.shutdown().await.unwrap();
}

/// The queue gauges, sampled: bodies running, records of an executor this binary does
/// not know waiting (their age), this binary's executors at 0 with nothing in the queue,
/// and every gauge back to 0 once its records are gone.
async fn queue_gauges_follow_the_store<DB: async_exec::Backend>(db: common::TestDb) {
    let _turn = TURN.lock().await;
    const ELSEWHERE: &str = "metrics::elsewhere";
    let depth = |executor: &str, status: &str| {
        counts().get(&format!(
            "async_exec_queue_depth{{executor={executor},status={status}}}"
        ))
    };
    let oldest = |executor: &str| {
        counts().get(&format!(
            "async_exec_oldest_waiting_seconds{{executor={executor}}}"
        ))
    };
    let rt = builder(&db)
        .queue_sample_interval(Duration::from_millis(100))
        .start()
        .await
        .unwrap();
    for n in 0..3 {
        metered_gated(n).on(&rt).await.unwrap();
    }
    for _ in 0..2 {
        db.insert_raw(ELSEWHERE, "0000000000000000", "{}").await;
    }
    rt.data::<Probe>().unwrap().wait_runs("gated", 3).await;
    tokio::time::sleep(Duration::from_millis(50)).await;
    common::wait_for(|| async {
        depth(GATED, "running") == 3.0 && depth(ELSEWHERE, "init") == 2.0 && oldest(ELSEWHERE) > 0.0
    })
    .await;
    assert_eq!(depth(GATED, "init"), 0.0);
    assert!(
        counts().has(&format!(
            "async_exec_queue_depth{{executor={OK},status=failed}}"
        )),
        "every executor of this binary is reported"
    );
    assert_eq!(oldest(GATED), 0.0, "running records do not wait");

    rt.data::<Gate>().unwrap().open();
    db.exec(&format!(
        "DELETE FROM async_req WHERE executor = '{ELSEWHERE}'"
    ))
    .await;
    common::wait_for(|| async {
        depth(GATED, "running") == 0.0
            && depth(ELSEWHERE, "init") == 0.0
            && oldest(ELSEWHERE) == 0.0
    })
    .await;
    rt.shutdown().await.unwrap();
}

/// Issue 30: a snooze is its own outcome, `outcome="snoozed"`, not a failure (seen failing
/// before: counted as `failure`, and no `snoozed` series).
async fn a_snooze_is_counted_as_snoozed_not_as_a_failure<DB: async_exec::Backend>(
    db: common::TestDb,
) {
    let _turn = TURN.lock().await;
    const SNOOZES: &str = "metrics::metered_snoozes";
    let series = [
        format!("async_exec_finished_total{{executor={SNOOZES},outcome=snoozed}}"),
        format!("async_exec_finished_total{{executor={SNOOZES},outcome=failure}}"),
        format!("async_exec_finished_total{{executor={SNOOZES},outcome=success}}"),
        format!("async_exec_started_total{{executor={SNOOZES}}}"),
    ];
    let before = snapshot(&series);
    let rt = builder(&db)
        .retry_interval(Duration::from_millis(50))
        .delete_on_success(false)
        .start()
        .await
        .unwrap();
    let id = metered_snoozes(1).on(&rt).await.unwrap().id.unwrap();
    common::wait_for(|| {
        let rt = rt.clone();
        async move { rt.get(id).await.unwrap().unwrap().status == Status::Success }
    })
    .await;
    assert_eq!(
        since(&series, &before),
        vec![1.0, 0.0, 1.0, 2.0],
        "{series:?}"
    );
    rt.shutdown().await.unwrap();
}

backend_suite!(
    a_snooze_is_counted_as_snoozed_not_as_a_failure,
    a_run_and_a_failure_are_counted,
    retention_prunes_are_counted,
    start_latency_counts_from_the_commit_or_the_due_time,
    lost_leases_and_their_rescue_are_counted,
    a_refused_outcome_is_counted_as_poisoned,
    sweep_rounds_are_counted,
    queue_gauges_follow_the_store,
);

//! Counters and histograms through the `metrics` facade (issue 9): what a submitted
//! request that runs, and one that fails, record. A recorder of this file's own counts
//! them; the tests take turns (one global recorder) and compare counts before and after.

#![allow(clippy::extra_unused_type_parameters)] // every test takes the backend, used or not

#[macro_use]
mod common;

use std::collections::HashMap;
use std::sync::{Arc, Mutex, OnceLock};

use async_exec::{async_exec, Status};
use metrics::{
    Counter, CounterFn, Gauge, GaugeFn, Histogram, HistogramFn, Key, KeyName, Metadata, Recorder,
    SharedString, Unit,
};

#[async_exec(type = SaveAsync)]
async fn metered_ok(n: i64) -> Result<(), String> {
    let _ = n;
    Ok(())
}

#[async_exec(type = SaveAsync, max_attempts = 1)]
async fn metered_fails(n: i64) -> Result<(), String> {
    Err(format!("{n}: refused"))
}

/// One series: how many increments (counters) or records (histograms) it saw.
#[derive(Default)]
struct Series(Mutex<f64>);

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
    fn record(&self, _value: f64) {
        *self.0.lock().unwrap() += 1.0;
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

    let rt = db.builder().delete_on_success(false).start().await.unwrap();
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
             VALUES ({req}, 1, 'w', {old}, {old}, 'error', 'e')"
        ))
        .await;
    }
    let report = rt.retention().run_once().await.unwrap();
    assert_eq!((report.requests, report.attempt_logs), (1, 2));
    let delta: Vec<f64> = series
        .iter()
        .zip(&before)
        .map(|(s, b)| counts.get(s) - b)
        .collect();
    assert_eq!(delta, vec![1.0, 2.0], "series: {series:?}");
    rt.shutdown().await.unwrap();
}

backend_suite!(
    a_run_and_a_failure_are_counted,
    retention_prunes_are_counted
);

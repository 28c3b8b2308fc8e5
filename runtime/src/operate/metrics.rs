//! Counters, histograms and gauges through the [`metrics`] facade: whatever recorder the
//! application installs (Prometheus exporter, StatsD, ...) receives them; with none
//! installed they cost little. What is counted per call and per job goes to handles
//! registered once per executor (again when another recorder is in effect), so a job
//! builds no keys and allocates nothing for them; the queue gauges, sampled every
//! `queue_sample_interval`, label executors this binary does not know with their stored
//! names.
//!
//! | name | type | labels |
//! |---|---|---|
//! | `async_exec_submitted_total` | counter | `executor`, `strategy` |
//! | `async_exec_started_total` | counter | `executor` |
//! | `async_exec_finished_total` | counter | `executor`, `outcome` (`success`, `failure`, `snoozed`) |
//! | `async_exec_duration_seconds` | histogram | `executor` |
//! | `async_exec_retention_pruned_total` | counter | `table` (`async_req`, `async_log`) |
//! | `async_exec_listener_dropped_total` | counter | |
//! | `async_exec_start_latency_seconds` | histogram | `executor` |
//! | `async_exec_leases_total` | counter | `result` (`renewed`, `lost`, `unanswered_released`) |
//! | `async_exec_sweep_records_total` | counter | `sweep`, `result` (see [`Sweep`]) |
//! | `async_exec_sweep_failures_total` | counter | `sweep` |
//! | `async_exec_outcome_write_failures_total` | counter | `result` (`transient`, `poisoned`, `unwritable`) |
//! | `async_exec_queue_depth` | gauge | `executor`, `status` (`init`, `running`, `failed`) |
//! | `async_exec_oldest_waiting_seconds` | gauge | `executor` |

use std::sync::{LazyLock, RwLock};
use std::time::Duration;

use metrics::{Counter, Histogram, SharedString};
use rustc_hash::FxHashMap;

use crate::base::registry::ExecutorDef;

/// The handles of what is counted per call and per job of one executor, registered with
/// the recorder once rather than on every job (a labelled key is allocated and hashed
/// each time it is built: four times a job, a few percent of a SQLite drain).
#[derive(Debug)]
struct ExecutorMetrics {
    /// The recorder they were registered with (see [`recorder_id`]).
    recorder: usize,
    submitted: Counter,
    started: Counter,
    succeeded: Counter,
    failed: Counter,
    snoozed: Counter,
    duration: Histogram,
    start_latency: Histogram,
}

impl ExecutorMetrics {
    fn register(def: &'static ExecutorDef, recorder: usize) -> Self {
        let executor = def.name;
        ExecutorMetrics {
            recorder,
            submitted: metrics::counter!(
                "async_exec_submitted_total",
                "executor" => executor,
                "strategy" => def.strategy.as_str()
            ),
            started: metrics::counter!("async_exec_started_total", "executor" => executor),
            succeeded: metrics::counter!(
                "async_exec_finished_total",
                "executor" => executor,
                "outcome" => "success"
            ),
            failed: metrics::counter!(
                "async_exec_finished_total",
                "executor" => executor,
                "outcome" => "failure"
            ),
            snoozed: metrics::counter!(
                "async_exec_finished_total",
                "executor" => executor,
                "outcome" => "snoozed"
            ),
            duration: metrics::histogram!("async_exec_duration_seconds", "executor" => executor),
            start_latency: metrics::histogram!(
                "async_exec_start_latency_seconds",
                "executor" => executor
            ),
        }
    }
}

/// Which recorder is in effect here: the address of the thread's local one, the global
/// one, or the no-op one. Handles registered under another are registered again (a
/// recorder installed after the runtime started, a local recorder in a test).
fn recorder_id() -> usize {
    metrics::with_recorder(|recorder| {
        recorder as *const dyn metrics::Recorder as *const () as usize
    })
}

/// Every executor's handles, by the address of its definition (process-wide, as the
/// recorder is).
static BY_EXECUTOR: LazyLock<RwLock<FxHashMap<usize, ExecutorMetrics>>> =
    LazyLock::new(Default::default);

/// Runs `f` on the handles of `def`, registered with the recorder in effect.
fn with_handles<T>(def: &'static ExecutorDef, f: impl FnOnce(&ExecutorMetrics) -> T) -> T {
    let key = def as *const ExecutorDef as usize;
    let recorder = recorder_id();
    {
        let handles = BY_EXECUTOR.read().expect("metrics handles lock");
        if let Some(found) = handles.get(&key).filter(|m| m.recorder == recorder) {
            return f(found);
        }
    }
    let registered = ExecutorMetrics::register(def, recorder);
    let result = f(&registered);
    BY_EXECUTOR
        .write()
        .expect("metrics handles lock")
        .insert(key, registered);
    result
}

/// A call is submitted (counted as it is made, before it is written or run).
pub(crate) fn submitted(def: &'static ExecutorDef) {
    with_handles(def, |m| m.submitted.increment(1));
}

/// A body is about to run, `latency_ms` (database clock) after its request was committed
/// or due (`None`: it runs in its call); a negative difference (the clock reading's round
/// trip) counts as 0.
pub(crate) fn started(def: &'static ExecutorDef, latency_ms: Option<i64>) {
    with_handles(def, |m| {
        m.started.increment(1);
        if let Some(latency_ms) = latency_ms {
            m.start_latency.record(latency_ms.max(0) as f64 / 1000.0);
        }
    });
}

/// How a body's run ended, as `async_exec_finished_total` counts it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Finished {
    Success,
    /// An error, a panic, a timeout.
    Failure,
    /// A [`Snooze`](crate::Snooze): not now, later; neither a success nor a failure.
    Snoozed,
}

/// A body returned (or panicked, or timed out) after `elapsed`.
pub(crate) fn finished(def: &'static ExecutorDef, outcome: Finished, elapsed: Duration) {
    with_handles(def, |m| {
        match outcome {
            Finished::Success => m.succeeded.increment(1),
            Finished::Failure => m.failed.increment(1),
            Finished::Snoozed => m.snoozed.increment(1),
        }
        m.duration.record(elapsed.as_secs_f64());
    });
}

/// The retention sweep deleted `rows` audit rows.
pub(crate) fn audit_pruned(rows: u64) {
    metrics::counter!("async_exec_retention_pruned_total", "table" => "async_audit")
        .increment(rows);
}

/// The retention sweep deleted `requests` records and `logs` attempt logs.
pub(crate) fn retention_pruned(requests: u64, logs: u64) {
    metrics::counter!("async_exec_retention_pruned_total", "table" => "async_req")
        .increment(requests);
    metrics::counter!("async_exec_retention_pruned_total", "table" => "async_log").increment(logs);
}

/// An outcome's listeners were not called: their queue was full.
pub(crate) fn listener_dropped() {
    metrics::counter!("async_exec_listener_dropped_total").increment(1);
}

/// `n` leases were `renewed`, or found `lost`, by the heartbeat.
pub(crate) fn leases(result: &'static str, n: u64) {
    metrics::counter!("async_exec_leases_total", "result" => result).increment(n);
}

/// The periodic parts whose rounds are counted, by their `sweep` label.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Sweep {
    /// The retry sweep: `claimed` (due retries and delayed records started).
    Retrier,
    /// The compensation sweep: `claimed` (records never dispatched, started).
    Compensator,
    /// The expiry of idempotency keys (in the compensation sweep's round): `expired`.
    Keys,
    /// The lease rescue: `rescued` (back to the queue), `dead` (their last attempt).
    Rescuer,
    /// Lease renewals (failed rounds only; what they did is `async_exec_leases_total`).
    Heartbeat,
    /// The queue gauges' sample (failed rounds only).
    QueueSampler,
    /// The retention sweep (failed rounds only; what it deleted is
    /// `async_exec_retention_pruned_total`).
    Retention,
    /// Cancels and deadlines: `told` (running bodies asked to stop), `expired` (waiting
    /// requests whose deadline passed, made `dead`).
    Stops,
    /// The count of the quotas of waiting requests (failed rounds only).
    Quotas,
    /// The saturation history's sample of the queues (failed rounds only).
    FlowHistory,
}

impl Sweep {
    /// The `sweep` label.
    pub(crate) const fn as_str(self) -> &'static str {
        match self {
            Sweep::Retrier => "retrier",
            Sweep::Compensator => "compensator",
            Sweep::Keys => "keys",
            Sweep::Rescuer => "rescuer",
            Sweep::Heartbeat => "heartbeat",
            Sweep::QueueSampler => "queue_sampler",
            Sweep::Retention => "retention",
            Sweep::Stops => "stops",
            Sweep::Quotas => "quotas",
            Sweep::FlowHistory => "flow_history",
        }
    }
}

/// A round of `sweep` did `n` of `result` (counted when 0 too, so that the series exists).
pub(crate) fn swept(sweep: Sweep, result: &'static str, n: u64) {
    metrics::counter!(
        "async_exec_sweep_records_total",
        "sweep" => sweep.as_str(),
        "result" => result
    )
    .increment(n);
}

/// A round of `sweep` failed, or panicked (its error or panic is logged where it is
/// handled).
pub(crate) fn sweep_failed(sweep: Sweep) {
    metrics::counter!("async_exec_sweep_failures_total", "sweep" => sweep.as_str()).increment(1);
}

/// Counts a failed round of `sweep` when `result` is an error; passes it on.
pub(crate) fn round<T>(sweep: Sweep, result: crate::Result<T>) -> crate::Result<T> {
    if result.is_err() {
        sweep_failed(sweep);
    }
    result
}

/// An outcome write failed: `transient` (a write tried again), `poisoned` (an outcome the
/// database refused, written `dead` instead), `unwritable` (refused even as `dead`).
pub(crate) fn outcome_write_failed(result: &'static str, n: u64) {
    metrics::counter!("async_exec_outcome_write_failures_total", "result" => result).increment(n);
}

/// The sampled number of records of `executor` in `status`.
pub(crate) fn queue_depth(executor: SharedString, status: &'static str, count: f64) {
    metrics::gauge!("async_exec_queue_depth", "executor" => executor, "status" => status)
        .set(count);
}

/// How long the longest-waiting due record of `executor` has waited (0: none waits).
pub(crate) fn oldest_waiting(executor: SharedString, seconds: f64) {
    metrics::gauge!("async_exec_oldest_waiting_seconds", "executor" => executor).set(seconds);
}

/// A recorder for unit tests: every counter's total, by `name{label=value,...}` (labels
/// in their order). Install it with [`metrics::with_local_recorder`] around a
/// current-thread runtime.
#[cfg(test)]
pub(crate) mod counting {
    use std::collections::HashMap;
    use std::sync::{Arc, Mutex};

    use metrics::{Counter, CounterFn, Gauge, Histogram, Key, KeyName, Metadata, Unit};

    /// The counters seen, by name and labels.
    #[derive(Debug, Default, Clone)]
    pub(crate) struct Counting(Arc<Mutex<HashMap<String, u64>>>);

    impl Counting {
        /// The total of the counter `series` (`name{label=value}`), 0 if never counted.
        pub(crate) fn get(&self, series: &str) -> u64 {
            self.0.lock().unwrap().get(series).copied().unwrap_or(0)
        }
    }

    struct Slot(String, Arc<Mutex<HashMap<String, u64>>>);

    impl CounterFn for Slot {
        fn increment(&self, value: u64) {
            *self.1.lock().unwrap().entry(self.0.clone()).or_default() += value;
        }
        fn absolute(&self, value: u64) {
            self.1.lock().unwrap().insert(self.0.clone(), value);
        }
    }

    impl metrics::Recorder for Counting {
        fn describe_counter(&self, _: KeyName, _: Option<Unit>, _: metrics::SharedString) {}
        fn describe_gauge(&self, _: KeyName, _: Option<Unit>, _: metrics::SharedString) {}
        fn describe_histogram(&self, _: KeyName, _: Option<Unit>, _: metrics::SharedString) {}
        fn register_counter(&self, key: &Key, _: &Metadata<'_>) -> Counter {
            let labels: Vec<String> = key
                .labels()
                .map(|l| format!("{}={}", l.key(), l.value()))
                .collect();
            let series = format!("{}{{{}}}", key.name(), labels.join(","));
            Counter::from_arc(Arc::new(Slot(series, self.0.clone())))
        }
        fn register_gauge(&self, _: &Key, _: &Metadata<'_>) -> Gauge {
            Gauge::noop()
        }
        fn register_histogram(&self, _: &Key, _: &Metadata<'_>) -> Histogram {
            Histogram::noop()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::counting::Counting;
    use super::*;
    use crate::base::strategy::Strategy;

    static COUNTED: ExecutorDef = ExecutorDef {
        name: "metrics_test::counted",
        path: "metrics_test::counted",
        sign: "0000000000000000",
        signature: "()",
        remark: "",
        strategy: Strategy::SaveAsync,
        max_attempts: None,
        timeout_ms: None,
        queue: None,
        deadline_ms: None,
        data: &[],
        secrets: &[],
        schedule: None,
        modes: crate::base::registry::Modes::NONE,
        run: |_| Box::pin(async { Ok(()) }),
    };

    const STARTED: &str = "async_exec_started_total{executor=metrics_test::counted}";
    const SUCCEEDED: &str =
        "async_exec_finished_total{executor=metrics_test::counted,outcome=success}";

    /// The handles are registered once, with the recorder in effect then: a recorder that
    /// comes later (installed after the runtime started) still gets every count, and the
    /// one before gets no more.
    #[test]
    fn a_recorder_in_effect_later_gets_the_counts_from_then_on() {
        started(&COUNTED, None); // registered with the no-op recorder
        let first = Counting::default();
        metrics::with_local_recorder(&first, || {
            started(&COUNTED, Some(5));
            finished(&COUNTED, Finished::Success, Duration::from_millis(1));
        });
        let second = Counting::default();
        metrics::with_local_recorder(&second, || {
            started(&COUNTED, None);
            started(&COUNTED, None);
        });
        assert_eq!((first.get(STARTED), first.get(SUCCEEDED)), (1, 1));
        assert_eq!((second.get(STARTED), second.get(SUCCEEDED)), (2, 0));
    }
}

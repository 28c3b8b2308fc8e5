//! Counters and histograms through the [`metrics`] facade: whatever recorder the
//! application installs (Prometheus exporter, StatsD, ...) receives them; with none
//! installed they cost a relaxed load. Labels are `&'static str` (executor names,
//! strategy and outcome names), so a job allocates no label strings.
//!
//! | name | type | labels |
//! |---|---|---|
//! | `async_exec_submitted_total` | counter | `executor`, `strategy` |
//! | `async_exec_started_total` | counter | `executor` |
//! | `async_exec_finished_total` | counter | `executor`, `outcome` (`success`, `failure`) |
//! | `async_exec_duration_seconds` | histogram | `executor` |
//! | `async_exec_retention_pruned_total` | counter | `table` (`async_req`, `async_log`) |
//! | `async_exec_listener_dropped_total` | counter | |

use std::time::Duration;

use crate::strategy::Strategy;

/// A call is submitted (counted as it is made, before it is written or run).
pub(crate) fn submitted(executor: &'static str, strategy: Strategy) {
    metrics::counter!(
        "async_exec_submitted_total",
        "executor" => executor,
        "strategy" => strategy.as_str()
    )
    .increment(1);
}

/// A body is about to run.
pub(crate) fn started(executor: &'static str) {
    metrics::counter!("async_exec_started_total", "executor" => executor).increment(1);
}

/// A body returned (or panicked, or timed out) after `elapsed`.
pub(crate) fn finished(executor: &'static str, succeeded: bool, elapsed: Duration) {
    let outcome = if succeeded { "success" } else { "failure" };
    metrics::counter!(
        "async_exec_finished_total",
        "executor" => executor,
        "outcome" => outcome
    )
    .increment(1);
    metrics::histogram!("async_exec_duration_seconds", "executor" => executor)
        .record(elapsed.as_secs_f64());
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

//! What a queue's flow looks like: its limits in force, what runs, waits and starts in it,
//! per partition, and the verdict ([`Runtime::queue_flow`](crate::Runtime::queue_flow)),
//! so that "the limit is working" and "the queue is stuck" look different; and its
//! saturation history ([`Runtime::flow_history`](crate::Runtime::flow_history)).

use serde::Serialize;

pub use super::verdict::Verdict;
pub(crate) use super::verdict::{judge, Reading};

/// A queue now: its limits in force, what runs, waits and starts, its partitions and the
/// verdict. See [`Runtime::queue_flow`](crate::Runtime::queue_flow).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[cfg_attr(feature = "console", derive(utoipa::ToSchema))]
#[non_exhaustive]
pub struct QueueFlow {
    /// The queue.
    pub queue: String,
    /// Running at once over every instance, if limited (the policy's, else the builder's).
    pub concurrency: Option<i64>,
    /// Running at once on each instance, if limited.
    pub per_instance: Option<i64>,
    /// Running at once in each partition, if limited.
    pub per_partition: Option<i64>,
    /// Starts per `rate_period_ms` over every instance, if limited.
    pub rate: Option<i64>,
    /// The rate's period in ms: 1,000 (a second), or the builder's
    /// [`rate_per`](crate::QueueLimits::rate_per) period.
    pub rate_period_ms: i64,
    /// Whether a policy (or a pause of every executor of the queue this instance knows)
    /// pauses its claims.
    pub paused: bool,
    /// The queue's requests running now, over every instance.
    pub running: i64,
    /// The queue's requests waiting (`init`, `failed`), due or not.
    pub waiting: i64,
    /// Of those waiting, the ones due now (by the database's clock).
    pub due: i64,
    /// How long the longest-waiting due request has waited (ms, the database's clock),
    /// if any is due.
    pub lag_ms: Option<i64>,
    /// Attempts started since the start of the previous minute (every instance's as
    /// written every 2 s, and this instance's not written yet): over the last
    /// `rate_window_ms`.
    pub started: i64,
    /// Attempts finished over the same window.
    pub finished: i64,
    /// The window `started` and `finished` count over (60,000 to 120,000 ms).
    pub rate_window_ms: i64,
    /// What the numbers mean: see [`Verdict`].
    pub verdict: Verdict,
    /// The verdict in a sentence, with what to look at.
    pub reason: String,
    /// Its partitions with requests running or waiting, the most waiting first (at most
    /// the number asked for); `""` is the partition of the requests that named none.
    pub partitions: Vec<PartitionFlow>,
}

/// One partition of a queue now.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[cfg_attr(feature = "console", derive(utoipa::ToSchema))]
#[non_exhaustive]
pub struct PartitionFlow {
    /// The partition (`""`: the requests that named none).
    pub partition: String,
    /// Running now.
    pub running: i64,
    /// Waiting (`init`, `failed`).
    pub waiting: i64,
    /// When the longest-waiting of them became due (unix ms, the database's clock), if
    /// any waits.
    pub oldest_due: Option<i64>,
    /// How long the longest-waiting of them has been due (ms), if one is due.
    pub lag_ms: Option<i64>,
    /// The running limit in force for this partition, if any: its own concurrency, else
    /// the queue's `per_partition`.
    pub limit: Option<i64>,
    /// Whether it runs as many as its limit lets it (its own concurrency, else the
    /// queue's per-partition limit).
    pub at_limit: bool,
    /// Its own settings ([`Runtime::set_partition`](crate::Runtime::set_partition)), if
    /// it has any: what is not set is the queue's.
    pub settings: Option<crate::PartitionSettings>,
}

/// A queue in the list of queues: what it holds now and its verdict, without its
/// partitions. See [`Runtime::queues_flow`](crate::Runtime::queues_flow).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[cfg_attr(feature = "console", derive(utoipa::ToSchema))]
#[non_exhaustive]
pub struct QueueSummary {
    /// The queue.
    pub queue: String,
    /// Running at once over every instance, if limited.
    pub concurrency: Option<i64>,
    /// Running now.
    pub running: i64,
    /// Waiting (`init`, `failed`).
    pub waiting: i64,
    /// Due now, of those waiting.
    pub due: i64,
    /// How long the longest-waiting due request has waited (ms), if any is due.
    pub lag_ms: Option<i64>,
    /// Attempts started over the last `rate_window_ms` of [`QueueFlow`].
    pub started: i64,
    /// See [`Verdict`].
    pub verdict: Verdict,
    /// The verdict in a sentence.
    pub reason: String,
}

/// One sample of a queue's saturation history, taken every
/// [`Settings::flow_sample_interval`](crate::Settings::flow_sample_interval) by one
/// instance. See [`Runtime::flow_history`](crate::Runtime::flow_history).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[cfg_attr(feature = "console", derive(utoipa::ToSchema))]
#[non_exhaustive]
pub struct FlowSample {
    /// The start of the sampled period (unix ms, the database's clock).
    pub at: i64,
    /// Running then.
    pub running: i64,
    /// Waiting then (due or not).
    pub waiting: i64,
    /// Due then.
    pub due: i64,
    /// How long the longest-waiting due request had waited (ms), if any was due.
    pub lag_ms: Option<i64>,
    /// Attempts started over the minute or two before (as [`QueueFlow::started`]).
    pub started: i64,
    /// The running limit in force then, if any.
    pub concurrency: Option<i64>,
    /// The verdict then.
    pub verdict: Verdict,
}

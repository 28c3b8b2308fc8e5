//! What a queue's flow looks like now: its limits in force, and per partition what runs
//! and what waits ([`Runtime::queue_flow`](crate::Runtime::queue_flow)), so that "the
//! limit is working" (partitions at their limit, the others running) and "the queue is
//! stuck" (waiting, none running, the oldest ever older) look different.

use serde::Serialize;

/// A queue now: its limits in force and its partitions. See
/// [`Runtime::queue_flow`](crate::Runtime::queue_flow).
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
    /// The queue's requests running now, over every instance.
    pub running: i64,
    /// The queue's requests waiting (`init`, `failed`), due or not.
    pub waiting: i64,
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
    /// Whether it runs as many as its limit lets it (its own concurrency, else the
    /// queue's per-partition limit).
    pub at_limit: bool,
    /// Its own settings ([`Runtime::set_partition`](crate::Runtime::set_partition)), if
    /// it has any: what is not set is the queue's.
    pub settings: Option<crate::PartitionSettings>,
}

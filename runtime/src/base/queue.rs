//! Queues and their limits: executors that name the same `queue` in their attribute share
//! limits on how many of their requests run at once, across every instance of the
//! application and on each one. The limits hold in the store's claims (the claimer takes
//! no more than the free slots a queue has), so a burst never overshoots them and a full
//! queue holds up no other.

use std::collections::BTreeMap;

use crate::base::error::{Error, Result};
use crate::base::registry::ExecutorDef;

/// The limits of one queue, given to [`Builder::queue`](crate::Builder::queue).
///
/// A queue without limits (or an executor without a queue) runs as many requests as the
/// instances have workers.
///
/// ```no_run
/// use async_exec::{QueueLimits, Runtime};
///
/// #[async_exec::async_exec(type = SaveAsync, queue = "payments")]
/// async fn charge(order: i64) -> Result<(), String> {
///     Ok(())
/// }
///
/// # async fn demo() -> async_exec::Result<()> {
/// // At most 4 charges run at once across every instance, at most 2 on each one, and
/// // at most 10 start per second (the gateway's rate limit).
/// let rt = Runtime::builder()
///     .queue("payments", QueueLimits::new().concurrency(4).per_instance(2).rate(10))
///     .start()
///     .await?;
/// # Ok(()) }
/// ```
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct QueueLimits {
    concurrency: Option<u32>,
    per_instance: Option<u32>,
    rate: Option<u32>,
    waiting: Option<u32>,
    per_partition: Option<u32>,
    singleton: bool,
    sequence: Option<SequenceFailure>,
    /// The period of `rate` (ms): a second unless `rate_per` says otherwise.
    rate_period_ms: Option<i64>,
}

/// What a failed request of a [`sequence`](QueueLimits::sequence) does to the requests
/// of its partition called after it.
///
/// ```no_run
/// use async_exec::{QueueLimits, SequenceFailure};
///
/// // A ledger's entries of one account in order; a dead entry stops the account's
/// // later ones until an operator replays or cancels it.
/// let limits = QueueLimits::new().sequence_on_failure(SequenceFailure::Hold);
/// ```
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub enum SequenceFailure {
    /// They wait while it retries, and go on once it succeeded or is `dead` (out of
    /// attempts, a final error) or cancelled.
    #[default]
    Wait,
    /// They wait while it retries, and while it is `dead`: until an operator replays it
    /// (and it succeeds) or cancels it.
    Hold,
    /// They go on while it waits for its retry (it runs again when due, one at a time
    /// with them): order holds for first attempts only.
    StepAside,
}

impl SequenceFailure {
    /// The statuses of an earlier request of the partition that keep a later one
    /// waiting.
    pub(crate) fn blocking(self) -> &'static str {
        match self {
            SequenceFailure::Wait => "'init', 'failed', 'running'",
            SequenceFailure::Hold => "'init', 'failed', 'running', 'dead'",
            SequenceFailure::StepAside => "'init', 'running'",
        }
    }
}

impl QueueLimits {
    /// No limits yet: add [`concurrency`](Self::concurrency) or
    /// [`per_instance`](Self::per_instance).
    pub fn new() -> Self {
        QueueLimits::default()
    }

    /// At most `n` of the queue's requests run at once, counted over every instance of the
    /// application (requests claimed and not yet finished count).
    pub fn concurrency(mut self, n: u32) -> Self {
        self.concurrency = Some(n);
        self
    }

    /// At most `n` of the queue's requests run at once on each instance.
    pub fn per_instance(mut self, n: u32) -> Self {
        self.per_instance = Some(n);
        self
    }

    /// At most `n` requests of each partition of the queue run at once, counted over every
    /// instance ([`Call::partition`](crate::Call::partition): a tenant, an account; the
    /// requests without one share a partition). Every partition gets this limit; the
    /// queue's claims take turns between partitions whether or not it is set.
    ///
    /// ```no_run
    /// use async_exec::{QueueLimits, Runtime};
    ///
    /// # async fn demo() -> async_exec::Result<()> {
    /// // Webhooks: 50 deliveries at once over every tenant, at most 2 of any one tenant.
    /// let rt = Runtime::builder()
    ///     .queue("webhooks", QueueLimits::new().concurrency(50).per_partition(2))
    /// #   .database_url("sqlite::memory:")
    ///     .start()
    ///     .await?;
    /// # Ok(()) }
    /// ```
    pub fn per_partition(mut self, n: u32) -> Self {
        self.per_partition = Some(n);
        self
    }

    /// The limit of each partition, if any.
    pub fn per_partition_limit(&self) -> Option<u32> {
        self.per_partition
    }

    /// At most one request of each partition of the queue is live (waiting or running),
    /// over every instance: a `SaveAsync` call while one is writes nothing and gets that
    /// request's id, with [`Outcome::Live`](crate::Outcome::Live). A unique index over
    /// the live records holds it, so two instances racing, or two callers' transactions,
    /// never write two; once the request finishes (succeeds, goes `dead`, is cancelled)
    /// the next call writes a new one. The requests without a partition share one.
    ///
    /// ```no_run
    /// use async_exec::{async_exec, Outcome, QueueLimits, Runtime};
    ///
    /// /// Rebuilds one account's search index from the database: one waiting is enough.
    /// #[async_exec(type = SaveAsync, queue = "reindex", partition = account)]
    /// async fn reindex(account: i64) -> anyhow::Result<()> {
    ///     Ok(())
    /// }
    ///
    /// # async fn demo() -> async_exec::Result<()> {
    /// let rt = Runtime::builder()
    ///     .queue("reindex", QueueLimits::new().singleton())
    /// #   .database_url("sqlite::memory:")
    ///     .start()
    ///     .await?;
    /// let first = reindex(7).on(&rt).await?;
    /// let second = reindex(7).on(&rt).await?; // while the first waits or runs
    /// if second.outcome == Outcome::Live {
    ///     assert_eq!(second.id, first.id);
    /// }
    /// # Ok(()) }
    /// ```
    pub fn singleton(mut self) -> Self {
        self.singleton = true;
        self
    }

    /// The queue's requests of each partition run one at a time, in the order they were
    /// called (by id: the order their records were written), over every instance: a
    /// request is claimed only once no request of its partition called before it is
    /// waiting or running. A failed request keeps the later ones waiting while it
    /// retries, and lets them go once it is `dead`; see
    /// [`sequence_on_failure`](Self::sequence_on_failure) for the other choices. Implies
    /// [`per_partition(1)`](Self::per_partition).
    ///
    /// ```no_run
    /// use async_exec::{async_exec, QueueLimits, Runtime};
    ///
    /// /// Applies one change to an account's balance: an account's changes in order.
    /// #[async_exec(type = SaveAsync, queue = "ledger", partition = account, max_attempts = 5)]
    /// async fn apply(account: i64, cents: i64) -> anyhow::Result<()> {
    ///     Ok(())
    /// }
    ///
    /// # async fn demo() -> async_exec::Result<()> {
    /// let rt = Runtime::builder()
    ///     .queue("ledger", QueueLimits::new().concurrency(16).sequence())
    /// #   .database_url("sqlite::memory:")
    ///     .start()
    ///     .await?;
    /// apply(7, 500).on(&rt).await?;
    /// apply(7, -200).on(&rt).await?; // runs after the first has succeeded
    /// # Ok(()) }
    /// ```
    pub fn sequence(self) -> Self {
        self.sequence_on_failure(SequenceFailure::default())
    }

    /// A [`sequence`](Self::sequence) in which a failed request does `on_failure` to the
    /// requests of its partition called after it.
    pub fn sequence_on_failure(mut self, on_failure: SequenceFailure) -> Self {
        self.sequence = Some(on_failure);
        self
    }

    /// The queue's [`sequence`](Self::sequence), if it is one: what a failure does.
    pub fn sequence_mode(&self) -> Option<SequenceFailure> {
        self.sequence
    }

    /// Whether each partition has at most one live request ([`singleton`](Self::singleton)).
    pub fn is_singleton(&self) -> bool {
        self.singleton
    }

    /// At most `n` of the queue's requests start per second, counted over every instance
    /// (a bucket of one second's starts, refilled as time passes: a third-party API's
    /// rate limit).
    pub fn rate(mut self, per_second: u32) -> Self {
        self.rate = Some(per_second);
        self.rate_period_ms = None;
        self
    }

    /// At most `rate` of the queue's requests start per its period (a second, a minute,
    /// an hour, a day), counted over every instance: a bucket of one period's starts,
    /// refilled evenly over the period. A rate set while running
    /// ([`set_queue_limits`](crate::Runtime::set_queue_limits)) is per second.
    ///
    /// ```no_run
    /// use async_exec::{QueueLimits, Rate, Runtime};
    ///
    /// # async fn demo() -> async_exec::Result<()> {
    /// // The mail provider allows 10,000 a day.
    /// let rt = Runtime::builder()
    ///     .queue("mail", QueueLimits::new().rate_per(Rate::per_day(10_000)))
    /// #   .database_url("sqlite::memory:")
    ///     .start()
    ///     .await?;
    /// # Ok(()) }
    /// ```
    pub fn rate_per(mut self, rate: crate::Rate) -> Self {
        self.rate = Some(rate.starts());
        self.rate_period_ms = Some(rate.period().millis());
        self
    }

    /// The period of the rate, in ms (1,000 unless set by [`rate_per`](Self::rate_per)).
    pub fn rate_period_ms(&self) -> i64 {
        self.rate_period_ms.unwrap_or(1_000)
    }

    /// At most `n` of the queue's requests may wait (`init`, `failed`) when a call is made:
    /// past it, a `SaveAsync` call of the queue is refused with
    /// [`Error::QuotaExceeded`](crate::Error::QuotaExceeded) and nothing is written.
    pub fn max_waiting(mut self, n: u32) -> Self {
        self.waiting = Some(n);
        self
    }

    /// The quota of waiting requests, if any.
    pub fn max_waiting_limit(&self) -> Option<u32> {
        self.waiting
    }

    /// The starts per second over every instance, if limited.
    pub fn rate_limit(&self) -> Option<u32> {
        self.rate
    }

    /// The limit over every instance, if any.
    pub fn concurrency_limit(&self) -> Option<u32> {
        self.concurrency
    }

    /// The limit on each instance, if any.
    pub fn per_instance_limit(&self) -> Option<u32> {
        self.per_instance
    }

    fn is_limited(&self) -> bool {
        self.concurrency.is_some()
            || self.per_instance.is_some()
            || self.rate.is_some()
            || self.waiting.is_some()
            || self.per_partition.is_some()
            || self.singleton
            || self.sequence.is_some()
    }
}

/// The longest queue name, in characters (the records' column on MySQL/MariaDB).
pub(crate) const MAX_QUEUE_NAME_CHARS: usize = 190;

/// The most requests of a queue a limit lets run at once.
pub(crate) const MAX_QUEUE_LIMIT: u32 = 100_000;

/// Checks the limits given to the builder, alone (their names against the executors are
/// checked by [`QueuePlan::new`]).
pub(crate) fn validate(queues: &BTreeMap<String, QueueLimits>) -> Result<()> {
    for (name, limits) in queues {
        check(name, limits, true)?;
    }
    Ok(())
}

/// Checks one queue's limits: each within 1 to [`MAX_QUEUE_LIMIT`]; at least one unless
/// `none_is_error` is false (limits set while running may clear both).
pub(crate) fn check(name: &str, limits: &QueueLimits, none_is_error: bool) -> Result<()> {
    let fail = |reason: String| {
        Err(Error::Config {
            setting: "queue",
            reason,
        })
    };
    if name.trim().is_empty() {
        return fail("a queue's name must not be empty".into());
    }
    if name.chars().count() > MAX_QUEUE_NAME_CHARS {
        return fail(format!(
            "a queue's name is at most {MAX_QUEUE_NAME_CHARS} characters (MySQL's claim \
             index holds no more); {name:?} has {}",
            name.chars().count()
        ));
    }
    if none_is_error && !limits.is_limited() {
        return fail(format!(
            "queue {name:?} has no limit; give QueueLimits::new().concurrency(n), \
             .per_instance(n), .per_partition(n) or .rate(n), or leave the queue out"
        ));
    }
    if let (Some(_), Some(n @ 2..)) = (limits.sequence, limits.per_partition) {
        return fail(format!(
            "queue {name:?}: a sequence runs one request of a partition at a time, so \
             per_partition({n}) cannot hold; leave per_partition out"
        ));
    }
    if limits.waiting == Some(0) {
        return fail(format!(
            "queue {name:?}: max_waiting must be at least 1, not 0"
        ));
    }
    for (what, limit) in [
        ("concurrency", limits.concurrency),
        ("per_instance", limits.per_instance),
        ("rate", limits.rate),
        ("per_partition", limits.per_partition),
    ] {
        if let Some(n) = limit {
            if n == 0 || n > MAX_QUEUE_LIMIT {
                return fail(format!(
                    "queue {name:?}: {what} must be between 1 and {MAX_QUEUE_LIMIT}, not {n} \
                     (to stop a queue for a while, pause its executors)"
                ));
            }
        }
    }
    Ok(())
}

/// One queue and the executors in it, with the builder's limits (the queue's row in
/// the store may override them while the service runs).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct NamedQueue {
    pub(crate) name: String,
    pub(crate) executors: Vec<&'static str>,
    pub(crate) limits: QueueLimits,
}

/// Which executors claims may take freely, and which only through their queue's claim.
#[derive(Debug, Clone, Default)]
pub(crate) struct QueuePlan {
    /// Executors in no queue: claimed by id after commit and by the sweeps.
    unlimited: Vec<&'static str>,
    /// Every queue an executor names: claimed only by the producer, one queue at a time,
    /// within the limits in effect (the builder's, or those set while running). With a
    /// limit over every queue, the executors in no queue are one more, named
    /// [`GLOBAL_QUEUE`].
    queues: Vec<NamedQueue>,
    /// The limit over every queue (`Builder::global_concurrency`), if any.
    global: Option<QueueLimits>,
}

/// The name of the limit over every queue, and of the queue of the executors in none
/// when it is set. An executor may not name it.
pub(crate) const GLOBAL_QUEUE: &str = "(all)";

impl QueuePlan {
    /// The plan for `defs` under the builder's `queues`. Limits for a queue that no
    /// executor names are an error (a typo would otherwise leave a queue unlimited).
    pub(crate) fn new(
        defs: &[&'static ExecutorDef],
        limits: &BTreeMap<String, QueueLimits>,
    ) -> Result<Self> {
        let mut named: Vec<&'static str> = defs.iter().filter_map(|d| d.queue).collect();
        named.sort_unstable();
        named.dedup();
        if named.contains(&GLOBAL_QUEUE) {
            return Err(Error::Config {
                setting: "queue",
                reason: format!(
                    "the queue name {GLOBAL_QUEUE:?} is the limit over every queue's; give \
                     the executor another"
                ),
            });
        }
        if let Some(long) = named
            .iter()
            .find(|n| n.chars().count() > MAX_QUEUE_NAME_CHARS)
        {
            return Err(Error::Config {
                setting: "queue",
                reason: format!(
                    "a queue's name is at most {MAX_QUEUE_NAME_CHARS} characters (MySQL's \
                     claim index holds no more); {long:?} is longer"
                ),
            });
        }
        let global = limits.get(GLOBAL_QUEUE).copied();
        if let Some(global) = global {
            let ignored: Vec<&str> = [
                ("per_instance", global.per_instance.is_some()),
                ("rate", global.rate.is_some()),
                ("max_waiting", global.waiting.is_some()),
                ("per_partition", global.per_partition.is_some()),
            ]
            .into_iter()
            .filter_map(|(what, set)| set.then_some(what))
            .collect();
            if !ignored.is_empty() || global.concurrency.is_none() {
                return Err(Error::Config {
                    setting: "global_concurrency",
                    reason: format!(
                        "the limit over every queue ({GLOBAL_QUEUE:?}) takes a concurrency \
                         only; {} cannot be set there: set them on a queue \
                         (Builder::queue), or max_waiting for the application with \
                         Builder::max_waiting",
                        if ignored.is_empty() {
                            "it has none, and the others".to_string()
                        } else {
                            ignored.join(", ")
                        }
                    ),
                });
            }
        }
        if let Some(unknown) = limits
            .keys()
            .find(|l| *l != GLOBAL_QUEUE && !named.contains(&l.as_str()))
        {
            return Err(Error::Config {
                setting: "queue",
                reason: format!(
                    "no executor names queue {unknown:?} (in #[async_exec(queue = \"...\")]); \
                     the queues the executors name: {}",
                    if named.is_empty() {
                        "none".to_string()
                    } else {
                        named.join(", ")
                    }
                ),
            });
        }
        let queues: Vec<NamedQueue> = named
            .iter()
            .map(|&name| NamedQueue {
                name: name.to_string(),
                executors: defs
                    .iter()
                    .filter(|d| d.queue == Some(name))
                    .map(|d| d.name)
                    .collect(),
                limits: limits.get(name).copied().unwrap_or_default(),
            })
            .collect();
        let mut queues: Vec<NamedQueue> = queues;
        let mut unlimited: Vec<&'static str> = defs
            .iter()
            .filter(|d| d.queue.is_none())
            .map(|d| d.name)
            .collect();
        if let Some(limits) = global {
            // Under a limit over every queue, nothing is claimed outside one: the
            // executors in none become one more, claimed under that limit alone.
            queues.push(NamedQueue {
                name: GLOBAL_QUEUE.to_string(),
                executors: std::mem::take(&mut unlimited),
                limits,
            });
        }
        Ok(QueuePlan {
            unlimited,
            queues,
            global,
        })
    }

    /// The limit over every queue, if any.
    pub(crate) fn global(&self) -> Option<QueueLimits> {
        self.global
    }

    /// The executors in no queue.
    pub(crate) fn unlimited(&self) -> &[&'static str] {
        &self.unlimited
    }

    /// Every queue an executor names.
    pub(crate) fn queues(&self) -> &[NamedQueue] {
        &self.queues
    }

    /// Each queue a record can be in (its `queue_name`) with its executors (the
    /// executors in none, `""`, are not among them).
    pub(crate) fn record_queues(&self) -> Vec<(&str, Vec<&'static str>)> {
        self.queues
            .iter()
            .filter(|queue| queue.name != GLOBAL_QUEUE)
            .map(|queue| (queue.name.as_str(), queue.executors.clone()))
            .collect()
    }

    /// Whether `executor`'s requests are claimed only through its queue.
    pub(crate) fn is_queued(&self, executor: &str) -> bool {
        !self.queues.is_empty() && self.queues.iter().any(|q| q.executors.contains(&executor))
    }

    /// The singleton of a request of `queue` in `partition` (`""`: the shared one) when
    /// the queue is a [`QueueLimits::singleton`]: the queue and the partition, apart.
    pub(crate) fn singleton_key(&self, queue: &str, partition: &str) -> Option<String> {
        let queue = self.queues.iter().find(|q| q.name == queue)?;
        // A queue's name holds no control character ([`check`]): the separator is unique.
        queue
            .limits
            .singleton
            .then(|| format!("q\u{1f}{}\u{1f}{partition}", queue.name))
    }

    /// Whether some executor names `queue`.
    pub(crate) fn has(&self, queue: &str) -> bool {
        self.queues.iter().any(|q| q.name == queue)
    }

    /// The queues' names, for messages.
    pub(crate) fn names(&self) -> String {
        let names: Vec<&str> = self.queues.iter().map(|q| q.name.as_str()).collect();
        if names.is_empty() {
            "none".into()
        } else {
            names.join(", ")
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn limits(pairs: &[(&str, QueueLimits)]) -> BTreeMap<String, QueueLimits> {
        pairs.iter().map(|(n, l)| (n.to_string(), *l)).collect()
    }

    #[test]
    fn absurd_limits_are_refused_with_the_range() {
        for bad in [
            QueueLimits::new(),
            QueueLimits::new().concurrency(0),
            QueueLimits::new().per_instance(MAX_QUEUE_LIMIT + 1),
        ] {
            let error = validate(&limits(&[("payments", bad)]))
                .unwrap_err()
                .to_string();
            assert!(error.contains("payments"), "{error}");
        }
        let error = validate(&limits(&[("payments", QueueLimits::new().concurrency(0))]))
            .unwrap_err()
            .to_string();
        assert!(error.contains("between 1 and 100000, not 0"), "{error}");
        assert!(validate(&limits(&[(" ", QueueLimits::new().concurrency(1))])).is_err());
        validate(&limits(&[(
            "payments",
            QueueLimits::new().concurrency(4).per_instance(2),
        )]))
        .unwrap();
    }
}

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
/// // At most 4 charges run at once across every instance, at most 2 on each one.
/// let rt = Runtime::builder()
///     .queue("payments", QueueLimits::new().concurrency(4).per_instance(2))
///     .start()
///     .await?;
/// # Ok(()) }
/// ```
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct QueueLimits {
    concurrency: Option<u32>,
    per_instance: Option<u32>,
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

    /// The limit over every instance, if any.
    pub fn concurrency_limit(&self) -> Option<u32> {
        self.concurrency
    }

    /// The limit on each instance, if any.
    pub fn per_instance_limit(&self) -> Option<u32> {
        self.per_instance
    }

    fn is_limited(&self) -> bool {
        self.concurrency.is_some() || self.per_instance.is_some()
    }
}

/// The most requests of a queue a limit lets run at once.
pub(crate) const MAX_QUEUE_LIMIT: u32 = 100_000;

/// Checks the limits given to the builder, alone (their names against the executors are
/// checked by [`QueuePlan::new`]).
pub(crate) fn validate(queues: &BTreeMap<String, QueueLimits>) -> Result<()> {
    for (name, limits) in queues {
        let fail = |reason: String| {
            Err(Error::Config {
                setting: "queue",
                reason,
            })
        };
        if name.trim().is_empty() {
            return fail("a queue's name must not be empty".into());
        }
        if !limits.is_limited() {
            return fail(format!(
                "queue {name:?} has no limit; give QueueLimits::new().concurrency(n) or \
                 .per_instance(n), or leave the queue out"
            ));
        }
        for (what, limit) in [
            ("concurrency", limits.concurrency),
            ("per_instance", limits.per_instance),
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
    }
    Ok(())
}

/// One queue with limits and the executors in it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct LimitedQueue {
    pub(crate) name: String,
    pub(crate) executors: Vec<&'static str>,
    pub(crate) limits: QueueLimits,
}

/// Which executors claims may take freely, and which only through their queue's limits.
#[derive(Debug, Clone, Default)]
pub(crate) struct QueuePlan {
    /// Executors of no limited queue: claimed by id after commit and by the sweeps.
    unlimited: Vec<&'static str>,
    /// Queues with limits: claimed only by the producer, one queue at a time.
    limited: Vec<LimitedQueue>,
}

impl QueuePlan {
    /// The plan for `defs` under the builder's `queues`. A limited queue that no executor
    /// names is an error (a typo would otherwise leave a queue unlimited).
    pub(crate) fn new(
        defs: &[&'static ExecutorDef],
        queues: &BTreeMap<String, QueueLimits>,
    ) -> Result<Self> {
        let mut plan = QueuePlan::default();
        for (name, limits) in queues {
            let executors: Vec<&'static str> = defs
                .iter()
                .filter(|d| d.queue == Some(name.as_str()))
                .map(|d| d.name)
                .collect();
            if executors.is_empty() {
                let mut named: Vec<&str> = defs.iter().filter_map(|d| d.queue).collect();
                named.sort_unstable();
                named.dedup();
                return Err(Error::Config {
                    setting: "queue",
                    reason: format!(
                        "no executor names queue {name:?} (in #[async_exec(queue = \"...\")]); \
                         the queues the executors name: {}",
                        if named.is_empty() {
                            "none".to_string()
                        } else {
                            named.join(", ")
                        }
                    ),
                });
            }
            plan.limited.push(LimitedQueue {
                name: name.clone(),
                executors,
                limits: *limits,
            });
        }
        plan.unlimited = defs
            .iter()
            .filter(|d| !plan.limited.iter().any(|q| q.executors.contains(&d.name)))
            .map(|d| d.name)
            .collect();
        Ok(plan)
    }

    /// The executors that claims may take without a queue's limits.
    pub(crate) fn unlimited(&self) -> &[&'static str] {
        &self.unlimited
    }

    /// The queues with limits.
    pub(crate) fn limited(&self) -> &[LimitedQueue] {
        &self.limited
    }

    /// Whether `executor`'s requests are held to a queue's limits.
    pub(crate) fn is_limited(&self, executor: &str) -> bool {
        !self.limited.is_empty() && self.limited.iter().any(|q| q.executors.contains(&executor))
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

//! What a claim of records asks for: due records of a sweep, or the ids just committed.

use crate::base::record::RequestId;

/// Which records a sweep claims.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum DueKind {
    /// `failed` records whose `run_at` has come, and `init` records that were delayed
    /// (or released) and whose `run_at` has come.
    Scheduled,
    /// `init` records that should have been dispatched at least `older_than` ms ago:
    /// committed but never dispatched (a crash between commit and dispatch, a full channel).
    Stale {
        /// Only records with `run_at <= now - older_than`.
        older_than: i64,
    },
    /// `init` and `failed` records whose `run_at` has come: what a queue with limits
    /// claims (its records are claimed by no other path).
    Ready,
}

/// The limits a claim of one queue's records keeps: it takes no more than the slots
/// left, counting the queue's `running` records of the application (all, and this
/// instance's), serialized with other claims of the queue. The limits here are the
/// builder's; the queue's row in `async_queue` overrides them where it sets them.
#[derive(Debug, Clone, Copy)]
pub(crate) struct QueueCap<'a> {
    /// The queue's name (its row in `async_queue`: locked, and read for its limits).
    pub(crate) name: &'a str,
    /// Running at once over every instance.
    pub(crate) concurrency: Option<i64>,
    /// Running at once on this instance (`lease_owner = owner`).
    pub(crate) per_instance: Option<i64>,
}

impl QueueCap<'_> {
    /// The limits in effect: the queue row's where it sets them (changed while running),
    /// else the builder's.
    #[cfg_attr(not(any(feature = "postgres", feature = "mysql")), allow(dead_code))]
    pub(crate) fn with_policy(
        self,
        (concurrency, per_instance): (Option<i64>, Option<i64>),
    ) -> Self {
        QueueCap {
            concurrency: concurrency.or(self.concurrency),
            per_instance: per_instance.or(self.per_instance),
            ..self
        }
    }

    /// Whether any limit holds (else a claim counts nothing).
    #[cfg_attr(not(any(feature = "postgres", feature = "mysql")), allow(dead_code))]
    pub(crate) fn is_limited(&self) -> bool {
        self.concurrency.is_some() || self.per_instance.is_some()
    }

    // SQLite counts in the claiming statement.
    #[cfg_attr(not(any(feature = "postgres", feature = "mysql")), allow(dead_code))]
    /// The slots left given the running records of the queue (`all`) and of this
    /// instance (`mine`), at most `limit`.
    pub(crate) fn slots(&self, limit: i64, all: i64, mine: i64) -> i64 {
        let over_all = self.concurrency.map_or(limit, |c| c - all);
        let here = self.per_instance.map_or(limit, |c| c - mine);
        limit.min(over_all).min(here).max(0)
    }
}

/// Parameters of [`Store::request_claim_due`].
#[derive(Debug, Clone)]
pub(crate) struct ClaimDue<'a> {
    pub(crate) application: &'a str,
    pub(crate) executors: &'a [&'static str],
    pub(crate) kind: DueKind,
    pub(crate) owner: &'a str,
    /// For `update_time`.
    pub(crate) now: i64,
    /// The lease, from the database's clock in the claiming statement.
    pub(crate) lease_ms: i64,
    pub(crate) limit: i64,
    /// Records to leave for other instances, as `sign:executor` (a rolling deploy: they
    /// have the record's signature and this binary does not).
    pub(crate) skip: &'a [String],
    /// A queue's limits: set for (and only for) a claim of one limited queue's executors.
    pub(crate) cap: Option<QueueCap<'a>>,
}

/// Parameters of [`Store::request_claim_ids`].
#[derive(Debug, Clone)]
pub(crate) struct ClaimIds<'a> {
    pub(crate) ids: &'a [RequestId],
    pub(crate) owner: &'a str,
    /// For `update_time`.
    pub(crate) now: i64,
    /// The lease, from the database's clock in the claiming statement.
    pub(crate) lease_ms: i64,
}

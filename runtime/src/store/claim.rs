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
    /// `init` and `failed` records whose `run_at` has come: what a queue's claim
    /// claims (its records are claimed by no other path).
    Ready,
}

/// The limits a claim of one queue's records keeps: it takes no more than the slots
/// left, counting the queue's `running` records of the application (all, and this
/// instance's), and no more starts than its rate's bucket holds, serialized with other
/// claims of the queue. The limits here are the builder's; the queue's row in
/// `async_queue` overrides them where it sets them.
#[derive(Debug, Clone, Copy)]
pub(crate) struct QueueCap<'a> {
    /// The queue's name (its row in `async_queue`: locked, and read for its limits).
    pub(crate) name: &'a str,
    /// Running at once over every instance.
    pub(crate) concurrency: Option<i64>,
    /// Running at once on this instance (`lease_owner = owner`).
    pub(crate) per_instance: Option<i64>,
    /// Starts per second over every instance.
    pub(crate) rate: Option<i64>,
}

/// A queue's row as a claim reads it (under its lock): the limits set while running, and
/// the rate's bucket.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct QueueRow {
    pub(crate) concurrency: Option<i64>,
    pub(crate) per_instance: Option<i64>,
    pub(crate) rate: Option<i64>,
    /// Thousandths of a start left in the bucket, as of `refilled_at`.
    pub(crate) tokens: Option<i64>,
    /// Unix ms.
    pub(crate) refilled_at: Option<i64>,
}

/// The columns of a queue's row a claim reads: concurrency, per_instance, rate, tokens,
/// refilled_at (as 64-bit integers).
pub(crate) type QueueRowColumns = (
    Option<i64>,
    Option<i64>,
    Option<i64>,
    Option<i64>,
    Option<i64>,
);

impl From<QueueRowColumns> for QueueRow {
    fn from((concurrency, per_instance, rate, tokens, refilled_at): QueueRowColumns) -> Self {
        QueueRow {
            concurrency,
            per_instance,
            rate,
            tokens,
            refilled_at,
        }
    }
}

/// What a queue's claim may take, and the bucket to write back.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct ClaimPlan {
    /// Records to claim at most.
    pub(crate) slots: i64,
    /// The bucket now, in thousandths of a start, when the queue has a rate.
    pub(crate) bucket: Option<i64>,
}

impl ClaimPlan {
    /// The bucket after `claimed` starts, to write back (`None`: no rate).
    pub(crate) fn tokens_after(&self, claimed: usize) -> Option<i64> {
        self.bucket
            .map(|b| b.saturating_sub(1_000 * claimed as i64).max(0))
    }
}

impl QueueCap<'_> {
    /// The limits in effect: the queue row's where it sets them (changed while running),
    /// else the builder's.
    pub(crate) fn with_policy(self, row: &QueueRow) -> Self {
        QueueCap {
            concurrency: row.concurrency.or(self.concurrency),
            per_instance: row.per_instance.or(self.per_instance),
            rate: row.rate.or(self.rate),
            ..self
        }
    }

    /// Whether a claim must count the running records (a concurrency limit holds).
    pub(crate) fn counts_running(&self) -> bool {
        self.concurrency.is_some() || self.per_instance.is_some()
    }

    /// What a claim of at most `limit` records may take, given the running records of the
    /// queue (`all`, and this instance's: `mine`) and the row's bucket at `now` (unix ms):
    /// the bucket holds one second of starts at most, and refills at the rate.
    pub(crate) fn plan(
        &self,
        limit: i64,
        (all, mine): (i64, i64),
        row: &QueueRow,
        now: i64,
    ) -> ClaimPlan {
        let over_all = self.concurrency.map_or(limit, |c| c - all);
        let here = self.per_instance.map_or(limit, |c| c - mine);
        let bucket = self.rate.map(|rate| {
            let full = rate.saturating_mul(1_000);
            match (row.tokens, row.refilled_at) {
                (Some(tokens), Some(at)) => tokens
                    .saturating_add(now.saturating_sub(at).max(0).saturating_mul(rate))
                    .min(full),
                _ => full,
            }
        });
        let started = bucket.map_or(limit, |b| b / 1_000);
        ClaimPlan {
            slots: limit.min(over_all).min(here).min(started).max(0),
            bucket,
        }
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
    /// A queue's limits: set for (and only for) a claim of one queue's executors.
    pub(crate) cap: Option<QueueCap<'a>>,
    /// The application's limit over every queue (`Builder::global_concurrency`), when
    /// set: the claim first locks its row (`base::queue::GLOBAL_QUEUE`) and counts every
    /// running record of the application, then the queue's.
    pub(crate) global: Option<QueueCap<'a>>,
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

/// The condition that keeps a claim from starting a request whose deadline passed, by
/// the database's clock (`db_now`, the backend's expression of it): the deadline sweep
/// makes those `dead`.
pub(crate) fn before_deadline(db_now: &str) -> String {
    format!("(deadline_at IS NULL OR deadline_at > {db_now})")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cap(
        concurrency: Option<i64>,
        per_instance: Option<i64>,
        rate: Option<i64>,
    ) -> QueueCap<'static> {
        QueueCap {
            name: "q",
            concurrency,
            per_instance,
            rate,
        }
    }

    #[test]
    fn slots_are_the_least_of_every_limit() {
        let none = QueueRow::default();
        assert_eq!(
            cap(Some(4), None, None).plan(256, (3, 0), &none, 0).slots,
            1
        );
        assert_eq!(
            cap(Some(4), Some(2), None)
                .plan(256, (1, 2), &none, 0)
                .slots,
            0
        );
        assert_eq!(
            cap(Some(4), None, None).plan(256, (6, 0), &none, 0).slots,
            0,
            "never negative"
        );
        assert_eq!(cap(None, None, None).plan(10, (99, 99), &none, 0).slots, 10);
    }

    #[test]
    fn a_rate_fills_its_bucket_for_a_second_at_most() {
        let rate = cap(None, None, Some(5));
        let fresh = rate.plan(256, (0, 0), &QueueRow::default(), 1_000);
        assert_eq!(
            (fresh.slots, fresh.bucket),
            (5, Some(5_000)),
            "a new bucket is full"
        );
        assert_eq!(fresh.tokens_after(5), Some(0));
        let row = |tokens, at| QueueRow {
            tokens: Some(tokens),
            refilled_at: Some(at),
            ..QueueRow::default()
        };
        // Empty at 1,000 ms: 400 ms later, 2 starts (2,000 thousandths) are there.
        assert_eq!(rate.plan(256, (0, 0), &row(0, 1_000), 1_400).slots, 2);
        // Never more than a second's worth, however long it waited.
        assert_eq!(
            rate.plan(256, (0, 0), &row(0, 1_000), 60_000).bucket,
            Some(5_000)
        );
        // A clock that stepped back adds nothing.
        assert_eq!(rate.plan(256, (0, 0), &row(1_500, 1_000), 500).slots, 1);
        // The row's rate overrides the builder's.
        let set = QueueRow {
            rate: Some(1),
            ..QueueRow::default()
        };
        assert_eq!(rate.with_policy(&set).plan(256, (0, 0), &set, 0).slots, 1);
    }
}

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
    /// Running at once in each partition of the queue (`partition_key`), over every
    /// instance.
    pub(crate) per_partition: Option<i64>,
    /// The queue is a sequence (`QueueLimits::sequence`): a record is a candidate only
    /// once no earlier one of its partition blocks it ([`in_sequence`]).
    pub(crate) sequence: Option<crate::base::queue::SequenceFailure>,
}

/// A queue's row as a claim reads it (under its lock): the limits set while running, and
/// the rate's bucket.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct QueueRow {
    pub(crate) concurrency: Option<i64>,
    pub(crate) per_instance: Option<i64>,
    pub(crate) rate: Option<i64>,
    pub(crate) per_partition: Option<i64>,
    /// The partition the last claim served last: the next takes turns from the one after.
    pub(crate) turn_after: Option<String>,
    /// Thousandths of a start left in the bucket, as of `refilled_at`.
    pub(crate) tokens: Option<i64>,
    /// Unix ms.
    pub(crate) refilled_at: Option<i64>,
}

/// The columns of a queue's row a claim reads: concurrency, per_instance, rate, tokens,
/// refilled_at, per_partition (as 64-bit integers), turn_after.
pub(crate) type QueueRowColumns = (
    Option<i64>,
    Option<i64>,
    Option<i64>,
    Option<i64>,
    Option<i64>,
    Option<i64>,
    Option<String>,
);

impl From<QueueRowColumns> for QueueRow {
    fn from(
        (concurrency, per_instance, rate, tokens, refilled_at, per_partition, turn_after): QueueRowColumns,
    ) -> Self {
        QueueRow {
            concurrency,
            per_instance,
            rate,
            per_partition,
            turn_after,
            tokens,
            refilled_at,
        }
    }
}

/// The condition a waiting record of a sequence's queue meets to be a candidate of its
/// claim (appended to the candidate read, whose table is `async_req` unaliased): no
/// record of its partition written before it (a smaller id) is in a status that
/// blocks it ([`SequenceFailure::blocking`](crate::base::queue::SequenceFailure)). The
/// `queue_name <> ''` term names the predicate of the index it seeks
/// (`async_req_sequence`); `""` outside a sequence.
pub(crate) fn in_sequence(sequence: Option<crate::base::queue::SequenceFailure>) -> String {
    match sequence {
        None => String::new(),
        Some(on_failure) => format!(
            " AND NOT EXISTS (SELECT 1 FROM async_req e WHERE e.queue_name <> '' \
             AND e.application_name = async_req.application_name \
             AND e.queue_name = async_req.queue_name \
             AND e.partition_key = async_req.partition_key \
             AND e.status IN ({}) AND e.id < async_req.id)",
            on_failure.blocking()
        ),
    }
}

/// The most waiting records a claim of a queue reads to choose from: a claim takes
/// turns between the partitions among them.
pub(crate) const PARTITION_WINDOW: i64 = 1_000;

/// How many waiting records a claim of at most `slots` reads to choose from: 32 per
/// place (so that the partitions behind a busy one's first records get turns), at least
/// 64, at most [`PARTITION_WINDOW`]. A claim of few places reads few rows under its
/// queue's lock.
pub(crate) fn candidate_window(slots: i64) -> i64 {
    slots.saturating_mul(32).clamp(64, PARTITION_WINDOW)
}

/// A waiting record of a queue, as a claim that takes turns between partitions reads it:
/// id and partition, in claim order (priority, due time, id).
pub(crate) type Candidate = (crate::base::record::RequestId, String);

/// Which of `candidates` (in claim order) a claim takes: at most `slots`, at most
/// `per_partition - running` of each partition (`running`: the partitions' running
/// counts; a partition not in it runs none), taking turns: the first of each partition,
/// then the second of each, and so on; in each turn the partitions after `after` (the
/// one the claim before served last, by name) first, then the others, so that claims of
/// one record each go round the partitions. Returns the ids, and the partition served
/// last (`None` when none was).
pub(crate) fn take_turns(
    candidates: &[Candidate],
    running: &std::collections::HashMap<String, i64>,
    per_partition: Option<i64>,
    slots: i64,
    after: Option<&str>,
) -> (Vec<crate::base::record::RequestId>, Option<String>) {
    let mut seen: std::collections::HashMap<&str, i64> = std::collections::HashMap::new();
    // (turn, whether the partition comes round again only after the cursor, partition,
    // position in claim order, id)
    let mut ranked: Vec<(i64, bool, &str, usize, crate::base::record::RequestId)> = Vec::new();
    for (position, (id, partition)) in candidates.iter().enumerate() {
        let turn = seen.entry(partition.as_str()).or_insert(0);
        let room = per_partition.map_or(i64::MAX, |limit| {
            limit - running.get(partition).copied().unwrap_or(0)
        });
        if *turn < room {
            let later = after.is_some_and(|after| partition.as_str() <= after);
            ranked.push((*turn, later, partition.as_str(), position, *id));
        }
        *turn += 1;
    }
    ranked.sort_unstable();
    ranked.truncate(slots.max(0) as usize);
    let last = ranked.last().map(|r| r.2.to_string());
    (ranked.into_iter().map(|r| r.4).collect(), last)
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
            // A sequence runs one of a partition at a time, whatever the row says.
            per_partition: match self.sequence {
                Some(_) => Some(1),
                None => row.per_partition.or(self.per_partition),
            },
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
    /// The queue whose records it claims (the records' `queue_name`; `""`: those in no
    /// queue), of these executors only (some may be paused, or unknown to this build).
    pub(crate) queue: &'a str,
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
            per_partition: None,
            sequence: None,
        }
    }

    fn candidates(partitions: &[&str]) -> Vec<Candidate> {
        partitions
            .iter()
            .enumerate()
            .map(|(i, p)| (i as i64 + 1, p.to_string()))
            .collect()
    }

    #[test]
    fn a_claim_takes_turns_between_partitions() {
        let none = std::collections::HashMap::new();
        // Ids 1-4 of "a" (a backlog) ahead of 5 of "b" and 6 of "c".
        let waiting = candidates(&["a", "a", "a", "a", "b", "c"]);
        let ids = |c: &[Candidate], slots, after| take_turns(c, &none, None, slots, after).0;
        assert_eq!(ids(&waiting, 3, None), vec![1, 5, 6]);
        assert_eq!(ids(&waiting, 5, None), vec![1, 5, 6, 2, 3]);
        // No partitions: claim order.
        let shared = candidates(&["", "", ""]);
        assert_eq!(ids(&shared, 2, None), vec![1, 2]);
        // One at a time: each claim goes on from the partition the last one served.
        assert_eq!(
            take_turns(&waiting, &none, None, 1, None),
            (vec![1], Some("a".to_string()))
        );
        assert_eq!(
            take_turns(&waiting, &none, None, 1, Some("a")),
            (vec![5], Some("b".to_string()))
        );
        assert_eq!(ids(&waiting, 1, Some("b")), vec![6]);
        assert_eq!(ids(&waiting, 1, Some("c")), vec![1], "round again");
        assert_eq!(
            ids(&waiting, 1, Some("zzz")),
            vec![1],
            "a cursor past every name"
        );
    }

    #[test]
    fn a_partition_takes_no_more_than_its_room() {
        let waiting = candidates(&["a", "a", "a", "b", "b", "c"]);
        let running: std::collections::HashMap<String, i64> =
            [("a".to_string(), 1), ("c".to_string(), 2)].into();
        // Limit 2: "a" has room for 1, "b" for 2, "c" for none.
        assert_eq!(
            take_turns(&waiting, &running, Some(2), 10, None).0,
            vec![1, 4, 5]
        );
        assert_eq!(
            take_turns(&waiting, &running, Some(2), 0, None),
            (Vec::<i64>::new(), None)
        );
        // Over its limit already (lowered while running): nothing, never negative.
        let over: std::collections::HashMap<String, i64> = [("a".to_string(), 5)].into();
        // "b" has room for two, "c" for one: the first turn of each, then b's second.
        assert_eq!(
            take_turns(&waiting, &over, Some(2), 10, None).0,
            vec![4, 6, 5]
        );
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

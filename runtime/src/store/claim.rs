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
    /// Starts per `rate_period_ms` over every instance.
    pub(crate) rate: Option<i64>,
    /// The rate's period: 1,000 (a second) unless the builder's `rate_per` set another.
    pub(crate) rate_period_ms: i64,
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

/// A waiting record of a queue, as a claim that takes turns between partitions reads it.
pub(crate) use crate::store::partitions::Candidate;

/// Where a queue's turns between partitions stand after a claim: the partition served
/// last, and how many of its records that turn took (a partition of weight `w` takes up
/// to `w` a turn, over claims of one record each too). Kept in `async_queue.turn_after`
/// as `"\u{1f}{taken}\u{1f}{partition}"`; a value not of that form (written before
/// weights) is a partition whose turn is over.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Cursor {
    pub(crate) partition: String,
    pub(crate) taken: i64,
}

impl Cursor {
    /// The cursor a queue's row keeps, if any.
    pub(crate) fn decode(stored: Option<&str>) -> Option<Cursor> {
        let stored = stored?;
        let encoded = stored.strip_prefix('\u{1f}').and_then(|rest| {
            let (taken, partition) = rest.split_once('\u{1f}')?;
            Some(Cursor {
                partition: partition.to_string(),
                taken: taken.parse().ok()?,
            })
        });
        Some(encoded.unwrap_or_else(|| Cursor {
            partition: stored.to_string(),
            taken: i64::MAX,
        }))
    }

    /// The text a queue's row keeps.
    pub(crate) fn encode(&self) -> String {
        format!("\u{1f}{}\u{1f}{}", self.taken, self.partition)
    }
}

/// Which of `candidates` (in claim order) a claim takes: at most `slots`, at most each
/// partition's room (`parts`: under its limit of running requests and its rate's
/// bucket), taking turns: up to its weight (1 unless set) of each partition's first
/// records, then as many of its next, and so on; in each turn the partitions after the
/// `after` cursor's (the one the claim before served last, by name) first, then the
/// others, and the cursor's own first if its turn was not over, so that claims of one
/// record each go round the partitions by their weights. Returns the ids, and the cursor
/// after it (`None` when it served none).
pub(crate) fn take_turns(
    candidates: &[Candidate],
    parts: &crate::store::partitions::Partitions,
    slots: i64,
    after: Option<&Cursor>,
) -> (Vec<crate::base::record::RequestId>, Option<Cursor>) {
    // Per partition: records seen, its room, its weight.
    let mut seen: std::collections::HashMap<&str, (i64, i64, i64)> =
        std::collections::HashMap::new();
    // (turn, whether the partition comes round again only after the cursor, partition,
    // position in claim order, id)
    let mut ranked: Vec<(i64, bool, &str, usize, crate::base::record::RequestId)> = Vec::new();
    for (position, (id, partition)) in candidates.iter().enumerate() {
        let (k, room, weight) = seen
            .entry(partition.as_str())
            .or_insert_with(|| (0, parts.room(partition), parts.weight(partition)));
        if *k < *room {
            let (turn, later) = match after {
                // The cursor's partition goes on with its turn first, then waits for
                // the others.
                Some(c) if c.partition == *partition && c.taken < *weight => {
                    let left = *weight - c.taken.max(0);
                    if *k < left {
                        (0, false)
                    } else {
                        ((*k - left) / *weight, true)
                    }
                }
                Some(c) => (*k / *weight, partition.as_str() <= c.partition.as_str()),
                None => (*k / *weight, false),
            };
            ranked.push((turn, later, partition.as_str(), position, *id));
        }
        *k += 1;
    }
    ranked.sort_unstable();
    ranked.truncate(slots.max(0) as usize);
    let cursor = ranked.last().map(|&(turn, later, partition, _, _)| {
        let mut taken = ranked
            .iter()
            .filter(|r| (r.0, r.1, r.2) == (turn, later, partition))
            .count() as i64;
        if let Some(c) = after {
            if c.partition == partition && (turn, later) == (0, false) {
                taken += c.taken.max(0);
            }
        }
        Cursor {
            partition: partition.to_string(),
            taken,
        }
    });
    (ranked.into_iter().map(|r| r.4).collect(), cursor)
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
    /// The bucket after `claimed` starts, to write back (`None`: no rate, or nothing
    /// started: the bucket refills from the time it was last written, so that a rate
    /// per hour or day loses nothing to the rounding of many claims that take none).
    pub(crate) fn tokens_after(&self, claimed: usize) -> Option<i64> {
        if claimed == 0 {
            return None;
        }
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
            // A rate set while running is per second.
            rate_period_ms: if row.rate.is_some() {
                1_000
            } else {
                self.rate_period_ms
            },
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
    /// the bucket holds one period of starts at most, and refills at the rate.
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
            let full = i128::from(rate) * 1_000;
            let period = i128::from(self.rate_period_ms.max(1));
            let now = match (row.tokens, row.refilled_at) {
                (Some(tokens), Some(at)) => {
                    let since = i128::from(now.saturating_sub(at).max(0));
                    (i128::from(tokens) + since * full / period).min(full)
                }
                _ => full,
            };
            now.clamp(0, i128::from(i64::MAX)) as i64
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
            rate_period_ms: 1_000,
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

    use crate::store::partitions::Partitions;

    fn counted(per_partition: Option<i64>, running: &[(&str, i64)]) -> Partitions {
        Partitions::new(per_partition, 0)
            .with_running(running.iter().map(|(k, n)| (k.to_string(), *n)).collect())
    }

    /// The partitions' weights (rows read for them), the others 1.
    fn weighted(weights: &[(&str, i64)]) -> Partitions {
        let mut parts = Partitions::new(None, 0);
        let keys: Vec<String> = weights.iter().map(|(k, _)| k.to_string()).collect();
        parts.add_rows(
            &keys,
            weights
                .iter()
                .map(|(k, w)| (k.to_string(), Some(*w), None, None, None, None, None))
                .collect(),
        );
        parts
    }

    #[test]
    fn a_claim_takes_turns_between_partitions() {
        let none = counted(None, &[]);
        // Ids 1-4 of "a" (a backlog) ahead of 5 of "b" and 6 of "c".
        let waiting = candidates(&["a", "a", "a", "a", "b", "c"]);
        let ids = |c: &[Candidate], slots, after: Option<&str>| {
            take_turns(c, &none, slots, Cursor::decode(after).as_ref()).0
        };
        assert_eq!(ids(&waiting, 3, None), vec![1, 5, 6]);
        assert_eq!(ids(&waiting, 5, None), vec![1, 5, 6, 2, 3]);
        // No partitions: claim order.
        let shared = candidates(&["", "", ""]);
        assert_eq!(ids(&shared, 2, None), vec![1, 2]);
        // One at a time: each claim goes on from the partition the last one served.
        let served = |p: &str| {
            Some(Cursor {
                partition: p.to_string(),
                taken: 1,
            })
        };
        assert_eq!(take_turns(&waiting, &none, 1, None), (vec![1], served("a")));
        assert_eq!(
            take_turns(&waiting, &none, 1, served("a").as_ref()),
            (vec![5], served("b"))
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
    fn a_cursor_is_kept_as_text() {
        let cursor = Cursor {
            partition: "t:1\u{1f}x".to_string(),
            taken: 2,
        };
        assert_eq!(Cursor::decode(Some(&cursor.encode())), Some(cursor));
        // Written before weights: a partition whose turn is over.
        assert_eq!(
            Cursor::decode(Some("a")),
            Some(Cursor {
                partition: "a".into(),
                taken: i64::MAX
            })
        );
        assert_eq!(Cursor::decode(None), None);
    }

    #[test]
    fn a_partition_takes_no_more_than_its_room() {
        let waiting = candidates(&["a", "a", "a", "b", "b", "c"]);
        let running = counted(Some(2), &[("a", 1), ("c", 2)]);
        // Limit 2: "a" has room for 1, "b" for 2, "c" for none.
        assert_eq!(take_turns(&waiting, &running, 10, None).0, vec![1, 4, 5]);
        assert_eq!(
            take_turns(&waiting, &running, 0, None),
            (Vec::<i64>::new(), None)
        );
        // Over its limit already (lowered while running): nothing, never negative.
        let over = counted(Some(2), &[("a", 5)]);
        // "b" has room for two, "c" for one: the first turn of each, then b's second.
        assert_eq!(take_turns(&waiting, &over, 10, None).0, vec![4, 6, 5]);
    }

    #[test]
    fn a_heavier_partition_takes_more_records_a_turn() {
        // Both with a backlog, "a" first in claim order.
        let waiting = candidates(&["a", "a", "a", "a", "a", "a", "b", "b", "b", "b", "b", "b"]);
        let parts = weighted(&[("b", 3)]);
        // Turn 1: a's 1, b's 7, 8, 9; turn 2: a's 2, b's 10, 11, 12; ...
        assert_eq!(
            take_turns(&waiting, &parts, 4, None).0,
            vec![1, 7, 8, 9],
            "weight 3: three of b for one of a"
        );
        assert_eq!(
            take_turns(&waiting, &parts, 8, None).0,
            vec![1, 7, 8, 9, 2, 10, 11, 12]
        );
        // Claims of one record each go round by the weights: b three times, then a once.
        let mut after: Option<Cursor> = None;
        let mut served = String::new();
        for _ in 0..8 {
            let (ids, cursor) = take_turns(&waiting, &parts, 1, after.as_ref());
            served.push_str(if ids[0] >= 7 { "b" } else { "a" });
            after = cursor;
        }
        assert_eq!(served, "abbbabbb");
        // Claims of two: the cursor carries what a turn took.
        let mut after: Option<Cursor> = None;
        let mut served = String::new();
        for _ in 0..4 {
            let (ids, cursor) = take_turns(&waiting, &parts, 2, after.as_ref());
            for id in ids {
                served.push_str(if id >= 7 { "b" } else { "a" });
            }
            after = cursor;
        }
        assert_eq!(served, "abbbabbb");
        // Over many claims of 4, b gets three quarters: each claim is 1 of a, 3 of b.
        let share = |weights: &[(&str, i64)], slots: i64| {
            let parts = weighted(weights);
            let ids = take_turns(&waiting, &parts, slots, None).0;
            ids.iter().filter(|&&id| id >= 7).count()
        };
        assert_eq!(share(&[("b", 3)], 4), 3);
        assert_eq!(share(&[("a", 2)], 3), 1, "a of weight 2, b of 1");
        // The weight never lifts a limit: "b" of weight 3 with room for 1.
        let parts = {
            let mut p = Partitions::new(None, 0);
            p.add_rows(
                &["b".to_string()],
                vec![("b".to_string(), Some(3), Some(1), None, None, None, None)],
            );
            p.add_running(&["b".to_string()], vec![]);
            p
        };
        assert_eq!(
            take_turns(&waiting, &parts, 8, None).0,
            vec![1, 7, 2, 3, 4, 5, 6]
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

    #[test]
    fn a_rate_per_day_refills_over_the_day() {
        let daily = QueueCap {
            rate_period_ms: 86_400_000,
            ..cap(None, None, Some(2))
        };
        let fresh = daily.plan(256, (0, 0), &QueueRow::default(), 0);
        assert_eq!(fresh.slots, 2, "a day's starts at first");
        assert_eq!(
            fresh.tokens_after(0),
            None,
            "nothing written when none started"
        );
        assert_eq!(fresh.tokens_after(2), Some(0));
        let empty = QueueRow {
            tokens: Some(0),
            refilled_at: Some(0),
            ..QueueRow::default()
        };
        // Half a day later one start is back, not before.
        assert_eq!(daily.plan(256, (0, 0), &empty, 43_199_999).slots, 0);
        assert_eq!(daily.plan(256, (0, 0), &empty, 43_200_000).slots, 1);
        // A rate set while running is per second.
        let set = QueueRow {
            rate: Some(3),
            ..QueueRow::default()
        };
        assert_eq!(daily.with_policy(&set).rate_period_ms, 1_000);
    }
}

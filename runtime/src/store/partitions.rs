//! What a queue's claim knows of the queue's partitions when it takes turns between them:
//! each one's running count, its own settings (a row of `async_partition`, read only for
//! the partitions among the claim's candidates and those running at the queue's limit),
//! and from them its weight (records per turn) and its room (how many more may start:
//! under its concurrency, and its rate's bucket). The backends read the rows and write
//! the buckets back; the arithmetic lives here once.

use std::collections::HashMap;

/// A waiting record of a queue, as a claim that takes turns between partitions reads it:
/// id and partition, in claim order (priority, due time, id).
pub(crate) type Candidate = (crate::base::record::RequestId, String);

/// A partition's row in `async_partition`, as a claim reads it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct PartitionRow {
    pub(crate) weight: Option<i64>,
    pub(crate) concurrency: Option<i64>,
    /// Starts per `period_ms`.
    pub(crate) rate: Option<i64>,
    pub(crate) period_ms: Option<i64>,
    /// Thousandths of a start left, as of `refilled_at` (unix ms); `None`: full.
    pub(crate) tokens: Option<i64>,
    pub(crate) refilled_at: Option<i64>,
}

/// The columns a claim reads of a partition's row: partition_key, weight, concurrency,
/// rate, rate_period_ms, tokens, refilled_at (the integers as 64-bit).
pub(crate) type PartitionRowColumns = (
    String,
    Option<i64>,
    Option<i64>,
    Option<i64>,
    Option<i64>,
    Option<i64>,
    Option<i64>,
);

/// The statement that reads the rows of some partitions of a queue: the
/// [`PartitionRowColumns`] (the INTEGER columns as 64-bit integers) where
/// `application_name`, `queue_name` and then the partitions' condition (`keys`, the
/// backend's list of them) follow.
pub(crate) fn rows_sql(dialect: crate::store::sql::Dialect, keys: &str) -> String {
    format!(
        "SELECT partition_key, {}, {}, {}, rate_period_ms, tokens, refilled_at \
         FROM async_partition WHERE application_name = {} AND queue_name = {} \
         AND partition_key {keys}",
        dialect.int64("weight"),
        dialect.int64("concurrency"),
        dialect.int64("rate"),
        if dialect == crate::store::sql::Dialect::Postgres {
            "$1"
        } else {
            "?"
        },
        if dialect == crate::store::sql::Dialect::Postgres {
            "$2"
        } else {
            "?"
        },
    )
}

/// The statement that counts the running requests of some partitions of a queue, as
/// [`rows_sql`].
pub(crate) fn running_sql(dialect: crate::store::sql::Dialect, keys: &str) -> String {
    let (a, q) = if dialect == crate::store::sql::Dialect::Postgres {
        ("$1", "$2")
    } else {
        ("?", "?")
    };
    format!(
        "SELECT partition_key, COUNT(*) FROM async_req WHERE application_name = {a} \
         AND queue_name = {q} AND status = 'running' AND partition_key {keys} \
         GROUP BY partition_key"
    )
}

/// A partition's bucket to take starts from: the row as read (what the conditional
/// `UPDATE` compares) and what it holds now.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Spend {
    /// The row's `tokens` and `refilled_at` as read (`-1` for NULL: what the statement's
    /// `COALESCE(.., -1)` compares).
    pub(crate) was: (i64, i64),
    /// `tokens` and `refilled_at` to write.
    pub(crate) now: (i64, i64),
}

/// The statement that takes starts from a partition's bucket, if no other claim took
/// any since this one read it: `tokens`, `refilled_at`, application, queue, partition,
/// the `tokens` and `refilled_at` read. One statement: no lock across round trips; a
/// claim whose `UPDATE` matches no row starts none of that partition.
pub(crate) static SPEND: crate::store::sql::Statement = crate::store::sql::Statement::new(
    "UPDATE async_partition SET tokens = ?, refilled_at = ? WHERE application_name = ? \
     AND queue_name = ? AND partition_key = ? AND COALESCE(tokens, -1) = ? \
     AND COALESCE(refilled_at, -1) = ?",
);

/// What a queue's claim knows of its partitions.
#[derive(Debug, Clone, Default)]
pub(crate) struct Partitions {
    /// The queue's limit of each partition (the builder's or the queue's row).
    per_partition: Option<i64>,
    /// Running counts, of every partition (`all_counted`) or of those asked for.
    running: HashMap<String, i64>,
    all_counted: bool,
    /// The rows read (a partition read and without a row: `None`).
    rows: HashMap<String, Option<PartitionRow>>,
    /// Unix ms, for the buckets.
    now: i64,
}

impl Partitions {
    /// A claim's view at `now`, with the queue's per-partition limit.
    pub(crate) fn new(per_partition: Option<i64>, now: i64) -> Self {
        Partitions {
            per_partition,
            now,
            ..Partitions::default()
        }
    }

    /// Every running partition's count (a partition not in it runs none).
    pub(crate) fn with_running(mut self, running: HashMap<String, i64>) -> Self {
        self.running = running;
        self.all_counted = true;
        self
    }

    /// Whether the claim counts every partition's running requests before it reads
    /// candidates: only a queue with a per-partition limit does.
    pub(crate) fn counts_all(&self) -> bool {
        self.per_partition.is_some()
    }

    /// The running partitions at or past the queue's limit, whose rows the claim reads
    /// before the candidates (their own concurrency may be higher).
    pub(crate) fn at_queue_limit(&self) -> Vec<String> {
        match self.per_partition {
            Some(limit) => self
                .running
                .iter()
                .filter(|&(k, &n)| n >= limit && !self.rows.contains_key(k))
                .map(|(k, _)| k.clone())
                .collect(),
            None => Vec::new(),
        }
    }

    /// Of `keys`, the partitions whose rows the claim has not read yet, each once.
    pub(crate) fn unread<'a>(&self, keys: impl IntoIterator<Item = &'a str>) -> Vec<String> {
        let mut out: Vec<String> = Vec::new();
        for key in keys {
            if !self.rows.contains_key(key) && !out.iter().any(|k| k == key) {
                out.push(key.to_string());
            }
        }
        out
    }

    /// The rows read for `asked` (those without a row have none).
    pub(crate) fn add_rows(&mut self, asked: &[String], rows: Vec<PartitionRowColumns>) {
        for key in asked {
            self.rows.entry(key.clone()).or_insert(None);
        }
        for (key, weight, concurrency, rate, period_ms, tokens, refilled_at) in rows {
            self.rows.insert(
                key,
                Some(PartitionRow {
                    weight,
                    concurrency,
                    rate,
                    period_ms,
                    tokens,
                    refilled_at,
                }),
            );
        }
    }

    /// The partitions with a concurrency of their own whose running count the claim has
    /// not read (it counted none: the queue has no per-partition limit).
    pub(crate) fn uncounted(&self) -> Vec<String> {
        if self.all_counted {
            return Vec::new();
        }
        self.rows
            .iter()
            .filter(|(k, row)| {
                row.as_ref().is_some_and(|r| r.concurrency.is_some())
                    && !self.running.contains_key(*k)
            })
            .map(|(k, _)| k.clone())
            .collect()
    }

    /// Running counts of `asked` (those not in `counts` run none).
    pub(crate) fn add_running(&mut self, asked: &[String], counts: Vec<(String, i64)>) {
        for key in asked {
            self.running.entry(key.clone()).or_insert(0);
        }
        self.running.extend(counts);
    }

    fn row(&self, key: &str) -> Option<&PartitionRow> {
        self.rows.get(key).and_then(Option::as_ref)
    }

    /// The partition's limit of running requests: its own, else the queue's.
    pub(crate) fn limit(&self, key: &str) -> Option<i64> {
        self.row(key)
            .and_then(|r| r.concurrency)
            .or(self.per_partition)
    }

    /// Records per turn (1 unless set).
    pub(crate) fn weight(&self, key: &str) -> i64 {
        self.row(key).and_then(|r| r.weight).unwrap_or(1).max(1)
    }

    /// The partition's bucket now, in thousandths of a start, if it has a rate: full at
    /// first; refilled evenly over the period, one period's starts at most.
    pub(crate) fn bucket(&self, key: &str) -> Option<i64> {
        let row = self.row(key)?;
        let (starts, period) = (row.rate?, row.period_ms?.max(1));
        let full = i128::from(starts) * 1_000;
        let now = match (row.tokens, row.refilled_at) {
            (Some(tokens), Some(at)) => {
                let since = i128::from(self.now.saturating_sub(at).max(0));
                (i128::from(tokens) + since * full / i128::from(period)).min(full)
            }
            _ => full,
        };
        Some(now.clamp(0, i128::from(i64::MAX)) as i64)
    }

    /// How many more of the partition's records may start now: under its limit of
    /// running requests and its bucket (unbounded when neither is set; never negative).
    pub(crate) fn room(&self, key: &str) -> i64 {
        let running = self.running.get(key).copied().unwrap_or(0);
        let by_limit = self.limit(key).map_or(i64::MAX, |limit| limit - running);
        let by_rate = self.bucket(key).map_or(i64::MAX, |b| b / 1_000);
        by_limit.min(by_rate).max(0)
    }

    /// The partitions the candidate read leaves out: those with no room.
    pub(crate) fn full(&self) -> Vec<String> {
        let mut keys: Vec<&String> = self.running.keys().collect();
        keys.extend(self.rows.keys());
        keys.sort_unstable();
        keys.dedup();
        keys.into_iter()
            .filter(|k| self.room(k) == 0)
            .cloned()
            .collect()
    }

    /// The partitions of `candidates` with no room that the read did not leave out
    /// (`left_out`): a claim reads again without them (their records fill the window of
    /// candidates, and none of them may start).
    pub(crate) fn blocked(&self, candidates: &[Candidate], left_out: &[String]) -> Vec<String> {
        let mut out: Vec<String> = Vec::new();
        for (_, key) in candidates {
            if self.room(key) == 0 && !left_out.contains(key) && !out.contains(key) {
                out.push(key.clone());
            }
        }
        out
    }

    /// The bucket writes for `taken` starts of each partition (those with a rate only).
    pub(crate) fn spends(&self, taken: &HashMap<String, i64>) -> Vec<(String, Spend)> {
        let mut out: Vec<(String, Spend)> = taken
            .iter()
            .filter(|&(_, &n)| n > 0)
            .filter_map(|(key, &n)| {
                let bucket = self.bucket(key)?;
                let row = self.row(key)?;
                let at = row.refilled_at.unwrap_or(-1);
                Some((
                    key.clone(),
                    Spend {
                        was: (row.tokens.unwrap_or(-1), at),
                        // Never back in time (another instance's clock ahead of this one).
                        now: (
                            bucket.saturating_sub(n.saturating_mul(1_000)).max(0),
                            self.now.max(at),
                        ),
                    },
                ))
            })
            .collect();
        // One order on every instance.
        out.sort_by(|a, b| a.0.cmp(&b.0));
        out
    }
}

/// The most reads of candidates a claim makes, each leaving out the partitions the one
/// before found with no room.
pub(crate) const MAX_READS: usize = 3;

/// How many of `chosen` (ids) each partition has, by the candidates' partitions.
pub(crate) fn taken_by_partition(
    candidates: &[Candidate],
    chosen: &[crate::base::record::RequestId],
) -> HashMap<String, i64> {
    let mut taken = HashMap::new();
    for (id, key) in candidates {
        if chosen.contains(id) {
            *taken.entry(key.clone()).or_insert(0) += 1;
        }
    }
    taken
}

/// `chosen` without the records of the partitions in `refused` (their bucket was taken
/// by another claim meanwhile).
pub(crate) fn without(
    candidates: &[Candidate],
    chosen: Vec<crate::base::record::RequestId>,
    refused: &[String],
) -> Vec<crate::base::record::RequestId> {
    if refused.is_empty() {
        return chosen;
    }
    let out: std::collections::HashSet<crate::base::record::RequestId> = candidates
        .iter()
        .filter(|(_, key)| refused.contains(key))
        .map(|(id, _)| *id)
        .collect();
    chosen.into_iter().filter(|id| !out.contains(id)).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(columns: PartitionRowColumns) -> Vec<PartitionRowColumns> {
        vec![columns]
    }

    #[test]
    fn a_partitions_own_concurrency_replaces_the_queues() {
        let mut parts = Partitions::new(Some(2), 0)
            .with_running([("big".to_string(), 2), ("small".to_string(), 2)].into());
        // Both at the queue's limit: their rows are read before the candidates.
        let mut at = parts.at_queue_limit();
        at.sort();
        assert_eq!(at, vec!["big", "small"]);
        parts.add_rows(
            &at,
            row(("big".into(), None, Some(5), None, None, None, None)),
        );
        assert_eq!((parts.room("big"), parts.room("small")), (3, 0));
        assert_eq!(parts.full(), vec!["small"]);
        assert_eq!(parts.room("idle"), 2, "no row: the queue's limit");
        assert!(parts.at_queue_limit().is_empty(), "each read once");
    }

    #[test]
    fn without_a_queue_limit_only_partitions_with_their_own_are_counted() {
        let mut parts = Partitions::new(None, 0);
        assert!(!parts.counts_all());
        let asked = parts.unread(["a", "b", "a"]);
        assert_eq!(asked, vec!["a", "b"]);
        parts.add_rows(
            &asked,
            row(("a".into(), None, Some(1), None, None, None, None)),
        );
        assert_eq!(parts.uncounted(), vec!["a"]);
        parts.add_running(&["a".to_string()], vec![("a".into(), 1)]);
        assert!(parts.uncounted().is_empty());
        assert_eq!((parts.room("a"), parts.room("b")), (0, i64::MAX));
        assert!(parts.unread(["a", "b"]).is_empty());
    }

    #[test]
    fn a_partitions_bucket_refills_over_its_period() {
        let minute = 60_000;
        // 6 a minute, empty at 0: 10 s later one start is there; never more than 6.
        let at = |now| {
            let mut parts = Partitions::new(None, now);
            parts.add_rows(
                &["t".to_string()],
                row((
                    "t".into(),
                    None,
                    None,
                    Some(6),
                    Some(minute),
                    Some(0),
                    Some(0),
                )),
            );
            parts
        };
        assert_eq!(at(9_999).room("t"), 0);
        assert_eq!(at(10_000).room("t"), 1);
        assert_eq!(at(10 * minute).room("t"), 6);
        // A day's rate of 1 is not lost to rounding: the bucket is written only when
        // starts are taken, from the time it was last written.
        let mut daily = Partitions::new(None, 86_400_000);
        daily.add_rows(
            &["d".to_string()],
            row((
                "d".into(),
                None,
                None,
                Some(1),
                Some(86_400_000),
                Some(0),
                Some(0),
            )),
        );
        assert_eq!(daily.room("d"), 1);
        // A new bucket is full; taking 2 of 6 leaves 4, compared against NULLs as -1.
        let mut fresh = Partitions::new(None, 500);
        fresh.add_rows(
            &["f".to_string()],
            row(("f".into(), None, None, Some(6), Some(minute), None, None)),
        );
        assert_eq!(fresh.room("f"), 6);
        let spends = fresh.spends(&[("f".to_string(), 2), ("none".to_string(), 1)].into());
        assert_eq!(
            spends,
            vec![(
                "f".to_string(),
                Spend {
                    was: (-1, -1),
                    now: (4_000, 500)
                }
            )]
        );
        // A clock behind the row's: the time written never goes back.
        let mut behind = Partitions::new(None, 100);
        behind.add_rows(
            &["b".to_string()],
            row((
                "b".into(),
                None,
                None,
                Some(6),
                Some(minute),
                Some(3_000),
                Some(200),
            )),
        );
        assert_eq!(behind.room("b"), 3);
        assert_eq!(
            behind.spends(&[("b".to_string(), 1)].into())[0].1.now,
            (2_000, 200)
        );
    }

    #[test]
    fn chosen_records_are_counted_and_dropped_by_partition() {
        let candidates: Vec<crate::store::claim::Candidate> =
            vec![(1, "a".into()), (2, "b".into()), (3, "a".into())];
        let taken = taken_by_partition(&candidates, &[1, 2, 3]);
        assert_eq!(taken.get("a"), Some(&2));
        assert_eq!(without(&candidates, vec![1, 2, 3], &["a".into()]), vec![2]);
        // "a" has no room: read again without it (once).
        let mut parts = Partitions::new(None, 0);
        parts.add_rows(
            &["a".to_string()],
            vec![(
                "a".into(),
                None,
                None,
                Some(1),
                Some(1_000),
                Some(0),
                Some(0),
            )],
        );
        assert_eq!(parts.blocked(&candidates, &[]), vec!["a"]);
        assert!(parts.blocked(&candidates, &["a".into()]).is_empty());
    }
}

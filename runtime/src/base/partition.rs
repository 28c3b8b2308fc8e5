//! A partition's own settings (a tenant of a queue): its weight in the queue's turns, its
//! own limit of running requests, its own rate of starts. Kept in the database
//! (`async_partition`), one row per partition that has any; the others have the queue's
//! defaults. Set while the service runs with
//! [`Runtime::set_partition`](crate::Runtime::set_partition).

use serde::{Deserialize, Serialize};

use crate::base::error::{Error, Result};

/// The longest partition, in characters (the columns hold 255).
pub(crate) const MAX_PARTITION_CHARS: usize = 255;

/// The heaviest weight a partition may have.
pub(crate) const MAX_WEIGHT: u32 = 1_000;

/// The most requests a partition's own concurrency lets run, or its rate lets start in
/// a period.
pub(crate) const MAX_PARTITION_LIMIT: u32 = 100_000;

/// The period of a [`Rate`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[cfg_attr(feature = "console", derive(utoipa::ToSchema))]
#[serde(rename_all = "lowercase")]
pub enum Period {
    /// A second.
    Second,
    /// A minute.
    Minute,
    /// An hour.
    Hour,
    /// A day (24 hours).
    Day,
}

impl Period {
    /// Its length in milliseconds.
    ///
    /// ```
    /// assert_eq!(async_exec::Period::Minute.millis(), 60_000);
    /// ```
    pub fn millis(self) -> i64 {
        match self {
            Period::Second => 1_000,
            Period::Minute => 60_000,
            Period::Hour => 3_600_000,
            Period::Day => 86_400_000,
        }
    }

    /// The period of `ms` milliseconds, if it is one of the four.
    pub(crate) fn from_millis(ms: i64) -> Option<Period> {
        [Period::Second, Period::Minute, Period::Hour, Period::Day]
            .into_iter()
            .find(|p| p.millis() == ms)
    }
}

/// At most `starts` starts per period, over every instance: a bucket that holds one
/// period's starts and refills evenly over the period.
///
/// ```
/// use async_exec::Rate;
/// let rate = Rate::per_minute(30);
/// assert_eq!((rate.starts(), rate.period().millis()), (30, 60_000));
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[cfg_attr(feature = "console", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct Rate {
    starts: u32,
    period: Period,
}

impl Rate {
    /// `starts` per `period`.
    pub fn new(starts: u32, period: Period) -> Self {
        Rate { starts, period }
    }

    /// `n` starts per second.
    pub fn per_second(n: u32) -> Self {
        Rate::new(n, Period::Second)
    }

    /// `n` starts per minute.
    pub fn per_minute(n: u32) -> Self {
        Rate::new(n, Period::Minute)
    }

    /// `n` starts per hour.
    pub fn per_hour(n: u32) -> Self {
        Rate::new(n, Period::Hour)
    }

    /// `n` starts per day.
    pub fn per_day(n: u32) -> Self {
        Rate::new(n, Period::Day)
    }

    /// Starts per period.
    pub fn starts(&self) -> u32 {
        self.starts
    }

    /// The period.
    pub fn period(&self) -> Period {
        self.period
    }
}

/// A partition's own settings, given to
/// [`Runtime::set_partition`](crate::Runtime::set_partition). What is not set is the
/// queue's: weight 1, the queue's
/// [`per_partition`](crate::QueueLimits::per_partition), no rate of its own (the queue's
/// rate holds for every partition in any case).
///
/// ```
/// use async_exec::{PartitionSettings, Rate};
/// // A tenant on the big plan: three turns for one of the others, 10 at once, 600 a minute.
/// let big = PartitionSettings::new()
///     .weight(3)
///     .concurrency(10)
///     .rate(Rate::per_minute(600));
/// assert_eq!(big.weight_value(), Some(3));
/// ```
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "console", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct PartitionSettings {
    #[serde(default)]
    weight: Option<u32>,
    #[serde(default)]
    concurrency: Option<u32>,
    #[serde(default)]
    rate: Option<Rate>,
}

impl PartitionSettings {
    /// Nothing set yet.
    pub fn new() -> Self {
        PartitionSettings::default()
    }

    /// Up to `n` of the partition's records start in each turn of the queue's claims, where
    /// others start one (1 to 1,000): a partition of weight 3 gets about three times the
    /// starts of one of weight 1 when both have a backlog.
    pub fn weight(mut self, n: u32) -> Self {
        self.weight = Some(n);
        self
    }

    /// At most `n` of the partition's requests run at once over every instance, in place
    /// of the queue's `per_partition` (the queue's `concurrency` still holds).
    pub fn concurrency(mut self, n: u32) -> Self {
        self.concurrency = Some(n);
        self
    }

    /// At most `rate` of the partition's requests start, over every instance.
    pub fn rate(mut self, rate: Rate) -> Self {
        self.rate = Some(rate);
        self
    }

    /// The weight, if set.
    pub fn weight_value(&self) -> Option<u32> {
        self.weight
    }

    /// The partition's own concurrency, if set.
    pub fn concurrency_limit(&self) -> Option<u32> {
        self.concurrency
    }

    /// The partition's own rate, if set.
    pub fn rate_limit(&self) -> Option<Rate> {
        self.rate
    }

    /// Whether anything is set.
    pub(crate) fn is_set(&self) -> bool {
        self.weight.is_some() || self.concurrency.is_some() || self.rate.is_some()
    }

    /// The settings of a row's columns (weight, concurrency, rate, its period in ms).
    pub(crate) fn from_columns(
        weight: Option<i64>,
        concurrency: Option<i64>,
        rate: Option<i64>,
        period_ms: Option<i64>,
    ) -> Self {
        let small = |n: Option<i64>| n.and_then(|n| u32::try_from(n).ok());
        PartitionSettings {
            weight: small(weight),
            concurrency: small(concurrency),
            rate: match (small(rate), period_ms.and_then(Period::from_millis)) {
                (Some(starts), Some(period)) => Some(Rate::new(starts, period)),
                _ => None,
            },
        }
    }
}

/// Checks a partition's name and settings before they are written: a name of 1 to 255
/// characters without NUL (as [`Call::partition`](crate::Call::partition)); something
/// set; each value within its bounds.
pub(crate) fn check(queue: &str, partition: &str, settings: &PartitionSettings) -> Result<()> {
    let fail = |reason: String| {
        Err(Error::Config {
            setting: "partition",
            reason,
        })
    };
    let max = MAX_PARTITION_CHARS;
    if partition.is_empty() || partition.contains('\0') || partition.chars().count() > max {
        return fail(format!(
            "a partition is 1 to {max} characters without NUL, as Call::partition takes it; \
             {:?} is not",
            crate::base::text::capped(partition, 100)
        ));
    }
    if !settings.is_set() {
        return fail(format!(
            "queue {queue:?}: give the partition a weight, a concurrency or a rate \
             (PartitionSettings::new().weight(n)), or clear its settings with \
             clear_partition"
        ));
    }
    if let Some(w) = settings.weight {
        if w == 0 || w > MAX_WEIGHT {
            return fail(format!(
                "queue {queue:?}: a partition's weight must be between 1 and {MAX_WEIGHT}, \
                 not {w}"
            ));
        }
    }
    if let Some(n) = settings.concurrency {
        if n == 0 || n > MAX_PARTITION_LIMIT {
            return fail(format!(
                "queue {queue:?}: a partition's concurrency must be between 1 and \
                 {MAX_PARTITION_LIMIT}, not {n} (to stop a tenant for a while, pause the \
                 queue's executors or cancel its requests)"
            ));
        }
    }
    if let Some(rate) = settings.rate {
        if rate.starts == 0 || rate.starts > MAX_PARTITION_LIMIT {
            return fail(format!(
                "queue {queue:?}: a partition's rate must be between 1 and \
                 {MAX_PARTITION_LIMIT} starts per period, not {}",
                rate.starts
            ));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn absurd_settings_are_refused() {
        let ok = PartitionSettings::new().weight(3);
        assert!(check("q", "t1", &ok).is_ok());
        for (name, settings, says) in [
            ("", ok, "1 to 255"),
            ("a\0b", ok, "without NUL"),
            (&"x".repeat(256) as &str, ok, "1 to 255"),
            ("t", PartitionSettings::new(), "clear_partition"),
            ("t", PartitionSettings::new().weight(0), "weight"),
            ("t", PartitionSettings::new().weight(1_001), "weight"),
            ("t", PartitionSettings::new().concurrency(0), "concurrency"),
            (
                "t",
                PartitionSettings::new().concurrency(u32::MAX),
                "concurrency",
            ),
            ("t", PartitionSettings::new().rate(Rate::per_day(0)), "rate"),
            (
                "t",
                PartitionSettings::new().rate(Rate::per_hour(100_001)),
                "rate",
            ),
        ] {
            let error = check("q", name, &settings).expect_err(says).to_string();
            assert!(error.contains(says), "{error}");
        }
    }

    #[test]
    fn settings_come_back_from_their_columns() {
        let set = PartitionSettings::new().weight(2).rate(Rate::per_hour(7));
        assert_eq!(
            PartitionSettings::from_columns(Some(2), None, Some(7), Some(3_600_000)),
            set
        );
        // A period that is none of the four reads as no rate (never a wrong one).
        assert_eq!(
            PartitionSettings::from_columns(None, None, Some(7), Some(5)).rate_limit(),
            None
        );
    }
}

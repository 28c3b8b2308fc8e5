//! Policies changed while running: what a change of a queue's (or an executor's) policy
//! sets, checked against the ranges the settings use, and the overrides in force that the
//! executor and the claims read ([`Overrides`]).

use std::time::Duration;

use crate::base::error::{Error, Result};
use crate::base::query::QueuePolicy;
use crate::base::queue::MAX_QUEUE_LIMIT;

/// The longest timeout or backoff a policy may set: a year, as the settings.
const MAX_MS: i64 = 366 * 24 * 3_600_000;

/// The largest priority boost, either way.
pub(crate) const MAX_BOOST: i32 = 1_000_000;

/// What one policy change sets: `None` leaves a field as stored, `Some(None)` resets it
/// to the attribute's and the builder's.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct PolicyFields {
    pub(crate) paused: Option<Option<bool>>,
    pub(crate) concurrency: Option<Option<u32>>,
    pub(crate) per_instance: Option<Option<u32>>,
    pub(crate) rate: Option<Option<u32>>,
    pub(crate) max_attempts: Option<Option<u32>>,
    pub(crate) backoff: Option<Option<(Duration, Duration)>>,
    pub(crate) timeout: Option<Option<Duration>>,
    pub(crate) priority_boost: Option<Option<i32>>,
}

impl PolicyFields {
    /// Every field back to the attribute's and the builder's.
    pub(crate) fn reset() -> Self {
        PolicyFields {
            paused: Some(None),
            concurrency: Some(None),
            per_instance: Some(None),
            rate: Some(None),
            max_attempts: Some(None),
            backoff: Some(None),
            timeout: Some(None),
            priority_boost: Some(None),
        }
    }

    /// Whether it sets concurrency, per-instance or rate limits (only a queue's claims
    /// hold to those).
    pub(crate) fn sets_limits(&self) -> bool {
        [self.concurrency, self.per_instance, self.rate]
            .iter()
            .any(|f| matches!(f, Some(Some(_))))
    }

    /// Refuses values out of range, naming the range.
    pub(crate) fn check(&self, name: &str) -> Result<()> {
        let fail = |reason: String| {
            Err(Error::Config {
                setting: "policy",
                reason: format!("policy {name:?}: {reason}"),
            })
        };
        if name.trim().is_empty() {
            return fail("a policy names a queue or an executor; the name is empty".into());
        }
        for (what, limit) in [
            ("concurrency", self.concurrency),
            ("per_instance", self.per_instance),
            ("rate", self.rate),
        ] {
            if let Some(Some(n)) = limit {
                if n == 0 || n > MAX_QUEUE_LIMIT {
                    return fail(format!(
                        "{what} must be between 1 and {MAX_QUEUE_LIMIT}, not {n} (to stop \
                         the queue for a while, pause it)"
                    ));
                }
            }
        }
        if let Some(Some(n)) = self.max_attempts {
            if n == 0 || n > i32::MAX as u32 {
                return fail(format!(
                    "max_attempts must be between 1 and {}, not {n}",
                    i32::MAX
                ));
            }
        }
        let ms = |d: Duration| i64::try_from(d.as_millis()).unwrap_or(i64::MAX);
        if let Some(Some((base, cap))) = self.backoff {
            if ms(base) < 1 || ms(cap) > MAX_MS || base > cap {
                return fail(format!(
                    "backoff must be a first delay of at least 1ms and a cap of at most a \
                     year, the first no longer than the cap; not {base:?} and {cap:?}"
                ));
            }
        }
        if let Some(Some(timeout)) = self.timeout {
            if ms(timeout) < 1 || ms(timeout) > MAX_MS {
                return fail(format!(
                    "timeout must be between 1ms and a year, not {timeout:?}"
                ));
            }
        }
        if let Some(Some(boost)) = self.priority_boost {
            // `unsigned_abs`: `i32::MIN` has no `abs` (it overflowed here).
            if boost.unsigned_abs() > MAX_BOOST.unsigned_abs() {
                return fail(format!(
                    "priority_boost must be between -{MAX_BOOST} and {MAX_BOOST}, not {boost}"
                ));
            }
        }
        Ok(())
    }

    /// The columns of the policy row it writes, with their values (`None`: NULL).
    pub(crate) fn columns(&self) -> Vec<(&'static str, Option<i64>)> {
        let ms = |d: Duration| i64::try_from(d.as_millis()).unwrap_or(i64::MAX);
        let mut columns = Vec::new();
        let mut add = |column, value: Option<Option<i64>>| {
            if let Some(value) = value {
                columns.push((column, value));
            }
        };
        add("paused", self.paused.map(|p| p.filter(|&p| p).map(|_| 1)));
        add("concurrency", self.concurrency.map(|n| n.map(i64::from)));
        add("per_instance", self.per_instance.map(|n| n.map(i64::from)));
        add("rate", self.rate.map(|n| n.map(i64::from)));
        add("max_attempts", self.max_attempts.map(|n| n.map(i64::from)));
        add(
            "backoff_base_ms",
            self.backoff.map(|b| b.map(|(base, _)| ms(base))),
        );
        add(
            "backoff_cap_ms",
            self.backoff.map(|b| b.map(|(_, cap)| ms(cap))),
        );
        add("timeout_ms", self.timeout.map(|t| t.map(ms)));
        add(
            "priority_boost",
            self.priority_boost.map(|b| b.map(i64::from)),
        );
        columns
    }
}

/// What a policy row overrides of an executor's behaviour (its limits are read by the
/// claims from the row itself).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct Overrides {
    pub(crate) paused: bool,
    pub(crate) max_attempts: Option<i32>,
    pub(crate) backoff: Option<(Duration, Duration)>,
    pub(crate) timeout: Option<Duration>,
    pub(crate) priority_boost: i32,
}

impl Overrides {
    /// The overrides of a stored policy row (values out of range, written by hand, are
    /// clamped into it).
    pub(crate) fn of(row: &QueuePolicy) -> Self {
        let ms = |n: i64| Duration::from_millis(n.clamp(1, MAX_MS) as u64);
        Overrides {
            paused: row.paused,
            max_attempts: row
                .max_attempts
                .map(|n| n.clamp(1, i64::from(i32::MAX)) as i32),
            backoff: match (row.backoff_base_ms, row.backoff_cap_ms) {
                (Some(base), Some(cap)) => Some((ms(base).min(ms(cap)), ms(cap))),
                _ => None,
            },
            timeout: row.timeout_ms.map(ms),
            priority_boost: row.priority_boost.map_or(0, |b| {
                b.clamp(-i64::from(MAX_BOOST), i64::from(MAX_BOOST)) as i32
            }),
        }
    }

    /// Whether it changes nothing.
    pub(crate) fn is_none(&self) -> bool {
        *self == Overrides::default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn absurd_values_are_refused_with_the_range() {
        let refused = |fields: PolicyFields, says: &str| {
            let error = fields.check("payments").unwrap_err().to_string();
            assert!(error.contains(says), "{error}");
        };
        refused(
            PolicyFields {
                max_attempts: Some(Some(0)),
                ..PolicyFields::default()
            },
            "between 1 and 2147483647, not 0",
        );
        refused(
            PolicyFields {
                concurrency: Some(Some(0)),
                ..PolicyFields::default()
            },
            "between 1 and 100000",
        );
        refused(
            PolicyFields {
                backoff: Some(Some((Duration::from_secs(10), Duration::from_secs(1)))),
                ..PolicyFields::default()
            },
            "no longer than the cap",
        );
        refused(
            PolicyFields {
                timeout: Some(Some(Duration::ZERO)),
                ..PolicyFields::default()
            },
            "between 1ms and a year",
        );
        refused(
            PolicyFields {
                priority_boost: Some(Some(MAX_BOOST + 1)),
                ..PolicyFields::default()
            },
            "priority_boost",
        );
        assert!(PolicyFields::default().check(" ").is_err());
        PolicyFields::reset().check("payments").unwrap();
    }

    #[test]
    fn a_change_writes_only_what_it_sets() {
        let fields = PolicyFields {
            paused: Some(Some(true)),
            timeout: Some(None),
            ..PolicyFields::default()
        };
        assert_eq!(
            fields.columns(),
            vec![("paused", Some(1)), ("timeout_ms", None)]
        );
        assert_eq!(PolicyFields::reset().columns().len(), 9);
    }
}

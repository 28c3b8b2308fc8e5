//! [`Runtime::health`]: whether this instance can do its work. The store answers a cheap
//! statement (the database's clock, as the clock part reads it) within a short timeout;
//! every background part is alive and was active within a few of its intervals (see
//! `pulse.rs`); the oldest due request waiting to run is younger than
//! [`Settings::health_backlog_threshold`](crate::Settings::health_backlog_threshold); and
//! the oldest outcome waiting to be written is younger than the bound on one statement
//! ([`statement_bound`](crate::statement_bound) of the lease).

use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use serde::Serialize;

use crate::runtime::Runtime;

/// How long each statement of a health check may take before the store counts as
/// unreachable.
pub const HEALTH_PROBE_TIMEOUT: Duration = Duration::from_secs(2);

/// The overall verdict of a [`Health`] report.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum HealthStatus {
    /// Everything checked is fine.
    Ok,
    /// The instance works, but the backlog is older than the threshold: requests wait
    /// longer than they should (too few workers, or a paused executor); or an outcome
    /// has waited longer than one statement may take to be written (its writes get no
    /// answer, or wait for locks: its lease, and so the body's single run, is at risk).
    /// Still ready.
    Degraded,
    /// The instance cannot do its work: it was shut down, the store does not answer, or a
    /// background part is dead or stuck. Not ready.
    Down,
}

/// What [`Runtime::health`] found. Serializes to the JSON the console's `/health` route
/// returns.
///
/// ```no_run
/// # async fn demo(rt: async_exec::Runtime) {
/// let health = rt.health().await;
/// if !health.is_ready() {
///     eprintln!("{}", serde_json::to_string_pretty(&health).unwrap());
/// }
/// # }
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[non_exhaustive]
pub struct Health {
    /// The verdict: see [`HealthStatus`].
    pub status: HealthStatus,
    /// The application this runtime runs records of.
    pub application: String,
    /// This instance's name (as in `lease_owner`).
    pub instance: String,
    /// Whether the runtime was shut down (or aborted).
    pub shut_down: bool,
    /// Whether the store answers.
    pub store: StoreHealth,
    /// Each background part of this instance.
    pub parts: Vec<PartHealth>,
    /// The oldest request waiting to run.
    pub backlog: BacklogHealth,
    /// The oldest outcome waiting to be written.
    pub outcomes: OutcomesHealth,
}

/// The oldest outcome of a body that ran here and is not written yet (queued for the
/// completer, or being written), against the bound on one statement.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[non_exhaustive]
pub struct OutcomesHealth {
    /// How long the oldest unwritten outcome has waited, in milliseconds; `None` when
    /// none waits.
    pub oldest_unwritten_ms: Option<u64>,
    /// The threshold, in milliseconds: [`statement_bound`](crate::statement_bound) of the
    /// lease (for SQLite too, whose writes wait only for its lock).
    pub threshold_ms: u64,
    /// The oldest unwritten outcome is older than the threshold.
    pub over_threshold: bool,
}

/// Whether the store answered a cheap statement within [`HEALTH_PROBE_TIMEOUT`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[non_exhaustive]
pub struct StoreHealth {
    /// It answered.
    pub reachable: bool,
    /// How long it took to answer, in milliseconds.
    pub round_trip_ms: Option<u64>,
    /// Why it did not.
    pub error: Option<String>,
}

/// One background part (completer, clock, presence, control, producer, retrier,
/// compensator, retention, heartbeat, queue sampler, flow history). Parts that restart after a
/// panic stay alive.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[non_exhaustive]
pub struct PartHealth {
    /// The part's name.
    pub name: String,
    /// Its task is running.
    pub alive: bool,
    /// It was not active for several of its intervals: it is stuck.
    pub stale: bool,
    /// Milliseconds since it was last active (woke up to do something).
    pub last_active_ms_ago: u64,
    /// How often it is expected to be active, in milliseconds; `None` for a part that
    /// waits for work (the completer, the producer), which may be idle for ever.
    pub interval_ms: Option<u64>,
}

/// The oldest request of the application due to run and waiting (`init` or `failed`),
/// against [`Settings::health_backlog_threshold`](crate::Settings::health_backlog_threshold).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[non_exhaustive]
pub struct BacklogHealth {
    /// Whether the store could be asked (else the age is unknown).
    pub checked: bool,
    /// How long the oldest waiting request has been due, in milliseconds; `None` when
    /// nothing waits.
    pub oldest_due_age_ms: Option<u64>,
    /// The threshold, in milliseconds.
    pub threshold_ms: u64,
    /// The oldest waiting request is older than the threshold.
    pub over_threshold: bool,
}

impl Health {
    /// Whether the instance can do its work: the status is not [`HealthStatus::Down`]
    /// (a backlog over its threshold is [`HealthStatus::Degraded`], still ready).
    pub fn is_ready(&self) -> bool {
        self.status != HealthStatus::Down
    }

    /// The verdict of the checks.
    fn verdict(&mut self) {
        let parts_fine = self.parts.iter().all(|p| p.alive && !p.stale);
        self.status = if self.shut_down || !self.store.reachable || !parts_fine {
            HealthStatus::Down
        } else if self.backlog.over_threshold || self.outcomes.over_threshold {
            HealthStatus::Degraded
        } else {
            HealthStatus::Ok
        };
    }
}

fn millis(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

impl Runtime {
    /// Checks this instance: the store answers within [`HEALTH_PROBE_TIMEOUT`], every
    /// background part is alive and not stuck, and the oldest due waiting request is
    /// younger than `health_backlog_threshold`. A runtime that was shut down is
    /// [`HealthStatus::Down`]. Never fails: what could not be checked is reported.
    ///
    /// ```no_run
    /// # async fn demo(rt: async_exec::Runtime) {
    /// let health = rt.health().await;
    /// println!("{:?}: store reachable {}", health.status, health.store.reachable);
    /// for part in health.parts.iter().filter(|p| p.stale) {
    ///     eprintln!("{} has not been active for {} ms", part.name, part.last_active_ms_ago);
    /// }
    /// # }
    /// ```
    pub async fn health(&self) -> Health {
        let inner = &self.inner;
        let began = Instant::now();
        let probe = tokio::time::timeout(HEALTH_PROBE_TIMEOUT, inner.store.db_now_ms()).await;
        let (store, now) = match probe {
            Ok(Ok(now)) => (
                StoreHealth {
                    reachable: true,
                    round_trip_ms: Some(millis(began.elapsed())),
                    error: None,
                },
                Some(now),
            ),
            Ok(Err(error)) => (unreachable(error.to_string()), None),
            Err(_) => (
                unreachable(format!(
                    "no answer within {HEALTH_PROBE_TIMEOUT:?}; is the database up and reachable?"
                )),
                None,
            ),
        };
        let threshold = inner.settings.health_backlog_threshold;
        let mut backlog = BacklogHealth {
            checked: false,
            oldest_due_age_ms: None,
            threshold_ms: millis(threshold),
            over_threshold: false,
        };
        if let Some(now) = now {
            let oldest = tokio::time::timeout(
                HEALTH_PROBE_TIMEOUT,
                inner.store.ops().request_oldest_waiting(&inner.app, now),
            )
            .await;
            if let Ok(Ok(oldest)) = oldest {
                backlog.checked = true;
                backlog.oldest_due_age_ms = oldest.map(|due| now.saturating_sub(due).max(0) as u64);
                backlog.over_threshold = backlog
                    .oldest_due_age_ms
                    .is_some_and(|age| age > backlog.threshold_ms);
            }
        }
        let outcomes = {
            let threshold = millis(crate::store::bounded::statement_bound(inner.settings.lease));
            let oldest = inner.completer.oldest_unwritten().map(millis);
            OutcomesHealth {
                oldest_unwritten_ms: oldest,
                threshold_ms: threshold,
                over_threshold: oldest.is_some_and(|age| age > threshold),
            }
        };
        let parts = inner
            .pulses
            .snapshot()
            .into_iter()
            .map(|p| PartHealth {
                name: p.name.to_string(),
                alive: p.alive,
                stale: p.stale,
                last_active_ms_ago: millis(p.last_active_ago),
                interval_ms: p.interval.map(millis),
            })
            .collect();
        let mut health = Health {
            status: HealthStatus::Down,
            application: inner.app.to_string(),
            instance: inner.owner.to_string(),
            shut_down: inner.closed.load(Ordering::Acquire),
            store,
            parts,
            backlog,
            outcomes,
        };
        health.verdict();
        health
    }
}

fn unreachable(error: String) -> StoreHealth {
    StoreHealth {
        reachable: false,
        round_trip_ms: None,
        error: Some(error),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn healthy() -> Health {
        Health {
            status: HealthStatus::Down,
            application: "a".into(),
            instance: "i".into(),
            shut_down: false,
            store: StoreHealth {
                reachable: true,
                round_trip_ms: Some(1),
                error: None,
            },
            parts: vec![PartHealth {
                name: "completer".into(),
                alive: true,
                stale: false,
                last_active_ms_ago: 0,
                interval_ms: None,
            }],
            backlog: BacklogHealth {
                checked: true,
                oldest_due_age_ms: None,
                threshold_ms: 1000,
                over_threshold: false,
            },
            outcomes: OutcomesHealth {
                oldest_unwritten_ms: Some(10),
                threshold_ms: 1000,
                over_threshold: false,
            },
        }
    }

    #[test]
    fn each_failed_check_decides_the_verdict() {
        let verdict = |change: fn(&mut Health)| {
            let mut health = healthy();
            change(&mut health);
            health.verdict();
            (health.status, health.is_ready())
        };
        assert_eq!(verdict(|_| {}), (HealthStatus::Ok, true));
        assert_eq!(
            verdict(|h| h.backlog.over_threshold = true),
            (HealthStatus::Degraded, true)
        );
        assert_eq!(
            verdict(|h| h.outcomes.over_threshold = true),
            (HealthStatus::Degraded, true)
        );
        assert_eq!(verdict(|h| h.shut_down = true), (HealthStatus::Down, false));
        assert_eq!(
            verdict(|h| h.store.reachable = false),
            (HealthStatus::Down, false)
        );
        assert_eq!(
            verdict(|h| h.parts[0].alive = false),
            (HealthStatus::Down, false)
        );
        assert_eq!(
            verdict(|h| h.parts[0].stale = true),
            (HealthStatus::Down, false)
        );
    }
}

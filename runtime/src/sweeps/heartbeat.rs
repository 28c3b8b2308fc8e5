//! The heartbeat: renews the leases of this instance's running records, so that only a
//! dead or stuck instance loses them. A body that overran its timeout without yielding
//! (a blocking call) is no longer renewed: its record goes to another worker.
//!
//! It keeps its own pace, not the sweeps' backoff: a failed renewal is tried again within
//! a quarter of the interval; no statement waits past the earliest lease it would renew;
//! renewals run on a connection of their own. A lease that could not be kept (it ran out
//! before a renewal got through, or the record was taken over) is lost: the body's
//! [`Context`](crate::Context) sees it as cancelled; a record taken over is not renewed
//! again and the late outcome of its body here is fenced.

use std::sync::Arc;
use std::time::Duration;

use tokio_util::sync::CancellationToken;

use crate::base::error::Result;
use crate::operate::metrics::Sweep;
use crate::store::LeaseKeeper;
use crate::work::executor::ExecutorPool;

/// Renews leases. Get one with [`Runtime::heartbeat`](crate::Runtime::heartbeat).
#[derive(Debug, Clone)]
pub struct Heartbeat {
    pub(crate) keeper: Arc<dyn LeaseKeeper>,
    pub(crate) pool: Arc<ExecutorPool>,
    pub(crate) owner: Arc<str>,
    pub(crate) clock: Arc<crate::sweeps::clock::Clock>,
    pub(crate) lease: Duration,
    pub(crate) interval: Duration,
}

/// What one heartbeat did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct HeartbeatReport {
    /// Leases renewed.
    pub renewed: u64,
    /// Leases lost: they ended before a renewal got through, or another instance holds
    /// the record now. Their bodies are told (their `Context` is cancelled).
    pub lost: u64,
}

/// The shortest wait before a failed renewal is tried again.
const RETRY_MIN: Duration = Duration::from_millis(10);
/// The longest wait before a failed renewal is tried again.
const RETRY_MAX: Duration = Duration::from_secs(1);

impl Heartbeat {
    /// Extends the lease of every running record of this instance by `lease`. (On
    /// PostgreSQL a record locked at that moment, its outcome being written, is skipped.)
    /// Gives up when the earliest of those leases that has not ended yet ends.
    /// Counted: `async_exec_leases_total{result}` (`renewed`, `lost`), and a failed round
    /// in `async_exec_sweep_failures_total{sweep="heartbeat"}`.
    pub async fn run_once(&self) -> Result<HeartbeatReport> {
        crate::operate::metrics::round(Sweep::Heartbeat, self.beat().await)
    }

    /// [`Heartbeat::run_once`], but for counting a failed round.
    async fn beat(&self) -> Result<HeartbeatReport> {
        let sent = self.clock.now_ms();
        let mut report = HeartbeatReport {
            lost: self.report_lost(
                self.pool.lapse(sent),
                "ran out before a renewal got through: their bodies are told to stop \
                 (`Context::is_cancelled`); another instance may run them now",
            ),
            ..HeartbeatReport::default()
        };
        let (held, earliest) = self.pool.renewable(sent);
        if held.is_empty() {
            return Ok(report);
        }
        // No renewal waits past the end of a lease it would keep; when every lease ended
        // already (by this clock), it may take a heartbeat interval.
        let patience = earliest.map_or(self.interval, |earliest| {
            Duration::from_millis(earliest.saturating_sub(sent).max(1) as u64)
        });
        let lease_ms = self.lease.as_millis() as i64;
        // This instance's estimate of the new lease end: from before the statement was
        // sent, so never later than the database's.
        let until = sent + lease_ms;
        let renewal = self
            .keeper
            .renew(&self.owner, &held, lease_ms, patience)
            .await?;
        report.renewed = renewal.renewed.len() as u64;
        crate::operate::metrics::leases("renewed", report.renewed);
        report.lost += self.report_lost(
            self.pool.renewed(&held, &renewal, until),
            "are held by another instance now (or the records are gone): their bodies are \
             told to stop (`Context::is_cancelled`) and their outcomes will not be written",
        );
        Ok(report)
    }

    fn report_lost(&self, lost: Vec<i64>, why: &str) -> u64 {
        crate::operate::metrics::leases("lost", lost.len() as u64);
        if !lost.is_empty() {
            crate::log::error!(
                requests = ?lost,
                "the leases of {} request(s) {why}",
                lost.len()
            );
        }
        lost.len() as u64
    }

    /// Beats every `interval` until `stop`; after a failure, again within a quarter of it;
    /// wakes when a lease is due to end, to tell its body.
    pub(crate) async fn run(self, stop: CancellationToken) {
        let retry = (self.interval / 4).clamp(RETRY_MIN, RETRY_MAX);
        let mut failures = 0u32;
        loop {
            let wait = match self.run_once().await {
                Ok(_) => {
                    if failures > 0 {
                        crate::log::info!(after_failures = failures, "lease renewals recovered");
                    }
                    failures = 0;
                    self.interval
                }
                Err(error) => {
                    failures += 1;
                    crate::log::warn!(error = %crate::log::escaped(&error), failures, "could not renew leases; trying again in {retry:?}");
                    retry
                }
            };
            let now = self.clock.now_ms();
            let wait = match self.pool.renewable(now).1 {
                Some(earliest) if earliest > now => {
                    wait.min(Duration::from_millis((earliest - now) as u64))
                }
                _ => wait,
            };
            tokio::select! {
                _ = stop.cancelled() => return,
                _ = tokio::time::sleep(wait) => {}
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use async_trait::async_trait;
    use std::sync::Mutex;

    /// A store whose renewals take `round_trip`: one asked to give up sooner fails, as a
    /// statement timed out by its patience does.
    #[derive(Debug)]
    struct SlowKeeper {
        round_trip: Duration,
        asked: Mutex<Vec<(Vec<crate::store::Held>, Duration)>>,
    }

    #[async_trait]
    impl LeaseKeeper for SlowKeeper {
        async fn renew(
            &self,
            _owner: &str,
            held: &[crate::store::Held],
            _lease_ms: i64,
            patience: Duration,
        ) -> Result<crate::store::Renewal> {
            self.asked.lock().unwrap().push((held.to_vec(), patience));
            if patience < self.round_trip {
                return Err(crate::Error::NoAnswer(patience));
            }
            Ok(crate::store::Renewal::all(
                held.iter().map(|&(id, _)| id).collect(),
            ))
        }
    }

    /// Found by the long chaos run (MariaDB): after an outage, a record whose lease had
    /// ended by this clock (its body still running, or its outcome not yet written) made
    /// every later renewal give up after 1 ms, so no lease of this instance was renewed
    /// again and other instances rescued live work. A lease that ended no longer limits
    /// how long a renewal may wait; the others are renewed.
    #[tokio::test]
    async fn an_ended_lease_does_not_starve_the_renewal_of_the_others() {
        let clock = Arc::new(crate::sweeps::clock::Clock::new(0));
        let now = clock.now_ms();
        let pool = Arc::new(ExecutorPool::new(4));
        pool.reserve(1, 1, now - 500); // ended while this instance was cut off
        pool.reserve(2, 1, now + 3_000); // a fresh claim
        let keeper = Arc::new(SlowKeeper {
            round_trip: Duration::from_millis(20),
            asked: Mutex::new(Vec::new()),
        });
        let heartbeat = Heartbeat {
            keeper: keeper.clone(),
            pool,
            owner: "a".into(),
            clock,
            lease: Duration::from_secs(3),
            interval: Duration::from_millis(500),
        };
        let report = heartbeat.run_once().await.expect("renewed");
        assert_eq!(report.renewed, 2, "{:?}", keeper.asked.lock().unwrap());
        let asked = keeper.asked.lock().unwrap();
        assert_eq!(asked[0].0, vec![(1, 1), (2, 1)]);
        assert!(asked[0].1 >= Duration::from_millis(2_500), "{asked:?}");
    }
}

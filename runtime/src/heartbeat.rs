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

use crate::error::Result;
use crate::executor::ExecutorPool;
use crate::metrics::Sweep;
use crate::store::LeaseKeeper;

/// Renews leases. Get one with [`Runtime::heartbeat`](crate::Runtime::heartbeat).
#[derive(Debug, Clone)]
pub struct Heartbeat {
    pub(crate) keeper: Arc<dyn LeaseKeeper>,
    pub(crate) pool: Arc<ExecutorPool>,
    pub(crate) owner: Arc<str>,
    pub(crate) clock: Arc<crate::clock::Clock>,
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
    /// Gives up when the earliest of those leases ends.
    /// Counted: `async_exec_leases_total{result}` (`renewed`, `lost`), and a failed round
    /// in `async_exec_sweep_failures_total{sweep="heartbeat"}`.
    pub async fn run_once(&self) -> Result<HeartbeatReport> {
        crate::metrics::round(Sweep::Heartbeat, self.beat().await)
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
        let (ids, earliest) = self.pool.renewable(sent);
        let Some(earliest) = earliest.filter(|_| !ids.is_empty()) else {
            return Ok(report);
        };
        let patience = Duration::from_millis(earliest.saturating_sub(sent).max(1) as u64);
        let lease_ms = self.lease.as_millis() as i64;
        // This instance's estimate of the new lease end: from before the statement was
        // sent, so never later than the database's.
        let until = sent + lease_ms;
        let renewed = self
            .keeper
            .renew(&self.owner, &ids, lease_ms, patience)
            .await?;
        report.renewed = renewed.len() as u64;
        crate::metrics::leases("renewed", report.renewed);
        report.lost += self.report_lost(
            self.pool.renewed(&ids, &renewed, until),
            "are held by another instance now (or the records are gone): their bodies are \
             told to stop (`Context::is_cancelled`) and their outcomes will not be written",
        );
        Ok(report)
    }

    fn report_lost(&self, lost: Vec<i64>, why: &str) -> u64 {
        crate::metrics::leases("lost", lost.len() as u64);
        if !lost.is_empty() {
            tracing::error!(
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
                        tracing::info!(after_failures = failures, "lease renewals recovered");
                    }
                    failures = 0;
                    self.interval
                }
                Err(error) => {
                    failures += 1;
                    tracing::warn!(%error, failures, "could not renew leases; trying again in {retry:?}");
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

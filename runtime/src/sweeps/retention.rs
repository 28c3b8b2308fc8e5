//! The retention sweep: finished records (`success`, `cancelled`, and `dead`) last changed
//! longer ago than the `retention` setting are deleted with their attempt logs, and so
//! are older attempt logs whose request is gone (deleted on success, or by an operator).
//! Records that may still run (`init`, `running`, `failed`) and their logs are kept,
//! whatever their age. Audit rows (`async_audit`) of the application older than the
//! `audit_retention` setting are deleted too, oldest first, in batches.
//!
//! It deletes through the purge path ([`purge_all`](crate::sweeps::purge::purge_all), the store's
//! `request_purge` and `log_purge_orphans`), in batches that skip rows another
//! transaction holds: instances may run it at the same time.
//!
//! It holds the store, the application, the database's clock and its [`RetentionConfig`].

use std::sync::Arc;
use std::time::Duration;

use crate::base::error::Result;
use crate::base::settings::Settings;
use crate::store::bounded::bounded_op;
use crate::store::Store;
use crate::sweeps::clock::Clock;
use crate::sweeps::purge::{purge_all, Purge, MAX_PURGE_BATCH};

/// How often the retention sweep runs when `retention` is set.
pub(crate) const RETENTION_INTERVAL: Duration = Duration::from_secs(300);

/// The settings the retention sweep reads, taken from [`Settings`] (validated there).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct RetentionConfig {
    /// How long finished records and old logs are kept; `None`: forever.
    pub(crate) retention: Option<Duration>,
    /// How long audit rows are kept; `None`: forever.
    pub(crate) audit_retention: Option<Duration>,
    /// Rows deleted per transaction.
    pub(crate) batch: i64,
}

impl RetentionConfig {
    /// The retention sweep's settings among the runtime's.
    pub(crate) fn from_settings(settings: &Settings) -> Self {
        RetentionConfig {
            retention: settings.retention,
            audit_retention: settings.audit_retention,
            batch: MAX_PURGE_BATCH,
        }
    }
}

/// Deletes finished records and attempt logs older than
/// [`Settings::retention`](crate::Settings::retention), and audit rows older than
/// [`Settings::audit_retention`](crate::Settings::audit_retention). Get one with
/// [`Runtime::retention`](crate::Runtime::retention); an instance that runs workers runs it
/// every 5 minutes by itself.
///
/// ```no_run
/// # async fn demo(rt: async_exec::Runtime) -> async_exec::Result<()> {
/// let report = rt.retention().run_once().await?;
/// println!(
///     "{} requests, {} attempt logs and {} audit rows pruned",
///     report.requests, report.attempt_logs, report.audit_rows
/// );
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct Retention {
    pub(crate) store: Arc<dyn Store>,
    pub(crate) application: Arc<str>,
    pub(crate) clock: Arc<Clock>,
    pub(crate) config: RetentionConfig,
}

impl std::fmt::Debug for Retention {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Retention")
            .field("application", &self.application)
            .field("config", &self.config)
            .finish_non_exhaustive()
    }
}

/// What one retention sweep pruned.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize)]
#[non_exhaustive]
pub struct RetentionReport {
    /// Records (`async_req` rows) deleted.
    pub requests: u64,
    /// Attempt logs (`async_log` rows) deleted: those of the records deleted, and old ones
    /// whose request was gone already.
    pub attempt_logs: u64,
    /// Audit rows (`async_audit`) deleted.
    pub audit_rows: u64,
    /// Transactions it took (0 when retention is off).
    pub batches: u64,
}

impl Retention {
    /// The settings it runs with.
    fn purge(&self) -> Option<Purge> {
        let retention = self.config.retention?;
        Some(
            Purge::older_than(retention)
                .dead(true)
                .batch(self.config.batch),
        )
    }

    /// Deletes, batch by batch, every finished record and old attempt log past the
    /// retention, and every audit row past the audit retention, as the database's clock
    /// tells it. Does nothing for a retention that is `None`. Counts what it deleted in
    /// `async_exec_retention_pruned_total`, and a failed round in
    /// `async_exec_sweep_failures_total{sweep="retention"}`.
    pub async fn run_once(&self) -> Result<RetentionReport> {
        let mut report = RetentionReport::default();
        let now = self.clock.now_ms();
        if let Some(purge) = self.purge() {
            let purged = purge_all(&*self.store, &self.application, now, purge).await;
            let purged =
                crate::operate::metrics::round(crate::operate::metrics::Sweep::Retention, purged)?;
            (report.requests, report.attempt_logs, report.batches) =
                (purged.requests, purged.attempt_logs, purged.batches);
        }
        if let Some(keep) = self.config.audit_retention {
            let before = now.saturating_sub(i64::try_from(keep.as_millis()).unwrap_or(i64::MAX));
            let pruned = self.prune_audit(before, &mut report.batches).await;
            report.audit_rows =
                crate::operate::metrics::round(crate::operate::metrics::Sweep::Retention, pruned)?;
        }
        crate::operate::metrics::retention_pruned(report.requests, report.attempt_logs);
        crate::operate::metrics::audit_pruned(report.audit_rows);
        if report.requests + report.attempt_logs + report.audit_rows > 0 {
            crate::log::info!(
                application = %crate::log::escaped(&self.application),
                requests = report.requests,
                attempt_logs = report.attempt_logs,
                audit_rows = report.audit_rows,
                "retention: pruned finished requests, old attempt logs and audit rows"
            );
        }
        Ok(report)
    }

    /// Deletes the application's audit rows written before `before`, a batch at a time
    /// (each statement bounded as the other sweeps' are); how many.
    async fn prune_audit(&self, before: i64, batches: &mut u64) -> Result<u64> {
        let mut pruned = 0;
        loop {
            let batch = self
                .store
                .ops()
                .audit_prune(&self.application, before, self.config.batch);
            let deleted = bounded_op(&*self.store, "audit_prune", batch).await?;
            *batches += 1;
            pruned += deleted;
            if deleted < self.config.batch as u64 {
                return Ok(pruned);
            }
        }
    }
}

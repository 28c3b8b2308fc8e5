//! The retention sweep: finished records (`success`, `cancelled`, and `dead`) last changed
//! longer ago than the `retention` setting are deleted with their attempt logs, and so
//! are older attempt logs whose request is gone (deleted on success, or by an operator).
//! Records that may still run (`init`, `running`, `failed`) and their logs are kept,
//! whatever their age.
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
    /// Rows deleted per transaction.
    pub(crate) batch: i64,
}

impl RetentionConfig {
    /// The retention sweep's settings among the runtime's.
    pub(crate) fn from_settings(settings: &Settings) -> Self {
        RetentionConfig {
            retention: settings.retention,
            batch: MAX_PURGE_BATCH,
        }
    }
}

/// Deletes finished records and attempt logs older than
/// [`Settings::retention`](crate::Settings::retention). Get one with
/// [`Runtime::retention`](crate::Runtime::retention); an instance that runs workers runs it
/// every 5 minutes by itself.
///
/// ```no_run
/// # async fn demo(rt: async_exec::Runtime) -> async_exec::Result<()> {
/// let report = rt.retention().run_once().await?;
/// println!("{} requests and {} attempt logs pruned", report.requests, report.attempt_logs);
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
    /// retention, as the database's clock tells it. Does nothing when `retention` is
    /// `None`. Counts what it deleted in `async_exec_retention_pruned_total`, and a failed
    /// round in `async_exec_sweep_failures_total{sweep="retention"}`.
    pub async fn run_once(&self) -> Result<RetentionReport> {
        let Some(purge) = self.purge() else {
            return Ok(RetentionReport::default());
        };
        let purged = purge_all(&*self.store, &self.application, self.clock.now_ms(), purge).await;
        let purged =
            crate::operate::metrics::round(crate::operate::metrics::Sweep::Retention, purged)?;
        crate::operate::metrics::retention_pruned(purged.requests, purged.attempt_logs);
        if purged.requests + purged.attempt_logs > 0 {
            crate::log::info!(
                application = %crate::log::escaped(&self.application),
                requests = purged.requests,
                attempt_logs = purged.attempt_logs,
                "retention: pruned finished requests and old attempt logs"
            );
        }
        Ok(RetentionReport {
            requests: purged.requests,
            attempt_logs: purged.attempt_logs,
            batches: purged.batches,
        })
    }
}

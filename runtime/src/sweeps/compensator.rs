//! The compensation sweep: `init` records committed but never dispatched, such as those
//! of a process that crashed between its commit and its dispatch, or that met a full
//! channel, once they are older than `stale_after`. It also forgets idempotency keys older
//! than `key_retention`.
//!
//! It holds the [`Claimer`] it claims and starts records with, the store, application and
//! clock it expires keys with, and its [`CompensatorConfig`].

use std::sync::Arc;
use std::time::Duration;

use crate::base::error::Result;
use crate::base::settings::Settings;
use crate::operate::metrics::Sweep;
use crate::store::{DueKind, Store, KEY_SWEEP_BATCH};
use crate::sweeps::clock::Clock;
use crate::work::claimer::Claimer;

/// The settings the compensator reads, taken from [`Settings`] (validated there).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct CompensatorConfig {
    /// The most records claimed per run (`compensate_batch`).
    pub(crate) batch: i64,
    /// How long past its due time an `init` record counts as never dispatched.
    pub(crate) stale_after: Duration,
    /// How long one run may go on deleting expired keys while batches come back full
    /// (half of `compensate_interval`).
    pub(crate) key_budget: Duration,
}

impl CompensatorConfig {
    /// The compensator's settings among the runtime's.
    pub(crate) fn from_settings(settings: &Settings) -> Self {
        CompensatorConfig {
            batch: settings.compensate_batch,
            stale_after: settings.stale_after,
            key_budget: settings.compensate_interval / 2,
        }
    }
}

/// Runs stale `init` records. Get one with [`Runtime::compensator`](crate::Runtime::compensator).
///
/// ```no_run
/// # async fn demo(rt: async_exec::Runtime) -> async_exec::Result<()> {
/// let report = rt.compensator().run_once().await?;
/// println!("{} started, {} keys expired", report.started, report.keys_expired);
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct Compensator {
    pub(crate) claimer: Arc<Claimer>,
    pub(crate) store: Arc<dyn Store>,
    pub(crate) application: Arc<str>,
    pub(crate) clock: Arc<Clock>,
    pub(crate) config: CompensatorConfig,
}

impl std::fmt::Debug for Compensator {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Compensator")
            .field("application", &self.application)
            .field("config", &self.config)
            .finish_non_exhaustive()
    }
}

/// What one compensation sweep did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct CompensateReport {
    /// Records claimed and started.
    pub started: usize,
    /// Expired idempotency keys deleted: batches of 1,000 while they come back full, for
    /// up to half of `compensate_interval`.
    pub keys_expired: u64,
}

impl Compensator {
    /// Deletes idempotency keys whose `key_retention` has passed (1,000 at a time, again
    /// while a batch comes back full, for up to half of `compensate_interval`), then
    /// claims `init` records whose due time is more than `stale_after` ago (at most
    /// `compensate_batch`, no more than there are free workers) and starts them.
    ///
    /// Counted: `async_exec_sweep_records_total{sweep="keys",result="expired"}` and
    /// `{sweep="compensator",result="claimed"}`, and a failed round of either in
    /// `async_exec_sweep_failures_total{sweep}`.
    pub async fn run_once(&self) -> Result<CompensateReport> {
        let expired = crate::sweeps::sweep::while_full(
            KEY_SWEEP_BATCH as u64,
            self.config.key_budget,
            || {
                self.store
                    .key_expire(&self.application, self.clock.now_ms(), KEY_SWEEP_BATCH)
            },
        )
        .await;
        let keys_expired = crate::operate::metrics::round(Sweep::Keys, expired)?;
        crate::operate::metrics::swept(Sweep::Keys, "expired", keys_expired);
        let older_than = self.config.stale_after.as_millis() as i64;
        let kind = DueKind::Stale { older_than };
        let claimed = self
            .claimer
            .claim_and_start(kind, self.config.batch, false)
            .await;
        let started = crate::operate::metrics::round(Sweep::Compensator, claimed)?;
        crate::operate::metrics::swept(Sweep::Compensator, "claimed", started as u64);
        Ok(CompensateReport {
            started,
            keys_expired,
        })
    }
}

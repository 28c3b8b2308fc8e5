//! The retry sweep: runs `failed` records whose backoff has passed, and delayed
//! (`.delay(..)`) or released `init` records whose time has come.
//!
//! It holds the [`Claimer`] it claims and starts them with, and its [`RetrierConfig`].

use std::sync::Arc;

use crate::claimer::Claimer;
use crate::error::Result;
use crate::settings::Settings;
use crate::store::DueKind;

/// The settings the retrier reads, taken from [`Settings`] (validated there).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct RetrierConfig {
    /// The most records claimed per run (`retry_batch`).
    pub(crate) batch: i64,
}

impl RetrierConfig {
    /// The retrier's settings among the runtime's.
    pub(crate) fn from_settings(settings: &Settings) -> Self {
        RetrierConfig {
            batch: settings.retry_batch,
        }
    }
}

/// Runs due retries. Get one with [`Runtime::retrier`](crate::Runtime::retrier).
///
/// ```no_run
/// # async fn demo(rt: async_exec_runtime::Runtime) -> async_exec_runtime::Result<()> {
/// let started = rt.retrier().run_once().await?.started;
/// rt.wait_idle().await; // the retries it started have run
/// # Ok(()) }
/// ```
#[derive(Debug, Clone)]
pub struct Retrier {
    pub(crate) claimer: Arc<Claimer>,
    pub(crate) config: RetrierConfig,
}

/// What one retry sweep did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct RetryReport {
    /// Records claimed and started.
    pub started: usize,
}

impl Retrier {
    /// Claims due records (at most `retry_batch`, and no more than there are free workers)
    /// and starts them. Does not wait for them to finish: see
    /// [`Runtime::wait_idle`](crate::Runtime::wait_idle).
    pub async fn run_once(&self) -> Result<RetryReport> {
        let started = self
            .claimer
            .claim_and_start(DueKind::Scheduled, self.config.batch)
            .await?;
        Ok(RetryReport { started })
    }
}

//! The retry sweep: runs `failed` records whose backoff has passed, and delayed
//! (`.delay(..)`) or released `init` records whose time has come.

use std::sync::Arc;

use crate::error::Result;
use crate::runtime::Inner;
use crate::store::DueKind;

/// Runs due retries. Get one with [`Runtime::retrier`](crate::Runtime::retrier).
#[derive(Debug, Clone)]
pub struct Retrier {
    pub(crate) inner: Arc<Inner>,
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
            .inner
            .claimer
            .claim_and_start(DueKind::Scheduled, self.inner.settings.retry_batch)
            .await?;
        Ok(RetryReport { started })
    }
}

//! The compensation sweep: `init` records committed but never dispatched, such as those
//! of a process that crashed between its commit and its dispatch, or that met a full
//! channel, once they are older than `stale_after`.

use std::sync::Arc;

use crate::error::Result;
use crate::runtime::Inner;
use crate::store::DueKind;
use crate::sweep::claim_and_start;

/// Runs stale `init` records. Get one with [`Runtime::compensator`](crate::Runtime::compensator).
#[derive(Debug, Clone)]
pub struct Compensator {
    pub(crate) inner: Arc<Inner>,
}

/// What one compensation sweep did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct CompensateReport {
    /// Records claimed and started.
    pub started: usize,
}

impl Compensator {
    /// Claims `init` records whose due time is more than `stale_after` ago (at most
    /// `compensate_batch`, no more than there are free workers) and starts them.
    pub async fn run_once(&self) -> Result<CompensateReport> {
        let older_than = self.inner.settings.stale_after.as_millis() as i64;
        let kind = DueKind::Stale { older_than };
        let started =
            claim_and_start(&self.inner, kind, self.inner.settings.compensate_batch).await?;
        Ok(CompensateReport { started })
    }
}

//! The compensation sweep: `init` records committed but never dispatched, such as those
//! of a process that crashed between its commit and its dispatch, or that met a full
//! channel, once they are older than `stale_after`. It also forgets idempotency keys older
//! than `key_retention`.

use std::sync::Arc;

use crate::error::Result;

use crate::runtime::Inner;
use crate::store::{DueKind, KEY_SWEEP_BATCH};

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
    /// Expired idempotency keys deleted (at most 1,000 per sweep).
    pub keys_expired: u64,
}

impl Compensator {
    /// Deletes idempotency keys whose `key_retention` has passed (at most 1,000), then
    /// claims `init` records whose due time is more than `stale_after` ago (at most
    /// `compensate_batch`, no more than there are free workers) and starts them.
    pub async fn run_once(&self) -> Result<CompensateReport> {
        let inner = &self.inner;
        let keys_expired = inner
            .store
            .key_expire(&inner.app, inner.now_ms(), KEY_SWEEP_BATCH)
            .await?;
        let older_than = inner.settings.stale_after.as_millis() as i64;
        let kind = DueKind::Stale { older_than };
        let started = inner
            .claimer
            .claim_and_start(kind, inner.settings.compensate_batch)
            .await?;
        Ok(CompensateReport {
            started,
            keys_expired,
        })
    }
}

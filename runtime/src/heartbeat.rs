//! The heartbeat: renews the leases of this instance's running records, so that only a
//! dead or stuck instance loses them. A body that overran its timeout without yielding
//! (a blocking call) is no longer renewed: its record goes to another worker.

use std::sync::Arc;

use crate::error::Result;
use crate::record::now_ms;
use crate::runtime::Inner;

/// Renews leases. Get one with [`Runtime::heartbeat`](crate::Runtime::heartbeat).
#[derive(Debug, Clone)]
pub struct Heartbeat {
    pub(crate) inner: Arc<Inner>,
}

/// What one heartbeat did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct HeartbeatReport {
    /// Leases renewed.
    pub renewed: u64,
}

impl Heartbeat {
    /// Extends the lease of every running record of this instance by `lease`. (On
    /// PostgreSQL a record locked at that moment, its outcome being written, is skipped;
    /// if it is still running at the next beat, that one renews it.)
    pub async fn run_once(&self) -> Result<HeartbeatReport> {
        let inner = &self.inner;
        let now = now_ms();
        let ids = inner.pool.renewable(now);
        if ids.is_empty() {
            return Ok(HeartbeatReport::default());
        }
        let renewed = inner
            .store
            .lease_renew(&inner.owner, &ids, now + inner.lease_ms())
            .await?;
        Ok(HeartbeatReport { renewed })
    }
}

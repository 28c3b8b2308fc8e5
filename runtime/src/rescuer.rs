//! The rescuer: `running` records whose lease expired (their instance died, hung, or lost
//! the database for longer than a lease) go back to `failed`, to be retried at once, or to
//! `dead` when that was their last attempt. Each gets an `async_log` row `lease_expired`.

use std::sync::Arc;

use crate::error::Result;
use crate::record::RequestId;
use crate::runtime::Inner;

/// Recovers expired leases. Get one with [`Runtime::rescuer`](crate::Runtime::rescuer).
#[derive(Debug, Clone)]
pub struct Rescuer {
    pub(crate) inner: Arc<Inner>,
}

/// What one rescue did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RescueReport {
    /// Records put back to `failed`, due now.
    pub retried: Vec<RequestId>,
    /// Records whose lost attempt was their last: `dead`.
    pub dead: Vec<RequestId>,
}

impl Rescuer {
    /// Rescues up to `compensate_batch` records whose lease has expired.
    pub async fn run_once(&self) -> Result<RescueReport> {
        let inner = &self.inner;
        let rescued = inner
            .store
            .request_rescue(
                &inner.app,
                inner.registry.names(),
                inner.now_ms(),
                inner.settings.compensate_batch,
            )
            .await?;
        if !rescued.retried.is_empty() {
            tracing::warn!(retried = ?rescued.retried, "rescued requests whose lease expired; they run again");
        }
        if !rescued.dead.is_empty() {
            tracing::error!(dead = ?rescued.dead,
                "requests whose lease expired on their last attempt are dead; replay them with `retry_now`");
        }
        Ok(RescueReport {
            retried: rescued.retried,
            dead: rescued.dead,
        })
    }
}

//! The rescuer: `running` records whose lease expired (their instance died, hung, or lost
//! the database for longer than a lease) go back to `failed`, to be retried at once, or to
//! `dead` when that was their last attempt. Each gets an `async_log` row `lease_expired`.
//! Records of executors this binary does not know are left to an instance that knows them.
//!
//! It holds the store, the application and the executors it rescues for (the registry),
//! the database's clock and its [`RescuerConfig`].

use std::sync::Arc;

use crate::clock::Clock;
use crate::error::Result;
use crate::record::RequestId;
use crate::registry::Registry;
use crate::settings::Settings;
use crate::store::Store;

/// The settings the rescuer reads, taken from [`Settings`] (validated there).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct RescuerConfig {
    /// The most records rescued per run (`compensate_batch`).
    pub(crate) batch: i64,
}

impl RescuerConfig {
    /// The rescuer's settings among the runtime's.
    pub(crate) fn from_settings(settings: &Settings) -> Self {
        RescuerConfig {
            batch: settings.compensate_batch,
        }
    }
}

/// Recovers expired leases. Get one with [`Runtime::rescuer`](crate::Runtime::rescuer).
///
/// ```no_run
/// # async fn demo(rt: async_exec_runtime::Runtime) -> async_exec_runtime::Result<()> {
/// let report = rt.rescuer().run_once().await?;
/// println!("{} back to the queue, {} dead", report.retried.len(), report.dead.len());
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct Rescuer {
    pub(crate) store: Arc<dyn Store>,
    pub(crate) application: Arc<str>,
    pub(crate) registry: Arc<Registry>,
    pub(crate) clock: Arc<Clock>,
    pub(crate) config: RescuerConfig,
}

impl std::fmt::Debug for Rescuer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Rescuer")
            .field("application", &self.application)
            .field("config", &self.config)
            .finish_non_exhaustive()
    }
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
        let rescued = self
            .store
            .request_rescue(
                &self.application,
                self.registry.names(),
                self.clock.now_ms(),
                self.config.batch,
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

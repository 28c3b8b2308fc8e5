//! Stops asked of requests by their records: every [`STOPS_INTERVAL`], the bodies running
//! here whose record was asked to stop (`rt.cancel` of a running request, from any
//! instance, the console or the CLI) or whose deadline passed are told (their
//! [`Context`](crate::Context) is cancelled), and waiting requests whose deadline passed
//! go `dead` ("deadline passed while it waited").
//!
//! It holds the store, the application's and this instance's names, the database's clock
//! and the [`ExecutorPool`] whose bodies it tells. One statement by primary key for the
//! bodies running here (none when nothing runs), one through the index of waiting
//! requests with a deadline for the waiting ones (finished requests are not in it): with
//! neither feature used, both find nothing.

use std::sync::Arc;
use std::time::Duration;

use crate::base::error::Result;
use crate::store::bounded::bounded_op;
use crate::store::Store;
use crate::sweeps::clock::Clock;
use crate::work::pool::ExecutorPool;

/// How often running bodies are checked for a cancel or a passed deadline (what "within
/// about a second" means), and waiting requests for a passed deadline.
pub(crate) const STOPS_INTERVAL: Duration = Duration::from_secs(1);

/// The most waiting requests made `dead` by one statement (the sweep repeats while
/// statements come back full, for up to half its interval).
const EXPIRE_BATCH: i64 = 1_000;

/// What one round did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct StopsReport {
    /// Running bodies told to stop.
    pub(crate) told: u64,
    /// Waiting requests made `dead` because their deadline passed.
    pub(crate) expired: u64,
}

/// Tells running bodies to stop and ends waiting requests past their deadline. See the
/// [module docs](self).
#[derive(Debug, Clone)]
pub(crate) struct Stops {
    pub(crate) store: Arc<dyn Store>,
    pub(crate) application: Arc<str>,
    pub(crate) owner: Arc<str>,
    pub(crate) clock: Arc<Clock>,
    pub(crate) pool: Arc<ExecutorPool>,
}

impl Stops {
    /// One round: tells, then expires. A failed round is counted in
    /// `async_exec_sweep_failures_total{sweep="stops"}`.
    pub(crate) async fn run_once(&self) -> Result<StopsReport> {
        crate::operate::metrics::round(crate::operate::metrics::Sweep::Stops, self.round().await)
    }

    async fn round(&self) -> Result<StopsReport> {
        let told = self.tell_running().await?;
        let expired =
            crate::sweeps::sweep::while_full(EXPIRE_BATCH as u64, STOPS_INTERVAL / 2, || async {
                let expire = self.store.ops().request_expire_deadlines(
                    &self.application,
                    self.clock.now_ms(),
                    EXPIRE_BATCH,
                );
                bounded_op(&*self.store, "request_expire_deadlines", expire).await
            })
            .await?;
        crate::operate::metrics::swept(crate::operate::metrics::Sweep::Stops, "told", told);
        crate::operate::metrics::swept(crate::operate::metrics::Sweep::Stops, "expired", expired);
        if expired > 0 {
            crate::log::warn!(
                expired,
                "requests whose deadline passed while they waited are dead (\"deadline passed \
                 while it waited\"); replay them with `retry_now` if they should still run"
            );
        }
        Ok(StopsReport { told, expired })
    }

    /// Tells the bodies running here whose record asks them to stop.
    async fn tell_running(&self) -> Result<u64> {
        let running = self.pool.unstopped();
        if running.is_empty() {
            return Ok(0);
        }
        let stops = self
            .store
            .ops()
            .request_stops(&self.owner, &running, self.clock.now_ms());
        let stops = bounded_op(&*self.store, "request_stops", stops).await?;
        let mut told = 0;
        for (id, attempt, why) in stops {
            if self.pool.ask_stop(id, attempt, why) {
                told += 1;
                crate::log::info!(
                    request_id = id,
                    attempt,
                    "{}: its body is told to stop (`Context::is_cancelled`); it ends \
                     `cancelled` unless it succeeds, and is stopped at its timeout if it \
                     goes on",
                    why.reason()
                );
            }
        }
        Ok(told)
    }
}

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
use crate::listeners::{Notifier, OutcomeKind, Subject};
use crate::metrics::Sweep;
use crate::record::{RequestId, Status};
use crate::registry::Registry;
use crate::settings::Settings;
use crate::store::Store;
use crate::trace::TraceContext;

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
/// # async fn demo(rt: async_exec::Runtime) -> async_exec::Result<()> {
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
    /// The outcome listeners, told of requests that die here.
    pub(crate) listeners: Arc<Notifier>,
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
    ///
    /// Counted: `async_exec_sweep_records_total{sweep="rescuer",result}` (`rescued`,
    /// `dead`), and a failed round in `async_exec_sweep_failures_total{sweep="rescuer"}`.
    pub async fn run_once(&self) -> Result<RescueReport> {
        let rescued = self
            .store
            .request_rescue(
                &self.application,
                self.registry.names(),
                self.clock.now_ms(),
                self.config.batch,
            )
            .await;
        let rescued = crate::metrics::round(Sweep::Rescuer, rescued)?;
        crate::metrics::swept(Sweep::Rescuer, "rescued", rescued.retried.len() as u64);
        crate::metrics::swept(Sweep::Rescuer, "dead", rescued.dead.len() as u64);
        if !rescued.retried.is_empty() {
            crate::log::warn!(retried = ?rescued.retried, "rescued requests whose lease expired; they run again");
        }
        if !rescued.dead.is_empty() {
            crate::log::error!(dead = ?rescued.dead,
                "requests whose lease expired on their last attempt are dead; replay them with `retry_now`");
            self.tell_dead(&rescued.dead).await;
        }
        Ok(RescueReport {
            retried: rescued.retried,
            dead: rescued.dead,
        })
    }
}

impl Rescuer {
    /// Tells the `on_dead` listeners of records this rescue wrote `dead` (read back, one
    /// by one, for their executor, attempt, error, key and caller's trace, only when an
    /// `on_dead` listener is registered; one that cannot be read is logged and skipped).
    async fn tell_dead(&self, dead: &[RequestId]) {
        if !self.listeners.wants(OutcomeKind::Dead) {
            return;
        }
        for &id in dead {
            let record = match self.store.request_get(&self.application, id).await {
                Ok(Some(record)) if record.status == Status::Dead => record,
                Ok(_) => continue, // replayed or deleted since
                Err(error) => {
                    crate::log::warn!(id, %error, "could not read a rescued dead request back for its listeners");
                    continue;
                }
            };
            let Some(def) = self.registry.get(&record.executor) else {
                continue;
            };
            let subject = Subject {
                key: record.idempotency_key,
                remark: def.remark,
                trace: record
                    .trace_json
                    .as_deref()
                    .map(|json| TraceContext::from_json(Some(json))),
            };
            self.listeners.send(self.listeners.event(
                OutcomeKind::Dead,
                id,
                def.name,
                record.exec_count,
                record.last_error,
                subject,
            ));
        }
    }
}

/// The rescuer on its own: a store, a registry and a clock, no runtime.
#[cfg(test)]
mod tests {
    use super::*;
    use crate::record::{now_ms, Inserted, NewRequest};
    use crate::registry::ExecutorDef;
    use crate::store::ClaimIds;
    use crate::strategy::Strategy;

    static KNOWN: ExecutorDef = ExecutorDef {
        name: "rescue_test::known",
        path: "rescue_test::known",
        sign: "0000000000000000",
        signature: "()",
        remark: "",
        strategy: Strategy::SaveAsync,
        max_attempts: None,
        timeout_ms: None,
        data: &[],
        run: |_| Box::pin(async { Ok(()) }),
    };

    fn request(application: &Arc<str>, executor: &'static str, max_attempts: i32) -> NewRequest {
        NewRequest {
            max_attempts,
            ..crate::store::fixture::new_request(application, executor, "0000000000000000")
        }
    }

    /// Claims `ids` for `owner` with a lease of `lease_ms`.
    async fn claim(store: &dyn Store, ids: &[RequestId], owner: &str, lease_ms: i64) {
        let claimed = store
            .request_claim_ids(ClaimIds {
                ids,
                owner,
                now: now_ms(),
                lease_ms,
            })
            .await
            .unwrap();
        assert_eq!(claimed.len(), ids.len());
    }

    /// Expired leases go back to `failed` (or `dead` on their last attempt); a live lease
    /// and a record of an executor this binary does not know are left alone.
    async fn only_expired_leases_of_known_executors_are_rescued(store: Arc<dyn Store>) {
        let application: Arc<str> = Arc::from(format!("rescue-test-{}", now_ms()).as_str());
        let requests = [
            request(&application, KNOWN.name, 3),
            request(&application, KNOWN.name, 1),
            request(&application, KNOWN.name, 3),
            request(&application, "rescue_test::unknown", 3),
        ];
        let ids: Vec<RequestId> = store
            .request_insert_many(&requests)
            .await
            .unwrap()
            .into_iter()
            .map(|inserted| match inserted {
                Inserted::New(id) => id,
                Inserted::Existing(_) => unreachable!("no keys"),
            })
            .collect();
        let (expiring, last_attempt, live, unknown) = (ids[0], ids[1], ids[2], ids[3]);
        claim(&*store, &[expiring, last_attempt, unknown], "gone", 1).await;
        claim(&*store, &[live], "alive", 3_600_000).await;
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;

        let clock = Arc::new(Clock::new(0));
        clock.sync(&*store).await.unwrap();
        let rescuer = Rescuer {
            store: store.clone(),
            application: application.clone(),
            registry: Arc::new(Registry::from_defs([&KNOWN]).unwrap()),
            clock,
            listeners: Default::default(),
            config: RescuerConfig { batch: 100 },
        };
        let report = rescuer.run_once().await.unwrap();
        assert_eq!(report.retried, vec![expiring]);
        assert_eq!(report.dead, vec![last_attempt]);
        let status = |id| {
            let store = store.clone();
            let application = application.clone();
            async move {
                let record = store.request_get(&application, id).await.unwrap().unwrap();
                record.status
            }
        };
        assert_eq!(status(expiring).await, Status::Failed);
        assert_eq!(status(last_attempt).await, Status::Dead);
        assert_eq!(status(live).await, Status::Running);
        assert_eq!(status(unknown).await, Status::Running);
        assert_eq!(rescuer.run_once().await.unwrap(), RescueReport::default());
        for id in ids {
            store.request_delete(&application, id).await.unwrap();
        }
    }

    #[cfg(feature = "sqlite")]
    #[tokio::test]
    async fn sqlite_only_expired_leases_of_known_executors_are_rescued() {
        let dir = tempfile::tempdir().unwrap();
        let store = crate::store::fixture::sqlite(&dir).await;
        only_expired_leases_of_known_executors_are_rescued(store).await;
    }

    #[cfg(feature = "postgres")]
    #[tokio::test]
    #[cfg_attr(
        not(async_exec_test_postgres),
        ignore = "set ASYNC_EXEC_TEST_POSTGRES_URL to run it"
    )]
    async fn postgres_only_expired_leases_of_known_executors_are_rescued() {
        only_expired_leases_of_known_executors_are_rescued(crate::store::fixture::postgres().await)
            .await;
    }

    #[cfg(feature = "mysql")]
    #[tokio::test]
    #[cfg_attr(
        not(async_exec_test_mysql),
        ignore = "set ASYNC_EXEC_TEST_MYSQL_URL to run it"
    )]
    async fn mysql_only_expired_leases_of_known_executors_are_rescued() {
        only_expired_leases_of_known_executors_are_rescued(crate::store::fixture::mysql().await)
            .await;
    }
}

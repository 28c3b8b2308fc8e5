//! The rescuer: `running` records whose lease expired (their instance died, hung, or lost
//! the database for longer than a lease) go back to `failed`, to be retried at once, or to
//! `dead` when that was their last attempt. Each gets an `async_log` row `lease_expired`.
//! Records of executors this binary does not know are left to an instance that knows them.
//!
//! A lease is taken from its holder only once it missed more than one renewal (ended more
//! than a `heartbeat_interval` ago), so that a renewal a little late wins the race; and
//! not at all for a `lease` after the database's clock was seen to step (each round reads
//! it), since a step makes every lease set before it look ended, or longer, until its
//! holder renews it. Rounds repeat while they come back full, for up to half of
//! `compensate_interval`.
//!
//! It holds the store, the application and the executors it rescues for (the registry),
//! the database's clock and its [`RescuerConfig`].

use std::sync::Arc;
use std::time::Duration;

use crate::base::error::Result;
use crate::base::outcome::Subject;
use crate::base::record::{RequestId, Status};
use crate::base::registry::Registry;
use crate::base::settings::Settings;
use crate::base::trace::TraceContext;
use crate::operate::listeners::{Notifier, OutcomeKind};
use crate::operate::metrics::Sweep;
use crate::store::{RescueBatch, Store};
use crate::sweeps::clock::Clock;

/// The settings the rescuer reads, taken from [`Settings`] (validated there).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct RescuerConfig {
    /// The most records rescued per round (`compensate_batch`).
    pub(crate) batch: i64,
    /// How long past its end a lease must be to be rescued (`heartbeat_interval`).
    pub(crate) grace: Duration,
    /// How long rescue pauses after the database's clock was seen to step (`lease`).
    pub(crate) pause_after_step: Duration,
    /// How long one run may go on while rounds come back full (half of
    /// `compensate_interval`).
    pub(crate) budget: Duration,
}

impl RescuerConfig {
    /// The rescuer's settings among the runtime's.
    pub(crate) fn from_settings(settings: &Settings) -> Self {
        RescuerConfig {
            batch: settings.compensate_batch,
            grace: settings.heartbeat_interval,
            pause_after_step: settings.lease,
            budget: settings.compensate_interval / 2,
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
    /// Whether this run rescued nothing because the database's clock stepped less than a
    /// `lease` ago (leases set before the step are not judged by the clock after it).
    pub paused: bool,
}

impl Rescuer {
    /// Reads the database's clock, then (unless it stepped less than a `lease` ago)
    /// rescues records whose lease ended more than a `heartbeat_interval` ago,
    /// `compensate_batch` at a time, again while a round comes back full, for up to half of
    /// `compensate_interval`.
    ///
    /// Counted: `async_exec_sweep_records_total{sweep="rescuer",result}` (`rescued`,
    /// `dead`), and a failed round in `async_exec_sweep_failures_total{sweep="rescuer"}`.
    pub async fn run_once(&self) -> Result<RescueReport> {
        let synced = self.clock.sync(&*self.store).await;
        crate::operate::metrics::round(Sweep::Rescuer, synced)?;
        if self.clock.stepped_within(self.config.pause_after_step) {
            crate::log::warn!(
                "not rescuing leases: the database's clock stepped less than a lease ago"
            );
            return Ok(RescueReport {
                paused: true,
                ..RescueReport::default()
            });
        }
        let all_rounds = std::sync::Mutex::new(crate::store::Rescued::default());
        let batch = u64::try_from(self.config.batch).unwrap_or(0);
        let grace_ms = i64::try_from(self.config.grace.as_millis()).unwrap_or(i64::MAX);
        let all = crate::sweeps::sweep::while_full(batch, self.config.budget, || {
            let round = self.store.request_rescue(RescueBatch {
                application: &self.application,
                executors: self.registry.names(),
                queues: self.registry.queues(),
                now: self.clock.now_ms(),
                grace_ms,
                limit: self.config.batch,
            });
            let all_rounds = &all_rounds;
            async move {
                let round = round.await?;
                let found = (round.retried.len() + round.dead.len()) as u64;
                let mut all_rounds = all_rounds.lock().expect("rescued lock");
                all_rounds.retried.extend(round.retried);
                all_rounds.dead.extend(round.dead);
                Ok(found)
            }
        })
        .await;
        let rescued = all_rounds.into_inner().expect("rescued lock");
        if let Err(error) = all {
            if rescued.retried.is_empty() && rescued.dead.is_empty() {
                return crate::operate::metrics::round(Sweep::Rescuer, Err(error));
            }
            // Earlier rounds of this run rescued records: they are reported (and their
            // listeners told) below; the failure is counted and logged.
            crate::operate::metrics::sweep_failed(Sweep::Rescuer);
            crate::log::error!(error = %crate::log::escaped(&error), "a rescue round failed after earlier rounds of this run rescued records");
        }
        crate::operate::metrics::swept(Sweep::Rescuer, "rescued", rescued.retried.len() as u64);
        crate::operate::metrics::swept(Sweep::Rescuer, "dead", rescued.dead.len() as u64);
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
            paused: false,
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
                    crate::log::warn!(id, error = %crate::log::escaped(&error), "could not read a rescued dead request back for its listeners");
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
    use crate::base::record::{now_ms, Inserted, NewRequest};
    use crate::base::registry::ExecutorDef;
    use crate::base::strategy::Strategy;
    use crate::store::ClaimIds;

    static KNOWN: ExecutorDef = ExecutorDef {
        name: "rescue_test::known",
        path: "rescue_test::known",
        sign: "0000000000000000",
        signature: "()",
        remark: "",
        strategy: Strategy::SaveAsync,
        max_attempts: None,
        timeout_ms: None,
        queue: None,
        deadline_ms: None,
        data: &[],
        secrets: &[],
        schedule: None,
        modes: crate::base::registry::Modes::NONE,
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
                Inserted::Existing(_) | Inserted::Live(_) | Inserted::Merged(_) => {
                    unreachable!("no keys, no singletons")
                }
            })
            .collect();
        let (expiring, last_attempt, live, unknown) = (ids[0], ids[1], ids[2], ids[3]);
        claim(&*store, &[expiring, last_attempt, unknown], "gone", 1).await;
        claim(&*store, &[live], "alive", 3_600_000).await;
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;

        let rescuer = rescuer(&store, &application, CONFIG).await;
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

    /// A rescuer for `application` on `store` with `config`, its clock read.
    async fn rescuer(
        store: &Arc<dyn Store>,
        application: &Arc<str>,
        config: RescuerConfig,
    ) -> Rescuer {
        let clock = Arc::new(Clock::new(0));
        clock.sync(&**store).await.unwrap();
        Rescuer {
            store: store.clone(),
            application: application.clone(),
            registry: Arc::new(Registry::from_defs([&KNOWN]).unwrap()),
            clock,
            listeners: Default::default(),
            config,
        }
    }

    /// `n` records of the known executor, claimed by `gone` with a lease that ends at once.
    async fn expired(store: &Arc<dyn Store>, application: &Arc<str>, n: usize) -> Vec<RequestId> {
        let requests: Vec<NewRequest> = (0..n)
            .map(|_| request(application, KNOWN.name, 3))
            .collect();
        let ids: Vec<RequestId> = store
            .request_insert_many(&requests)
            .await
            .unwrap()
            .into_iter()
            .map(|inserted| match inserted {
                Inserted::New(id) => id,
                Inserted::Existing(_) | Inserted::Live(_) | Inserted::Merged(_) => {
                    unreachable!("no keys, no singletons")
                }
            })
            .collect();
        claim(&**store, &ids, "gone", 1).await;
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
        ids
    }

    const CONFIG: RescuerConfig = RescuerConfig {
        batch: 100,
        grace: Duration::ZERO,
        pause_after_step: Duration::from_secs(30),
        budget: Duration::from_secs(10),
    };

    /// Issue 18 item 9: the rescuer took 100 records per round whatever the backlog; a
    /// run now goes on while rounds come back full (250 rescued in one run of batch 100).
    async fn a_backlog_larger_than_a_batch_is_rescued_in_one_run(store: Arc<dyn Store>) {
        let application: Arc<str> = Arc::from(format!("rescue-backlog-{}", now_ms()).as_str());
        let ids = expired(&store, &application, 250).await;
        let rescuer = rescuer(&store, &application, CONFIG).await;
        let report = rescuer.run_once().await.unwrap();
        assert_eq!(report.retried.len(), 250, "{report:?}");
        for id in ids {
            store.request_delete(&application, id).await.unwrap();
        }
    }

    /// Issue 18 item 10: a lease that ended less than a renewal (`heartbeat_interval`)
    /// ago is left to its holder, whose renewal may be on its way; past that, rescued.
    async fn a_lease_late_by_less_than_a_renewal_is_left_alone(store: Arc<dyn Store>) {
        let application: Arc<str> = Arc::from(format!("rescue-grace-{}", now_ms()).as_str());
        let ids = expired(&store, &application, 1).await;
        let patient = RescuerConfig {
            grace: Duration::from_secs(10),
            ..CONFIG
        };
        let report = rescuer(&store, &application, patient)
            .await
            .run_once()
            .await;
        assert_eq!(report.unwrap(), RescueReport::default(), "within the grace");
        let report = rescuer(&store, &application, CONFIG).await.run_once().await;
        assert_eq!(report.unwrap().retried, ids, "past the grace");
        for id in ids {
            store.request_delete(&application, id).await.unwrap();
        }
    }

    /// Issue 18 item 10: after the database's clock was seen to step, no lease is rescued
    /// for a lease's time (each holder renews under the new clock first); then rescue
    /// goes on.
    async fn a_step_of_the_database_clock_pauses_rescue(store: Arc<dyn Store>) {
        let application: Arc<str> = Arc::from(format!("rescue-step-{}", now_ms()).as_str());
        let ids = expired(&store, &application, 1).await;
        let rescuer = rescuer(&store, &application, CONFIG).await;
        // A reading a minute ahead, then the next (in `run_once`) a minute back: a step.
        rescuer
            .clock
            .sync_with(async { Ok(now_ms() + 60_000) })
            .await
            .unwrap();
        let report = rescuer.run_once().await.unwrap();
        assert!(report.paused && report.retried.is_empty(), "{report:?}");
        let later = Rescuer {
            config: RescuerConfig {
                pause_after_step: Duration::from_millis(1),
                ..CONFIG
            },
            ..rescuer
        };
        tokio::time::sleep(Duration::from_millis(20)).await;
        let report = later.run_once().await.unwrap();
        assert_eq!((report.paused, report.retried), (false, ids.clone()));
        for id in ids {
            store.request_delete(&application, id).await.unwrap();
        }
    }

    /// The rescuer's tests on SQLite, each with a database of its own.
    #[cfg(feature = "sqlite")]
    #[tokio::test]
    async fn sqlite_sweeps_rescue_as_they_should() {
        for test in 0..3 {
            let dir = tempfile::tempdir().unwrap();
            let store = crate::store::fixture::sqlite(&dir).await;
            match test {
                0 => a_backlog_larger_than_a_batch_is_rescued_in_one_run(store).await,
                1 => a_lease_late_by_less_than_a_renewal_is_left_alone(store).await,
                _ => a_step_of_the_database_clock_pauses_rescue(store).await,
            }
        }
    }

    #[cfg(feature = "postgres")]
    #[tokio::test]
    #[cfg_attr(
        not(async_exec_test_postgres),
        ignore = "set ASYNC_EXEC_TEST_POSTGRES_URL to run it"
    )]
    async fn postgres_sweeps_rescue_as_they_should() {
        let store = crate::store::fixture::postgres().await;
        a_backlog_larger_than_a_batch_is_rescued_in_one_run(store.clone()).await;
        a_lease_late_by_less_than_a_renewal_is_left_alone(store.clone()).await;
        a_step_of_the_database_clock_pauses_rescue(store).await;
    }

    #[cfg(feature = "mysql")]
    #[tokio::test]
    #[cfg_attr(
        not(async_exec_test_mysql),
        ignore = "set ASYNC_EXEC_TEST_MYSQL_URL to run it"
    )]
    async fn mysql_sweeps_rescue_as_they_should() {
        let store = crate::store::fixture::mysql().await;
        a_backlog_larger_than_a_batch_is_rescued_in_one_run(store.clone()).await;
        a_lease_late_by_less_than_a_renewal_is_left_alone(store.clone()).await;
        a_step_of_the_database_clock_pauses_rescue(store).await;
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

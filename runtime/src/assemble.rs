//! How a runtime assembles its parts: each part gets what it needs (the store, its
//! settings, a channel, a stop token) and runs on a task of its own, supervised.

use std::sync::atomic::Ordering;

use crate::compensator::CompensatorConfig;
use crate::completer::CompleterTask;
use crate::dispatcher::{Inbox, Producer, ProducerConfig, ProducerParts};
use crate::error::{Error, Result};
use crate::rescuer::RescuerConfig;
use crate::retrier::RetrierConfig;
use crate::runtime::Runtime;
use crate::supervise::supervised;

impl Runtime {
    pub(crate) fn spawn_parts(&self, inbox: Inbox, completer: CompleterTask) {
        let inner = &self.inner;
        let mut tasks = inner.tasks.lock().expect("tasks lock");
        let stop = inner.completer_stop.clone();
        tasks.push(tokio::spawn(supervised(
            "completer",
            completer,
            move |part| {
                let stop = stop.clone();
                async move { part.lock().await.run(stop).await }
            },
        )));
        // Every instance writes times (submit-only ones too): keep reading the database's
        // clock.
        let (clock, store, stop) = (
            inner.clock.clone(),
            inner.store.clone(),
            inner.completer_stop.clone(),
        );
        tasks.push(tokio::spawn(supervised("clock", (), move |_| {
            let (clock, store, stop) = (clock.clone(), store.clone(), stop.clone());
            async move { clock.keep_synced(&*store, stop).await }
        })));
        let presence = self.presence();
        let stop = inner.completer_stop.clone();
        tasks.push(tokio::spawn(supervised(
            "presence",
            presence,
            move |part| {
                let stop = stop.clone();
                async move { part.lock().await.run(stop).await }
            },
        )));
        let settings = &inner.settings;
        if !settings.enabled || !settings.run_workers || settings.test_mode.is_some() {
            *inner.idle_inbox.lock().expect("inbox lock") = Some(inbox);
            return;
        }
        drop(tasks);
        self.spawn_workers(inbox);
    }

    /// Starts the producer, the sweeps and the heartbeat: this instance runs requests.
    fn spawn_workers(&self, inbox: Inbox) {
        let inner = &self.inner;
        inner.workers_on.store(true, Ordering::Release);
        let mut tasks = inner.tasks.lock().expect("tasks lock");
        let producer = Producer::new(
            inbox,
            ProducerParts {
                claimer: inner.claimer.clone(),
                store: inner.store.clone(),
                completer: inner.completer.clone(),
                application: inner.app.clone(),
                owner: inner.owner.clone(),
                shutdown: inner.shutdown.clone(),
            },
            ProducerConfig::from_settings(&inner.settings),
        );
        tasks.push(tokio::spawn(supervised(
            "producer",
            producer,
            |part| async move { part.lock().await.run().await },
        )));
        let s = &inner.settings;
        let retrier = self.retrier();
        tasks.push(tokio::spawn(crate::sweep::every(
            inner.shutdown.clone(),
            "retrier",
            s.retry_interval,
            move || {
                let retrier = retrier.clone();
                async move { retrier.run_once().await.map(drop) }
            },
        )));
        let (rescuer, compensator) = (self.rescuer(), self.compensator());
        tasks.push(tokio::spawn(crate::sweep::every(
            inner.shutdown.clone(),
            "compensator",
            s.compensate_interval,
            move || {
                let (rescuer, compensator) = (rescuer.clone(), compensator.clone());
                async move {
                    rescuer.run_once().await?;
                    compensator.run_once().await.map(drop)
                }
            },
        )));
        // Leases are kept while bodies run, also during shutdown's grace period: the
        // heartbeat stops with the completer, after the workers.
        let heartbeat = self.heartbeat();
        let stop = inner.completer_stop.clone();
        tasks.push(tokio::spawn(supervised(
            "heartbeat",
            heartbeat,
            move |part| {
                let stop = stop.clone();
                async move { part.lock().await.clone().run(stop).await }
            },
        )));
    }

    /// The retry sweep, to run by hand (tests, or with background sweeps off).
    pub fn retrier(&self) -> crate::Retrier {
        let inner = &self.inner;
        crate::Retrier {
            claimer: inner.claimer.clone(),
            config: RetrierConfig::from_settings(&inner.settings),
        }
    }

    /// The compensation sweep for records committed but never dispatched.
    pub fn compensator(&self) -> crate::Compensator {
        let inner = &self.inner;
        crate::Compensator {
            claimer: inner.claimer.clone(),
            store: inner.store.clone(),
            application: inner.app.clone(),
            clock: inner.clock.clone(),
            config: CompensatorConfig::from_settings(&inner.settings),
        }
    }

    /// The sweep that recovers records whose lease expired.
    pub fn rescuer(&self) -> crate::Rescuer {
        let inner = &self.inner;
        crate::Rescuer {
            store: inner.store.clone(),
            application: inner.app.clone(),
            registry: inner.registry.clone(),
            clock: inner.clock.clone(),
            config: RescuerConfig::from_settings(&inner.settings),
        }
    }

    /// The lease renewal of this instance's running records.
    pub fn heartbeat(&self) -> crate::Heartbeat {
        let inner = &self.inner;
        crate::Heartbeat {
            keeper: inner.leases.clone(),
            clock: inner.clock.clone(),
            pool: inner.pool.clone(),
            owner: inner.owner.clone(),
            lease: inner.settings.lease,
            interval: inner.settings.heartbeat_interval,
        }
    }

    /// Makes a running submit-only runtime (`run_workers(false)`) run requests too: starts
    /// its workers, sweeps and heartbeat, as if it had been started with workers. Does
    /// nothing when they run already. Refused for a runtime that is disabled, in a test
    /// mode, or shut down.
    ///
    /// ```no_run
    /// # async fn demo() -> async_exec_runtime::Result<()> {
    /// let rt = async_exec_runtime::Runtime::builder().run_workers(false).start().await?;
    /// // ... later, this instance takes its share of the work:
    /// rt.start_workers()?;
    /// # Ok(()) }
    /// ```
    pub fn start_workers(&self) -> Result<()> {
        let inner = &self.inner;
        inner.check_open()?;
        if inner.settings.test_mode.is_some() {
            return Err(Error::Config {
                setting: "test_mode",
                reason: "a runtime in a test mode runs calls itself; it has no workers to start"
                    .into(),
            });
        }
        let inbox = inner.idle_inbox.lock().expect("inbox lock").take();
        if let Some(inbox) = inbox {
            self.spawn_workers(inbox);
            tracing::info!(owner = %inner.owner, "workers started");
        }
        Ok(())
    }

    pub(crate) fn presence(&self) -> crate::instances::Presence {
        let inner = &self.inner;
        let settings = &inner.settings;
        let ours = crate::instances::Presence::executors_of(&inner.registry);
        crate::instances::Presence {
            store: inner.store.clone(),
            application: inner.app.clone(),
            owner: inner.owner.clone(),
            workers: inner.workers_on.clone(),
            executors: serde_json::to_string(&ours).expect("names and signs serialize"),
            ours,
            alive_within: settings.lease,
            interval: settings.heartbeat_interval,
            skip: inner.skip.clone(),
        }
    }

    /// The instances of this application that announced themselves within the last
    /// `lease` (this one included), with the executors they link and their signatures.
    ///
    /// ```no_run
    /// # async fn demo(rt: async_exec_runtime::Runtime) -> async_exec_runtime::Result<()> {
    /// for instance in rt.instances().await? {
    ///     println!("{} (workers: {}), seen {}", instance.name, instance.workers, instance.last_seen);
    /// }
    /// # Ok(()) }
    /// ```
    pub async fn instances(&self) -> Result<Vec<crate::InstanceInfo>> {
        let inner = &self.inner;
        inner
            .store
            .instance_list(&inner.app, inner.settings.lease.as_millis() as i64)
            .await
    }
}

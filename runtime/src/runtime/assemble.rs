//! How a runtime assembles its parts: each part gets what it needs (the store, its
//! settings, a channel, a stop token) and runs on a task of its own, supervised. No part
//! knows the runtime; the runtime (`runtime/mod.rs`) only starts, hands out and stops them.
//!
//! # What each part gets
//!
//! The shared handles (`Shared`, in `parts.rs`) are made once at start: the store, the application's
//! name, this instance's name (`owner`), the database's clock, the registry of executors,
//! the `Data<T>` values, the skip list of a rolling deploy, shutdown's token and the count
//! of records handed back at shutdown. From them and the [`Settings`](crate::Settings),
//! each part takes its own handles and a `Config` of the settings it reads (validated with
//! the rest by `Settings::validate`):
//!
//! | part | module | holds | does |
//! |---|---|---|---|
//! | executor pool | `work/pool.rs` | permits, body tasks, the records held | bookkeeping the heartbeat, completer and shutdown read |
//! | completer | `work/completer/` | its channel, the store, the pool, listeners | writes outcomes in batches, forgets their jobs, tells the listeners |
//! | executor | `work/executor/` | data, clock, completer, store, names, pool, `ExecutorConfig` | runs bodies; builds and hands on their outcomes |
//! | claimer | `work/claimer.rs` | store, names, registry, clock, skip list, executor, shutdown, `ClaimerConfig` | claims records and starts them: the producer's and the sweeps' path |
//! | producer | `work/dispatcher.rs` | the channel's inbox, claimer, store, completer, names, shutdown, `ProducerConfig` | starts what is dispatched; claims from the store on overflow, wake-up, poll |
//! | retrier | `sweeps/retrier.rs` | claimer, `RetrierConfig` | `run_once`: due retries and delayed records |
//! | compensator | `sweeps/compensator.rs` | claimer, store, names, clock, `CompensatorConfig` | `run_once`: expired keys, records never dispatched |
//! | rescuer | `sweeps/rescuer.rs` | store, names, registry, clock, listeners, `RescuerConfig` | `run_once`: expired leases back to the queue |
//! | retention | `sweeps/retention.rs` | store, names, clock, `RetentionConfig` | `run_once`: finished records and old logs past `retention` |
//! | stops | `sweeps/stops.rs` | store, names, clock, pool | every second: tells running bodies of cancels and deadlines; waiting requests past their deadline go `dead` |
//! | heartbeat | `sweeps/heartbeat.rs` | lease keeper (own connection), clock, pool, owner, lease, interval | `run_once`: renews leases, tells bodies that lost theirs |
//! | presence | `sweeps/instances.rs` | store, names, executors' signs, skip list, intervals | announces this instance; keeps the skip list |
//! | clock | `sweeps/clock.rs` | its reading of the database's time | re-reads it every minute |
//! | queue sampler | `operate/gauges.rs` | store, names, registry, clock, the gauges it set | every `queue_sample_interval`: the queue depth gauges |
//! | flow history | `operate/flow_view.rs` | the runtime, weakly | twice every `flow_sample_interval`: the period's saturation sample, by the one instance that takes it |
//!
//! Each part's task is spawned wrapped in a pulse (`operate/pulse.rs`) that records when it was
//! last active and whether it still runs, for `Runtime::health`.
//!
//! Every instance runs the completer, the clock and the presence; an instance that runs
//! workers runs the producer, the sweeps (the retrier; the rescuer then the compensator),
//! the queue sampler, the flow history and the heartbeat too (`start_workers` adds them later to a
//! submit-only one). The
//! producer and the sweeps stop at shutdown's token; the completer, the heartbeat, the
//! presence and the clock at the completer's, after the workers have finished.

use std::sync::atomic::Ordering;
use std::sync::Arc;

use crate::base::error::{Error, Result};
use crate::base::supervise::{supervised, supervised_sweep};
use crate::operate::metrics::Sweep;
use crate::operate::pulse::Pulses;
use crate::runtime::Runtime;
use crate::sweeps::compensator::CompensatorConfig;
use crate::sweeps::rescuer::RescuerConfig;
use crate::sweeps::retention::RetentionConfig;
use crate::sweeps::retrier::RetrierConfig;
use crate::work::completer::CompleterTask;
use crate::work::dispatcher::{Inbox, Producer, ProducerConfig, ProducerParts};

impl Runtime {
    pub(crate) fn spawn_parts(&self, inbox: Inbox, completer: CompleterTask) {
        let inner = &self.inner;
        let mut tasks = inner.tasks.lock().expect("tasks lock");
        let stop = inner.completer_stop.clone();
        tasks.push(self.watched(
            "completer",
            None,
            supervised("completer", completer, move |part| {
                let stop = stop.clone();
                async move { part.lock().await.run(stop).await }
            }),
        ));
        // Every instance writes times (submit-only ones too): keep reading the database's
        // clock.
        let (clock, store, stop) = (
            inner.clock.clone(),
            inner.store.clone(),
            inner.completer_stop.clone(),
        );
        tasks.push(self.watched(
            "clock",
            Some(crate::sweeps::clock::SYNC_INTERVAL),
            supervised("clock", (), move |_| {
                let (clock, store, stop) = (clock.clone(), store.clone(), stop.clone());
                async move { clock.keep_synced(&*store, stop).await }
            }),
        ));
        let presence = self.presence();
        let stop = inner.completer_stop.clone();
        tasks.push(self.watched(
            "presence",
            Some(inner.settings.heartbeat_interval),
            supervised("presence", presence, move |part| {
                let stop = stop.clone();
                async move { part.lock().await.run(stop).await }
            }),
        ));
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
        // The producer waits for work and for free workers (a full pool may hold it for
        // as long as a body runs): like the completer, it has no interval to be late by.
        tasks.push(self.watched(
            "producer",
            None,
            supervised("producer", producer, |part| async move {
                part.lock().await.run().await
            }),
        ));
        let s = &inner.settings;
        let retrier = self.retrier();
        let pulse = inner.pulses.part("retrier", Some(s.retry_interval));
        tasks.push(tokio::spawn(Pulses::watch(
            pulse.clone(),
            crate::sweeps::sweep::every(
                inner.shutdown.clone(),
                Sweep::Retrier,
                s.retry_interval,
                pulse,
                move || {
                    let retrier = retrier.clone();
                    async move { retrier.run_once().await.map(drop) }
                },
            ),
        )));
        let (rescuer, compensator) = (self.rescuer(), self.compensator());
        let pulse = inner
            .pulses
            .part("compensator", Some(s.compensate_interval));
        tasks.push(tokio::spawn(Pulses::watch(
            pulse.clone(),
            crate::sweeps::sweep::every(
                inner.shutdown.clone(),
                Sweep::Compensator,
                s.compensate_interval,
                pulse,
                move || {
                    let (rescuer, compensator) = (rescuer.clone(), compensator.clone());
                    async move {
                        // A panic of the rescue counts as the rescuer's; of the rest, the
                        // compensator's.
                        crate::sweeps::sweep::caught(Sweep::Rescuer, rescuer.run_once()).await?;
                        compensator.run_once().await.map(drop)
                    }
                },
            ),
        )));
        if s.retention.is_some() || s.audit_retention.is_some() {
            let retention = self.retention();
            let every = crate::sweeps::retention::RETENTION_INTERVAL;
            let pulse = inner.pulses.part("retention", Some(every));
            tasks.push(tokio::spawn(Pulses::watch(
                pulse.clone(),
                crate::sweeps::sweep::every(
                    inner.shutdown.clone(),
                    Sweep::Retention,
                    every,
                    pulse,
                    move || {
                        let retention = retention.clone();
                        async move { retention.run_once().await.map(drop) }
                    },
                ),
            )));
        }
        let sampler = Arc::new(crate::operate::gauges::QueueSampler::new(
            inner.store.clone(),
            inner.app.clone(),
            inner.registry.clone(),
            inner.clock.clone(),
        ));
        let every = s.queue_sample_interval;
        let pulse = inner.pulses.part("queue sampler", Some(every));
        tasks.push(tokio::spawn(Pulses::watch(
            pulse.clone(),
            crate::sweeps::sweep::every(
                inner.shutdown.clone(),
                Sweep::QueueSampler,
                every,
                pulse,
                move || {
                    let sampler = sampler.clone();
                    async move { sampler.sample().await }
                },
            ),
        )));
        // The saturation history: each instance tries twice a period; the one whose
        // `UPDATE` of the period's row moves it on samples every queue. Holds the runtime
        // weakly, as the ticker does.
        let every = (s.flow_sample_interval / 2).max(std::time::Duration::from_millis(1));
        let weak = Arc::downgrade(&self.inner);
        let pulse = inner.pulses.part("flow history", Some(every));
        tasks.push(tokio::spawn(Pulses::watch(
            pulse.clone(),
            crate::sweeps::sweep::every(
                inner.shutdown.clone(),
                Sweep::FlowHistory,
                every,
                pulse,
                move || {
                    let weak = weak.clone();
                    async move {
                        match weak.upgrade() {
                            Some(inner) => Runtime { inner }.sample_flow().await.map(drop),
                            None => Ok(()),
                        }
                    }
                },
            ),
        )));
        // Running bodies are told of cancels and deadlines also during shutdown's grace
        // period: this stops with the completer, after the workers.
        let stops = self.stops();
        let every = crate::sweeps::stops::STOPS_INTERVAL;
        let pulse = inner.pulses.part("stops", Some(every));
        tasks.push(tokio::spawn(Pulses::watch(
            pulse.clone(),
            crate::sweeps::sweep::every(
                inner.completer_stop.clone(),
                Sweep::Stops,
                every,
                pulse,
                move || {
                    let stops = stops.clone();
                    async move { stops.run_once().await.map(drop) }
                },
            ),
        )));
        // The quotas' count (PostgreSQL, MySQL/MariaDB), as often as the stops; holds the
        // runtime weakly, as the ticker does.
        if inner.quotas_reserve() {
            let weak = Arc::downgrade(&self.inner);
            let pulse = inner.pulses.part("quotas", Some(every));
            tasks.push(tokio::spawn(Pulses::watch(
                pulse.clone(),
                crate::sweeps::sweep::every(
                    inner.shutdown.clone(),
                    Sweep::Quotas,
                    every,
                    pulse,
                    move || {
                        let weak = weak.clone();
                        async move {
                            match weak.upgrade() {
                                Some(inner) => inner.reconcile_quotas().await.map(drop),
                                None => Ok(()),
                            }
                        }
                    },
                ),
            )));
        }
        // The scheduled executors' ticks: one task for all, stopped with the producer.
        if !inner.schedules.is_empty() {
            let ticks = inner.schedules.iter().cloned().map(|scheduled| {
                crate::runtime::ticker::run(
                    Arc::downgrade(&self.inner),
                    scheduled,
                    inner.shutdown.clone(),
                )
            });
            let all = futures_util::future::join_all(ticks.collect::<Vec<_>>());
            tasks.push(self.watched("ticker", None, async move {
                all.await;
            }));
        }
        // Leases are kept while bodies run, also during shutdown's grace period: the
        // heartbeat stops with the completer, after the workers.
        let heartbeat = self.heartbeat();
        let stop = inner.completer_stop.clone();
        tasks.push(self.watched(
            "heartbeat",
            Some(inner.settings.heartbeat_interval),
            supervised_sweep(Sweep::Heartbeat, heartbeat, move |part| {
                let stop = stop.clone();
                async move { part.lock().await.clone().run(stop).await }
            }),
        ));
    }

    /// Starts the control part (pauses, statistics) among the runtime's tasks; it stops
    /// with the completer.
    pub(crate) fn spawn_control(&self) {
        let inner = &self.inner;
        let part = self.control_part();
        let stop = inner.completer_stop.clone();
        let task = self.watched(
            "control",
            Some(crate::work::control::PAUSE_REFRESH),
            supervised("control", part, move |part| {
                let stop = stop.clone();
                async move { part.lock().await.run(stop).await }
            }),
        );
        inner.tasks.lock().expect("tasks lock").push(task);
    }

    /// The control part, built from the shared handles.
    pub(crate) fn control_part(&self) -> crate::work::control::ControlPart {
        let inner = &self.inner;
        crate::work::control::ControlPart {
            control: inner.control.clone(),
            store: inner.store.clone(),
            application: inner.app.clone(),
            clock: inner.clock.clone(),
            workers: inner.workers_on.clone(),
            waker: Arc::new(inner.dispatcher.store_waker()),
        }
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

    /// The sweep that deletes finished records and attempt logs older than
    /// [`Settings::retention`](crate::Settings::retention), to run by hand (tests, or an
    /// instance that runs no workers). Its `run_once` does nothing when retention is off.
    pub fn retention(&self) -> crate::Retention {
        let inner = &self.inner;
        crate::Retention {
            store: inner.store.clone(),
            application: inner.app.clone(),
            clock: inner.clock.clone(),
            config: RetentionConfig::from_settings(&inner.settings),
        }
    }

    /// Spawns a part's task, watched by a pulse of its own (`interval`: how long it may
    /// wait between two activities; `None` for a part that waits for work).
    fn watched<F>(
        &self,
        name: &'static str,
        interval: Option<std::time::Duration>,
        part: F,
    ) -> tokio::task::JoinHandle<()>
    where
        F: std::future::Future<Output = ()> + Send + 'static,
    {
        let pulse = self.inner.pulses.part(name, interval);
        tokio::spawn(Pulses::watch(pulse, part))
    }

    /// The sweep that recovers records whose lease expired.
    pub fn rescuer(&self) -> crate::Rescuer {
        let inner = &self.inner;
        crate::Rescuer {
            store: inner.store.clone(),
            application: inner.app.clone(),
            registry: inner.registry.clone(),
            clock: inner.clock.clone(),
            listeners: inner.listeners.clone(),
            config: RescuerConfig::from_settings(&inner.settings),
        }
    }

    /// The check for cancels of running requests and passed deadlines.
    pub(crate) fn stops(&self) -> crate::sweeps::stops::Stops {
        let inner = &self.inner;
        crate::sweeps::stops::Stops {
            store: inner.store.clone(),
            application: inner.app.clone(),
            owner: inner.owner.clone(),
            clock: inner.clock.clone(),
            pool: inner.pool.clone(),
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
    /// # async fn demo() -> async_exec::Result<()> {
    /// let rt = async_exec::Runtime::builder().run_workers(false).start().await?;
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
        inner.data.check(inner.registry.defs(), |_| true)?;
        let inbox = inner.idle_inbox.lock().expect("inbox lock").take();
        if let Some(inbox) = inbox {
            self.spawn_workers(inbox);
            crate::log::info!(owner = %crate::log::escaped(&inner.owner), "workers started");
        }
        Ok(())
    }

    pub(crate) fn presence(&self) -> crate::sweeps::instances::Presence {
        let inner = &self.inner;
        let settings = &inner.settings;
        let roster = crate::sweeps::instances::Roster::new(
            inner.store.clone(),
            inner.app.clone(),
            inner.owner.clone(),
            &inner.registry,
            settings.lease,
            inner.skip.clone(),
        );
        crate::sweeps::instances::Presence {
            store: inner.store.clone(),
            application: inner.app.clone(),
            owner: inner.owner.clone(),
            workers: inner.workers_on.clone(),
            executors: serde_json::to_string(roster.ours()).expect("names and signs serialize"),
            interval: settings.heartbeat_interval,
            roster,
        }
    }

    /// The instances of this application that announced themselves within the last
    /// `lease` (this one included), with the executors they link and their signatures.
    ///
    /// ```no_run
    /// # async fn demo(rt: async_exec::Runtime) -> async_exec::Result<()> {
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

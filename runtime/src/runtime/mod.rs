//! The runtime: its shared state, start-up, global installation and shutdown. It only
//! assembles the parts: beside it, the [`Builder`](crate::Builder) (`builder.rs`),
//! `connect.rs` (the store a URL names), `parts.rs` (the handles the parts share, and the
//! parts every runtime has), `assemble.rs` (what each part gets, and their tasks) and
//! `testing.rs` (`rt.run_due`).

pub(crate) mod assemble;
pub(crate) mod builder;
pub(crate) mod connect;
pub(crate) mod parts;
pub(crate) mod testing;
pub(crate) mod ticker;

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, RwLock};
use std::time::Duration;

use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use crate::base::data::DataMap;
use crate::base::error::{Error, Result};
use crate::base::record::NewRequest;
use crate::base::registry::{ExecutorDef, Registry};
use crate::base::settings::{Settings, TestMode};
use crate::base::trace::TraceContext;
use crate::runtime::parts::{Core, Shared};
use crate::store::Store;
use crate::sweeps::clock::Clock;
use crate::work::claimer::Claimer;
use crate::work::completer::Completer;
use crate::work::dispatcher::Dispatcher;
use crate::work::executor::{Executor, ExecutorPool, Job};

/// The running async-exec: a store, the channel, the workers and the sweeps.
///
/// Cheap to clone; every clone is the same runtime.
///
/// ```no_run
/// # async fn demo() -> Result<(), async_exec::Error> {
/// use async_exec::Runtime;
/// let rt = Runtime::builder().database_url("sqlite:app.db").start().await?;
/// // ... calls ...
/// rt.shutdown().await?;
/// # Ok(()) }
/// ```
#[derive(Clone, Debug)]
pub struct Runtime {
    pub(crate) inner: Arc<Inner>,
}

/// The state every part of a runtime shares.
pub(crate) struct Inner {
    pub(crate) settings: Settings,
    pub(crate) app: Arc<str>,
    /// This instance's name in `lease_owner` and `async_log.worker`.
    pub(crate) owner: Arc<str>,
    pub(crate) store: Arc<dyn Store>,
    /// The channel's receiving end while no workers run (a submit-only instance), for
    /// `start_workers`.
    pub(crate) idle_inbox: Mutex<Option<crate::work::dispatcher::Inbox>>,
    /// Whether this instance runs workers now.
    pub(crate) workers_on: Arc<AtomicBool>,
    /// Records to leave for other instances (a rolling deploy), kept by the presence part.
    pub(crate) skip: crate::sweeps::instances::SkipList,
    /// Paused executors and finished counts (the console's `async_pause`, `async_stat`).
    pub(crate) control: Arc<crate::work::control::Control>,
    /// The database's clock, for every time the runtime writes.
    pub(crate) clock: Arc<Clock>,
    /// Lease renewals, on a connection of their own.
    pub(crate) leases: Arc<dyn crate::store::LeaseKeeper>,
    pub(crate) registry: Arc<Registry>,
    pub(crate) data: Arc<DataMap>,
    pub(crate) dispatcher: Dispatcher,
    pub(crate) pool: Arc<ExecutorPool>,
    pub(crate) completer: Arc<Completer>,
    /// Runs bodies (pooled, direct, inline) and hands their outcomes on.
    pub(crate) executor: Arc<Executor>,
    /// Claims records and starts them: the producer's and the sweeps' path to a worker.
    pub(crate) claimer: Arc<Claimer>,
    /// Stops the producer and the sweeps.
    pub(crate) shutdown: CancellationToken,
    /// Stops the completer, after the workers.
    pub(crate) completer_stop: CancellationToken,
    /// Set once shutdown begins: calls are refused.
    pub(crate) closed: AtomicBool,
    /// Records handed back by workers that were stopping (counted in the shutdown report).
    pub(crate) handed_back: Arc<AtomicU64>,
    pub(crate) tasks: Mutex<Vec<JoinHandle<()>>>,
    /// The outcome listeners' queue (completer, rescuer).
    pub(crate) listeners: Arc<crate::operate::listeners::Notifier>,
    /// Each background part's last activity, for `health()`.
    pub(crate) pulses: crate::operate::pulse::Pulses,
    /// In-memory jobs held by [`TestMode::Hold`] until [`Runtime::drain`].
    pub(crate) held: Mutex<Vec<Job>>,
    /// In a test mode, delayed in-memory jobs waiting for their delay, for
    /// [`Runtime::run_due`].
    pub(crate) delayed_jobs: crate::call::delayed::DelayedJobs,
    /// The transactions open now, by the task that began them.
    pub(crate) open_txs: crate::call::open_tx::OpenTxs,
    /// The scheduled executors (`every`, `cron`), for the ticker and `schedules()`.
    pub(crate) schedules: crate::runtime::ticker::Schedules,
}

impl std::fmt::Debug for Inner {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Runtime")
            .field("application", &self.app)
            .field("owner", &self.owner)
            .field("backend", &self.store.backend_name())
            .field("executors", &self.registry.names())
            .finish_non_exhaustive()
    }
}

/// How many statement bounds ([`statement_bound`](crate::statement_bound) of the lease)
/// shutdown waits, all together, for the background parts (the completer writing the last
/// outcomes, the producer, the sweeps) to stop before it aborts those left: a write
/// abandoned after one bound is tried again once on a new connection.
const PART_STOP_BOUNDS: u32 = 2;

static GLOBAL: RwLock<Option<Runtime>> = RwLock::new(None);

/// The runtime that a bare `.await` on a call uses: the last one started with
/// `install_global` on (the default) and not yet shut down.
pub fn global() -> Option<Runtime> {
    GLOBAL.read().expect("global runtime lock").clone()
}

/// What a graceful shutdown did. After it, no record holds this instance's lease but
/// those counted in `unwritten` and `unstopped`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct ShutdownReport {
    /// Whether every running body finished within the grace period.
    pub finished: bool,
    /// Bodies that were running when shutdown began and ran to their end (their outcome
    /// is written, or counted in `unwritten`).
    pub completed: u64,
    /// Records handed back to the queue without counting the attempt: claimed but not
    /// started, or stopped when the grace period ran out. They run again elsewhere or at
    /// the next start.
    pub released: u64,
    /// Records whose body finished but whose outcome could not be written (the database
    /// failed): they keep their lease, and their attempt counts, when it expires.
    pub unwritten: u64,
    /// Bodies still running when shutdown returned: stopping them did not end them within
    /// 5 s (a blocking call never yields to be stopped). Their records are not handed back
    /// while they may still run: they keep this instance's lease, and run again (their
    /// attempt counted) once it expires and another instance rescues them.
    pub unstopped: u64,
}

impl Runtime {
    pub(crate) async fn start_with(
        settings: Settings,
        data: DataMap,
        store: Option<Arc<dyn Store>>,
        listeners: crate::operate::listeners::ListenerSet,
    ) -> Result<Runtime> {
        settings.validate()?;
        let registry = Registry::from_inventory()?;
        let defs: Vec<_> = registry.defs().collect();
        let schedules: crate::runtime::ticker::Schedules =
            crate::runtime::ticker::scheduled(&defs)?.into();
        let queues = crate::base::queue::QueuePlan::new(&defs, &settings.queues)?;
        crate::call::modes::check(&defs, &queues)?;
        if settings.enabled {
            let workers = settings.run_workers || settings.test_mode.is_some();
            data.check(registry.defs(), |def| {
                crate::base::registry::runs_here(def, workers)
            })?;
            settings.secrets.check(registry.defs())?;
        }
        let store = match store {
            Some(store) => store,
            None => crate::runtime::connect::connect(&settings).await?,
        };
        if settings.migrate {
            store.migrate().await?;
        }
        if settings.enabled {
            // Every queue this binary's executors name has its row, for tools without
            // the executors (the CLI) to find and to set limits on.
            for queue in queues.queues() {
                store
                    .ops()
                    .queue_register(&settings.application_name, &queue.name)
                    .await?;
            }
            // Records know their queue: those written before (by an older version, or
            // before an executor moved) are put in the queue this build gives them.
            for (queue, executors) in queues.record_queues() {
                let moved = store
                    .ops()
                    .queue_assign(&settings.application_name, queue, &executors)
                    .await?;
                if moved > 0 {
                    crate::log::info!(queue, moved, "requests put in their executors' queue");
                }
            }
        }
        let clock = Arc::new(Clock::new(settings.simulated_clock_offset_ms));
        let listeners = crate::operate::listeners::Notifier::start(
            listeners,
            settings.application_name.as_str().into(),
        )
        .map_err(|e| Error::Config {
            setting: "on_success",
            reason: format!("could not start the outcome listeners' thread: {e}"),
        })?;
        let (dispatcher, inbox) = Dispatcher::new(settings.channel_capacity);
        let owner: Arc<str> =
            crate::base::identity::instance_name(&settings.application_name).into();
        let control = Arc::new(crate::work::control::Control::for_executors(
            registry.defs(),
        ));
        let shared = Shared {
            store,
            application: settings.application_name.as_str().into(),
            owner,
            clock,
            registry: Arc::new(registry),
            data: Arc::new(data),
            skip: Default::default(),
            control,
            queues: Arc::new(queues),
            shutdown: CancellationToken::new(),
            handed_back: Arc::new(AtomicU64::new(0)),
            listeners: Arc::new(listeners),
        };
        let Core {
            pool,
            completer,
            completer_task,
            executor,
            claimer,
        } = Core::assemble(&settings, &shared);
        let Shared {
            store,
            application: app,
            owner,
            clock,
            registry,
            data,
            skip,
            control,
            queues: _,
            shutdown,
            handed_back,
            listeners,
        } = shared;
        let inner = Arc::new(Inner {
            app,
            owner,
            leases: store.lease_keeper(),
            skip,
            control,
            idle_inbox: Mutex::new(None),
            workers_on: Arc::new(AtomicBool::new(false)),
            clock,
            store,
            registry,
            data,
            dispatcher,
            pool,
            completer,
            executor,
            claimer,
            shutdown,
            completer_stop: CancellationToken::new(),
            closed: AtomicBool::new(false),
            handed_back,
            tasks: Mutex::new(Vec::new()),
            listeners,
            pulses: Default::default(),
            held: Mutex::new(Vec::new()),
            delayed_jobs: Default::default(),
            open_txs: Default::default(),
            schedules,
            settings,
        });
        let runtime = Runtime {
            inner: inner.clone(),
        };
        let s = &inner.settings;
        inner.workers_on.store(
            s.enabled && s.run_workers && s.test_mode.is_none(),
            Ordering::Release,
        );
        // Before any part runs: the database's clock read, this instance announced and the
        // pauses read (the skip list and the paused executors are known from the first
        // claim). Three statements of their own, at once.
        let (presence, control) = (runtime.presence(), runtime.control_part());
        let (synced, announced, paused) = tokio::join!(
            inner.clock.sync(&*inner.store),
            presence.announce_first(),
            control.refresh_pauses(),
        );
        synced.inspect_err(|error| {
            crate::log::error!(error = %crate::log::escaped(&error), "could not read the database's clock");
        })?;
        if let Err(error) = announced {
            crate::log::warn!(error = %crate::log::escaped(&error), "could not announce this instance in async_instance");
        }
        if let Err(error) = paused {
            crate::log::warn!(error = %crate::log::escaped(&error), "could not read the paused executors (async_pause) at start");
        }
        runtime.spawn_parts(inbox, completer_task);
        runtime.spawn_control();
        if s.enabled && s.run_workers {
            // Only a warning, looked for beside the first claims rather than before them:
            // the statement reads every waiting record, long for a large backlog.
            let (store, app, registry) = (
                inner.store.clone(),
                inner.app.clone(),
                inner.registry.clone(),
            );
            tokio::spawn(async move {
                warn_of_records_filed_elsewhere(&*store, &app, &registry).await;
            });
        }
        if inner.settings.install_global {
            *GLOBAL.write().expect("global runtime lock") = Some(runtime.clone());
        }
        crate::log::info!(
            application = %crate::log::escaped(&inner.app),
            owner = %crate::log::escaped(&inner.owner),
            backend = inner.store.backend_name(),
            executors = inner.registry.names().len(),
            "async-exec runtime started"
        );
        Ok(runtime)
    }

    /// The settings in force.
    pub fn settings(&self) -> &Settings {
        &self.inner.settings
    }

    /// This instance's name, as written in `lease_owner`, `async_log.worker` and
    /// `async_instance.owner`: `application@host:pid:<32 hex digits>`, the 128 random
    /// bits unique to this runtime.
    pub fn instance(&self) -> &str {
        &self.inner.owner
    }

    /// The `Data<T>` registered on the builder, if any.
    pub fn data<T: Send + Sync + 'static>(&self) -> Option<crate::Data<T>> {
        self.inner.data.get::<T>()
    }

    /// The names of the executors linked into this binary, sorted.
    pub fn executors(&self) -> &[&'static str] {
        self.inner.registry.names()
    }

    /// Outcome events dropped because the listeners were behind (their queue of
    /// [`LISTENER_QUEUE`](crate::LISTENER_QUEUE) events was full); see
    /// [`Builder::on_success`](crate::Builder::on_success).
    pub fn listener_drops(&self) -> u64 {
        self.inner.listeners.dropped()
    }

    /// Waits until every dispatched call has run and its outcome is written.
    pub async fn wait_idle(&self) {
        loop {
            let written = self.inner.completer.written().notified();
            if self.inner.dispatcher.is_empty() && self.inner.pool.is_idle() {
                return;
            }
            tokio::select! {
                _ = written => {}
                _ = tokio::time::sleep(Duration::from_millis(5)) => {}
            }
        }
    }

    /// Stops gracefully: refuses new calls, stops claiming, waits up to `shutdown_grace`
    /// for running bodies, then stops the rest; writes every outcome it can; hands every
    /// other record this instance claimed back to the queue at once (no lease expiry, no
    /// attempt counted; by id and attempt, so never a record another instance of the
    /// same name holds), except those of bodies that could not be stopped
    /// ([`ShutdownReport::unstopped`]), and uninstalls itself as the global runtime. Every
    /// wait is bounded: it returns even when the database is gone or its connections went silent
    /// (then it says so), within `shutdown_grace`, plus 5 s when bodies had to be stopped,
    /// plus three statement bounds ([`statement_bound`](crate::statement_bound) of the
    /// lease: two for the parts to stop, one to hand the records back).
    pub async fn shutdown(&self) -> Result<ShutdownReport> {
        let inner = &self.inner;
        if inner.closed.swap(true, Ordering::AcqRel) {
            return Ok(ShutdownReport::default());
        }
        inner.shutdown.cancel();
        let running_at_start = inner.pool.running();
        let finished = inner.pool.wait(inner.settings.shutdown_grace).await;
        let mut stopped = 0;
        if !finished {
            let aborted = inner.pool.abort_all();
            stopped = aborted.len() as u64;
            crate::log::warn!(requests = ?aborted, "shutdown grace expired: stopping running bodies");
            inner.pool.wait(Duration::from_secs(5)).await;
        }
        inner.completer_stop.cancel();
        let tasks: Vec<JoinHandle<()>> =
            std::mem::take(&mut *inner.tasks.lock().expect("tasks lock"));
        let parts_stop_by = tokio::time::Instant::now()
            + crate::store::bounded::statement_bound(inner.settings.lease) * PART_STOP_BOUNDS;
        for task in tasks {
            let abort = task.abort_handle();
            if tokio::time::timeout_at(parts_stop_by, task).await.is_err() {
                crate::log::error!("a runtime part did not stop in time; aborting it");
                abort.abort();
            }
        }
        let unwritten = inner.pool.finished_unwritten();
        // Only what this instance's pool holds, at the attempt it claimed: never a record
        // a twin (an instance of the same name) holds, nor one whose body may still run.
        let (hand_back, unstopped) = inner.pool.to_hand_back();
        if unstopped > 0 {
            crate::log::error!(
                unstopped,
                "shutdown: {unstopped} body(ies) did not stop (a blocking call?); their \
                 records are not handed back and run again once their lease expires"
            );
        }
        let released = inner
            .store
            .lease_release(&inner.owner, &hand_back, inner.now_ms())
            .await;
        self.uninstall();
        let released = released.inspect_err(|error| {
            crate::log::error!(error = %crate::log::escaped(&error), "could not hand back the records this instance holds; \
                they run again when their lease expires");
        })?;
        let report = ShutdownReport {
            finished,
            completed: (running_at_start as u64).saturating_sub(stopped),
            released: released + inner.handed_back.load(Ordering::Acquire),
            unwritten: unwritten.len() as u64,
            unstopped: unstopped as u64,
        };
        crate::log::info!(?report, "async-exec runtime stopped");
        Ok(report)
    }

    /// Stops at once, as if the process had died: running bodies are dropped, outcomes not
    /// yet written are lost, leases are not released. For tests of crash recovery.
    pub fn abort(&self) {
        let inner = &self.inner;
        inner.closed.store(true, Ordering::Release);
        inner.shutdown.cancel();
        inner.pool.abort_all();
        for task in inner.tasks.lock().expect("tasks lock").drain(..) {
            task.abort();
        }
        self.uninstall();
    }

    fn uninstall(&self) {
        let mut global = GLOBAL.write().expect("global runtime lock");
        if global
            .as_ref()
            .is_some_and(|rt| Arc::ptr_eq(&rt.inner, &self.inner))
        {
            *global = None;
        }
    }
}

/// Warns when waiting records of this binary's executors carry another application name:
/// records that a renamed application (or one that relied on the old default, the
/// executable's name) left behind, which this runtime will not run.
async fn warn_of_records_filed_elsewhere(
    store: &dyn Store,
    application: &str,
    registry: &Registry,
) {
    match store
        .request_count_elsewhere(application, registry.names())
        .await
    {
        Ok(elsewhere) => {
            for (other, waiting) in elsewhere {
                crate::log::warn!(
                    application,
                    other_application = %crate::log::escaped(&other),
                    waiting,
                    "{waiting} waiting requests of this binary's executors are filed under \
                     application `{other}`, not `{application}`, and will not run here: if they \
                     are this application's, start it with `.application_name(\"{other}\")`"
                );
            }
        }
        // The runtime was shut down meanwhile: nothing to warn of.
        Err(crate::Error::Database(sqlx::Error::PoolClosed)) => {}
        Err(error) => {
            crate::log::warn!(error = %crate::log::escaped(&error), "could not look for requests filed under other application names")
        }
    }
}

impl Inner {
    /// The attempts a record of `def` gets.
    pub(crate) fn max_attempts_of(&self, def: &ExecutorDef) -> u32 {
        self.executor.max_attempts_of(def)
    }

    /// Now, by the database's clock (unix ms).
    pub(crate) fn now_ms(&self) -> i64 {
        self.clock.now_ms()
    }

    pub(crate) fn lease_ms(&self) -> i64 {
        self.settings.lease.as_millis() as i64
    }

    pub(crate) fn check_open(&self) -> Result<()> {
        if !self.settings.enabled {
            return Err(Error::Disabled);
        }
        if self.closed.load(Ordering::Acquire) {
            return Err(Error::ShutDown);
        }
        Ok(())
    }

    /// A new `init` record for a call.
    pub(crate) fn new_request(
        &self,
        def: &'static ExecutorDef,
        params: Arc<str>,
        key: Option<String>,
        priority: i32,
        run_at: i64,
        trace: Option<&TraceContext>,
    ) -> NewRequest {
        self.executor
            .new_request(def, params, key, priority, run_at, trace)
    }

    /// Whether calls run inline (test mode) instead of through the workers.
    pub(crate) fn test_mode(&self) -> Option<TestMode> {
        self.settings.test_mode
    }
}

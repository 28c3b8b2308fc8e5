//! What the parts share and the parts every runtime has: [`Shared`], the handles made
//! once at start, and [`Core`], the pool, the completer, the executor and the claimer,
//! built from them (`assemble.rs` says what each part gets).

use std::sync::atomic::AtomicU64;
use std::sync::Arc;

use tokio_util::sync::CancellationToken;

use crate::sweeps::clock::Clock;
use crate::work::claimer::{Claimer, ClaimerConfig, ClaimerParts};
use crate::work::control::Control;

use crate::base::data::DataMap;
use crate::base::registry::Registry;
use crate::base::settings::Settings;
use crate::store::Store;
use crate::sweeps::instances::SkipList;
use crate::work::completer::Completer;
use crate::work::completer::CompleterTask;
use crate::work::executor::{Executor, ExecutorConfig, ExecutorParts, ExecutorPool};

/// The handles the parts share, made once at start.
#[derive(Debug)]
pub(crate) struct Shared {
    pub(crate) store: Arc<dyn Store>,
    pub(crate) application: Arc<str>,
    /// This instance's name in `lease_owner` and `async_log.worker`.
    pub(crate) owner: Arc<str>,
    pub(crate) clock: Arc<Clock>,
    pub(crate) registry: Arc<Registry>,
    pub(crate) data: Arc<DataMap>,
    pub(crate) skip: SkipList,
    /// Paused executors and finished counts (the console's `async_pause`, `async_stat`).
    pub(crate) control: Arc<Control>,
    /// Which executors are claimed only within their queue's limits.
    pub(crate) queues: Arc<crate::base::queue::QueuePlan>,
    /// Stops the producer and the sweeps, and starting bodies.
    pub(crate) shutdown: CancellationToken,
    pub(crate) handed_back: Arc<AtomicU64>,
    /// The outcome listeners' queue.
    pub(crate) listeners: Arc<crate::operate::listeners::Notifier>,
}

#[cfg(test)]
impl Shared {
    /// The handles of a runtime with the one executor `def`, on `store`, for tests of
    /// the parts on their own (no runtime started).
    pub(crate) fn for_tests(
        store: Arc<dyn Store>,
        application: Arc<str>,
        owner: &str,
        clock: Arc<Clock>,
        def: &'static crate::base::registry::ExecutorDef,
    ) -> Shared {
        Shared {
            store,
            application,
            owner: owner.into(),
            clock,
            registry: Arc::new(Registry::from_defs([def]).expect("one executor")),
            data: Default::default(),
            skip: Default::default(),
            control: Default::default(),
            queues: Arc::new(
                crate::base::queue::QueuePlan::new(&[def], &Default::default())
                    .expect("no queue limits"),
            ),
            shutdown: CancellationToken::new(),
            handed_back: Arc::new(AtomicU64::new(0)),
            listeners: Default::default(),
        }
    }
}

/// The parts every runtime has, whether it runs workers or not (a submit-only instance
/// runs `Thread` calls and failed in-memory calls' retry records through them too).
#[derive(Debug)]
pub(crate) struct Core {
    pub(crate) pool: Arc<ExecutorPool>,
    pub(crate) completer: Arc<Completer>,
    /// The completer's task state, to spawn.
    pub(crate) completer_task: CompleterTask,
    pub(crate) executor: Arc<Executor>,
    pub(crate) claimer: Arc<Claimer>,
}

impl Core {
    /// Builds the pool, the completer, the executor and the claimer.
    pub(crate) fn assemble(settings: &Settings, shared: &Shared) -> Core {
        let pool = Arc::new(ExecutorPool::new(settings.concurrency));
        let (completer, completer_task) =
            Completer::new(shared.store.clone(), pool.clone(), shared.listeners.clone());
        let completer = Arc::new(completer);
        let executor = Arc::new(Executor::new(
            ExecutorParts {
                pool: pool.clone(),
                data: shared.data.clone(),
                clock: shared.clock.clone(),
                completer: completer.clone(),
                store: shared.store.clone(),
                application: shared.application.clone(),
                owner: shared.owner.clone(),
                control: shared.control.clone(),
                secrets: settings.secrets.clone(),
            },
            ExecutorConfig::from_settings(settings),
        ));
        let claimer = Arc::new(Claimer::new(
            ClaimerParts {
                store: shared.store.clone(),
                application: shared.application.clone(),
                registry: shared.registry.clone(),
                owner: shared.owner.clone(),
                clock: shared.clock.clone(),
                roster: crate::sweeps::instances::Roster::new(
                    shared.store.clone(),
                    shared.application.clone(),
                    shared.owner.clone(),
                    &shared.registry,
                    settings.lease,
                    shared.skip.clone(),
                ),
                control: shared.control.clone(),
                queues: shared.queues.clone(),
                executor: executor.clone(),
                shutdown: shared.shutdown.clone(),
                handed_back: shared.handed_back.clone(),
            },
            ClaimerConfig::from_settings(settings),
        ));
        Core {
            pool,
            completer,
            completer_task,
            executor,
            claimer,
        }
    }
}

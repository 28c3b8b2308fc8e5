//! The queue gauges: every `queue_sample_interval` one statement counts the records that
//! may still run by executor and status, and sets `async_exec_queue_depth{executor,status}`
//! and `async_exec_oldest_waiting_seconds{executor}`. Sampled, not counted per call: a job
//! costs nothing here. Every instance that runs workers samples the application's whole
//! queue (so several instances report the same numbers: take their maximum, never their
//! sum). A gauge once set is set every sample after, to 0 when its records are gone, and
//! this binary's executors are reported from the first sample on, at 0 while they have
//! nothing waiting.
//!
//! It holds the store, the application, the registry (to label known executors with their
//! static names), the database's clock, and the gauges it has set.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex};

use metrics::SharedString;

use crate::base::error::Result;
use crate::base::record::Status;
use crate::base::registry::Registry;
use crate::operate::metrics::{oldest_waiting, queue_depth, round, Sweep};
use crate::store::Store;
use crate::sweeps::clock::Clock;

/// The statuses a queue gauge is kept for: those of records that may still run.
const QUEUED: [Status; 3] = [Status::Init, Status::Running, Status::Failed];

/// Samples the queue into gauges. See the [module docs](self).
pub(crate) struct QueueSampler {
    store: Arc<dyn Store>,
    application: Arc<str>,
    registry: Arc<Registry>,
    clock: Arc<Clock>,
    /// The executors whose gauges have been set.
    shown: Mutex<BTreeSet<SharedString>>,
}

impl std::fmt::Debug for QueueSampler {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("QueueSampler")
            .field("application", &self.application)
            .finish_non_exhaustive()
    }
}

impl QueueSampler {
    pub(crate) fn new(
        store: Arc<dyn Store>,
        application: Arc<str>,
        registry: Arc<Registry>,
        clock: Arc<Clock>,
    ) -> Self {
        let shown = registry
            .names()
            .iter()
            .map(|name| SharedString::const_str(name))
            .collect();
        QueueSampler {
            store,
            application,
            registry,
            clock,
            shown: Mutex::new(shown),
        }
    }

    /// An executor's label: its static name when this binary knows it.
    fn label(&self, executor: String) -> SharedString {
        match self.registry.get(&executor) {
            Some(def) => SharedString::const_str(def.name),
            None => SharedString::from(executor),
        }
    }

    /// Takes one sample and sets the gauges. A failed sample is counted in
    /// `async_exec_sweep_failures_total{sweep="queue_sampler"}` and leaves them as they were.
    pub(crate) async fn sample(&self) -> Result<()> {
        let now = self.clock.now_ms();
        let counts = self.store.ops().queue_depth(&self.application, now);
        let counts = crate::store::bounded::bounded_op(&*self.store, "queue_depth", counts).await;
        let counts = round(Sweep::QueueSampler, counts)?;
        let mut depth: BTreeMap<(SharedString, &'static str), i64> = BTreeMap::new();
        let mut oldest: BTreeMap<SharedString, i64> = BTreeMap::new();
        for count in counts {
            let executor = self.label(count.executor);
            if let Some(due) = count.oldest_due {
                let earliest = oldest.entry(executor.clone()).or_insert(due);
                *earliest = (*earliest).min(due);
            }
            *depth.entry((executor, count.status.as_str())).or_default() += count.count;
        }
        let mut shown = self.shown.lock().expect("gauges lock");
        shown.extend(depth.keys().map(|(executor, _)| executor.clone()));
        for executor in shown.iter() {
            for status in QUEUED {
                let key = (executor.clone(), status.as_str());
                let n = depth.get(&key).copied().unwrap_or(0);
                queue_depth(key.0, key.1, n as f64);
            }
            let waited_ms = oldest.get(executor).map_or(0, |due| (now - due).max(0));
            oldest_waiting(executor.clone(), waited_ms as f64 / 1000.0);
        }
        Ok(())
    }
}

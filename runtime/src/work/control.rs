//! Operator control that every instance obeys, and the counts operators look at:
//!
//! - Pauses: executors listed in `async_pause` are not claimed. Each instance re-reads the
//!   table every [`PAUSE_REFRESH`]; a pause made through this runtime counts at once.
//! - Policies: the rows of `async_queue` (a queue's, or an executor's in no queue under
//!   its name) are re-read with the pauses; a paused policy pauses its executors, and its
//!   other overrides (attempts, backoff, timeout, priority boost) are what the executor
//!   reads ([`Control::overrides_of`]).
//! - Statistics: finished attempts are counted in memory per executor and minute and
//!   added to `async_stat` every [`STAT_FLUSH`] (they survive `delete_on_success`); the
//!   queue depth is sampled into `async_depth` once a minute. Rows older than
//!   [`STAT_KEEP_MS`] are pruned. [`ControlPart::finished_since`] reads the table and adds
//!   this instance's counts not written yet, so that the console's charts show the
//!   current minute.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, RwLock};
use std::time::Duration;

use rustc_hash::FxHashMap;
use tokio_util::sync::CancellationToken;

use crate::base::policy::Overrides;
use crate::base::query::{MinuteStat, QueuePolicy, StatDelta};
use crate::store::bounded::bounded_op;
use crate::store::ops::{minute_of, QueueStatDelta};
use crate::store::{CompletionResult, Store};
use crate::sweeps::clock::Clock;

/// How often every instance re-reads the paused executors.
pub(crate) const PAUSE_REFRESH: Duration = Duration::from_secs(1);

/// How often counted outcomes are added to `async_stat`.
const STAT_FLUSH: Duration = Duration::from_secs(2);

/// How often the queue depth is sampled.
const DEPTH_SAMPLE: Duration = Duration::from_secs(60);

/// The round of each [`DEPTH_SAMPLE`] period (counted in [`PAUSE_REFRESH`]es from start)
/// in which the queue depth is sampled.
const DEPTH_FIRST_TICK: u64 = 5;

/// How long statistics are kept: two days (the charts show one).
const STAT_KEEP_MS: i64 = 2 * 24 * 3600 * 1000;

/// Pauses and counts, shared by the runtime's parts.
#[derive(Debug, Default)]
pub(crate) struct Control {
    paused: RwLock<Arc<Vec<String>>>,
    /// Each executor's policy name: its queue, or its own name.
    policy_names: Vec<(&'static str, &'static str)>,
    /// The policy overrides in force, by executor; empty when no policy overrides
    /// anything (then a lookup is a read lock and an empty map's miss).
    overrides: RwLock<Arc<FxHashMap<&'static str, Overrides>>>,
    /// `(executor, minute)` to succeeded, failed (dead), retried. Counted on every job:
    /// a fast hash (the keys are the binary's executor names and times).
    counts: Mutex<FxHashMap<(&'static str, i64), [i64; 3]>>,
    /// Each executor's queue, for executors in one.
    queue_of: FxHashMap<&'static str, &'static str>,
    /// `(queue, minute)` to started, finished: attempts of the queue's executors, added
    /// to `async_queue_stat` with the other counts (the flow view's rate).
    queue_counts: Mutex<FxHashMap<(&'static str, i64), [i64; 2]>>,
}

impl Control {
    /// The control of a runtime whose executors are `defs`.
    pub(crate) fn for_executors<'a>(
        defs: impl Iterator<Item = &'a crate::base::registry::ExecutorDef>,
    ) -> Self {
        let defs: Vec<_> = defs.collect();
        Control {
            policy_names: defs
                .iter()
                .map(|d| (d.name, d.queue.unwrap_or(d.name)))
                .collect(),
            queue_of: defs
                .iter()
                .filter_map(|d| d.queue.map(|q| (d.name, q)))
                .collect(),
            ..Control::default()
        }
    }

    /// What policies override of `executor` now.
    pub(crate) fn overrides_of(&self, executor: &str) -> Overrides {
        let overrides = self.overrides.read().expect("policy lock");
        if overrides.is_empty() {
            return Overrides::default();
        }
        overrides.get(executor).copied().unwrap_or_default()
    }

    /// Takes the stored policy rows: their overrides by executor. Returns the executors
    /// that a paused policy pauses.
    pub(crate) fn set_policies(&self, rows: &[QueuePolicy]) -> Vec<String> {
        let mut by_executor = FxHashMap::default();
        let mut paused = Vec::new();
        for row in rows {
            let overrides = Overrides::of(row);
            if overrides.is_none() {
                continue;
            }
            for &(executor, _) in self.policy_names.iter().filter(|(_, n)| *n == row.queue) {
                by_executor.insert(executor, overrides);
                if overrides.paused {
                    paused.push(executor.to_string());
                }
            }
        }
        *self.overrides.write().expect("policy lock") = Arc::new(by_executor);
        paused
    }

    /// Whether claims of `executor` are paused.
    pub(crate) fn is_paused(&self, executor: &str) -> bool {
        self.paused
            .read()
            .expect("pause lock")
            .iter()
            .any(|p| p == executor)
    }

    /// The executors of `names` whose claims are not paused: the one hook of pauses in
    /// the claims of due records.
    pub(crate) fn claimable(&self, names: &[&'static str]) -> Vec<&'static str> {
        let paused = self.paused.read().expect("pause lock").clone();
        names
            .iter()
            .copied()
            .filter(|name| !paused.iter().any(|p| p == name))
            .collect()
    }

    /// Replaces the paused set; whether an executor was resumed.
    pub(crate) fn set_paused(&self, mut paused: Vec<String>) -> bool {
        paused.sort();
        let mut current = self.paused.write().expect("pause lock");
        let resumed = current.iter().any(|p| !paused.contains(p));
        *current = Arc::new(paused);
        resumed
    }

    /// Counts the outcome of one attempt of `executor`, finished at `now` (unix ms).
    pub(crate) fn count(&self, executor: &'static str, result: &CompletionResult, now: i64) {
        self.count_in_queue(executor, 1, now);
        let slot = match result {
            CompletionResult::Delete | CompletionResult::Succeeded => 0,
            // A cancelled run ended without success: counted with the dead.
            CompletionResult::Dead { .. } | CompletionResult::Cancelled { .. } => 1,
            CompletionResult::Failed { .. } => 2,
            CompletionResult::Snoozed { .. } => return, // neither a success nor a failure
        };
        let mut counts = self.counts.lock().expect("stat lock");
        counts.entry((executor, minute_of(now))).or_default()[slot] += 1;
    }

    /// Counts an attempt of `executor` that starts now (unix ms), for its queue's rate.
    pub(crate) fn count_start(&self, executor: &'static str, now: i64) {
        self.count_in_queue(executor, 0, now);
    }

    /// Adds one to `slot` (0: started, 1: finished) of `executor`'s queue, if it has one.
    fn count_in_queue(&self, executor: &'static str, slot: usize, now: i64) {
        let Some(&queue) = self.queue_of.get(executor) else {
            return;
        };
        let mut counts = self.queue_counts.lock().expect("stat lock");
        counts.entry((queue, minute_of(now))).or_default()[slot] += 1;
    }

    /// The starts and finishes not written yet of minutes from `since_minute` on, by
    /// queue.
    pub(crate) fn queue_pending_since(
        &self,
        since_minute: i64,
    ) -> FxHashMap<&'static str, [i64; 2]> {
        let counts = self.queue_counts.lock().expect("stat lock");
        let mut by_queue: FxHashMap<&'static str, [i64; 2]> = FxHashMap::default();
        for (&(queue, minute), &[started, finished]) in counts.iter() {
            if minute >= since_minute {
                let sum = by_queue.entry(queue).or_default();
                sum[0] += started;
                sum[1] += finished;
            }
        }
        by_queue
    }

    fn take_queue_counts(&self) -> Vec<QueueStatDelta> {
        let counts = std::mem::take(&mut *self.queue_counts.lock().expect("stat lock"));
        counts
            .into_iter()
            .map(|((queue, minute), [started, finished])| QueueStatDelta {
                queue,
                minute,
                started,
                finished,
            })
            .collect()
    }

    /// Puts queue counts that could not be written back.
    fn restore_queue_counts(&self, deltas: Vec<QueueStatDelta>) {
        let mut counts = self.queue_counts.lock().expect("stat lock");
        for d in deltas {
            let slot = counts.entry((d.queue, d.minute)).or_default();
            slot[0] += d.started;
            slot[1] += d.finished;
        }
    }

    /// The counts not written yet of minutes from `since_minute` on, summed over the
    /// executors, by minute.
    fn pending_since(&self, since_minute: i64) -> Vec<MinuteStat> {
        let counts = self.counts.lock().expect("stat lock");
        let mut by_minute: Vec<MinuteStat> = Vec::new();
        for (&(_, minute), &[succeeded, failed, retried]) in counts.iter() {
            if minute < since_minute {
                continue;
            }
            add_to(
                &mut by_minute,
                MinuteStat {
                    minute,
                    succeeded,
                    failed,
                    retried,
                },
            );
        }
        by_minute
    }

    fn take_counts(&self) -> Vec<StatDelta> {
        let counts = std::mem::take(&mut *self.counts.lock().expect("stat lock"));
        counts
            .into_iter()
            .map(
                |((executor, minute), [succeeded, failed, retried])| StatDelta {
                    executor,
                    minute,
                    succeeded,
                    failed,
                    retried,
                },
            )
            .collect()
    }

    /// Puts counts that could not be written back, to be written with the next ones.
    fn restore(&self, deltas: Vec<StatDelta>) {
        let mut counts = self.counts.lock().expect("stat lock");
        for d in deltas {
            let slot = counts.entry((d.executor, d.minute)).or_default();
            slot[0] += d.succeeded;
            slot[1] += d.failed;
            slot[2] += d.retried;
        }
    }
}

/// Adds `stat` to the minute of `series` it falls in, or inserts it in minute order.
fn add_to(series: &mut Vec<MinuteStat>, stat: MinuteStat) {
    match series.binary_search_by_key(&stat.minute, |s| s.minute) {
        Ok(i) => {
            let s = &mut series[i];
            s.succeeded += stat.succeeded;
            s.failed += stat.failed;
            s.retried += stat.retried;
        }
        Err(i) => series.insert(i, stat),
    }
}

/// Wakes the producer to claim waiting records from the store (the dispatcher's
/// `StoreWaker`): what the control part holds, knowing nothing of the dispatcher.
pub(crate) trait LookInStore: std::fmt::Debug + Send + Sync {
    /// Wakes the producer to claim waiting records from the store.
    fn look_in_store(&self);
}

/// The control part: pauses re-read, counts flushed, depth sampled, old statistics
/// pruned. It holds the shared [`Control`], the store, its application, the clock, whether
/// this instance runs workers (only workers sample the depth) and the producer's waker.
#[derive(Debug, Clone)]
pub(crate) struct ControlPart {
    pub(crate) control: Arc<Control>,
    pub(crate) store: Arc<dyn Store>,
    pub(crate) application: Arc<str>,
    pub(crate) clock: Arc<Clock>,
    pub(crate) workers: Arc<AtomicBool>,
    pub(crate) waker: Arc<dyn LookInStore>,
}

impl ControlPart {
    /// Re-reads the pauses and the policies of this application; wakes the producer when
    /// an executor was resumed, so that its waiting records are claimed at once.
    pub(crate) async fn refresh_pauses(&self) -> crate::Result<()> {
        let ops = self.store.ops();
        let store = &*self.store;
        let paused = bounded_op(store, "pause_list", ops.pause_list(&self.application)).await?;
        let policies = ops.queue_policy_list(&self.application);
        let policies = bounded_op(store, "queue_policy_list", policies).await?;
        let mut paused: Vec<String> = paused.into_iter().map(|p| p.executor).collect();
        paused.extend(self.control.set_policies(&policies));
        paused.dedup();
        let resumed = self.control.set_paused(paused);
        if resumed {
            self.waker.look_in_store();
        }
        Ok(())
    }

    /// Attempts finished per minute from `since_minute` on: every instance's written to
    /// `async_stat`, plus this instance's counted since its last write (up to
    /// [`STAT_FLUSH`] old). The table is read first, then the memory: counts that a write
    /// moves from one to the other in between are left out of this answer (they show in
    /// the next), never counted twice.
    pub(crate) async fn finished_since(&self, since_minute: i64) -> crate::Result<Vec<MinuteStat>> {
        let mut series = self
            .store
            .ops()
            .stat_series(&self.application, since_minute)
            .await?;
        for stat in self.control.pending_since(since_minute) {
            add_to(&mut series, stat);
        }
        Ok(series)
    }

    /// Adds the counted outcomes to `async_stat`.
    async fn flush_counts(&self) {
        let queued = self.control.take_queue_counts();
        if !queued.is_empty() {
            let add = self.store.ops().queue_stat_add(&self.application, &queued);
            if let Err(error) = bounded_op(&*self.store, "queue_stat_add", add).await {
                crate::log::warn!(error = %crate::log::escaped(&error), "could not add to async_queue_stat; trying again with the next counts");
                self.control.restore_queue_counts(queued);
            }
        }
        let deltas = self.control.take_counts();
        if deltas.is_empty() {
            return;
        }
        let add = self.store.ops().stat_add(&self.application, &deltas);
        if let Err(error) = bounded_op(&*self.store, "stat_add", add).await {
            crate::log::warn!(error = %crate::log::escaped(&error), "could not add to async_stat; trying again with the next counts");
            self.control.restore(deltas);
        }
    }

    /// Runs until `stop` (the completer's, after the workers), then flushes the last counts.
    pub(crate) async fn run(&self, stop: CancellationToken) {
        let mut ticks: u64 = 0;
        // Warned of an unreadable pause table since it last worked: say it once, not every second.
        let mut warned = false;
        let depth_every = DEPTH_SAMPLE.as_secs() / PAUSE_REFRESH.as_secs();
        let flush_every = STAT_FLUSH.as_secs() / PAUSE_REFRESH.as_secs();
        loop {
            // The start read the pauses before the first claim: the first round is one
            // refresh later.
            tokio::select! {
                _ = stop.cancelled() => break,
                _ = tokio::time::sleep(PAUSE_REFRESH) => {}
            }
            ticks += 1;
            match self.refresh_pauses().await {
                Ok(()) => warned = false,
                Err(error) if !warned => {
                    warned = true;
                    crate::log::warn!(error = %crate::log::escaped(&error), "could not read the paused executors (async_pause); \
                        trying again every second, pauses known before stay in force");
                }
                Err(error) => {
                    crate::log::debug!(error = %crate::log::escaped(&error), "could not read the paused executors")
                }
            }
            if ticks % flush_every == 0 {
                self.flush_counts().await;
            }
            // A few seconds after start (not amid its first claims: at a large backlog the
            // count is long), then every minute.
            if ticks % depth_every == DEPTH_FIRST_TICK && self.workers.load(Ordering::Acquire) {
                // Bounded as the pauses' reads are: this loop reads them, and a sample
                // caught by a silent connection would stop it for good.
                let now = self.clock.now_ms();
                let (ops, store) = (self.store.ops(), &*self.store);
                let sample = ops.depth_sample(&self.application, minute_of(now));
                if let Err(error) = bounded_op(store, "depth_sample", sample).await {
                    crate::log::warn!(error = %crate::log::escaped(&error), "could not sample the queue depth into async_depth");
                }
                let prune = ops.stat_prune(minute_of(now - STAT_KEEP_MS));
                if let Err(error) = bounded_op(store, "stat_prune", prune).await {
                    crate::log::warn!(error = %crate::log::escaped(&error), "could not prune async_stat");
                }
            }
        }
        self.flush_counts().await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paused_executors_are_not_claimable_and_resuming_is_noticed() {
        let control = Control::default();
        assert!(!control.set_paused(vec!["b".into()]));
        assert_eq!(control.claimable(&["a", "b", "c"]), vec!["a", "c"]);
        assert!(control.is_paused("b"));
        assert!(control.set_paused(vec![]));
        assert_eq!(control.claimable(&["a", "b"]), vec!["a", "b"]);
    }

    #[test]
    fn outcomes_are_counted_by_executor_and_minute() {
        let control = Control::default();
        control.count("a", &CompletionResult::Delete, 60_001);
        control.count("a", &CompletionResult::Succeeded, 119_999);
        control.count("a", &CompletionResult::Dead { error: "x".into() }, 60_000);
        control.count(
            "a",
            &CompletionResult::Failed {
                error: "x".into(),
                run_at: 0,
            },
            120_000,
        );
        let mut deltas = control.take_counts();
        deltas.sort_by_key(|d| d.minute);
        assert_eq!(deltas.len(), 2);
        assert_eq!(
            (deltas[0].minute, deltas[0].succeeded, deltas[0].failed),
            (60_000, 2, 1)
        );
        assert_eq!((deltas[1].minute, deltas[1].retried), (120_000, 1));
        assert!(control.take_counts().is_empty());
    }

    #[test]
    fn counts_not_written_yet_are_summed_by_minute_into_the_series() {
        let control = Control::default();
        control.count("a", &CompletionResult::Delete, 120_001);
        control.count("b", &CompletionResult::Succeeded, 120_500);
        control.count("b", &CompletionResult::Dead { error: "x".into() }, 180_000);
        control.count("a", &CompletionResult::Delete, 1_000); // before `since`
        let pending = control.pending_since(60_000);
        assert_eq!(
            pending.iter().map(|s| s.minute).collect::<Vec<_>>(),
            [120_000, 180_000]
        );
        assert_eq!((pending[0].succeeded, pending[1].failed), (2, 1));
        // Not taken: the next write still has them.
        assert_eq!(control.take_counts().len(), 4);
        let mut series = vec![
            MinuteStat {
                minute: 60_000,
                succeeded: 1,
                ..Default::default()
            },
            MinuteStat {
                minute: 180_000,
                succeeded: 5,
                ..Default::default()
            },
        ];
        for stat in pending {
            add_to(&mut series, stat);
        }
        let minutes: Vec<(i64, i64, i64)> = series
            .iter()
            .map(|s| (s.minute, s.succeeded, s.failed))
            .collect();
        assert_eq!(minutes, [(60_000, 1, 0), (120_000, 2, 0), (180_000, 5, 1)]);
    }
}

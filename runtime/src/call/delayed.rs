//! Delayed in-memory calls: the jobs a runtime in a test mode holds for `run_due` while
//! they wait for their delay, and the count of timers of delayed stored records.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use crate::work::executor::Job;

/// A delayed in-memory job: taken by its timer, or by `run_due` if that comes first.
#[derive(Debug, Clone, Default)]
pub(crate) struct Slot(Arc<Mutex<Option<Job>>>);

impl Slot {
    /// The job, unless it was taken already.
    pub(crate) fn take(&self) -> Option<Job> {
        self.0.lock().expect("delayed job lock").take()
    }

    fn is_taken(&self) -> bool {
        self.0.lock().expect("delayed job lock").is_none()
    }
}

/// The delayed in-memory jobs of a runtime in a test mode, waiting for their delay; and
/// the count of timers of delayed stored records (see [`STORED_TIMERS_MAX`]).
#[derive(Debug, Default)]
pub(crate) struct DelayedJobs(Mutex<Vec<Slot>>, AtomicUsize);

/// What a delayed record's due time adds to its delay, so that it never ends early
/// though the due time is written before the commit returns: a transaction that returns
/// within half of it after the call leaves the due time as written; a longer one moves it
/// (one `UPDATE` after the commit, [`crate::store::Store::request_postpone`]) to this
/// much past the delay counted from that update, by the database's clock. A delayed call
/// starts up to this much after its delay, never before.
pub(crate) const DELAY_SLACK_MS: i64 = 20;

/// The most timers of delayed stored records an instance keeps at once: each holds its
/// job (arguments included) in memory. Records past it start by the sweep.
pub(crate) const STORED_TIMERS_MAX: usize = 10_000;

/// Delayed stored records due within this long get a timer on the instance that wrote
/// them; later ones start by the sweep (`retry_interval`), memory not growing with them.
pub(crate) const STORED_TIMER_HORIZON: std::time::Duration = std::time::Duration::from_secs(900);

impl DelayedJobs {
    /// Counts a timer of a delayed stored record, unless [`STORED_TIMERS_MAX`] are
    /// running; `false` then.
    pub(crate) fn start_stored_timer(&self) -> bool {
        self.1
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| {
                (n < STORED_TIMERS_MAX).then_some(n + 1)
            })
            .is_ok()
    }

    /// A timer of a delayed stored record ended.
    pub(crate) fn end_stored_timer(&self) {
        self.1.fetch_sub(1, Ordering::AcqRel);
    }

    /// A slot for `job`; kept here (for `run_due`) when `keep`, a test mode.
    pub(crate) fn hold(&self, job: Job, keep: bool) -> Slot {
        let slot = Slot(Arc::new(Mutex::new(Some(job))));
        if keep {
            let mut slots = self.0.lock().expect("delayed jobs lock");
            slots.retain(|slot| !slot.is_taken());
            slots.push(slot.clone());
        }
        slot
    }

    /// Every job still waiting for its delay, taken from its timer.
    pub(crate) fn take_all(&self) -> Vec<Job> {
        let slots = std::mem::take(&mut *self.0.lock().expect("delayed jobs lock"));
        slots.iter().filter_map(Slot::take).collect()
    }
}

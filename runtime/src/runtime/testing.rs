//! What an application's own tests drive: [`Runtime::run_due`], which runs everything
//! waiting (delayed calls and retries included) without waiting for its time; and the
//! delayed in-memory calls it takes from their timers.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use crate::base::error::{Error, Result};
use crate::runtime::Runtime;
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
    fn take_all(&self) -> Vec<Job> {
        let slots = std::mem::take(&mut *self.0.lock().expect("delayed jobs lock"));
        slots.iter().filter_map(Slot::take).collect()
    }
}

/// What [`Runtime::run_due`] did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct RunDueReport {
    /// Executions that succeeded.
    pub succeeded: usize,
    /// Executions that failed (each retried in a later round, until it succeeds or its
    /// attempts are spent and it is `dead`).
    pub failed: usize,
    /// Times a waiting call was made due before its time (a delay or a retry backoff
    /// cut short); a call that waits twice counts twice.
    pub hurried: u64,
}

impl Runtime {
    /// Runs everything waiting, now, and returns when it has all finished: held calls,
    /// records due, delayed calls (stored or in memory) before their delay ends, and
    /// retries before their backoff ends, round after round until nothing is left (a
    /// request that keeps failing runs until its attempts are spent and it is `dead`).
    /// Everything runs in the caller's task: no polling, no sleeping for a delay.
    ///
    /// Only in a test mode ([`TestMode`](crate::TestMode)): elsewhere it would run other
    /// instances' waiting work early, and it is refused with
    /// [`Error::NotInTestMode`]. Paused executors are left alone.
    ///
    /// ```no_run
    /// use std::time::Duration;
    /// use async_exec::{async_exec, Runtime, TestMode};
    ///
    /// #[async_exec(type = SaveAsync, max_attempts = 5)]
    /// async fn send_reminder(user_id: i64) -> anyhow::Result<()> {
    ///     Ok(())
    /// }
    ///
    /// # async fn demo() -> async_exec::Result<()> {
    /// let rt = Runtime::builder().test_mode(TestMode::Hold).start().await?;
    /// send_reminder(7).delay(Duration::from_secs(86_400)).on(&rt).await?;
    /// let report = rt.run_due().await?; // runs it now, not tomorrow
    /// assert_eq!(report.succeeded, 1);
    /// # Ok(()) }
    /// ```
    pub async fn run_due(&self) -> Result<RunDueReport> {
        let inner = &self.inner;
        if inner.test_mode().is_none() {
            return Err(Error::NotInTestMode("run_due"));
        }
        let mut report = RunDueReport::default();
        loop {
            let mut ran = 0;
            for job in inner.delayed_jobs.take_all() {
                match inner.execute_inline(job).await? {
                    Some(true) => report.succeeded += 1,
                    Some(false) => report.failed += 1,
                    None => {}
                }
                ran += 1;
                report.hurried += 1;
            }
            report.hurried += inner.store.request_make_due(&inner.app).await?;
            let drained = self.drain().await?;
            report.succeeded += drained.succeeded;
            report.failed += drained.failed;
            if ran + drained.succeeded + drained.failed == 0 {
                return Ok(report);
            }
        }
    }
}

//! After a commit: committed jobs handed to the workers (through the channel, on a timer
//! when delayed, directly for `Thread`, held or run inline in a test mode), a full
//! channel's overflow, and the inline execution of test modes and [`Runtime::drain`].

use std::sync::Arc;

use crate::base::error::Result;
use crate::base::settings::TestMode;
use crate::base::strategy::Strategy;
use crate::call::delayed::STORED_TIMER_HORIZON;
use crate::runtime::{Inner, Runtime};
use crate::store::{ClaimIds, DueKind};
use crate::work::dispatcher::uses_channel;
use crate::work::executor::{log_if_dead, Job};
impl Inner {
    /// Hands committed jobs to the workers: through the channel, directly (`Thread`), or
    /// inline in a test mode. The delayed ones last: their timers start as the caller's
    /// `commit` returns, so that a delay never ends before it passed since then (what the
    /// others' hand-over takes, an overflow's write say, does not count in it).
    pub(crate) async fn after_commit(self: &Arc<Self>, mut jobs: Vec<Job>) {
        jobs.sort_by_key(|job| job.delay.is_some());
        // Their start latency counts from here (one clock reading per commit).
        let committed = if jobs.is_empty() {
            0
        } else {
            self.clock.now_ms()
        };
        for mut job in jobs {
            let delay = job.delay.take();
            let delay_ms = delay.map_or(0, |d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX));
            job.due = Some(committed.saturating_add(delay_ms));
            if let (Some(delay), Some(_)) = (delay, &job.record) {
                self.start_when_due(job, delay);
                continue;
            }
            match delay {
                Some(delay) => {
                    let inner = self.clone();
                    let slot = self.delayed_jobs.hold(job, self.test_mode().is_some());
                    tokio::spawn(async move {
                        tokio::time::sleep(delay).await;
                        // Unless `run_due` took it first.
                        if let Some(job) = slot.take() {
                            inner.dispatch_one(job).await;
                        }
                    });
                }
                None => self.dispatch_one(job).await,
            }
        }
    }

    /// A delayed stored record: started by a timer here when its delay ends (counted from
    /// the commit, by this instance's reading of the database's clock), rather than by
    /// the next sweep up to `retry_interval` later. Only for delays within
    /// [`STORED_TIMER_HORIZON`] and while fewer than [`crate::call::delayed::STORED_TIMERS_MAX`] timers run;
    /// the others, and every record in a test mode (`run_due` takes them from the
    /// store), are left to the sweep. The timer hands the record to the channel; its claim
    /// takes it only while it is still waiting (`init`).
    fn start_when_due(self: &Arc<Self>, job: Job, delay: std::time::Duration) {
        if self.test_mode().is_some()
            || delay > STORED_TIMER_HORIZON
            || !self.delayed_jobs.start_stored_timer()
        {
            return;
        }
        let inner = self.clone();
        tokio::spawn(async move {
            tokio::time::sleep(delay).await;
            inner.delayed_jobs.end_stored_timer();
            if inner.check_open().is_ok() {
                inner.dispatch_one(job).await;
            }
        });
    }

    async fn dispatch_one(self: &Arc<Self>, job: Job) {
        match self.test_mode() {
            Some(TestMode::Inline) => {
                if let Err(error) = self.execute_inline(job).await {
                    crate::log::error!(error = %crate::log::escaped(&error), "test mode: could not run a call inline");
                }
                return;
            }
            Some(TestMode::Hold) => {
                if job.record.is_none() {
                    self.held.lock().expect("held lock").push(job);
                }
                return;
            }
            None => {}
        }
        if !self.workers_on.load(std::sync::atomic::Ordering::Acquire) {
            // Submit-only: stored requests are for the instances that run workers.
            if job.record.is_none() {
                self.spawn_direct(job);
            }
            return;
        }
        if !uses_channel(job.def.strategy) {
            self.spawn_direct(job);
        } else if let Err(job) = self.dispatcher.try_dispatch(job) {
            self.overflowed(job).await;
        }
    }

    /// A job the channel could not take. Stored ones wait in the store for the producer.
    async fn overflowed(self: &Arc<Self>, job: Job) {
        if job.record.is_some() {
            return;
        }
        if job.def.strategy == Strategy::AsyncSave {
            // Persist it rather than lose it: it runs from the store like a SaveAsync call.
            let request = self.new_request(
                job.def,
                job.params.clone(),
                None,
                0,
                self.now_ms(),
                job.trace.as_ref(),
            );
            if let Err(error) = self.store.request_insert(&request).await {
                crate::log::error!(executor = job.def.name, error = %crate::log::escaped(&error), "channel full and store failing: running in memory");
                self.spawn_direct(job);
            }
            return;
        }
        crate::log::warn!(
            executor = job.def.name,
            "channel full: spawning the call directly"
        );
        self.spawn_direct(job);
    }

    /// Runs an in-memory job on its own task, outside the worker pool.
    fn spawn_direct(self: &Arc<Self>, job: Job) {
        self.executor.spawn_direct(job);
    }

    /// Runs a job to completion now, outcome written: test modes and [`Runtime::drain`].
    /// Returns whether it succeeded (`None` when a stored job could not be claimed).
    pub(crate) async fn execute_inline(&self, mut job: Job) -> Result<Option<bool>> {
        let max_attempts = self.max_attempts_of(job.def) as i32;
        if let Some(record) = &mut job.record {
            if record.attempt == 0 {
                let now = self.now_ms();
                let claimed = self
                    .store
                    .request_claim_ids(ClaimIds {
                        ids: &[record.id],
                        owner: &self.owner,
                        now,
                        lease_ms: self.lease_ms(),
                    })
                    .await?;
                let Some(claimed) = claimed.first() else {
                    return Ok(None);
                };
                record.attempt = claimed.attempt;
                record.max_attempts = max_attempts;
            }
        }
        let attempt = self.executor.run_body(&job).await;
        let ok = attempt.result.is_ok();
        match self.executor.completion_for(&mut job, &attempt) {
            Some(completion) => {
                log_if_dead(&completion, job.def.name);
                self.executor
                    .count(job.def.name, &completion, attempt.finished);
                self.completer.write_now(vec![completion]).await?;
            }
            None => self.executor.finish(job, attempt).await,
        }
        Ok(Some(ok))
    }
}

/// What [`Runtime::drain`] did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct DrainReport {
    /// Executions that succeeded.
    pub succeeded: usize,
    /// Executions that failed (now `failed` with a backoff, or `dead`).
    pub failed: usize,
}

impl Runtime {
    /// Runs, one after another in the caller's task, every held in-memory call and every
    /// record that is due now (`init`, and `failed` whose retry time has come), until none
    /// is left; a queue's records within its limits (a rate-limited queue's beyond its
    /// bucket are left). Retries whose backoff has not passed are left (set `retry_base_delay` to
    /// zero in tests to run them too). Meant for [`TestMode::Hold`], and works in any mode.
    pub async fn drain(&self) -> Result<DrainReport> {
        let inner = &self.inner;
        let mut report = DrainReport::default();
        loop {
            let mut jobs: Vec<Job> = std::mem::take(&mut *inner.held.lock().expect("held lock"));
            for kind in [DueKind::Stale { older_than: 0 }, DueKind::Scheduled] {
                jobs.extend(inner.claimer.claim_due(kind, 100).await?);
            }
            // And each queue's, within its limits (what runs of it counts: the records
            // claimed here run one after another and free their places as they finish).
            for queue in inner.claimer.queues() {
                jobs.extend(inner.claimer.claim_queue(queue, 100).await?);
            }
            if jobs.is_empty() {
                return Ok(report);
            }
            for job in jobs {
                match inner.execute_inline(job).await? {
                    Some(true) => report.succeeded += 1,
                    Some(false) => report.failed += 1,
                    None => {}
                }
            }
        }
    }
}

//! What an application's own tests drive: [`Runtime::run_due`], which runs everything
//! waiting (delayed calls and retries included) without waiting for its time, taking the
//! delayed in-memory calls from their timers (`call/delayed.rs`).

use crate::base::error::{Error, Result};
use crate::runtime::Runtime;

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

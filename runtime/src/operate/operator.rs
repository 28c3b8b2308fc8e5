//! What people who run the service look at and do beyond requests (the console, its
//! API): pauses of executors on every instance, the audit trail, per-minute statistics,
//! queue depth, attempt durations, the executors linked into this binary.

use std::time::Duration;

use serde::Serialize;

use crate::base::error::{Error, Result};
use crate::base::query::{AuditEntry, DepthSample, ExecutorCount, MinuteStat, Pause};
use crate::runtime::Runtime;
use crate::store::ops::minute_of;

/// An executor linked into this binary, as the console shows it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[non_exhaustive]
pub struct ExecutorInfo {
    /// Its stable name.
    pub name: String,
    /// The function's path.
    pub path: String,
    /// The sign (hash) of its persisted parameters' types.
    pub sign: String,
    /// Its persisted parameters, as written.
    pub signature: String,
    /// Its remark.
    pub remark: String,
    /// Its strategy.
    pub strategy: String,
    /// Attempts before a request goes `dead`.
    pub max_attempts: u32,
    /// How long one attempt may run (ms).
    pub timeout_ms: u64,
    /// Its schedule (`every`, `cron`), if it calls itself: `"every 1000 ms"`,
    /// `"cron 0 0 6 1 * * (UTC)"`.
    pub schedule: Option<String>,
    /// Its next three ticks (unix ms), for a scheduled executor.
    pub next_ticks: Vec<i64>,
}

impl Runtime {
    /// Pauses the claims of `executor` on every instance of this application: each stops
    /// claiming its records within about a second (this one at once); records already
    /// running finish. In-memory calls (`Async`, `AsyncSave`, `Thread`) still run.
    ///
    /// ```no_run
    /// # async fn demo(rt: async_exec::Runtime) -> async_exec::Result<()> {
    /// rt.pause_executor("mail::send", "alice").await?;   // the mail server is down
    /// rt.resume_executor("mail::send", "alice").await?;  // back: the backlog drains
    /// # Ok(()) }
    /// ```
    ///
    /// Refused with [`Error::Config`] for a name that is no executor's: neither linked
    /// into this binary, nor announced by a live instance of the application, nor named
    /// by its requests (the command-line tool knows the services' executors these ways).
    pub async fn pause_executor(&self, executor: &str, actor: &str) -> Result<()> {
        if !self.names_an_executor(executor).await? {
            return Err(Error::Config {
                setting: "pause",
                reason: format!(
                    "no executor is named {:?}: pause one by its stable name (the console's \
                     executors page and `async-exec stats` list them)",
                    crate::base::text::capped(executor, 100)
                ),
            });
        }
        let now = self.inner.now_ms();
        let ops = self.inner.store.ops();
        ops.pause_set(&self.inner.app, executor, actor, now).await?;
        let target = serde_json::json!({ "executor": executor }).to_string();
        self.audit(&self.inner.app, actor, "pause", target, 0)
            .await?;
        self.control_part().refresh_pauses().await
    }

    /// Whether `name` is an executor's: linked into this binary, announced by a live
    /// instance, or named by requests of the application.
    async fn names_an_executor(&self, name: &str) -> Result<bool> {
        if self.inner.registry.defs().any(|d| d.name == name)
            || super::policy::announced(self, name).await?
        {
            return Ok(true);
        }
        let counts = self.counts_by_executor().await?;
        Ok(counts.iter().any(|c| c.executor == name))
    }

    /// Resumes the claims of `executor` on every instance; whether it was paused.
    pub async fn resume_executor(&self, executor: &str, actor: &str) -> Result<bool> {
        let ops = self.inner.store.ops();
        let was = ops.pause_clear(&self.inner.app, executor).await?;
        let target = serde_json::json!({ "executor": executor }).to_string();
        self.audit(&self.inner.app, actor, "resume", target, 0)
            .await?;
        self.control_part().refresh_pauses().await?;
        Ok(was)
    }

    /// Sets the limits of `queue` on every instance of the application, overriding the
    /// builder's ([`Builder::queue`](crate::Builder::queue)) from the next claim of the
    /// queue on (claims read them under the queue's lock): `QueueLimits::new()` with
    /// neither limit clears the override (the builder's apply again). Written to the audit
    /// trail as `queue-limits` by `actor`. Refused for a queue that no executor names (of
    /// this binary, or of a service that started on this database), for limits of 0
    /// or above 100,000, and for limits with
    /// [`max_waiting`](crate::QueueLimits::max_waiting) or
    /// [`singleton`](crate::QueueLimits::singleton) or
    /// [`sequence`](crate::QueueLimits::sequence), set on the builder only (nothing is
    /// changed then).
    ///
    /// ```no_run
    /// # async fn demo(rt: async_exec::Runtime) -> async_exec::Result<()> {
    /// use async_exec::QueueLimits;
    /// // The gateway is struggling: one charge at a time, everywhere, now.
    /// rt.set_queue_limits("payments", QueueLimits::new().concurrency(1), "alice").await?;
    /// // Back to what the service was started with.
    /// rt.set_queue_limits("payments", QueueLimits::new(), "alice").await?;
    /// # Ok(()) }
    /// ```
    pub async fn set_queue_limits(
        &self,
        queue: &str,
        limits: crate::QueueLimits,
        actor: &str,
    ) -> Result<()> {
        crate::base::queue::check(queue, &limits, false)?;
        if limits.rate_limit().is_some() && limits.rate_period_ms() != 1_000 {
            return Err(Error::Config {
                setting: "queue",
                reason: format!(
                    "queue {:?}: a rate set while running is per second (.rate(n)); a rate \
                     per minute, hour or day (.rate_per) is set on the builder: nothing was \
                     changed",
                    crate::base::text::capped(queue, 100)
                ),
            });
        }
        if let Some(waiting) = limits.max_waiting_limit() {
            // Not kept by this call: writing the others as "none" would clear them.
            return Err(Error::Config {
                setting: "queue",
                reason: format!(
                    "queue {queue:?}: max_waiting ({waiting}) is a quota set on the builder \
                     (Builder::queue); set_queue_limits sets concurrency, per_instance and \
                     rate only: nothing was changed"
                ),
            });
        }
        if limits.is_singleton() || limits.sequence_mode().is_some() {
            return Err(Error::Config {
                setting: "queue",
                reason: format!(
                    "queue {queue:?}: singleton and sequence are modes set on the builder \
                     (Builder::queue); set_queue_limits sets concurrency, per_instance and \
                     rate only: nothing was changed"
                ),
            });
        }
        self.known_queue(queue).await?;
        let ops = self.inner.store.ops();
        let now = self.inner.now_ms();
        let values = (
            limits.concurrency_limit().map(i64::from),
            limits.per_instance_limit().map(i64::from),
            limits.rate_limit().map(i64::from),
        );
        ops.queue_policy_set(&self.inner.app, queue, values, actor, now)
            .await?;
        let target = serde_json::json!({
            "queue": queue,
            "concurrency": values.0,
            "per_instance": values.1,
            "rate": values.2,
        })
        .to_string();
        self.audit(&self.inner.app, actor, "queue-limits", target, 0)
            .await
    }

    /// Refuses, with [`Error::Config`], a queue that no executor names (of this binary,
    /// or of a service that started on this database).
    pub(crate) async fn known_queue(&self, queue: &str) -> Result<()> {
        let plan = self.inner.claimer.queue_plan();
        // A tool without the service's executors (the CLI) knows the queues that some
        // instance's executors name (each has a row, made at start).
        if plan.has(queue) {
            return Ok(());
        }
        let stored = self
            .inner
            .store
            .ops()
            .queue_policy_list(&self.inner.app)
            .await?;
        if stored.iter().any(|p| p.queue == queue) {
            return Ok(());
        }
        let claimed: Vec<&str> = stored.iter().map(|p| p.queue.as_str()).collect();
        Err(Error::Config {
            setting: "queue",
            reason: format!(
                "no executor names queue {:?}; the queues the executors name: {}; the queues \
                 the services' executors name: {}",
                crate::base::text::capped(queue, 100),
                plan.names(),
                if claimed.is_empty() {
                    "none".to_string()
                } else {
                    claimed.join(", ")
                }
            ),
        })
    }

    /// The application's queues (named by the executors of a service that started on
    /// this database) and the limits set while running
    /// ([`set_queue_limits`](Runtime::set_queue_limits)).
    pub async fn queue_policies(&self) -> Result<Vec<crate::QueuePolicy>> {
        self.inner
            .store
            .ops()
            .queue_policy_list(&self.inner.app)
            .await
    }

    /// The executors of this application whose claims are paused.
    pub async fn paused(&self) -> Result<Vec<Pause>> {
        self.inner.store.ops().pause_list(&self.inner.app).await
    }

    /// The last `limit` operator actions on this application, newest first.
    pub async fn audit_trail(&self, limit: i64) -> Result<Vec<AuditEntry>> {
        self.inner
            .store
            .ops()
            .audit_list(&self.inner.app, limit.clamp(1, 10_000))
            .await
    }

    /// Attempts finished per minute over the last `span`, by the minute they finished
    /// in: every instance's, counted in memory and written every two seconds, plus this
    /// instance's not written yet (so the current minute is up to date for what this
    /// instance ran). Minutes without any are left out.
    ///
    /// ```no_run
    /// # async fn demo(rt: async_exec::Runtime) -> async_exec::Result<()> {
    /// let last_hour = rt.finished_per_minute(std::time::Duration::from_secs(3600)).await?;
    /// let dead: i64 = last_hour.iter().map(|m| m.failed).sum();
    /// println!("{dead} requests went dead in the last hour");
    /// # Ok(()) }
    /// ```
    pub async fn finished_per_minute(&self, span: Duration) -> Result<Vec<MinuteStat>> {
        let since = minute_of(self.inner.now_ms() - span.as_millis() as i64);
        self.control_part().finished_since(since).await
    }

    /// The queue depth sampled once a minute over the last `span`.
    pub async fn queue_depth(&self, span: Duration) -> Result<Vec<DepthSample>> {
        let since = minute_of(self.inner.now_ms() - span.as_millis() as i64);
        self.inner
            .store
            .ops()
            .depth_series(&self.inner.app, since)
            .await
    }

    /// Requests of this application counted by executor and status (zeros left out).
    pub async fn counts_by_executor(&self) -> Result<Vec<ExecutorCount>> {
        self.inner
            .store
            .ops()
            .request_count_by_executor(&self.inner.app)
            .await
    }

    /// How long the longest-waiting due request has waited, if any waits.
    pub async fn oldest_waiting(&self) -> Result<Option<Duration>> {
        let now = self.inner.now_ms();
        let due = self.oldest_waiting_due().await?;
        Ok(due.map(|due| Duration::from_millis((now - due).max(0) as u64)))
    }

    /// When the longest-waiting due request was due (unix ms, the database's clock).
    pub(crate) async fn oldest_waiting_due(&self) -> Result<Option<i64>> {
        self.inner
            .store
            .ops()
            .request_oldest_waiting(&self.inner.app, self.inner.now_ms())
            .await
    }

    /// The durations of the last `limit` logged attempts of `executor` (ms), newest
    /// first: failures always, successes with `log_success` on, of requests still kept.
    pub async fn attempt_durations(&self, executor: &str, limit: i64) -> Result<Vec<i64>> {
        self.inner
            .store
            .ops()
            .log_durations(&self.inner.app, executor, limit.clamp(1, 100_000))
            .await
    }

    /// How many requests of this application each instance holds `running` now.
    pub async fn running_by_instance(&self) -> Result<Vec<(String, i64)>> {
        self.inner
            .store
            .ops()
            .request_count_running_by_owner(&self.inner.app)
            .await
    }

    /// The executors linked into this binary, by name.
    pub fn executor_infos(&self) -> Vec<ExecutorInfo> {
        let inner = &self.inner;
        let schedules = self.schedules(3);
        inner
            .registry
            .names()
            .iter()
            .filter_map(|name| inner.registry.get(name))
            .map(|def| ExecutorInfo {
                name: def.name.to_string(),
                path: def.path.to_string(),
                sign: def.sign.to_string(),
                signature: def.signature.to_string(),
                remark: def.remark.to_string(),
                strategy: def.strategy.as_str().to_string(),
                max_attempts: inner.max_attempts_of(def),
                timeout_ms: inner.executor.timeout_of(def).as_millis() as u64,
                schedule: def.schedule.map(|schedule| schedule.describe()),
                next_ticks: schedules
                    .iter()
                    .find(|s| s.executor == def.name)
                    .map(|s| s.next.clone())
                    .unwrap_or_default(),
            })
            .collect()
    }

    /// This runtime's application name.
    pub fn application(&self) -> &str {
        &self.inner.app
    }
}

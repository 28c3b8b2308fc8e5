//! The executor: runs bodies, one execution at a time per worker permit, each in a
//! `tracing` span, with errors, panics and timeouts caught and turned into outcomes, which
//! it hands to the completer (stored jobs) or writes itself (the retry record of a failed
//! in-memory call).
//!
//! It holds what a body run needs and nothing else: the `Data<T>` values to inject, the
//! database's clock, the completer's sending end, the store (for failed in-memory calls),
//! this instance's name, the [`ExecutorPool`] it runs in, and its [`ExecutorConfig`].
//! What an attempt leads to (the completion, a failed in-memory call's retry record) is
//! in [`outcome`].

mod outcome;
mod progress;

pub(crate) use outcome::log_if_dead;

use std::panic::AssertUnwindSafe;
use std::sync::Arc;
use std::time::Duration;

use futures_util::FutureExt;
use tokio::sync::OwnedSemaphorePermit;
use tokio_util::sync::CancellationToken;
use tracing::Instrument;

use crate::base::context::Context;
use crate::base::data::DataMap;
use crate::base::outcome::{Failure, FailureKind};
use crate::base::record::{NewRequest, RequestId, Status};
use crate::base::registry::{ExecutorDef, Invocation};
use crate::base::settings::Settings;
use crate::base::trace::{scope_baggage, TraceContext};
use crate::store::{Completion, Store};
use crate::sweeps::clock::Clock;
use crate::work::completer::Completer;
use crate::work::control::Control;

pub(crate) use super::pool::ExecutorPool;
use super::pool::FlightStart;

/// One execution to perform.
#[derive(Debug)]
pub(crate) struct Job {
    pub(crate) def: &'static ExecutorDef,
    pub(crate) params: Arc<str>,
    pub(crate) trace: Option<TraceContext>,
    /// For in-memory jobs: wait this long after commit before dispatching.
    pub(crate) delay: Option<Duration>,
    /// The record it runs for; `None` for the in-memory strategies.
    pub(crate) record: Option<RecordRef>,
    /// When it became due to start, by the database's clock (unix ms): its commit, or its
    /// due time as claimed from the store. `None` for a body that runs in its call
    /// (`SyncSave`). What `async_exec_start_latency_seconds` counts from.
    pub(crate) due: Option<i64>,
}

/// The record behind a stored job, as claimed.
#[derive(Debug, Clone)]
pub(crate) struct RecordRef {
    pub(crate) id: RequestId,
    pub(crate) attempt: i32,
    pub(crate) max_attempts: i32,
    /// The sign the arguments were written with.
    pub(crate) sign: Arc<str>,
    /// The call's idempotency key, for the outcome listeners.
    pub(crate) key: Option<String>,
    /// Not started by then (unix ms, the database's clock), it must not start at all.
    pub(crate) deadline: Option<i64>,
}

/// What one run of a body did.
#[derive(Debug)]
pub(crate) struct Attempt {
    pub(crate) started: i64,
    pub(crate) finished: i64,
    pub(crate) result: Result<(), Failure>,
    /// Whether its record asked the body to stop (a cancel, its deadline) while it ran.
    pub(crate) stopped: Option<crate::base::record::StopAsked>,
    /// The JSON of the body's value, when its record keeps it.
    pub(crate) result_json: Option<String>,
}

/// The settings the executor reads, taken from [`Settings`] (validated there).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct ExecutorConfig {
    /// The timeout of an executor without `timeout = ...`.
    pub(crate) default_timeout: Duration,
    /// The attempts of an executor without `max_attempts = ...`.
    pub(crate) default_max_attempts: u32,
    /// Whether a success deletes its record (else marks it `success`).
    pub(crate) delete_on_success: bool,
    /// Whether a success gets an `async_log` row too.
    pub(crate) log_success: bool,
    /// The backoff of retries: the first delay, and the cap.
    pub(crate) retry_base_delay: Duration,
    pub(crate) retry_max_delay: Duration,
    /// How long a claim's lease lasts.
    pub(crate) lease: Duration,
    /// How long past its timeout a body's lease is still renewed (one heartbeat).
    pub(crate) heartbeat_interval: Duration,
    /// How long an idempotency key protects (for the records it writes).
    pub(crate) key_retention: Duration,
    /// How the execution span relates to the caller's OpenTelemetry span.
    pub(crate) trace_propagation: crate::TracePropagation,
}

impl ExecutorConfig {
    /// The executor's settings among the runtime's.
    pub(crate) fn from_settings(settings: &Settings) -> Self {
        ExecutorConfig {
            default_timeout: settings.default_timeout,
            default_max_attempts: settings.default_max_attempts,
            delete_on_success: settings.delete_on_success,
            log_success: settings.log_success,
            retry_base_delay: settings.retry_base_delay,
            retry_max_delay: settings.retry_max_delay,
            lease: settings.lease,
            heartbeat_interval: settings.heartbeat_interval,
            key_retention: settings.key_retention,
            trace_propagation: settings.trace_propagation,
        }
    }
}

/// Runs bodies and hands their outcomes on. See the [module docs](self).
pub(crate) struct Executor {
    /// The worker permits and the stored jobs held; every body runs on its task tracker.
    pub(crate) pool: Arc<ExecutorPool>,
    data: Arc<DataMap>,
    clock: Arc<Clock>,
    completer: Arc<Completer>,
    /// Where the retry record of a failed in-memory call is written.
    store: Arc<dyn Store>,
    /// The application whose records it writes.
    application: Arc<str>,
    /// This instance's name, in `async_log.worker` and the completions' fence.
    owner: Arc<str>,
    /// Where finished attempts are counted (`async_stat`).
    control: Arc<Control>,
    /// Opens the sealed (`#[secret]`) arguments before a body decodes them.
    secrets: crate::base::secret::Keyring,
    /// Where stored bodies' `ctx.progress(..)` goes.
    progress: crate::base::context::ProgressTo,
    config: ExecutorConfig,
}

impl std::fmt::Debug for Executor {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Executor")
            .field("owner", &self.owner)
            .field("config", &self.config)
            .finish_non_exhaustive()
    }
}

/// What an executor is made of: the shared handles it uses.
#[derive(Debug)]
pub(crate) struct ExecutorParts {
    pub(crate) pool: Arc<ExecutorPool>,
    pub(crate) data: Arc<DataMap>,
    pub(crate) clock: Arc<Clock>,
    pub(crate) completer: Arc<Completer>,
    pub(crate) store: Arc<dyn Store>,
    pub(crate) application: Arc<str>,
    pub(crate) owner: Arc<str>,
    pub(crate) control: Arc<Control>,
    pub(crate) secrets: crate::base::secret::Keyring,
}

impl Executor {
    pub(crate) fn new(parts: ExecutorParts, config: ExecutorConfig) -> Self {
        let ExecutorParts {
            pool,
            data,
            clock,
            completer,
            store,
            application,
            owner,
            control,
            secrets,
        } = parts;
        let progress = crate::base::context::ProgressTo(Arc::new(progress::ProgressWriter::new(
            store.clone(),
            application.clone(),
            owner.clone(),
            clock.clone(),
        )));
        Executor {
            pool,
            data,
            clock,
            completer,
            store,
            application,
            owner,
            control,
            secrets,
            progress,
            config,
        }
    }

    /// Counts a finished attempt for the statistics (`async_stat`).
    pub(crate) fn count(&self, executor: &'static str, completion: &Completion, finished: i64) {
        self.control.count(executor, &completion.result, finished);
    }

    /// The timeout of `def`'s bodies: its policy's, else the attribute's, else the
    /// runtime's.
    pub(crate) fn timeout_of(&self, def: &ExecutorDef) -> Duration {
        if let Some(timeout) = self.control.overrides_of(def.name).timeout {
            return timeout;
        }
        def.timeout_ms
            .map(Duration::from_millis)
            .unwrap_or(self.config.default_timeout)
    }

    /// The attempts a new record of `def` gets: its policy's, else the attribute's, else
    /// the runtime's.
    pub(crate) fn max_attempts_of(&self, def: &ExecutorDef) -> u32 {
        if let Some(n) = self.control.overrides_of(def.name).max_attempts {
            return n as u32;
        }
        def.max_attempts.unwrap_or(self.config.default_max_attempts)
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
        // A policy's boost is added to the priority of new requests.
        let priority = priority.saturating_add(self.control.overrides_of(def.name).priority_boost);
        NewRequest {
            application_name: self.application.clone(),
            executor: def.name,
            sign: def.sign,
            strategy: def.strategy.as_str(),
            status: Status::Init,
            exec_count: 0,
            max_attempts: self.max_attempts_of(def) as i32,
            param_json: params,
            remark: def.remark,
            idempotency_key: key,
            key_retention: self.config.key_retention.as_millis() as i64,
            priority,
            run_at,
            deadline_at: None,
            queue: def.queue.unwrap_or(""),
            partition: None,
            singleton: None,
            debounce: None,
            tags: Vec::new(),
            last_error: None,
            trace_json: trace.map(TraceContext::to_json),
            now: self.clock.now_ms(),
            notify: None,
            log: None,
        }
    }

    /// Runs `job` on its own task under `permit`; stored jobs' outcomes go to the
    /// completer. A stored job whose lease was lost while it waited is dropped, not run.
    pub(crate) fn spawn(self: &Arc<Self>, job: Job, permit: OwnedSemaphorePermit) {
        let record = job.record.as_ref().map(|r| (r.id, r.attempt));
        let mut lease_lost = CancellationToken::new();
        if let Some((id, attempt)) = record {
            // Registered before the task starts, so that its completion always finds it.
            let overrun = self.timeout_of(job.def) + self.config.heartbeat_interval;
            let now = self.clock.now_ms();
            let renew_until = now.saturating_add(overrun.as_millis() as i64);
            let deadline = job.record.as_ref().and_then(|r| r.deadline);
            let start = FlightStart {
                now,
                // A second reading of the clock only for the few records with a deadline.
                latest: deadline.map_or(now, |_| self.clock.latest_ms()),
                renew_until,
                lease_until: now + self.config.lease.as_millis() as i64,
                next_renewal_ms: self.config.heartbeat_interval.as_millis() as i64,
                deadline,
            };
            match self.pool.start_flight(id, attempt, start) {
                Some(token) => lease_lost = token,
                None => {
                    self.hand_back_unstarted(id, attempt);
                    return;
                }
            }
            // A start of its queue, for the flow view's rate.
            self.control.count_start(job.def.name, now);
        }
        let executor = self.clone();
        let handle = self.pool.tasks.spawn(async move {
            let mut attempt_run = executor.run_body_told(&job, lease_lost).await;
            drop(permit);
            if let Some((id, attempt)) = record {
                attempt_run.stopped = executor.pool.mark_done(id, attempt);
            }
            let attempt = attempt_run;
            executor.finish(job, attempt).await;
        });
        if let Some((id, attempt)) = record {
            self.pool.started(id, attempt, handle.abort_handle());
        }
    }

    /// A claimed record whose lease was lost or ran out, or that was asked to stop (a
    /// cancel, its deadline), or whose deadline passed, before a worker was free: its body
    /// did not start, so its attempt does not count (one asked to stop by a cancel ends
    /// `cancelled`; one past its deadline waits, unclaimable, and the stops sweep makes it
    /// `dead`). Handed back (on a task of the pool, which `wait_idle` and shutdown wait
    /// for) while this instance still holds it at that attempt; a record another instance
    /// took, or the rescuer moved on, is left alone.
    fn hand_back_unstarted(&self, id: RequestId, attempt: i32) {
        let (store, owner, now) = (self.store.clone(), self.owner.clone(), self.clock.now_ms());
        self.pool.tasks.spawn(async move {
            match store.lease_release(&owner, &[(id, attempt)], now).await {
                Ok(released) => crate::log::warn!(
                    request_id = id,
                    attempt,
                    released,
                    "not started: a claimed request lost its lease, was asked to stop \
                     (a cancel, its deadline) or saw its deadline pass, before a worker was free; handed back without \
                     counting the attempt (unless another instance holds it now)"
                ),
                Err(error) => crate::log::warn!(
                    request_id = id,
                    attempt,
                    error = %crate::log::escaped(&error),
                    "not started: the lease of a claimed request ran out before a worker was \
                     free, and it could not be handed back; it runs again once rescued"
                ),
            }
        });
    }

    /// Runs an in-memory job on its own task, outside the worker permits.
    pub(crate) fn spawn_direct(self: &Arc<Self>, job: Job) {
        let executor = self.clone();
        self.pool.tasks.spawn(async move {
            let attempt = executor.run_body(&job).await;
            executor.finish(job, attempt).await;
        });
    }

    /// Runs the body of `job` once: decodes, injects, enforces the timeout, catches panics.
    pub(crate) async fn run_body(&self, job: &Job) -> Attempt {
        self.run_body_told(job, CancellationToken::new()).await
    }

    /// [`Executor::run_body`], with the token its [`Context`] sees cancelled when the
    /// record's lease is lost.
    async fn run_body_told(&self, job: &Job, lease_lost: CancellationToken) -> Attempt {
        let def = job.def;
        let attempt = job.record.as_ref().map_or(1, |r| r.attempt.max(1) as u32);
        let trace = job.trace.clone().unwrap_or_default();
        let span = crate::log::info_span!(
            "async_exec",
            request_id = job.record.as_ref().map(|r| r.id),
            executor = def.name,
            attempt,
            strategy = def.strategy.as_str(),
            caller_span = trace.span,
            baggage = tracing::field::Empty,
        );
        if !trace.baggage.is_empty() {
            span.record("baggage", trace.baggage_field());
        }
        // A span id means something only in the process that made the call: read back
        // from a record (another instance, a retry after a restart) it may name an
        // unrelated span that happens to hold that id now.
        if let Some(caller) = trace.span.filter(|_| trace.local) {
            span.follows_from(tracing::Id::from_u64(caller));
        }
        trace.attach_to(&span, self.config.trace_propagation);
        // A value is kept only with a record that is kept after a success.
        let result_slot = (job.record.is_some() && !self.config.delete_on_success)
            .then(crate::base::results::ResultSlot::default);
        let params = match self.secrets.open(def.name, &job.params) {
            Ok(None) => Ok(job.params.clone()),
            Ok(Some(opened)) => Ok(opened.into()),
            Err(message) => Err(message),
        };
        let invocation = Invocation {
            def,
            params,
            stored_sign: job.record.as_ref().map(|r| r.sign.clone()),
            context: Context {
                request_id: job.record.as_ref().map(|r| r.id),
                attempt,
                executor: def.name,
                baggage: trace.baggage.clone(),
                key: job.record.as_ref().and_then(|r| r.key.clone()),
                lease_lost,
                progress: job.record.is_some().then(|| self.progress.clone()),
                steps: Default::default(),
            },
            data: self.data.clone(),
            result: result_slot.clone(),
        };
        let timeout = self.timeout_of(def);
        let started = self.clock.now_ms();
        crate::operate::metrics::started(def, job.due.map(|due| started - due));
        let began = std::time::Instant::now();
        let body = AssertUnwindSafe((def.run)(invocation)).catch_unwind();
        let result = match tokio::time::timeout(timeout, scope_baggage(trace.baggage, body))
            .instrument(span.clone())
            .await
        {
            Ok(Ok(result)) => result,
            Ok(Err(panic)) => Err(Failure::new(FailureKind::Panic, panic_message(&*panic))),
            Err(_) => Err(Failure::new(
                FailureKind::Timeout,
                format!(
                    "timed out after {timeout:?}; raise it with `timeout = \"...\"` on the attribute"
                ),
            )),
        };
        let finished = self.clock.now_ms();
        use crate::operate::metrics::Finished;
        let outcome = match &result {
            Ok(()) => Finished::Success,
            Err(failure) if failure.kind == FailureKind::Snoozed => Finished::Snoozed,
            Err(_) => Finished::Failure,
        };
        crate::operate::metrics::finished(def, outcome, began.elapsed());
        span.in_scope(|| match &result {
            Ok(()) => crate::log::debug!(elapsed_ms = finished - started, "executed"),
            // Not now, later: asked for by the body, not a failure. `until` is this
            // instance's reading of the database's clock plus the delay.
            Err(failure) if outcome == Finished::Snoozed => {
                let delay_ms = failure.snooze_delay().map_or(0, |d| d.as_millis() as i64);
                crate::log::info!(
                    delay_ms,
                    until = %crate::log::escaped(&until(finished.saturating_add(delay_ms))),
                    reason = %crate::log::escaped(&failure.message),
                    "snoozed"
                )
            }
            Err(failure) => crate::log::warn!(kind = failure.kind.as_str(), error = %crate::log::escaped(&failure.message), "execution failed"),
        });
        Attempt {
            started,
            finished,
            result,
            stopped: None,
            result_json: result_slot.and_then(|slot| slot.take()),
        }
    }
}

/// Unix ms as UTC (RFC 3339, milliseconds), for a log line.
fn until(unix_ms: i64) -> String {
    chrono::DateTime::from_timestamp_millis(unix_ms).map_or_else(
        || unix_ms.to_string(),
        |t| t.to_rfc3339_opts(chrono::SecondsFormat::Millis, true),
    )
}

fn panic_message(panic: &(dyn std::any::Any + Send)) -> String {
    format!("panicked: {}", crate::base::supervise::panic_text(panic))
}

//! Runs bodies: one execution at a time per permit, each in a `tracing` span, with errors,
//! panics and timeouts caught and turned into outcomes.

use std::collections::HashMap;
use std::panic::AssertUnwindSafe;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures_util::FutureExt;
use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use tokio::task::AbortHandle;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;
use tracing::Instrument;

use crate::backoff::retry_delay;
use crate::context::Context;
use crate::outcome::{Failure, FailureKind};
use crate::record::{AttemptLog, NewRequest, RequestId, Status};
use crate::registry::{ExecutorDef, Invocation};
use crate::runtime::Inner;
use crate::store::{Completion, CompletionResult};
use crate::strategy::Strategy;
use crate::text;
use crate::trace::{scope_baggage, TraceContext};

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
}

/// The record behind a stored job, as claimed.
#[derive(Debug, Clone)]
pub(crate) struct RecordRef {
    pub(crate) id: RequestId,
    pub(crate) attempt: i32,
    pub(crate) max_attempts: i32,
    /// The sign the arguments were written with.
    pub(crate) sign: Arc<str>,
}

/// What one run of a body did.
#[derive(Debug)]
pub(crate) struct Attempt {
    pub(crate) started: i64,
    pub(crate) finished: i64,
    pub(crate) result: Result<(), Failure>,
}

/// Runs the body of `job` once: decodes, injects, enforces the timeout, catches panics.
pub(crate) async fn run_body(inner: &Inner, job: &Job) -> Attempt {
    run_body_told(inner, job, CancellationToken::new()).await
}

/// [`run_body`], with the token its [`Context`] sees cancelled when the record's lease is
/// lost.
pub(crate) async fn run_body_told(
    inner: &Inner,
    job: &Job,
    lease_lost: CancellationToken,
) -> Attempt {
    let def = job.def;
    let attempt = job.record.as_ref().map_or(1, |r| r.attempt.max(1) as u32);
    let trace = job.trace.clone().unwrap_or_default();
    let span = tracing::info_span!(
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
    if let Some(caller) = trace.span {
        span.follows_from(tracing::Id::from_u64(caller));
    }
    let invocation = Invocation {
        def,
        params: job.params.clone(),
        stored_sign: job.record.as_ref().map(|r| r.sign.clone()),
        context: Context {
            request_id: job.record.as_ref().map(|r| r.id),
            attempt,
            executor: def.name,
            baggage: trace.baggage.clone(),
            lease_lost,
        },
        data: inner.data.clone(),
    };
    let timeout = inner.timeout_of(def);
    let started = inner.now_ms();
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
    let finished = inner.now_ms();
    span.in_scope(|| match &result {
        Ok(()) => tracing::debug!(elapsed_ms = finished - started, "executed"),
        Err(failure) => tracing::warn!(kind = failure.kind.as_str(), error = %failure.message, "execution failed"),
    });
    Attempt {
        started,
        finished,
        result,
    }
}

fn panic_message(panic: &(dyn std::any::Any + Send)) -> String {
    format!("panicked: {}", crate::supervise::panic_text(panic))
}

/// The completion to write for a stored job's attempt.
pub(crate) fn completion_for(inner: &Inner, record: &RecordRef, attempt: &Attempt) -> Completion {
    let settings = &inner.settings;
    // The log row, built only when it will be written (failures; successes on request).
    let log = |outcome: &str, error: Option<String>| AttemptLog {
        request_id: record.id,
        attempt: record.attempt,
        worker: inner.owner.to_string(),
        started: attempt.started,
        finished: attempt.finished,
        outcome: outcome.into(),
        error,
    };
    let (result, log) = match &attempt.result {
        Ok(()) => {
            let result = match settings.delete_on_success {
                true => CompletionResult::Delete,
                false => CompletionResult::Succeeded,
            };
            (result, settings.log_success.then(|| log("success", None)))
        }
        Err(failure) => (
            failed_result(inner, record.attempt, record.max_attempts, failure),
            Some(log(
                failure.kind.as_str(),
                Some(text::stored(&failure.message)),
            )),
        ),
    };
    Completion {
        id: record.id,
        attempt: record.attempt,
        owner: inner.owner.clone(),
        result,
        log,
    }
}

/// `failed` with a backoff while attempts remain and the failure is retryable, else `dead`;
/// its message sanitized and capped for storing.
fn failed_result(
    inner: &Inner,
    attempt: i32,
    max_attempts: i32,
    failure: &Failure,
) -> CompletionResult {
    if !failure.kind.is_retryable() {
        return CompletionResult::Dead {
            error: text::stored(&failure.message),
        };
    }
    if attempt >= max_attempts {
        return CompletionResult::Dead {
            error: text::stored(&format!(
                "gave up after {attempt} attempts; last: {}",
                failure.message
            )),
        };
    }
    let settings = &inner.settings;
    let delay = retry_delay(attempt, settings.retry_base_delay, settings.retry_max_delay);
    CompletionResult::Failed {
        error: text::stored(&failure.message),
        run_at: inner.now_ms() + delay.as_millis() as i64,
    }
}

/// The record to insert after an in-memory attempt failed (`SyncSave`, `AsyncSave`):
/// `failed` with a backoff, or `dead` when the failure is final or attempts are spent.
pub(crate) fn failure_record(
    inner: &Inner,
    job: &Job,
    attempt: &Attempt,
    key: Option<String>,
    priority: i32,
) -> Option<NewRequest> {
    let failure = attempt.result.as_ref().err()?;
    let max_attempts = inner.max_attempts_of(job.def) as i32;
    let (status, run_at, error) = match failed_result(inner, 1, max_attempts, failure) {
        CompletionResult::Failed { error, run_at } => (Status::Failed, run_at, error),
        CompletionResult::Dead { error } => (Status::Dead, attempt.finished, error),
        CompletionResult::Delete | CompletionResult::Succeeded => unreachable!("a failure"),
    };
    let mut request = inner.new_request(
        job.def,
        job.params.clone(),
        key,
        priority,
        run_at,
        job.trace.as_ref(),
    );
    request.status = status;
    request.exec_count = 1;
    request.last_error = Some(error);
    request.log = Some(AttemptLog {
        request_id: 0,
        attempt: 1,
        worker: inner.owner.to_string(),
        started: attempt.started,
        finished: attempt.finished,
        outcome: failure.kind.as_str().into(),
        error: Some(text::stored(&failure.message)),
    });
    Some(request)
}

/// A running stored job, as the heartbeat and shutdown see it.
#[derive(Debug)]
struct InFlight {
    attempt: i32,
    /// Past this time (unix ms) the body has overrun its timeout without yielding:
    /// its lease is no longer renewed, so that another worker can take the record.
    renew_until: i64,
    /// When the lease, as last set by this instance, ends (unix ms, this clock; taken
    /// before the statement that set it was sent, so never later than the database's).
    lease_until: i64,
    /// Cancelled when the lease ran out or was lost: the body's `Context` sees it.
    lease_lost: CancellationToken,
    /// Another instance holds the record now (or it is gone): not renewed again; the
    /// outcome, if any, is fenced.
    lost: bool,
    abort: Option<AbortHandle>,
    /// The body has run to its end; its outcome is on its way to the store.
    done: bool,
}

impl InFlight {
    fn new(attempt: i32, lease_until: i64) -> Self {
        InFlight {
            attempt,
            renew_until: i64::MAX,
            lease_until,
            lease_lost: CancellationToken::new(),
            lost: false,
            abort: None,
            done: false,
        }
    }

    fn lose(&mut self) {
        self.lost = true;
        self.lease_lost.cancel();
    }
}

/// The worker pool: a semaphore of `concurrency` permits and the jobs running under them.
#[derive(Debug)]
pub(crate) struct ExecutorPool {
    pub(crate) permits: Arc<Semaphore>,
    in_flight: Mutex<HashMap<RequestId, InFlight>>,
    /// Every body running in this instance, pooled or not.
    pub(crate) tasks: TaskTracker,
}

impl ExecutorPool {
    pub(crate) fn new(concurrency: usize) -> Self {
        ExecutorPool {
            permits: Arc::new(Semaphore::new(concurrency)),
            in_flight: Mutex::new(HashMap::new()),
            tasks: TaskTracker::new(),
        }
    }

    /// Runs `job` on its own task under `permit`; stored jobs' outcomes go to the completer.
    /// A stored job whose lease was lost, or ran out, while it waited is dropped, not run.
    pub(crate) fn spawn(&self, inner: Arc<Inner>, job: Job, permit: OwnedSemaphorePermit) {
        let record = job.record.as_ref().map(|r| (r.id, r.attempt));
        let mut lease_lost = CancellationToken::new();
        if let Some((id, attempt)) = record {
            // Registered before the task starts, so that its completion always finds it.
            let overrun = inner.timeout_of(job.def) + inner.settings.heartbeat_interval;
            let renew_until = inner.now_ms().saturating_add(overrun.as_millis() as i64);
            let mut in_flight = self.in_flight.lock().expect("in-flight lock");
            let flight = in_flight
                .entry(id)
                .and_modify(|f| {
                    if f.attempt != attempt {
                        *f = InFlight::new(attempt, inner.now_ms() + inner.lease_ms());
                    }
                })
                .or_insert_with(|| InFlight::new(attempt, inner.now_ms() + inner.lease_ms()));
            // Lost (taken over), or ran out (by this clock) before a renewal got through:
            // the record may be running elsewhere already. Its lease is left to expire
            // (the rescuer hands it back), as a lost one's is.
            if flight.lost || flight.lease_until <= inner.now_ms() {
                in_flight.remove(&id);
                tracing::warn!(
                    request_id = id,
                    "the lease of a claimed request was lost or ran out before a worker was \
                     free; not running it here (another instance may)"
                );
                return;
            }
            flight.renew_until = renew_until;
            lease_lost = flight.lease_lost.clone();
        }
        let handle = self.tasks.spawn(async move {
            let attempt = run_body_told(&inner, &job, lease_lost).await;
            drop(permit);
            if let Some((id, attempt)) = record {
                inner.pool.mark_done(id, attempt);
            }
            inner.finish(job, attempt).await;
        });
        if let Some((id, attempt)) = record {
            let mut in_flight = self.in_flight.lock().expect("in-flight lock");
            if let Some(flight) = in_flight.get_mut(&id).filter(|f| f.attempt == attempt) {
                flight.abort = Some(handle.abort_handle());
            }
        }
    }

    /// Registers a claimed record that waits for a worker: the heartbeat renews its lease
    /// (set to end at `lease_until`) until it starts, and shutdown hands it back.
    pub(crate) fn reserve(&self, id: RequestId, attempt: i32, lease_until: i64) {
        self.in_flight
            .lock()
            .expect("in-flight lock")
            .insert(id, InFlight::new(attempt, lease_until));
    }

    /// Notes that a stored job's body has run to its end.
    fn mark_done(&self, id: RequestId, attempt: i32) {
        let mut in_flight = self.in_flight.lock().expect("in-flight lock");
        if let Some(flight) = in_flight.get_mut(&id).filter(|f| f.attempt == attempt) {
            flight.done = true;
        }
    }

    /// How many stored jobs' bodies are running now.
    pub(crate) fn running(&self) -> usize {
        let in_flight = self.in_flight.lock().expect("in-flight lock");
        in_flight
            .values()
            .filter(|f| f.abort.is_some() && !f.done)
            .count()
    }

    /// Records whose body finished but whose outcome is not written (yet, or at all).
    pub(crate) fn finished_unwritten(&self) -> Vec<RequestId> {
        let in_flight = self.in_flight.lock().expect("in-flight lock");
        in_flight
            .iter()
            .filter(|(_, f)| f.done)
            .map(|(id, _)| *id)
            .collect()
    }

    /// Forgets a stored job once its outcome is written.
    pub(crate) fn forget(&self, id: RequestId, attempt: i32) {
        let mut in_flight = self.in_flight.lock().expect("in-flight lock");
        if in_flight.get(&id).is_some_and(|f| f.attempt == attempt) {
            in_flight.remove(&id);
        }
    }

    /// Ids whose leases the heartbeat should renew now, in id order (the order every
    /// statement locks records in), and the earliest end among their leases.
    pub(crate) fn renewable(&self, now: i64) -> (Vec<RequestId>, Option<i64>) {
        let in_flight = self.in_flight.lock().expect("in-flight lock");
        let mut earliest = None::<i64>;
        let mut ids: Vec<RequestId> = in_flight
            .iter()
            .filter(|(_, f)| !f.lost && f.renew_until > now)
            .inspect(|(_, f)| {
                earliest = Some(earliest.map_or(f.lease_until, |e| e.min(f.lease_until)))
            })
            .map(|(id, _)| *id)
            .collect();
        ids.sort_unstable();
        (ids, earliest)
    }

    /// Notes a renewal: the leases of `renewed` now end at `until`; those of `asked` that
    /// were not renewed and whose body is still running (or waits to) were taken over or
    /// removed: they are lost, their bodies told. Returns the ids lost.
    pub(crate) fn renewed(
        &self,
        asked: &[RequestId],
        renewed: &[RequestId],
        until: i64,
    ) -> Vec<RequestId> {
        let renewed: std::collections::HashSet<RequestId> = renewed.iter().copied().collect();
        let mut in_flight = self.in_flight.lock().expect("in-flight lock");
        let mut lost = Vec::new();
        for id in asked {
            let Some(flight) = in_flight.get_mut(id) else {
                continue;
            };
            if renewed.contains(id) {
                flight.lease_until = flight.lease_until.max(until);
            } else if !flight.done && !flight.lost {
                flight.lose();
                lost.push(*id);
            }
        }
        lost
    }

    /// Tells the running bodies whose lease ended (by this clock) before it could be
    /// renewed: another instance may take their records now. Their leases are still
    /// renewed while this instance holds them (a renewal that gets through keeps the
    /// record here; one that finds it taken over marks it lost). Returns their ids.
    pub(crate) fn lapse(&self, now: i64) -> Vec<RequestId> {
        let mut in_flight = self.in_flight.lock().expect("in-flight lock");
        let mut lapsed = Vec::new();
        for (id, flight) in in_flight.iter_mut() {
            let started = flight.abort.is_some();
            if started
                && !flight.done
                && !flight.lease_lost.is_cancelled()
                && flight.lease_until <= now
            {
                flight.lease_lost.cancel();
                lapsed.push(*id);
            }
        }
        lapsed
    }

    /// How many claimed records this instance holds (waiting, running, or with an
    /// outcome not yet written).
    pub(crate) fn held(&self) -> usize {
        self.in_flight.lock().expect("in-flight lock").len()
    }

    /// Jobs running or waiting for their outcome to be written.
    pub(crate) fn is_idle(&self) -> bool {
        self.tasks.is_empty() && self.in_flight.lock().expect("in-flight lock").is_empty()
    }

    /// Waits until every running body has finished, or `grace` has passed.
    /// Returns whether all finished.
    pub(crate) async fn wait(&self, grace: Duration) -> bool {
        self.tasks.close();
        let done = tokio::time::timeout(grace, self.tasks.wait()).await.is_ok();
        self.tasks.reopen();
        done
    }

    /// Aborts the bodies still running; returns the ids of their records.
    pub(crate) fn abort_all(&self) -> Vec<RequestId> {
        let mut in_flight = self.in_flight.lock().expect("in-flight lock");
        let mut aborted = Vec::new();
        for (id, flight) in in_flight.iter_mut() {
            if flight.done {
                continue;
            }
            if let Some(abort) = flight.abort.take() {
                abort.abort();
                aborted.push(*id);
            }
        }
        aborted
    }

    /// Workers free right now.
    pub(crate) fn available(&self) -> usize {
        self.permits.available_permits()
    }
}

/// What happens to an in-memory job's failure, by strategy.
pub(crate) fn memory_failure_is_persisted(strategy: Strategy) -> bool {
    matches!(strategy, Strategy::AsyncSave | Strategy::SyncSave)
}

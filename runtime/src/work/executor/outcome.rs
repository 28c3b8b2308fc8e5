//! What an attempt leads to: the completion a stored job's outcome writes (success,
//! a retry, `dead`, `cancelled`, with its log row and kept result), the retry record of
//! a failed in-memory call, and the hand-over of each to the completer or the store.

use crate::base::backoff::retry_delay;
use crate::base::outcome::{Failure, Subject};
use crate::base::record::{AttemptLog, NewRequest, Status};
use crate::base::registry::ExecutorDef;
use crate::base::strategy::Strategy;
use crate::base::text;
use crate::store::{Completion, CompletionResult};

use super::{Attempt, Executor, Job};
impl Executor {
    /// The completion to write for a stored job's attempt (`None` for an in-memory job),
    /// with what the listeners are told moved out of the job.
    pub(crate) fn completion_for(&self, job: &mut Job, attempt: &Attempt) -> Option<Completion> {
        let record = job.record.as_mut()?;
        let settings = &self.config;
        // The log row, built only when it will be written (failures; successes on request).
        let log = |outcome: &str, error: Option<String>| AttemptLog {
            request_id: record.id,
            attempt: record.attempt,
            worker: self.owner.to_string(),
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
            // Asked to stop and it did not succeed: `cancelled`, for good (a success is
            // kept: the work was done before the stop reached it).
            Err(failure) if attempt.stopped.is_some() => {
                let why = attempt.stopped.map_or("", |why| why.reason());
                let note = text::stored(&format!("{why}: {}", failure.message));
                (
                    CompletionResult::Cancelled { note: note.clone() },
                    Some(log("cancelled", Some(note))),
                )
            }
            Err(failure) => (
                self.failed_result(job.def, record.attempt, record.max_attempts, failure),
                Some(log(
                    failure.kind.as_str(),
                    Some(text::stored(&failure.message)),
                )),
            ),
        };
        let result_json = match &result {
            CompletionResult::Succeeded => attempt.result_json.clone(),
            _ => None,
        };
        Some(Completion {
            id: record.id,
            attempt: record.attempt,
            owner: self.owner.clone(),
            executor: job.def.name,
            result,
            finished: attempt.finished,
            log,
            result_json,
            subject: Subject {
                key: record.key.take(),
                remark: job.def.remark,
                trace: job.trace.take(),
            },
        })
    }

    /// `failed` with a backoff while attempts remain and the failure is retryable, else `dead`;
    /// its message sanitized and capped for storing.
    fn failed_result(
        &self,
        def: &ExecutorDef,
        attempt: i32,
        max_attempts: i32,
        failure: &Failure,
    ) -> CompletionResult {
        if let Some(delay) = failure.snooze_delay() {
            // Never early by the database's clock (a Retry-After is a promise to keep):
            // `latest_ms`, as a delayed call's due time.
            return CompletionResult::Snoozed {
                note: text::stored(&failure.message),
                run_at: self.clock.latest_ms() + delay.as_millis() as i64,
            };
        }
        if !failure.kind.is_retryable() {
            return CompletionResult::Dead {
                error: text::stored(&failure.message),
            };
        }
        // A policy's attempts and backoff count for waiting requests too, from their next
        // failure on.
        let overrides = self.control.overrides_of(def.name);
        let max_attempts = overrides.max_attempts.unwrap_or(max_attempts);
        if attempt >= max_attempts {
            return CompletionResult::Dead {
                error: text::stored(&format!(
                    "gave up after {attempt} attempts; last: {}",
                    failure.message
                )),
            };
        }
        let settings = &self.config;
        let (base, cap) = overrides
            .backoff
            .unwrap_or((settings.retry_base_delay, settings.retry_max_delay));
        let delay = retry_delay(attempt, base, cap);
        CompletionResult::Failed {
            error: text::stored(&failure.message),
            run_at: self.clock.now_ms() + delay.as_millis() as i64,
        }
    }

    /// The record to insert after an in-memory attempt failed (`SyncSave`, `AsyncSave`):
    /// `failed` with a backoff, or `dead` when the failure is final or attempts are spent.
    pub(crate) fn failure_record(
        &self,
        job: &Job,
        attempt: &Attempt,
        key: Option<String>,
        priority: i32,
    ) -> Option<NewRequest> {
        let failure = attempt.result.as_ref().err()?;
        let max_attempts = self.max_attempts_of(job.def) as i32;
        let (status, run_at, error) = match self.failed_result(job.def, 1, max_attempts, failure) {
            CompletionResult::Failed { error, run_at } => (Status::Failed, run_at, error),
            // Written to run later; the attempt that snoozed is not counted.
            CompletionResult::Snoozed { note, run_at } => (Status::Init, run_at, note),
            CompletionResult::Dead { error } => (Status::Dead, attempt.finished, error),
            CompletionResult::Delete
            | CompletionResult::Succeeded
            | CompletionResult::Cancelled { .. } => unreachable!("a failure, not asked to stop"),
        };
        let mut request = self.new_request(
            job.def,
            job.params.clone(),
            key,
            priority,
            run_at,
            job.trace.as_ref(),
        );
        if status == Status::Init {
            // Snoozed: the attempt that ran is not counted against the others.
            request.max_attempts = request.max_attempts.saturating_add(1);
        }
        request.status = status;
        request.exec_count = 1;
        request.last_error = Some(error);
        request.log = Some(AttemptLog {
            request_id: 0,
            attempt: 1,
            worker: self.owner.to_string(),
            started: attempt.started,
            finished: attempt.finished,
            outcome: failure.kind.as_str().into(),
            error: Some(text::stored(&failure.message)),
        });
        Some(request)
    }

    /// Records the outcome of an attempt: a stored job's goes to the completer; a failed
    /// in-memory call is logged, or written for retry (`AsyncSave`, `SyncSave`).
    pub(crate) async fn finish(&self, mut job: Job, attempt: Attempt) {
        if let Some(completion) = self.completion_for(&mut job, &attempt) {
            log_if_dead(&completion, job.def.name);
            self.count(job.def.name, &completion, attempt.finished);
            if let Err(id) = self.completer.send(completion) {
                // The completer is gone (an aborted runtime): the lease expires and the
                // record runs again elsewhere.
                crate::log::warn!(id, "outcome not written: runtime stopped");
            }
            return;
        }
        let Err(failure) = &attempt.result else {
            return;
        };
        if !memory_failure_is_persisted(job.def.strategy) {
            crate::log::error!(executor = job.def.name, error = %crate::log::escaped(&failure.message), "in-memory call failed; not retried");
            return;
        }
        if let Some(request) = self.failure_record(&job, &attempt, None, 0) {
            if request.status == Status::Dead {
                crate::log::error!(executor = job.def.name, error = %crate::log::escaped(&failure.message),
                    "in-memory call failed for good: it is written as dead");
            }
            if let Err(error) = self.store.request_insert(&request).await {
                crate::log::error!(executor = job.def.name, error = %crate::log::escaped(&error), failure = %crate::log::escaped(&failure.message),
                    "call failed and its retry record could not be written: it is lost");
            }
        }
    }
}

/// A request going `dead` needs a person: it is logged at ERROR, with its last error.
pub(crate) fn log_if_dead(completion: &Completion, executor: &str) {
    if let CompletionResult::Dead { error } = &completion.result {
        crate::log::error!(
            request_id = completion.id,
            executor,
            attempt = completion.attempt,
            error = %crate::log::escaped(&error),
            "request failed for good: it is dead; replay it with `retry_now` once the cause is fixed"
        );
    }
}

/// What happens to an in-memory job's failure, by strategy.
pub(crate) fn memory_failure_is_persisted(strategy: Strategy) -> bool {
    matches!(strategy, Strategy::AsyncSave | Strategy::SyncSave)
}

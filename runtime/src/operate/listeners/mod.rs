//! Outcome listeners ([`Builder::on_success`](crate::Builder::on_success), `on_retry`,
//! `on_dead`): plain functions called with an [`OutcomeEvent`] after the outcome is
//! written; and their async forms (`on_success_async`, ...: see [`tasks`]).
//!
//! They run on one thread of their own (`async-exec-listeners`), fed by a bounded queue
//! of [`LISTENER_QUEUE`] events: the completer and the rescuer only put an event in the
//! queue, never wait for a listener. When the queue is full (the listeners are slower than
//! the outcomes) the event is dropped, counted in
//! [`Runtime::listener_drops`](crate::Runtime::listener_drops) and in the
//! `async_exec_listener_dropped_total` counter, and logged. A listener that panics is
//! caught and logged; the next event is delivered as usual.
//!
//! An event tells what an alerting hook needs without reading the record (which a
//! success usually deletes): the request's id, executor and remark, the attempt, the
//! error, the idempotency key, the application, and the caller's baggage and span. All
//! of it is carried with the outcome from the call or the claim: no statement is added
//! per event.
//!
//! Events are sent only for outcomes known to be written, each one's: an attempt fenced
//! off (its lease had expired and the record was claimed again, or it left `running`)
//! gets none, and the others of its batch get theirs. The store finds out which were
//! not written only when a batch wrote fewer records than it had outcomes. An outcome the
//! database refused is written `dead` instead, and its `on_dead` event carries the error
//! written. One case stays unknown: on SQLite, when a batch of successes of one attempt
//! falls short and a record of it was already gone before the write (another attempt of
//! it succeeded first, or it was deleted), the one statement's count cannot say which of
//! the gone records it deleted, and none of them gets an event (logged at DEBUG).

use std::panic::AssertUnwindSafe;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc::{self, SyncSender, TrySendError};
use std::sync::Arc;

mod tasks;

pub(crate) use tasks::{boxed, AsyncListener};
pub use tasks::{ASYNC_LISTENER_CALLS, ASYNC_LISTENER_TIMEOUT};

use crate::base::outcome::Subject;
use crate::base::record::RequestId;
use crate::base::supervise::panic_text;
use crate::store::{Completion, CompletionResult};

/// The events waiting for the listeners at most; more are dropped and counted.
pub const LISTENER_QUEUE: usize = 1024;

/// Which outcome an [`OutcomeEvent`] reports.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum OutcomeKind {
    /// The attempt succeeded (the record is deleted, or marked `success`).
    Success,
    /// The attempt failed and the request will run again (`failed`, due after its backoff).
    Retry,
    /// The request is `dead`: a final error, its last attempt failed, or its lease expired
    /// on its last attempt (the rescuer).
    Dead,
    /// The body returned a [`Snooze`](crate::Snooze): the request runs again after its
    /// delay, the attempt not counted. Told to the `on_retry` listeners.
    Snoozed,
    /// The request was asked to stop while it ran (a cancel, or its deadline passed) and
    /// its body did not succeed: it is `cancelled`, for good. Told to the `on_dead`
    /// listeners, as the other way a request ends without success.
    Cancelled,
}

/// What a listener is told: the request, the attempt, and its error; and what an alert
/// needs to name the request once its record is gone (a success deletes it unless
/// `delete_on_success(false)`): its idempotency key, remark, application, and the caller's
/// baggage.
///
/// ```
/// use async_exec::{OutcomeEvent, Runtime};
///
/// fn alert(event: &OutcomeEvent) {
///     eprintln!(
///         "{} ({}) of {} is dead after {} attempts: {} [key {:?}, tenant {:?}]",
///         event.executor,
///         event.remark,
///         event.application,
///         event.attempt,
///         event.error.as_deref().unwrap_or(""),
///         event.key,
///         event.baggage("tenant"),
///     );
/// }
///
/// let builder = Runtime::builder().on_dead(alert);
/// # drop(builder);
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct OutcomeEvent {
    /// Which outcome it is.
    pub kind: OutcomeKind,
    /// The request's id (look it up with [`Runtime::get`](crate::Runtime::get) while it
    /// exists: its arguments, its attempts' logs).
    pub id: RequestId,
    /// The executor's name.
    pub executor: &'static str,
    /// The executor's remark (`remark = "..."` on the attribute; empty without one).
    pub remark: &'static str,
    /// The attempt, from 1.
    pub attempt: u32,
    /// The error as stored in `last_error`; `None` for a success.
    pub error: Option<String>,
    /// The call's idempotency key (`.key(..)`), if it had one.
    pub key: Option<String>,
    /// The application the request belongs to
    /// ([`Builder::application_name`](crate::Builder::application_name)).
    pub application: Arc<str>,
    /// The caller's baggage ([`with_baggage`](crate::with_baggage)), as the body saw it
    /// (a `traceparent` set there, say): empty when the caller set none.
    pub baggage: Vec<(String, String)>,
    /// The id of the `tracing` span the call was made in, if any (the execution's span
    /// records it as `caller_span`).
    pub caller_span: Option<u64>,
    /// The W3C `traceparent` of the OpenTelemetry span the call was made in (feature
    /// `opentelemetry`; `None` without it or outside such a span): the trace to look the
    /// request up in.
    pub traceparent: Option<String>,
}

impl OutcomeEvent {
    /// A field of the caller's baggage (the `baggage` field), by its key.
    pub fn baggage(&self, key: &str) -> Option<&str> {
        self.baggage
            .iter()
            .find(|(k, _)| k == key)
            .map(|(_, v)| v.as_str())
    }
}

/// A listener: a plain function of the event, called on the listeners' thread.
pub(crate) type Listener = Arc<dyn Fn(&OutcomeEvent) + Send + Sync>;

/// The listeners registered on the builder, by outcome: plain ones, and async ones by
/// the slot of their outcome (see [`slot`]).
#[derive(Clone, Default)]
pub(crate) struct ListenerSet {
    pub(crate) success: Vec<Listener>,
    pub(crate) retry: Vec<Listener>,
    pub(crate) dead: Vec<Listener>,
    pub(crate) tasks: [Vec<AsyncListener>; 3],
}

impl std::fmt::Debug for ListenerSet {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ListenerSet")
            .field("success", &self.success.len())
            .field("retry", &self.retry.len())
            .field("dead", &self.dead.len())
            .field("async", &self.tasks.each_ref().map(Vec::len))
            .finish()
    }
}

impl ListenerSet {
    fn of(&self, kind: OutcomeKind) -> &[Listener] {
        match kind {
            OutcomeKind::Success => &self.success,
            // A snooze runs again later, as a retry does: the same listeners.
            OutcomeKind::Retry | OutcomeKind::Snoozed => &self.retry,
            OutcomeKind::Dead | OutcomeKind::Cancelled => &self.dead,
        }
    }
}

/// The sending side, held by the completer and the rescuer: which outcomes have
/// listeners, the queue to their thread, and the count of events dropped.
#[derive(Debug, Default)]
pub(crate) struct Notifier {
    queue: Option<SyncSender<OutcomeEvent>>,
    /// Whether a plain listener wants the outcomes of each slot.
    plain: [bool; 3],
    /// The queues of the async listeners, by slot.
    tasks: [Vec<tokio::sync::mpsc::Sender<OutcomeEvent>>; 3],
    wanted: [bool; 3],
    dropped: AtomicU64,
    /// The application named in the events.
    application: Arc<str>,
}

/// Where the listeners of `kind` are: 0 success, 1 retry (and snooze), 2 dead (and
/// cancelled).
pub(crate) fn slot(kind: OutcomeKind) -> usize {
    match kind {
        OutcomeKind::Success => 0,
        OutcomeKind::Retry | OutcomeKind::Snoozed => 1,
        OutcomeKind::Dead | OutcomeKind::Cancelled => 2,
    }
}

impl Notifier {
    /// A notifier for `listeners` of `application`'s outcomes, with the plain ones'
    /// thread started when there are any, and a task for each async one (on the tokio
    /// runtime this is called on).
    pub(crate) fn start(
        mut listeners: ListenerSet,
        application: Arc<str>,
    ) -> std::io::Result<Notifier> {
        let plain = [
            !listeners.success.is_empty(),
            !listeners.retry.is_empty(),
            !listeners.dead.is_empty(),
        ];
        let async_ones = std::mem::take(&mut listeners.tasks);
        let tasks = if async_ones.iter().all(Vec::is_empty) {
            Default::default()
        } else {
            let runtime = tokio::runtime::Handle::try_current().map_err(|_| {
                std::io::Error::other("async outcome listeners need a tokio runtime")
            })?;
            async_ones.map(|listeners| {
                listeners
                    .into_iter()
                    .map(|listener| tasks::start(listener, &runtime))
                    .collect::<Vec<_>>()
            })
        };
        let wanted = [0, 1, 2].map(|slot: usize| plain[slot] || !tasks[slot].is_empty());
        let queue = if plain.contains(&true) {
            let (queue, events) = mpsc::sync_channel::<OutcomeEvent>(LISTENER_QUEUE);
            std::thread::Builder::new()
                .name("async-exec-listeners".into())
                .spawn(move || {
                    // Ends when every sender is gone: the runtime is dropped.
                    for event in events {
                        call_all(listeners.of(event.kind), &event);
                    }
                })?;
            Some(queue)
        } else {
            None
        };
        Ok(Notifier {
            queue,
            plain,
            tasks,
            wanted,
            dropped: AtomicU64::new(0),
            application,
        })
    }

    /// Whether some listener wants `kind`.
    pub(crate) fn wants(&self, kind: OutcomeKind) -> bool {
        self.wanted[slot(kind)]
    }

    /// Events dropped because the queue was full.
    pub(crate) fn dropped(&self) -> u64 {
        self.dropped.load(Ordering::Relaxed)
    }

    /// Queues `event` for its listeners, without waiting; drops it for those whose queue
    /// is full (the plain listeners share one queue, each async one has its own).
    pub(crate) fn send(&self, event: OutcomeEvent) {
        if !self.wants(event.kind) {
            return;
        }
        let slot = slot(event.kind);
        for task in &self.tasks[slot] {
            match task.try_send(event.clone()) {
                Ok(()) => {}
                Err(tokio::sync::mpsc::error::TrySendError::Full(event)) => {
                    self.count_drop(&event, "an async outcome listener is behind");
                }
                Err(tokio::sync::mpsc::error::TrySendError::Closed(_)) => {}
            }
        }
        let Some(queue) = self.queue.as_ref().filter(|_| self.plain[slot]) else {
            return;
        };
        match queue.try_send(event) {
            Ok(()) => {}
            Err(TrySendError::Full(event)) => {
                self.count_drop(&event, "outcome listeners are behind");
            }
            Err(TrySendError::Disconnected(_)) => {}
        }
    }

    fn count_drop(&self, event: &OutcomeEvent, why: &str) {
        let dropped = self.dropped.fetch_add(1, Ordering::Relaxed) + 1;
        crate::operate::metrics::listener_dropped();
        crate::log::warn!(id = event.id, kind = ?event.kind, dropped,
            "{why} ({LISTENER_QUEUE} events queued): event dropped");
    }

    /// The event of an outcome of a request of this runtime's application.
    pub(crate) fn event(
        &self,
        kind: OutcomeKind,
        id: RequestId,
        executor: &'static str,
        attempt: i32,
        error: Option<String>,
        subject: Subject,
    ) -> OutcomeEvent {
        let trace = subject.trace.unwrap_or_default();
        OutcomeEvent {
            kind,
            id,
            executor,
            remark: subject.remark,
            attempt: attempt.max(0) as u32,
            error,
            key: subject.key,
            application: self.application.clone(),
            baggage: trace.baggage,
            caller_span: trace.span,
            traceparent: trace.traceparent,
        }
    }

    /// Queues the events of a batch of outcomes that was written but for the outcomes at
    /// `unwritten` (positions, ascending), and with the outcomes at `replaced` written
    /// instead of the batch's (refused ones, written `dead`).
    pub(crate) fn batch_written(
        &self,
        batch: Vec<Completion>,
        unwritten: &[usize],
        mut replaced: Vec<(usize, Completion)>,
    ) {
        if !self.wanted.contains(&true) {
            return;
        }
        if !unwritten.is_empty() {
            crate::log::debug!(
                completions = batch.len(),
                unwritten = unwritten.len(),
                "outcomes not written (fenced off): their listeners are not called"
            );
        }
        let mut unwritten = unwritten.iter().peekable();
        for (position, completion) in batch.into_iter().enumerate() {
            if unwritten.next_if_eq(&&position).is_some() {
                continue;
            }
            let completion = match replaced.iter().position(|(p, _)| *p == position) {
                Some(i) => replaced.swap_remove(i).1,
                None => completion,
            };
            let (kind, error) = match completion.result {
                CompletionResult::Delete | CompletionResult::Succeeded => {
                    (OutcomeKind::Success, None)
                }
                CompletionResult::Failed { error, .. } => (OutcomeKind::Retry, Some(error)),
                CompletionResult::Snoozed { note, .. } => (OutcomeKind::Snoozed, Some(note)),
                CompletionResult::Dead { error } => (OutcomeKind::Dead, Some(error)),
                CompletionResult::Cancelled { note } => (OutcomeKind::Cancelled, Some(note)),
            };
            if self.wants(kind) {
                self.send(self.event(
                    kind,
                    completion.id,
                    completion.executor,
                    completion.attempt,
                    error,
                    completion.subject,
                ));
            }
        }
    }
}

/// Calls each listener with `event`, catching and logging a panic.
fn call_all(listeners: &[Listener], event: &OutcomeEvent) {
    for listener in listeners {
        if let Err(panic) = std::panic::catch_unwind(AssertUnwindSafe(|| listener(event))) {
            crate::log::error!(id = event.id, kind = ?event.kind, executor = event.executor,
                panic = %crate::log::escaped(&panic_text(&*panic)), "an outcome listener panicked; it is called again for the next event");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Mutex;
    use std::time::Duration;

    fn event(id: RequestId, kind: OutcomeKind) -> OutcomeEvent {
        Notifier::default().event(kind, id, "x", 1, None, Subject::default())
    }

    #[test]
    fn a_panicking_listener_does_not_stop_the_next_events_and_a_full_queue_drops() {
        let seen = Arc::new(Mutex::new(Vec::new()));
        let (gate_tx, gate) = mpsc::channel::<()>();
        let gate = Mutex::new(gate);
        let (holding_tx, holding) = mpsc::channel::<()>();
        let holding_tx = Mutex::new(holding_tx);
        let recorded = seen.clone();
        let set = ListenerSet {
            success: vec![
                Arc::new(|e: &OutcomeEvent| {
                    if e.id == 1 {
                        panic!("listener fails on 1")
                    }
                }),
                Arc::new(move |e: &OutcomeEvent| {
                    if e.id == 2 {
                        // Holds the thread until the test has filled the queue.
                        holding_tx.lock().unwrap().send(()).unwrap();
                        gate.lock().unwrap().recv().unwrap();
                    }
                    recorded.lock().unwrap().push(e.id);
                }),
            ],
            ..Default::default()
        };
        let notifier = Notifier::start(set, Arc::from("test")).unwrap();
        assert!(notifier.wants(OutcomeKind::Success) && !notifier.wants(OutcomeKind::Dead));
        notifier.send(event(1, OutcomeKind::Success));
        notifier.send(event(2, OutcomeKind::Success));
        notifier.send(event(99, OutcomeKind::Dead)); // nobody listens: not queued

        // Once the thread holds event 2 (a sleep was not enough on a loaded machine: the
        // panic's backtrace of event 1 can take longer), fill the queue and overflow it.
        holding.recv_timeout(Duration::from_secs(30)).unwrap();
        for id in 0..LISTENER_QUEUE as i64 + 5 {
            notifier.send(event(1000 + id, OutcomeKind::Success));
        }
        assert_eq!(notifier.dropped(), 5);
        gate_tx.send(()).unwrap();
        let deadline = std::time::Instant::now() + Duration::from_secs(5);
        while seen.lock().unwrap().len() < LISTENER_QUEUE + 2
            && std::time::Instant::now() < deadline
        {
            std::thread::sleep(Duration::from_millis(10));
        }
        let seen = seen.lock().unwrap();
        assert_eq!(
            seen[..2],
            [1, 2],
            "the panic on 1 did not stop the second listener"
        );
        assert_eq!(seen.len(), LISTENER_QUEUE + 2);
        assert!(!seen.contains(&99));
    }
}

//! Outcome listeners ([`Builder::on_success`](crate::Builder::on_success), `on_retry`,
//! `on_dead`): plain functions called with an [`OutcomeEvent`] after the outcome is
//! written.
//!
//! They run on one thread of their own (`async-exec-listeners`), fed by a bounded queue
//! of [`LISTENER_QUEUE`] events: the completer and the rescuer only put an event in the
//! queue, never wait for a listener. When the queue is full (the listeners are slower than
//! the outcomes) the event is dropped, counted in
//! [`Runtime::listener_drops`](crate::Runtime::listener_drops) and in the
//! `async_exec_listener_dropped_total` counter, and logged. A listener that panics is
//! caught and logged; the next event is delivered as usual.
//!
//! Events are sent only for outcomes known to be written: when a batch of outcomes was
//! not written whole (an attempt was fenced off because its lease had expired and another
//! instance claimed the record, or the database refused an outcome and it was isolated),
//! the completer cannot tell which were, and sends none of that batch's (logged at DEBUG).

use std::panic::AssertUnwindSafe;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc::{self, SyncSender, TrySendError};
use std::sync::Arc;

use crate::record::RequestId;
use crate::store::{Completion, CompletionResult};
use crate::supervise::panic_text;

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
}

/// What a listener is told: the request, the attempt, and its error.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct OutcomeEvent {
    /// Which outcome it is.
    pub kind: OutcomeKind,
    /// The request's id (look it up with [`Runtime::get`](crate::Runtime::get) while it
    /// exists: its key, its arguments).
    pub id: RequestId,
    /// The executor's name.
    pub executor: &'static str,
    /// The attempt, from 1.
    pub attempt: u32,
    /// The error as stored in `last_error`; `None` for a success.
    pub error: Option<String>,
}

/// A listener: a plain function of the event, called on the listeners' thread.
pub(crate) type Listener = Arc<dyn Fn(&OutcomeEvent) + Send + Sync>;

/// The listeners registered on the builder, by outcome.
#[derive(Clone, Default)]
pub(crate) struct ListenerSet {
    pub(crate) success: Vec<Listener>,
    pub(crate) retry: Vec<Listener>,
    pub(crate) dead: Vec<Listener>,
}

impl std::fmt::Debug for ListenerSet {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ListenerSet")
            .field("success", &self.success.len())
            .field("retry", &self.retry.len())
            .field("dead", &self.dead.len())
            .finish()
    }
}

impl ListenerSet {
    fn of(&self, kind: OutcomeKind) -> &[Listener] {
        match kind {
            OutcomeKind::Success => &self.success,
            OutcomeKind::Retry => &self.retry,
            OutcomeKind::Dead => &self.dead,
        }
    }
}

/// The sending side, held by the completer and the rescuer: which outcomes have
/// listeners, the queue to their thread, and the count of events dropped.
#[derive(Debug, Default)]
pub(crate) struct Notifier {
    queue: Option<SyncSender<OutcomeEvent>>,
    wanted: [bool; 3],
    dropped: AtomicU64,
}

fn slot(kind: OutcomeKind) -> usize {
    match kind {
        OutcomeKind::Success => 0,
        OutcomeKind::Retry => 1,
        OutcomeKind::Dead => 2,
    }
}

impl Notifier {
    /// A notifier for `listeners`, with their thread started when there are any.
    pub(crate) fn start(listeners: ListenerSet) -> std::io::Result<Notifier> {
        let wanted = [
            !listeners.success.is_empty(),
            !listeners.retry.is_empty(),
            !listeners.dead.is_empty(),
        ];
        if !wanted.contains(&true) {
            return Ok(Notifier::default());
        }
        let (queue, events) = mpsc::sync_channel::<OutcomeEvent>(LISTENER_QUEUE);
        std::thread::Builder::new()
            .name("async-exec-listeners".into())
            .spawn(move || {
                // Ends when every sender is gone: the runtime is dropped.
                for event in events {
                    call_all(listeners.of(event.kind), &event);
                }
            })?;
        Ok(Notifier {
            queue: Some(queue),
            wanted,
            dropped: AtomicU64::new(0),
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

    /// Queues `event` for its listeners, without waiting; drops it when the queue is full.
    pub(crate) fn send(&self, event: OutcomeEvent) {
        let Some(queue) = &self.queue else { return };
        if !self.wants(event.kind) {
            return;
        }
        match queue.try_send(event) {
            Ok(()) => {}
            Err(TrySendError::Full(event)) => {
                let dropped = self.dropped.fetch_add(1, Ordering::Relaxed) + 1;
                crate::metrics::listener_dropped();
                crate::log::warn!(id = event.id, kind = ?event.kind, dropped,
                    "outcome listeners are behind ({LISTENER_QUEUE} events queued): event dropped");
            }
            Err(TrySendError::Disconnected(_)) => {}
        }
    }

    /// Queues the events of a batch of outcomes, if it was written whole (`written` rows
    /// for its completions; `refused` of them isolated or left unwritten).
    pub(crate) fn batch_written(&self, batch: &[Completion], written: u64, refused: usize) {
        if self.queue.is_none() {
            return;
        }
        if written != batch.len() as u64 || refused > 0 {
            crate::log::debug!(
                completions = batch.len(),
                written,
                refused,
                "a batch of outcomes was not written whole: its listeners are not called"
            );
            return;
        }
        for completion in batch {
            let (kind, error) = match &completion.result {
                CompletionResult::Delete | CompletionResult::Succeeded => {
                    (OutcomeKind::Success, None)
                }
                CompletionResult::Failed { error, .. } => (OutcomeKind::Retry, Some(error)),
                CompletionResult::Dead { error } => (OutcomeKind::Dead, Some(error)),
            };
            if self.wants(kind) {
                self.send(OutcomeEvent {
                    kind,
                    id: completion.id,
                    executor: completion.executor,
                    attempt: completion.attempt.max(0) as u32,
                    error: error.cloned(),
                });
            }
        }
    }
}

/// Calls each listener with `event`, catching and logging a panic.
fn call_all(listeners: &[Listener], event: &OutcomeEvent) {
    for listener in listeners {
        if let Err(panic) = std::panic::catch_unwind(AssertUnwindSafe(|| listener(event))) {
            crate::log::error!(id = event.id, kind = ?event.kind, executor = event.executor,
                panic = %panic_text(&*panic), "an outcome listener panicked; it is called again for the next event");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Mutex;
    use std::time::Duration;

    fn event(id: RequestId, kind: OutcomeKind) -> OutcomeEvent {
        OutcomeEvent {
            kind,
            id,
            executor: "x",
            attempt: 1,
            error: None,
        }
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
        let notifier = Notifier::start(set).unwrap();
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

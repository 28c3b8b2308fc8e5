//! The completer: writes the outcomes of attempts, many per transaction (group commit):
//! the next batch is whatever finished while the previous one was being written. An
//! outcome the database refuses is isolated from its batch ([`isolate`]), so that it never
//! holds up the others.
//!
//! It holds its channel (the receiving end; [`Completer`] is the sending one, held by the
//! executor), the store it writes to, the executor pool whose jobs it settles (forgets
//! once their outcomes are written) and the outcome listeners it tells of them. It has no settings of its own: its batch size and
//! linger are constants, and how many batches it writes at once is the store's.

mod isolate;
mod pending;

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::{mpsc, Notify};
use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;

use crate::base::fault::is_transient;
use crate::base::record::RequestId;
use crate::operate::listeners::Notifier;
use crate::store::{Completion, Store};
use crate::work::pool::ExecutorPool;

use isolate::{write_isolating, Backoff, Written};
use pending::{Pending, Stamp};

/// An outcome queued, with when.
type Queued = (Completion, Stamp);

/// The most completions written in one transaction. (SQLite drains measured 1.05x and
/// 1.07x of the hand-written queue with 1,024, 1.02x and 0.98x with 256; PostgreSQL and
/// MariaDB within their noise either way.)
const BATCH: usize = 1024;

/// How long a batch waits for more outcomes before it is written. Only the write waits:
/// bodies and their permits are already done.
const LINGER: Duration = Duration::from_micros(500);

/// How long, at shutdown, the writes still in flight may take before they are abandoned
/// (their records are then released by the shutdown, or their leases expire).
const SHUTDOWN_PATIENCE: Duration = Duration::from_secs(10);

/// The sending side, held by the executor (and the runtime, to wait for writes).
#[derive(Debug)]
pub(crate) struct Completer {
    tx: mpsc::UnboundedSender<Queued>,
    outcomes: Arc<Outcomes>,
}

/// The receiving side, moved into the completer task.
#[derive(Debug)]
pub(crate) struct CompleterTask {
    rx: mpsc::UnboundedReceiver<Queued>,
    outcomes: Arc<Outcomes>,
}

/// What writing a batch needs: the store, the pool whose jobs it settles, and the signal
/// that a batch was written.
struct Outcomes {
    store: Arc<dyn Store>,
    pool: Arc<ExecutorPool>,
    /// The outcome listeners, told of what was written.
    listeners: Arc<Notifier>,
    /// Notified after every batch written.
    written: Notify,
    /// The outcomes queued or being written.
    pending: Pending,
}

impl std::fmt::Debug for Outcomes {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Outcomes")
            .field("backend", &self.store.backend_name())
            .finish_non_exhaustive()
    }
}

/// What one batch did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct CompleteReport {
    /// Completions in the batch.
    pub completions: usize,
    /// Records written (the rest had been claimed again by someone else: their lease expired).
    pub written: u64,
}

impl Completer {
    /// The two ends of a completer that writes to `store` and settles the jobs of `pool`.
    pub(crate) fn new(
        store: Arc<dyn Store>,
        pool: Arc<ExecutorPool>,
        listeners: Arc<Notifier>,
    ) -> (Completer, CompleterTask) {
        let (tx, rx) = mpsc::unbounded_channel();
        let outcomes = Arc::new(Outcomes {
            store,
            pool,
            listeners,
            written: Notify::new(),
            pending: Pending::new(),
        });
        (
            Completer {
                tx,
                outcomes: outcomes.clone(),
            },
            CompleterTask { rx, outcomes },
        )
    }

    /// Queues an outcome for writing. Returns the request id when the completer is gone.
    pub(crate) fn send(&self, completion: Completion) -> Result<(), RequestId> {
        let stamp = self.outcomes.pending.add();
        self.tx.send((completion, stamp)).map_err(|e| {
            self.outcomes.pending.remove([stamp]);
            e.0 .0.id
        })
    }

    /// How long the oldest outcome queued and not yet written (or given up) has waited;
    /// `None` when none waits. Outcomes written inline ([`Completer::write_now`]) are
    /// their callers' to wait for, and not counted.
    pub(crate) fn oldest_unwritten(&self) -> Option<Duration> {
        self.outcomes.pending.oldest_age()
    }

    /// Notified after every batch written (by the task or by [`Completer::write_now`]).
    pub(crate) fn written(&self) -> &Notify {
        &self.outcomes.written
    }

    /// Writes one batch now and forgets its jobs: inline execution (test modes, `drain`).
    /// A transient failure goes to the caller; an outcome the database refuses is isolated
    /// and written `dead`, as the completer task does.
    pub(crate) async fn write_now(&self, batch: Vec<Completion>) -> crate::Result<CompleteReport> {
        let outcomes = &self.outcomes;
        let written: Written = match outcomes.store.request_complete_many(&batch).await {
            Ok(wrote) => wrote.into(),
            Err(error) if !is_transient(&error) => {
                write_isolating(&*outcomes.store, &batch, Backoff::default()).await
            }
            Err(error) => return Err(error),
        };
        outcomes.settle(&batch);
        let report = CompleteReport {
            completions: batch.len(),
            written: written.rows,
        };
        outcomes.tell(batch, written);
        Ok(report)
    }
}

impl CompleterTask {
    /// Writes batches until every sender is gone and the queue is empty. Transient
    /// failures are retried with a capped backoff, so that outcomes are not dropped (their
    /// fencing makes a late write harmless); an outcome the database refuses is written
    /// `dead` instead. Up to `Store::concurrent_writes` batches are written at once, each on
    /// its own connection: the next batch fills while earlier ones commit. At shutdown the
    /// writes left get [`SHUTDOWN_PATIENCE`], then are abandoned. `stop` is shutdown's
    /// signal, given after the workers have stopped.
    pub(crate) async fn run(&mut self, stop: CancellationToken) {
        let writers = self.outcomes.store.concurrent_writes().max(1);
        // Writes in flight, owned by this task: aborting it (`Runtime::abort`) aborts them.
        let mut writes = JoinSet::new();
        let mut batch = Vec::with_capacity(BATCH);
        loop {
            let received = tokio::select! {
                received = self.rx.recv_many(&mut batch, BATCH) => received,
                _ = stop.cancelled() => {
                    // Shutdown: write what is left, then end once every write is done.
                    while let Ok(completion) = self.rx.try_recv() {
                        batch.push(completion);
                    }
                    if !batch.is_empty() {
                        let outcomes = self.outcomes.clone();
                        writes.spawn(async move { outcomes.write_and_settle(batch).await });
                    }
                    finish_writes(writes, SHUTDOWN_PATIENCE).await;
                    return;
                }
            };
            if received == 0 {
                finish_writes(writes, SHUTDOWN_PATIENCE).await;
                return;
            }
            if received < BATCH {
                // Group commit: let the outcomes of the next few bodies join this write.
                tokio::time::sleep(LINGER).await;
                top_up(&mut self.rx, &mut batch);
            }
            while writes.len() >= writers {
                writes.join_next().await;
            }
            // Whatever finished while waiting for a writer joins this write.
            top_up(&mut self.rx, &mut batch);
            let full = std::mem::replace(&mut batch, Vec::with_capacity(BATCH));
            let outcomes = self.outcomes.clone();
            writes.spawn(async move { outcomes.write_and_settle(full).await });
        }
    }
}

/// Adds queued outcomes to `batch`, up to [`BATCH`], without waiting.
fn top_up(rx: &mut mpsc::UnboundedReceiver<Queued>, batch: &mut Vec<Queued>) {
    while batch.len() < BATCH {
        match rx.try_recv() {
            Ok(completion) => batch.push(completion),
            Err(_) => break,
        }
    }
}

/// Waits for the writes in flight for at most `patience`, then abandons the rest: their
/// records stay held by this instance, so that shutdown releases them.
async fn finish_writes(mut writes: JoinSet<()>, patience: Duration) {
    let all_done = async { while writes.join_next().await.is_some() {} };
    if tokio::time::timeout(patience, all_done).await.is_err() {
        crate::log::error!(
            writes = writes.len(),
            ?patience,
            "giving up writing outcomes at shutdown; their records are released and run again"
        );
        writes.abort_all();
    }
}

impl Outcomes {
    /// Writes a batch, isolating what the database refuses, forgets its jobs, and tells
    /// the listeners of the outcomes written.
    async fn write_and_settle(&self, queued: Vec<Queued>) {
        let (batch, stamps): (Vec<Completion>, Vec<Stamp>) = queued.into_iter().unzip();
        // Forgotten however this ends (written, or abandoned at shutdown).
        let _waiting = Waiting {
            pending: &self.pending,
            stamps,
        };
        let written: Written = write_isolating(&*self.store, &batch, Backoff::default()).await;
        self.settle(&batch);
        if written.isolated + written.unwritable > 0 {
            crate::log::warn!(
                completions = batch.len(),
                rows = written.rows,
                isolated = written.isolated,
                unwritable = written.unwritable,
                "a batch of outcomes written with the refused ones isolated"
            );
        }
        self.tell(batch, written);
    }

    /// Queues the listeners' events of the outcomes of `batch` that were written.
    fn tell(&self, batch: Vec<Completion>, written: Written) {
        self.listeners
            .batch_written(batch, &written.unwritten, written.replaced);
    }

    /// Forgets the jobs of a batch whose outcomes are settled, and wakes those waiting for
    /// it.
    fn settle(&self, batch: &[Completion]) {
        for completion in batch {
            self.pool.forget(completion.id, completion.attempt);
        }
        self.written.notify_waiters();
    }
}

/// The stamps of a batch being written: forgotten when the write ends, or is dropped.
struct Waiting<'a> {
    pending: &'a Pending,
    stamps: Vec<Stamp>,
}

impl Drop for Waiting<'_> {
    fn drop(&mut self) {
        self.pending.remove(self.stamps.drain(..));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn shutdown_abandons_writes_that_never_end_after_its_patience() {
        let mut writes = JoinSet::new();
        writes.spawn(std::future::pending::<()>());
        writes.spawn(async {});
        let started = tokio::time::Instant::now();
        finish_writes(writes, SHUTDOWN_PATIENCE).await;
        assert_eq!(started.elapsed(), SHUTDOWN_PATIENCE);
    }
}

//! The after-commit hand-off: a bounded in-process channel from the caller to the
//! workers, and the producer task that claims what arrives and starts it.
//!
//! A full channel never blocks the caller: a stored request stays `init` and the producer
//! claims it from the store once workers are free again. The producer also looks in the
//! store when another instance says it committed requests (PostgreSQL `LISTEN`), and
//! every `poll_interval` as a backstop.
//!
//! The [`Dispatcher`] (the sending end) is the API layer's; the [`Producer`] holds the
//! receiving end ([`Inbox`]), the [`Claimer`] it claims and starts with, the store (to
//! listen, and for its claim batch and default poll interval), the completer (to wait for
//! its writes when too much is held), the names it listens under, shutdown's token and its
//! [`ProducerConfig`].

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::{mpsc, Notify};
use tokio_util::sync::CancellationToken;

use crate::base::record::RequestId;
use crate::base::settings::Settings;
use crate::base::strategy::Strategy;
use crate::store::{DueKind, Store};
use crate::work::claimer::Claimer;
use crate::work::completer::Completer;
use crate::work::executor::{Job, RecordRef};
use crate::work::waiting_queues::WaitingQueues;

// The producer's turns between queues, and between queues and a backlog in no queue.
#[path = "queue_turns.rs"]
mod queue_turns;

/// The most messages claimed together.
const BATCH: usize = 64;

/// The sending side of the channel.
#[derive(Debug)]
pub(crate) struct Dispatcher {
    tx: mpsc::Sender<Job>,
    signals: Arc<Signals>,
}

/// What both ends of the channel see besides the jobs.
#[derive(Debug)]
struct Signals {
    /// Set when a stored request could not be sent: the producer looks in the store.
    overflow: AtomicBool,
    wake: Notify,
    /// Jobs sent and not yet started (or dropped) by the producer.
    queued: AtomicUsize,
    /// The executors of queues whose requests were committed since the producer last
    /// looked: it claims their queues between the starts of a backlog in no queue, whose
    /// claim keeps it from the channel meanwhile. A set: no more names than executors
    /// while no producer takes them (a submit-only instance's calls).
    queues_committed: std::sync::Mutex<std::collections::HashSet<&'static str>>,
}

/// The receiving side, kept until the producer starts (a submit-only instance keeps it
/// for `start_workers`).
#[derive(Debug)]
pub(crate) struct Inbox {
    rx: mpsc::Receiver<Job>,
    signals: Arc<Signals>,
}

/// The settings the producer reads, taken from [`Settings`] (validated there).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct ProducerConfig {
    /// Whether to listen for other instances' commits (PostgreSQL `LISTEN`).
    pub(crate) listen: bool,
    /// How often to look in the store anyway; `None`: the store's default.
    pub(crate) poll_interval: Option<Duration>,
}

impl ProducerConfig {
    /// The producer's settings among the runtime's.
    pub(crate) fn from_settings(settings: &Settings) -> Self {
        ProducerConfig {
            listen: settings.listen,
            poll_interval: settings.poll_interval,
        }
    }
}

/// The producer task's state. See the [module docs](self).
pub(crate) struct Producer {
    inbox: Inbox,
    claimer: Arc<Claimer>,
    store: Arc<dyn Store>,
    completer: Arc<Completer>,
    application: Arc<str>,
    owner: Arc<str>,
    /// Cancelled when shutdown begins.
    shutdown: CancellationToken,
    config: ProducerConfig,
    /// The queues that may have records this instance could claim now: only those are
    /// claimed when a commit or an outcome wakes the producer (every queue at a poll).
    /// While any is, every batch of outcomes written sends the producer to claim them.
    waiting: Arc<WaitingQueues>,
    /// Each queued executor's queue, by its index in the claimer's list.
    queue_of: std::collections::HashMap<&'static str, usize>,
    /// The queue the next [`claim_queues`](Self::claim_queues) begins with (modulo their
    /// number): each call begins one further.
    next_queue: AtomicUsize,
    /// When every queue was last marked while a backlog in no queue kept the producer
    /// from its polls (see [`queues_wait`](Self::queues_wait)).
    queues_looked_at: std::sync::Mutex<tokio::time::Instant>,
}

impl std::fmt::Debug for Producer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Producer")
            .field("owner", &self.owner)
            .field("config", &self.config)
            .finish_non_exhaustive()
    }
}

/// What a producer is made of besides its inbox: the shared handles it uses.
#[derive(Debug)]
pub(crate) struct ProducerParts {
    pub(crate) claimer: Arc<Claimer>,
    pub(crate) store: Arc<dyn Store>,
    pub(crate) completer: Arc<Completer>,
    pub(crate) application: Arc<str>,
    pub(crate) owner: Arc<str>,
    pub(crate) shutdown: CancellationToken,
}

impl Dispatcher {
    pub(crate) fn new(capacity: usize) -> (Dispatcher, Inbox) {
        let (tx, rx) = mpsc::channel(capacity);
        let signals = Arc::new(Signals {
            overflow: AtomicBool::new(false),
            wake: Notify::new(),
            queued: AtomicUsize::new(0),
            queues_committed: Default::default(),
        });
        let inbox = Inbox {
            rx,
            signals: signals.clone(),
        };
        (Dispatcher { tx, signals }, inbox)
    }

    /// Hands a job to the workers without waiting. Returns the job when the channel is full
    /// or closed; a stored job is then left to the store (the producer is told to look).
    // The job comes back as it went in (the channel's own `TrySendError` does the same):
    // boxing it would cost an allocation per call to spare a few bytes on a full channel.
    #[allow(clippy::result_large_err)]
    pub(crate) fn try_dispatch(&self, job: Job) -> Result<(), Job> {
        let signals = &self.signals;
        signals.queued.fetch_add(1, Ordering::AcqRel);
        if job.def.queue.is_some() && job.record.is_some() {
            signals
                .queues_committed
                .lock()
                .expect("committed queues' lock")
                .insert(job.def.name);
        }
        match self.tx.try_send(job) {
            Ok(()) => Ok(()),
            Err(mpsc::error::TrySendError::Full(job) | mpsc::error::TrySendError::Closed(job)) => {
                signals.queued.fetch_sub(1, Ordering::AcqRel);
                if job.record.is_some() {
                    signals.overflow.store(true, Ordering::Release);
                    signals.wake.notify_one();
                }
                Err(job)
            }
        }
    }
}

/// Tells the producer to claim waiting records from the store: what the control part
/// holds to wake it when an executor is resumed.
#[derive(Debug, Clone)]
pub(crate) struct StoreWaker {
    signals: Arc<Signals>,
}

impl StoreWaker {
    /// Wakes the producer to claim waiting records from the store.
    pub(crate) fn look_in_store(&self) {
        self.signals.overflow.store(true, Ordering::Release);
        self.signals.wake.notify_one();
    }
}

impl crate::work::control::LookInStore for StoreWaker {
    fn look_in_store(&self) {
        StoreWaker::look_in_store(self);
    }
}

impl Dispatcher {
    /// A handle that wakes the producer to look in the store.
    pub(crate) fn store_waker(&self) -> StoreWaker {
        StoreWaker {
            signals: self.signals.clone(),
        }
    }

    /// Whether every job sent has been started or dropped by the producer.
    pub(crate) fn is_empty(&self) -> bool {
        self.signals.queued.load(Ordering::Acquire) == 0
    }
}

impl Producer {
    pub(crate) fn new(inbox: Inbox, parts: ProducerParts, config: ProducerConfig) -> Self {
        let ProducerParts {
            claimer,
            store,
            completer,
            application,
            owner,
            shutdown,
        } = parts;
        Producer {
            inbox,
            store,
            completer,
            application,
            owner,
            shutdown,
            queue_of: claimer
                .queues()
                .iter()
                .enumerate()
                .flat_map(|(at, queue)| queue.executors.iter().map(move |&name| (name, at)))
                .collect(),
            claimer,
            config,
            waiting: Default::default(),
            next_queue: AtomicUsize::new(0),
            queues_looked_at: std::sync::Mutex::new(tokio::time::Instant::now()),
        }
    }

    /// Receives jobs until shutdown: claims stored ones in batches, then starts each
    /// under a worker permit.
    pub(crate) async fn run(&mut self) {
        let shutdown = self.shutdown.clone();
        let listen = async {
            match self.config.listen {
                true => self.store.listen(&self.application, &self.owner).await,
                false => Ok(None),
            }
        };
        // What was committed before this instance started (a crash, a restart) is claimed
        // while the LISTEN connection opens; once it listens, one more look finds what was
        // committed in between (notified to no one here).
        let (listening, ()) = tokio::join!(listen, self.claim_from_store());
        if matches!(listening, Ok(Some(_))) {
            self.claim_from_store().await;
        }
        let mut wakeups = match listening {
            Ok(wakeups) => wakeups,
            Err(error) => {
                crate::log::error!(error = %crate::log::escaped(&error), "could not listen for other instances' requests; polling only");
                None
            }
        };
        let poll_every = self.poll_every();
        let mut poll =
            tokio::time::interval_at(tokio::time::Instant::now() + poll_every, poll_every);
        poll.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let mut batch = Vec::with_capacity(BATCH);
        let signals = self.inbox.signals.clone();
        loop {
            let mut look_in_store = false;
            let mut look_in_queues = false;
            let queues_armed = self.queues_armed();
            tokio::select! {
                biased;
                _ = shutdown.cancelled() => break,
                received = self.inbox.rx.recv_many(&mut batch, BATCH) => {
                    if received == 0 {
                        break;
                    }
                    self.wait_for_completer().await;
                    let started = self.start_batch(std::mem::take(&mut batch)).await;
                    signals.queued.fetch_sub(received, Ordering::AcqRel);
                    if !started {
                        break;
                    }
                }
                _ = signals.wake.notified() => {}
                Some(()) = next_wakeup(&mut wakeups) => look_in_store = true,
                _ = poll.tick() => look_in_store = true,
                // Outcomes written may have freed slots of a queue.
                _ = self.completer.written().notified(), if queues_armed => look_in_queues = true,
            }
            let overflowed = signals.overflow.swap(false, Ordering::AcqRel);
            if self.inbox.rx.is_empty() && (overflowed || look_in_store) {
                self.claim_from_store().await;
            } else {
                if overflowed {
                    signals.overflow.store(true, Ordering::Release);
                }
                if look_in_queues || self.waiting.any() {
                    self.claim_queues().await;
                }
            }
        }
    }
}

/// The next wake-up from other instances; never, without a listener (or once it is gone).
async fn next_wakeup(wakeups: &mut Option<mpsc::Receiver<()>>) -> Option<()> {
    match wakeups {
        Some(rx) => match rx.recv().await {
            Some(()) => Some(()),
            None => {
                *wakeups = None;
                std::future::pending().await
            }
        },
        None => std::future::pending().await,
    }
}

/// Claimed records (waiting, running, or waiting for their outcome to be written) above
/// which no more are claimed from the store. 1,024 throttled PostgreSQL drains (29k to 18k
/// jobs/s, with slower outcome writes than today's); with 4,096, one process drained
/// 1,000,000-record backlogs at 22 MB (SQLite), 13 MB (PostgreSQL, MariaDB) peak RSS.
const MAX_HELD: usize = 4096;

impl Producer {
    /// Claims the stored jobs of a batch and starts every job. Returns `false` at shutdown.
    async fn start_batch(&self, batch: Vec<Job>) -> bool {
        let ids: Vec<RequestId> = batch
            .iter()
            .filter(|j| !self.claimer.is_paused(j.def.name)) // left `init` until resumed
            // Left `init` for a claim of their queue, within its limits.
            .filter(|j| !self.claimer.is_queued(j.def.name))
            .filter_map(|j| j.record.as_ref().map(|r| r.id))
            .collect();
        let claimed = if ids.is_empty() {
            Vec::new()
        } else {
            // Every claimed record is reserved before any starts: at shutdown, those not
            // started are handed back with the rest.
            match tokio::time::timeout(self.claim_patience(), self.claimer.claim_ids(&ids)).await {
                Ok(Ok(claimed)) => claimed,
                Ok(Err(error)) => {
                    // The records stay `init`: the compensation sweep finds them.
                    crate::log::error!(error = %crate::log::escaped(&error), requests = ids.len(), "could not claim dispatched requests; the sweep will");
                    Vec::new()
                }
                Err(_) => {
                    crate::log::error!(
                        requests = ids.len(),
                        patience = ?self.claim_patience(),
                        "a claim of dispatched requests got no answer within a lease; given up, the sweeps will find them"
                    );
                    Vec::new()
                }
            }
        };
        for mut job in batch {
            let max_attempts = self.claimer.max_attempts_of(job.def) as i32;
            if let Some(record) = &mut job.record {
                if let Some(&at) = self.queue_of.get(job.def.name) {
                    self.waiting.mark(at);
                    continue;
                }
                match claimed.iter().find(|c| c.id == record.id) {
                    Some(c) => {
                        record.attempt = c.attempt;
                        // As written moments ago by this instance.
                        record.max_attempts = max_attempts;
                    }
                    None => continue, // claimed elsewhere, cancelled, or left to the sweep
                }
            }
            // Jobs received before a queue's request take turns with it (issue 30, H2).
            if self.queues_wait() && !self.share_with_queues().await {
                return false;
            }
            if !self.claimer.start(job).await {
                return false;
            }
        }
        true
    }

    /// Claims due `init` records from the store as workers free up, until none is left:
    /// after an overflow, a wake-up from another instance, or a poll. The next batch is
    /// claimed while the current one starts, so that workers do not wait for claims; at
    /// most two batches are held, reserved (the heartbeat keeps their leases, shutdown
    /// hands them back). (Two claims in flight on PostgreSQL measured no faster: 1.11x
    /// against 1.02x of the hand-written queue, within its noise.)
    async fn claim_from_store(&self) {
        self.mark_queues_with_due().await;
        self.claim_unlimited().await;
        self.claim_queues().await;
    }

    /// Claims due `init` records of executors in no queue, batch after batch
    /// while workers free up (see [`claim_from_store`](Self::claim_from_store)).
    async fn claim_unlimited(&self) {
        let batch = self.store.claim_batch();
        let claim = move |claimer: Arc<Claimer>| {
            tokio::spawn(async move {
                claimer
                    .claim_due(DueKind::Stale { older_than: 0 }, batch)
                    .await
            })
        };
        // Wait for a free worker rather than claim records that would wait for one.
        let permit = tokio::select! {
            _ = self.shutdown.cancelled() => return,
            permit = self.claimer.pool().permits.clone().acquire_owned() => permit,
        };
        drop(permit);
        let mut next = claim(self.claimer.clone());
        loop {
            // A claim that gets no answer within a lease is given up (its records, if it
            // took them, are rescued when the lease ends): the producer never waits
            // forever, and fresh requests keep being started.
            let answer = tokio::time::timeout(self.claim_patience(), &mut next).await;
            let claimed = match answer {
                Ok(Ok(Ok(claimed))) => claimed,
                Ok(Ok(Err(error))) => {
                    crate::log::error!(error = %crate::log::escaped(&error), "could not claim requests from the store; the sweep will");
                    return;
                }
                Ok(Err(error)) => {
                    crate::log::error!(error = %crate::log::escaped(&error), "the claim task failed");
                    return;
                }
                Err(_) => {
                    next.abort();
                    crate::log::error!(
                        patience = ?self.claim_patience(),
                        "a claim from the store got no answer within a lease; given up"
                    );
                    return;
                }
            };
            if claimed.is_empty() {
                return;
            }
            self.wait_for_completer().await;
            next = claim(self.claimer.clone());
            for job in claimed {
                // A backlog in no queue takes turns with the queues (issue 30, H2): when
                // one may have requests waiting, a worker that comes free goes to it first.
                if self.queues_wait() && !self.share_with_queues().await {
                    let _ = next.await;
                    return;
                }
                if !self.claimer.start(job).await {
                    // Shutdown: wait for the claim in flight; its records are reserved and
                    // handed back with the rest.
                    let _ = next.await;
                    return;
                }
            }
        }
    }

    /// How long a claim may take: a lease (an answer later than that is of no use: the
    /// lease it sets may have run out).
    fn claim_patience(&self) -> std::time::Duration {
        std::time::Duration::from_millis(self.claimer.lease_ms().max(1) as u64)
    }

    /// Back-pressure: bodies can finish faster than their outcomes are written when the
    /// store is the bottleneck. Claim no more until the completer has caught up, so that
    /// memory is bounded by [`MAX_HELD`], never by the backlog.
    async fn wait_for_completer(&self) {
        let pool = self.claimer.pool();
        while pool.held() >= MAX_HELD {
            let written = self.completer.written().notified();
            if pool.held() < MAX_HELD {
                return;
            }
            tokio::select! {
                _ = self.shutdown.cancelled() => return,
                _ = written => {}
            }
        }
    }
}

/// Whether a strategy's calls go through the channel (all but `Thread` and `SyncSave`).
pub(crate) fn uses_channel(strategy: Strategy) -> bool {
    !matches!(strategy, Strategy::Thread | Strategy::SyncSave)
}

/// A stored job for a record just written with the caller's arguments (and `key`, and
/// `deadline`).
pub(crate) fn stored_job(
    job: Job,
    id: RequestId,
    key: Option<String>,
    deadline: Option<i64>,
) -> Job {
    let sign = job.def.sign.into();
    Job {
        record: Some(RecordRef {
            id,
            attempt: 0,
            max_attempts: 0,
            sign,
            key,
            deadline,
        }),
        ..job
    }
}

#[cfg(test)]
#[path = "dispatcher_tests.rs"]
mod tests;

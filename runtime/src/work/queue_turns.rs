//! The producer's turns between queues, and between the queues and a backlog in no
//! queue: which queues may have requests this instance could start (committed here,
//! finished here, or due by the probe at a poll), the rounds of queue claims, and the
//! workers a backlog's starts share with the queues (issue 30, H2).

use std::sync::atomic::Ordering;
use std::time::Duration;

use super::Producer;

impl Producer {
    /// Marks the queues that hold due records (one statement; every queue when it fails:
    /// their claims then find out), so that a poll or another instance's wake-up costs
    /// an idle queue an index probe, not a claim.
    pub(super) async fn mark_queues_with_due(&self) {
        *self.queues_looked_at.lock().expect("queues' look lock") = tokio::time::Instant::now();
        if self.queue_of.is_empty() {
            return;
        }
        let probe = tokio::time::timeout(self.claim_patience(), self.claimer.queues_with_due());
        match probe.await {
            Ok(Ok(due)) => {
                for at in due {
                    self.waiting.mark(at);
                }
            }
            Ok(Err(error)) => {
                crate::log::warn!(error = %crate::log::escaped(&error), "could not read which queues have due requests; claiming each");
                self.waiting.mark_all();
            }
            Err(_) => self.waiting.mark_all(),
        }
    }

    /// Marks the queues whose requests were committed here since the last look, before
    /// their jobs come out of the channel (behind up to a channel's worth of others).
    pub(super) fn mark_committed_queues(&self) {
        let committed = std::mem::take(
            &mut *self
                .inbox
                .signals
                .queues_committed
                .lock()
                .expect("committed queues' lock"),
        );
        for name in committed {
            if let Some(&at) = self.queue_of.get(name) {
                self.waiting.mark(at);
            }
        }
    }

    /// Whether a queue may have requests waiting that this instance could start: one of
    /// its requests was committed here (its job waits in the channel, which the claim of
    /// a backlog keeps the producer from), or one it ran has finished.
    pub(super) fn queues_wait(&self) -> bool {
        if self.queue_of.is_empty() {
            return false;
        }
        self.mark_committed_queues();
        // Other instances' commits are seen at polls, which a long backlog keeps the
        // producer from: which queues have due records is looked up once a poll interval
        // meanwhile.
        let due_to_look = {
            let looked_at = self.queues_looked_at.lock().expect("queues' look lock");
            looked_at.elapsed() >= self.poll_every()
        };
        due_to_look || self.queues_armed()
    }

    /// How often the producer looks in the store anyway.
    pub(super) fn poll_every(&self) -> Duration {
        self.config
            .poll_interval
            .unwrap_or_else(|| self.store.default_poll_interval())
    }

    /// Waits for a free worker and lets the waiting queues claim up to half the free
    /// workers (at least one) before the next start of a backlog in no queue: the two
    /// take turns. Returns `false` at shutdown.
    pub(super) async fn share_with_queues(&self) -> bool {
        let permit = tokio::select! {
            _ = self.shutdown.cancelled() => return false,
            permit = self.claimer.pool().permits.clone().acquire_owned() => permit,
        };
        drop(permit);
        let due_to_look = {
            let looked_at = self.queues_looked_at.lock().expect("queues' look lock");
            looked_at.elapsed() >= self.poll_every()
        };
        if due_to_look {
            self.mark_queues_with_due().await;
            if !self.queues_armed() {
                return true;
            }
        }
        let share = self.claimer.pool().available().div_ceil(2).max(1);
        self.claim_queues_upto(share as i64).await
    }

    /// Claims the due records of each queue, within its limits (the store counts what
    /// runs of it everywhere, and keeps its rate's bucket), and starts them, no more than
    /// there are free workers: in rounds of one claim of each queue, until no worker is
    /// free (looked at again when outcomes are written) or a round in which every queue
    /// gives none (it is empty, its slots are taken, or its claim failed). Each call
    /// begins with the queue after the one the last call began with, so that a queue
    /// with a long backlog does not take every worker that comes free from the others.
    pub(super) async fn claim_queues(&self) {
        self.claim_queues_upto(i64::MAX).await;
    }

    /// [`claim_queues`](Self::claim_queues), starting at most `most` requests. Returns
    /// `false` at shutdown.
    pub(super) async fn claim_queues_upto(&self, mut most: i64) -> bool {
        let queues = self.claimer.queues();
        if queues.is_empty() {
            return true;
        }
        let first = self.next_queue.fetch_add(1, Ordering::Relaxed);
        self.mark_committed_queues();
        let mut wanted = self.waiting.take(queues.len(), first);
        'rounds: while !wanted.is_empty() {
            let mut again = Vec::with_capacity(wanted.len());
            for (turn, &at) in wanted.iter().enumerate() {
                let queue = &queues[at];
                let free = (self.claimer.pool().available() as i64).min(most);
                if free == 0 {
                    // Looked at again when outcomes free workers.
                    for &left in &wanted[turn..] {
                        self.waiting.mark(left);
                    }
                    for &took in &again {
                        self.waiting.mark(took);
                    }
                    break 'rounds;
                }
                let limit = free.min(self.store.claim_batch());
                let answer = tokio::time::timeout(
                    self.claim_patience(),
                    self.claimer.claim_queue(queue, limit),
                )
                .await;
                let jobs = match answer {
                    Ok(Ok(jobs)) => jobs,
                    Ok(Err(error)) => {
                        crate::log::error!(error = %crate::log::escaped(&error), queue = %crate::log::escaped(&queue.name), "could not claim a queue's requests; trying again at the next poll");
                        Vec::new()
                    }
                    Err(_) => {
                        crate::log::error!(queue = %crate::log::escaped(&queue.name), patience = ?self.claim_patience(), "a claim of a queue's requests got no answer within a lease; given up");
                        Vec::new()
                    }
                };
                if jobs.is_empty() {
                    continue; // empty or full: looked at again when woken for it
                }
                again.push(at);
                self.waiting.hold(
                    at,
                    jobs.iter().filter_map(|j| j.record.as_ref().map(|r| r.id)),
                );
                self.look_again_at_its_rate(at, queue);
                most -= jobs.len() as i64;
                for job in jobs {
                    if !self.claimer.start(job).await {
                        return false; // shutdown: what is not started is handed back
                    }
                }
            }
            // The queues marked meanwhile (requests committed here, records finished)
            // go first in the next round, then those that took records in this one: a
            // queue with a backlog does not keep the others waiting while workers free.
            self.mark_committed_queues();
            let mut next = self.waiting.take(queues.len(), first);
            let took: std::collections::HashSet<usize> = again.iter().copied().collect();
            next.retain(|at| !took.contains(at));
            next.extend(again);
            wanted = next;
        }
        true
    }

    /// A queue with a rate that took records may have more waiting that its bucket did
    /// not let start: it is looked at again when its bucket has refilled by one start,
    /// not at the next poll.
    pub(super) fn look_again_at_its_rate(&self, at: usize, queue: &crate::base::queue::NamedQueue) {
        let Some(rate) = queue.limits.rate_limit() else {
            return;
        };
        let period = queue.limits.rate_period_ms().max(1) as u64;
        let refill = Duration::from_millis((period / u64::from(rate.max(1))).max(10));
        let waiting = self.waiting.clone();
        let signals = self.inbox.signals.clone();
        let shutdown = self.shutdown.clone();
        tokio::spawn(async move {
            tokio::select! {
                _ = shutdown.cancelled() => {}
                _ = tokio::time::sleep(refill) => {
                    waiting.mark(at);
                    signals.wake.notify_one();
                }
            }
        });
    }

    /// Whether outcomes written should send the producer to claim the queues: one
    /// of them may have records waiting, or a record of one that this instance ran has
    /// finished (its place is free).
    pub(super) fn queues_armed(&self) -> bool {
        if self.claimer.queues().is_empty() {
            return false;
        }
        let pool = self.claimer.pool();
        self.waiting.refresh(|id| pool.holds(id))
    }
}

//! The claimer: the one path from the store to a worker, shared by the producer and the
//! sweeps. It claims records for this instance (a conditional update: `running`, this
//! instance's lease, attempt + 1), turns them into jobs reserved in the executor pool
//! (the heartbeat keeps their leases until they start), and starts each under a worker
//! permit. At shutdown it starts nothing more: a claimed job not started is handed back at
//! once. A claim that got no answer may have been committed all the same: what it took is
//! handed back by a later claim's round (see [`Unanswered`]).
//!
//! It holds the store, the application and the executors it claims for (the registry),
//! this instance's name, the database's clock, the skip list of a rolling deploy (kept by
//! the presence part), which executors only their queue's limits let it claim, the executor that runs what it starts, shutdown's token and the
//! count of records handed back, and its [`ClaimerConfig`].

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use tokio_util::sync::CancellationToken;

use crate::base::error::Result;
use crate::base::queue::{NamedQueue, QueuePlan};
use crate::base::record::{Claimed, ClaimedId, RequestId};
use crate::base::registry::{ExecutorDef, Registry};
use crate::base::settings::Settings;
use crate::base::trace::TraceContext;
use crate::store::{ClaimDue, ClaimIds, DueKind, Held, QueueCap, Store};
use crate::sweeps::clock::Clock;
use crate::sweeps::instances::{skip_key, Roster};
use crate::work::control::Control;
use crate::work::executor::{Executor, ExecutorPool, Job, RecordRef};
use crate::work::unanswered::Unanswered;

/// The settings the claimer reads, taken from [`Settings`] (validated there).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct ClaimerConfig {
    /// How long a claim's lease lasts.
    pub(crate) lease: Duration,
}

impl ClaimerConfig {
    /// The claimer's settings among the runtime's.
    pub(crate) fn from_settings(settings: &Settings) -> Self {
        ClaimerConfig {
            lease: settings.lease,
        }
    }
}

/// Claims records and starts them. See the [module docs](self).
pub(crate) struct Claimer {
    store: Arc<dyn Store>,
    application: Arc<str>,
    registry: Arc<Registry>,
    owner: Arc<str>,
    clock: Arc<Clock>,
    /// The skip list of a rolling deploy, and how to read it afresh.
    roster: Roster,
    /// Paused executors are not claimed.
    control: Arc<Control>,
    /// Which executors are claimed only within their queue's limits.
    queues: Arc<QueuePlan>,
    executor: Arc<Executor>,
    /// Cancelled when shutdown begins: nothing more is started.
    shutdown: CancellationToken,
    /// Records handed back because shutdown came before they started.
    handed_back: Arc<AtomicU64>,
    /// Claims that got no answer, and the rounds that hand back what they took.
    unanswered: Unanswered,
    config: ClaimerConfig,
}

impl std::fmt::Debug for Claimer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Claimer")
            .field("application", &self.application)
            .field("owner", &self.owner)
            .field("config", &self.config)
            .finish_non_exhaustive()
    }
}

/// What a claimer is made of: the shared handles it uses.
#[derive(Debug)]
pub(crate) struct ClaimerParts {
    pub(crate) store: Arc<dyn Store>,
    pub(crate) application: Arc<str>,
    pub(crate) registry: Arc<Registry>,
    pub(crate) owner: Arc<str>,
    pub(crate) clock: Arc<Clock>,
    pub(crate) roster: Roster,
    pub(crate) control: Arc<Control>,
    pub(crate) queues: Arc<QueuePlan>,
    pub(crate) executor: Arc<Executor>,
    pub(crate) shutdown: CancellationToken,
    pub(crate) handed_back: Arc<AtomicU64>,
}

impl Claimer {
    pub(crate) fn new(parts: ClaimerParts, config: ClaimerConfig) -> Self {
        let ClaimerParts {
            store,
            application,
            registry,
            owner,
            clock,
            roster,
            control,
            queues,
            executor,
            shutdown,
            handed_back,
        } = parts;
        Claimer {
            store,
            application,
            registry,
            owner,
            clock,
            roster,
            control,
            queues,
            executor,
            shutdown,
            handed_back,
            unanswered: Unanswered::new(config.lease),
            config,
        }
    }

    /// The pool the jobs it starts run in (its permits, the records held).
    pub(crate) fn pool(&self) -> &ExecutorPool {
        &self.executor.pool
    }

    /// Whether claims of `executor` are paused by an operator.
    pub(crate) fn is_paused(&self, executor: &str) -> bool {
        self.control.is_paused(executor)
    }

    /// The attempts a record of `def` gets.
    pub(crate) fn max_attempts_of(&self, def: &ExecutorDef) -> u32 {
        self.executor.max_attempts_of(def)
    }

    pub(crate) fn lease_ms(&self) -> i64 {
        self.config.lease.as_millis() as i64
    }

    /// Claims up to `limit` due records of `kind` for this instance and turns them into jobs
    /// (reserved in the pool until they start). Records of queues with limits are left to
    /// [`claim_queue`](Self::claim_queue).
    pub(crate) async fn claim_due(&self, kind: DueKind, limit: i64) -> Result<Vec<Job>> {
        let executors = self.control.claimable(self.queues.unlimited());
        self.claim(kind, limit, "", &executors, None, None).await
    }

    /// Claims up to `limit` due records of `queue` for this instance, within the queue's
    /// limits (counted in the store, so that they hold across instances).
    pub(crate) async fn claim_queue(&self, queue: &NamedQueue, limit: i64) -> Result<Vec<Job>> {
        let executors = self.control.claimable(&queue.executors);
        let cap_of = |name, limits: crate::QueueLimits| QueueCap {
            name,
            concurrency: limits.concurrency_limit().map(i64::from),
            per_instance: limits.per_instance_limit().map(i64::from),
            rate: limits.rate_limit().map(i64::from),
            rate_period_ms: limits.rate_period_ms(),
            per_partition: match limits.sequence_mode() {
                Some(_) => Some(1),
                None => limits.per_partition_limit().map(i64::from),
            },
            sequence: limits.sequence_mode(),
        };
        // Under a limit over every queue, every claim keeps it first; the executors in no
        // queue keep it alone.
        let global = self
            .queues
            .global()
            .map(|limits| cap_of(crate::base::queue::GLOBAL_QUEUE, limits));
        let is_queue = queue.name != crate::base::queue::GLOBAL_QUEUE;
        let cap = is_queue.then(|| cap_of(&queue.name, queue.limits));
        // The executors in no queue, under the limit over every queue, are those of `""`.
        let records_of = if is_queue { queue.name.as_str() } else { "" };
        self.claim(DueKind::Ready, limit, records_of, &executors, cap, global)
            .await
    }

    /// Which of [`queues`](Self::queues) (by index) hold records due now, in one
    /// statement: what a poll claims, instead of a claim of every queue.
    pub(crate) async fn queues_with_due(&self) -> Result<Vec<usize>> {
        let queues = self.queues();
        // A queue's records carry its name; under the limit over every queue, the
        // executors in no queue are claimed as the queue `(all)`, their records of `''`.
        fn records_of(queue: &NamedQueue) -> &str {
            if queue.name == crate::base::queue::GLOBAL_QUEUE {
                ""
            } else {
                queue.name.as_str()
            }
        }
        let names: Vec<&str> = queues.iter().map(records_of).collect();
        let due = self
            .store
            .ops()
            // Never earlier than the database's clock, which the claim asks: a record
            // due by it is not left to the next poll (a probe early by the last
            // reading's round trip costs at most a claim that finds nothing).
            .queues_with_due(&self.application, &names, self.clock.latest_ms())
            .await?;
        let due: std::collections::HashSet<String> = due.into_iter().collect();
        Ok(queues
            .iter()
            .enumerate()
            .filter(|(_, queue)| due.contains(records_of(queue)))
            .map(|(at, _)| at)
            .collect())
    }

    /// The queues whose records only [`claim_queue`](Self::claim_queue) claims.
    pub(crate) fn queues(&self) -> &[NamedQueue] {
        self.queues.queues()
    }

    /// Which executors are claimed through their queue.
    pub(crate) fn queue_plan(&self) -> &QueuePlan {
        &self.queues
    }

    /// Whether `executor`'s records are claimed only through its queue's limits.
    pub(crate) fn is_queued(&self, executor: &str) -> bool {
        self.queues.is_queued(executor)
    }

    async fn claim(
        &self,
        kind: DueKind,
        limit: i64,
        queue: &str,
        executors: &[&'static str],
        cap: Option<QueueCap<'_>>,
        global: Option<QueueCap<'_>>,
    ) -> Result<Vec<Job>> {
        self.release_unanswered().await;
        let _claiming = self.unanswered.claiming().await;
        let now = self.clock.now_ms();
        let lease_until = now + self.lease_ms();
        let skip = self.roster.current();
        if executors.is_empty() {
            return Ok(Vec::new()); // every executor paused
        }
        let claimed = self
            .store
            .request_claim_due(ClaimDue {
                application: &self.application,
                queue,
                executors,
                kind,
                owner: &self.owner,
                now,
                lease_ms: self.lease_ms(),
                limit,
                skip: &skip,
                cap,
                global,
            })
            .await;
        let mut claimed = self.answered(claimed, now)?;
        if claimed.iter().any(|c| self.is_foreign(c)) {
            claimed = self.leave_to_their_instances(claimed).await;
        }
        Claimed::sort_for_start(&mut claimed);
        Ok(claimed
            .into_iter()
            .filter_map(|c| self.job_from_claim(c, lease_until))
            .collect())
    }

    /// A claim's answer; a claim made at `now` that got none (abandoned at its bound, its
    /// connection broken: [`Error::leaves_write_unknown`](crate::Error)) may have been
    /// committed all the same, and is noted, for
    /// [`release_unanswered`](Self::release_unanswered). A refusal (a SQL error, SQLite's
    /// lock) committed nothing.
    fn answered<T>(&self, answer: Result<T>, now: i64) -> Result<T> {
        if answer
            .as_ref()
            .is_err_and(|error| error.leaves_write_unknown())
        {
            self.unanswered.note(now);
        }
        answer
    }

    /// Hands back, without counting the attempt, what claims of this instance that got no
    /// answer took all the same: records it holds as running from those claims (by their
    /// time) but not in its pool. At most every eighth of a lease while such a claim is
    /// recent; otherwise one atomic read. See [`Unanswered`].
    async fn release_unanswered(&self) {
        let Some(claimed_at) = self.unanswered.take_round(self.clock.now_ms()) else {
            return;
        };
        let _alone = self.unanswered.alone().await;
        let found = match self
            .store
            .lease_claimed_at(&self.application, &self.owner, &claimed_at)
            .await
        {
            Ok(found) => found,
            Err(error) => {
                crate::log::warn!(error = %crate::log::escaped(&error), "could not look for records taken by claims that \
                    got no answer; tried again shortly");
                return;
            }
        };
        let taken: Vec<Held> = found
            .into_iter()
            .filter(|&(id, _)| !self.executor.pool.holds(id))
            .collect();
        if taken.is_empty() {
            return;
        }
        let ids: Vec<RequestId> = taken.iter().map(|&(id, _)| id).collect();
        match self
            .store
            .lease_release(&self.owner, &taken, self.clock.now_ms())
            .await
        {
            Ok(released) => {
                crate::operate::metrics::leases("unanswered_released", released);
                crate::log::warn!(
                    requests = ?ids,
                    released,
                    "not started: taken by a claim that got no answer (abandoned at its \
                     bound, or its connection broke) but that the database committed; \
                     handed back without counting the attempt"
                );
            }
            Err(error) => crate::log::warn!(
                error = %crate::log::escaped(&error),
                requests = ?ids,
                "could not hand back records taken by a claim that got no answer; tried \
                 again shortly"
            ),
        }
    }

    /// Whether a claimed record carries a signature this binary does not have for its
    /// executor (written by another version).
    fn is_foreign(&self, claimed: &Claimed) -> bool {
        self.registry
            .get(&claimed.executor)
            .is_some_and(|def| def.sign != claimed.sign)
    }

    /// A claim met signatures this binary does not have: the skip list it claimed with
    /// may predate the instance that has them (a newer version that announced itself and
    /// wrote a record since the last read). Reads the live instances again, and hands
    /// back, without counting an attempt, the records whose signature a live worker
    /// instance has; the others are this instance's to try (a compatible change runs, an
    /// incompatible one goes `dead` naming both signatures). When the instances cannot be
    /// read, every such record is handed back, to be tried again later.
    async fn leave_to_their_instances(&self, claimed: Vec<Claimed>) -> Vec<Claimed> {
        let skip = match self.roster.refresh().await {
            Ok(skip) => Some(skip),
            Err(error) => {
                crate::log::warn!(error = %crate::log::escaped(&error), "could not read the live instances for records of \
                    another signature; handing them back to be tried later");
                None
            }
        };
        let (theirs, ours): (Vec<Claimed>, Vec<Claimed>) = claimed.into_iter().partition(|c| {
            self.is_foreign(c)
                && skip.as_ref().map_or(true, |skip| {
                    skip.binary_search(&skip_key(&c.executor, &c.sign)).is_ok()
                })
        });
        if theirs.is_empty() {
            return ours;
        }
        let ids: Vec<RequestId> = theirs.iter().map(|c| c.id).collect();
        let held: Vec<Held> = theirs.iter().map(|c| (c.id, c.attempt)).collect();
        match self
            .store
            .lease_release(&self.owner, &held, self.clock.now_ms())
            .await
        {
            Ok(_) => crate::log::info!(
                requests = ?ids,
                "not started: claimed records of a signature that a live instance has; \
                 handed back to it, no attempt counted"
            ),
            Err(error) => crate::log::warn!(
                error = %crate::log::escaped(&error),
                requests = ?ids,
                "not started: could not hand back records of a signature that a live \
                 instance has; they run again when their lease ends"
            ),
        }
        ours
    }

    /// Claims the records `ids` (just dispatched through the channel) and reserves those
    /// claimed in the pool, every one before any starts: at shutdown, those not started
    /// are handed back with the rest. Records claimed elsewhere, cancelled, or not yet
    /// committed are not in the answer.
    pub(crate) async fn claim_ids(&self, ids: &[RequestId]) -> Result<Vec<ClaimedId>> {
        self.release_unanswered().await;
        let _claiming = self.unanswered.claiming().await;
        let now = self.clock.now_ms();
        let lease_until = now + self.lease_ms();
        let claimed = self
            .store
            .request_claim_ids(ClaimIds {
                ids,
                owner: &self.owner,
                now,
                lease_ms: self.lease_ms(),
            })
            .await;
        let claimed = self.answered(claimed, now)?;
        for c in &claimed {
            self.executor.pool.reserve(c.id, c.attempt, lease_until);
        }
        Ok(claimed)
    }

    /// The job for a record claimed from the store (its executor is known: claims filter).
    fn job_from_claim(&self, claimed: Claimed, lease_until: i64) -> Option<Job> {
        let Some(def) = self.registry.get(&claimed.executor) else {
            crate::log::error!(executor = %crate::log::escaped(&claimed.executor), id = claimed.id, "claimed a record of an unknown executor");
            return None;
        };
        let trace = claimed
            .trace_json
            .as_deref()
            .map(|j| TraceContext::from_json(Some(j)));
        self.executor
            .pool
            .reserve(claimed.id, claimed.attempt, lease_until);
        Some(Job {
            def,
            params: claimed.param_json,
            trace,
            delay: None,
            record: Some(RecordRef {
                id: claimed.id,
                attempt: claimed.attempt,
                max_attempts: claimed.max_attempts,
                sign: claimed.sign.into(),
                key: claimed.idempotency_key,
                deadline: claimed.deadline_at,
            }),
            due: Some(claimed.run_at),
        })
    }

    /// Starts a job under a worker permit. Returns `false` (dropping the job) at shutdown;
    /// a stored job is then handed back to the queue at once.
    pub(crate) async fn start(&self, job: Job) -> bool {
        let pool = &self.executor.pool;
        // Fast path: a free worker, no waiting (and no cancellation future to register).
        let permit = match pool.permits.clone().try_acquire_owned() {
            Ok(permit) if !self.shutdown.is_cancelled() => Some(permit),
            Ok(_) => None,
            Err(_) => tokio::select! {
                biased;
                _ = self.shutdown.cancelled() => None,
                permit = pool.permits.clone().acquire_owned() => permit.ok(),
            },
        };
        match permit {
            Some(permit) => {
                self.executor.spawn(job, permit);
                true
            }
            None => {
                if let Some(record) = &job.record {
                    let held = (record.id, record.attempt);
                    match self
                        .store
                        .lease_release(&self.owner, &[held], self.clock.now_ms())
                        .await
                    {
                        Ok(n) => {
                            self.handed_back.fetch_add(n, Ordering::AcqRel);
                            // Not renewed any more; not handed back again.
                            pool.forget(record.id, record.attempt);
                            crate::log::info!(
                                request_id = record.id,
                                attempt = record.attempt,
                                "not started: shutting down; handed back without counting \
                                 the attempt"
                            );
                        }
                        Err(error) => crate::log::warn!(
                            request_id = record.id,
                            error = %crate::log::escaped(&error),
                            "not started: shutting down, and the claim could not be handed \
                             back now; shutdown tries again"
                        ),
                    }
                }
                false
            }
        }
    }

    /// Claims up to `limit` due records of `kind` (never more than there are free workers;
    /// with `wait_in_line`, one when none is) and starts them. Returns how many were
    /// started.
    pub(crate) async fn claim_and_start(
        &self,
        kind: DueKind,
        limit: i64,
        wait_in_line: bool,
    ) -> Result<usize> {
        // Even with no worker free (the claim below is then not made).
        self.release_unanswered().await;
        let free = self.executor.pool.available() as i64;
        // In line for the next free worker: the semaphore serves its waiters in order,
        // so a backlog's next start and this one take turns.
        let free = if wait_in_line { free.max(1) } else { free };
        let limit = limit.min(free);
        if limit <= 0 {
            return Ok(0);
        }
        let mut started = 0;
        for job in self.claim_due(kind, limit).await? {
            if self.start(job).await {
                started += 1;
            }
        }
        Ok(started)
    }
}

#[cfg(test)]
#[path = "claimer_tests.rs"]
mod tests;

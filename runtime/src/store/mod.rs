//! Where records live: one store per backend ([`sqlite`], [`postgres`], [`mysql`], each
//! behind its feature, each a folder of the same file names: `claims`, `complete`,
//! `insert`, `keys`, `instances`, `purge`, `ops`, ...), implementing the crate's internal
//! `Store` trait; all SQL lives under this folder and nowhere else.
//!
//! What the backends write alike is written once: `sql.rs` (a `Dialect` renders
//! placeholders, upserts, locks; `Sql` and `Statement` carry the text; `SqlRunner` is what
//! a backend does with it), `ops/` and `page.rs` (the operators' statements and pages),
//! `records.rs` (an operator's look at and change of one record), `shared.rs` (key reads
//! and log writes inside a transaction, generic over the sqlx database type). What the
//! store's callers pass and get back: `claim.rs`, `key.rs`, `lease.rs`, `sweeps.rs`, and
//! the completions below. `backend.rs` holds the [`Backend`] trait, which makes `Tx<DB>`
//! work for each backend's sqlx type.

use std::any::Any;

use async_trait::async_trait;

use crate::base::error::Result;
use crate::base::record::{
    AttemptLog, Claimed, ClaimedId, Inserted, NewRequest, Request, RequestId, Status,
};

mod actions_in;
#[cfg(any(feature = "postgres", feature = "mysql"))]
mod alive;
mod backend;
#[cfg(any(feature = "postgres", feature = "mysql"))]
mod begin;
pub(crate) mod bounded;
mod claim;
#[cfg(any(feature = "postgres", feature = "mysql"))]
mod dedicated;
#[cfg(test)]
pub(crate) mod fixture;
mod key;
mod lease;
mod migrations;
#[cfg(feature = "mysql")]
pub mod mysql;
pub(crate) mod ops;
mod page;
mod partitions;
#[cfg(feature = "postgres")]
pub mod postgres;
mod reach;
mod records;
#[cfg(any(feature = "sqlite", feature = "postgres"))]
mod rows;
mod shared;
mod singleton;
pub(crate) mod sql;
#[cfg(feature = "sqlite")]
pub mod sqlite;
pub(crate) mod steps;
mod sweeps;

pub(crate) use actions_in::CancelCounts;
pub(crate) use backend::sealed;
pub use backend::{Backend, DefaultBackend, Value};
pub(crate) use claim::{ClaimDue, ClaimIds, DueKind, QueueCap, QueueRow};
pub(crate) use key::{KeyClaim, StoredKey, KEY_PENDING, KEY_SWEEP_BATCH};
pub(crate) use lease::{Held, LeaseKeeper, Renewal};
pub(crate) use records::Rerun;
pub(crate) use sweeps::{orphan_worker_prefix, PurgeBatch, Purged, RescueBatch, Rescued};

/// The columns of a [`Request`], in the order every backend's row reader expects.
pub(crate) const REQUEST_COLUMNS: &str =
    "id, application_name, executor, sign, strategy, status, exec_count, \
    max_attempts, param_json, remark, idempotency_key, priority, run_at, lease_owner, lease_until, \
    last_error, trace_json, create_time, update_time, progress_done, progress_total, \
    deadline_at, cancel_requested";

/// What an instance announces of itself.
#[derive(Debug, Clone)]
pub(crate) struct Announce<'a> {
    pub(crate) owner: &'a str,
    pub(crate) application: &'a str,
    pub(crate) workers: bool,
    /// JSON: `[{"name": ..., "sign": ...}]`.
    pub(crate) executors: &'a str,
    /// Instances of any application not seen for this long are removed; `None`: not
    /// this time (the first announcement of a start, which claims wait for).
    pub(crate) forget_after_ms: Option<i64>,
    /// How long the announcement may take, connecting included (PostgreSQL and MySQL
    /// announce on a connection of their own, outside the pool, so that a busy pool
    /// does not make a live instance look gone).
    // Read by PostgreSQL and MySQL only.
    #[cfg_attr(not(any(feature = "postgres", feature = "mysql")), allow(dead_code))]
    pub(crate) patience: std::time::Duration,
    /// The live instances listed after it: those seen within this long.
    pub(crate) list_within_ms: i64,
}

/// An [`Announce`] that owns its text, for a statement's future on a connection of its own.
#[cfg(any(feature = "postgres", feature = "mysql"))]
#[derive(Debug, Clone)]
pub(crate) struct AnnounceOwned {
    pub(crate) owner: String,
    pub(crate) application: String,
    pub(crate) workers: bool,
    pub(crate) executors: String,
    pub(crate) forget_after_ms: Option<i64>,
    pub(crate) list_within_ms: i64,
}

#[cfg(any(feature = "postgres", feature = "mysql"))]
impl Announce<'_> {
    /// The same announcement, owning its text.
    pub(crate) fn to_owned_announce(&self) -> AnnounceOwned {
        AnnounceOwned {
            owner: self.owner.to_owned(),
            application: self.application.to_owned(),
            workers: self.workers,
            executors: self.executors.to_owned(),
            forget_after_ms: self.forget_after_ms,
            list_within_ms: self.list_within_ms,
        }
    }
}

/// The outcome of one attempt, to be written by the completer.
#[derive(Debug, Clone)]
pub(crate) struct Completion {
    pub(crate) id: RequestId,
    pub(crate) attempt: i32,
    pub(crate) owner: std::sync::Arc<str>,
    /// The executor's name, for the outcome listeners.
    pub(crate) executor: &'static str,
    pub(crate) result: CompletionResult,
    /// When the attempt ended, by the database's clock (unix ms): the record's
    /// `update_time`.
    pub(crate) finished: i64,
    /// The `async_log` row to write, if any.
    pub(crate) log: Option<AttemptLog>,
    /// The JSON of the body's value, kept with a record marked `success` (`None`
    /// otherwise, and written as NULL).
    pub(crate) result_json: Option<String>,
    /// What the outcome listeners are told of the request (not written).
    pub(crate) subject: crate::base::outcome::Subject,
}

/// Completions with their positions in the batch they came in.
// Used by SQLite and MySQL only.
#[cfg_attr(not(any(feature = "sqlite", feature = "mysql")), allow(dead_code))]
pub(crate) type Positioned<'a> = Vec<(usize, &'a Completion)>;

/// What a write of outcomes did ([`Store::request_complete_many`]).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct Wrote {
    /// Records written.
    pub(crate) rows: u64,
    /// The positions, among the completions given, of those not known to be written, in
    /// ascending order: fenced off (their record was claimed again, or left `running`,
    /// since), or a repeat of an earlier one. Empty, and nothing allocated, when every one
    /// was written. On SQLite it may name written ones too (see `sqlite::complete_many`).
    pub(crate) unwritten: Vec<usize>,
}

impl Wrote {
    /// Every one of `n` completions written.
    // Used by SQLite and PostgreSQL only.
    #[cfg_attr(not(any(feature = "sqlite", feature = "postgres")), allow(dead_code))]
    pub(crate) fn all(n: usize) -> Wrote {
        Wrote {
            rows: n as u64,
            unwritten: Vec::new(),
        }
    }

    /// The write of `completions` of which those in `written` (id, owner, attempt) were
    /// written, each once: a repeat of a written one is not. For a write that fell short,
    /// once it has found out which were written.
    // Used by SQLite and MySQL only.
    #[cfg_attr(not(any(feature = "sqlite", feature = "mysql")), allow(dead_code))]
    pub(crate) fn of<'a>(
        completions: impl IntoIterator<Item = &'a Completion>,
        mut written: std::collections::HashSet<(RequestId, &'a str, i32)>,
    ) -> Wrote {
        let rows = written.len() as u64;
        let unwritten = completions
            .into_iter()
            .enumerate()
            .filter(|(_, c)| !written.remove(&(c.id, &*c.owner, c.attempt)))
            .map(|(i, _)| i)
            .collect();
        Wrote { rows, unwritten }
    }
}

impl Completion {
    /// A success with nothing to log: the record is deleted. Most outcomes are these, and
    /// every store writes a batch of them with one statement.
    pub(crate) fn is_plain_delete(&self) -> bool {
        self.log.is_none() && matches!(self.result, CompletionResult::Delete)
    }
}

/// The owner and attempt that a write of an outcome requires of its record.
// Used by SQLite and MySQL only.
#[cfg_attr(not(any(feature = "sqlite", feature = "mysql")), allow(dead_code))]
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) struct Fence<'a> {
    pub(crate) owner: &'a str,
    pub(crate) attempt: i32,
}

/// Completions grouped by fence (most batches have one: this instance, first attempt),
/// each group's ids in ascending order, so that one statement can write a group.
// Used by SQLite and MySQL only.
#[cfg_attr(not(any(feature = "sqlite", feature = "mysql")), allow(dead_code))]
pub(crate) fn fence_groups<'a>(completions: &[&'a Completion]) -> Vec<(Fence<'a>, Vec<RequestId>)> {
    let mut fenced: Vec<(Fence<'a>, RequestId)> = completions
        .iter()
        .map(|c| {
            let fence = Fence {
                owner: &c.owner,
                attempt: c.attempt,
            };
            (fence, c.id)
        })
        .collect();
    fenced.sort_unstable();
    fenced
        .chunk_by(|a, b| a.0 == b.0)
        .map(|group| (group[0].0, group.iter().map(|&(_, id)| id).collect()))
        .collect()
}

/// What the completer does with a record.
#[derive(Debug, Clone)]
pub(crate) enum CompletionResult {
    /// Delete the record.
    Delete,
    /// Mark it `success`.
    Succeeded,
    /// Mark it `failed`, to run again at `run_at`.
    Failed { error: String, run_at: i64 },
    /// Mark it `dead`.
    Dead { error: String },
    /// The body snoozed: `init` again, to run at `run_at`, its `max_attempts` one more
    /// (the attempt is not counted against them). The one completion that writes `init`.
    Snoozed { note: String, run_at: i64 },
    /// Mark it `cancelled`: it was asked to stop while it ran (a cancel, or its deadline)
    /// and its body did not succeed.
    Cancelled { note: String },
}

/// A running record whose lease expired: id, attempt, max attempts, owner, lease end.
// Used by SQLite and MySQL only.
#[cfg_attr(not(any(feature = "sqlite", feature = "mysql")), allow(dead_code))]
pub(crate) type ExpiredLease = (i64, i32, i32, Option<String>, Option<i64>);

impl CompletionResult {
    /// The record's new status, last error (none for a success: an earlier attempt's
    /// error is cleared) and run time (unchanged when `None`); `None` when the record is
    /// deleted. A write of `init` (a snooze) also adds one to `max_attempts`.
    pub(crate) fn update(&self) -> Option<(&'static str, Option<&str>, Option<i64>)> {
        match self {
            CompletionResult::Delete => None,
            CompletionResult::Succeeded => Some(("success", None, None)),
            CompletionResult::Failed { error, run_at } => {
                Some(("failed", Some(error), Some(*run_at)))
            }
            CompletionResult::Dead { error } => Some(("dead", Some(error), None)),
            CompletionResult::Snoozed { note, run_at } => Some(("init", Some(note), Some(*run_at))),
            CompletionResult::Cancelled { note } => Some(("cancelled", Some(note), None)),
        }
    }
}

/// The storage of one backend. All methods are scoped to records of one application.
#[async_trait]
pub(crate) trait Store: Send + Sync + 'static {
    /// `SQLite`, `PostgreSQL`, ...
    fn backend_name(&self) -> &'static str;

    /// For downcasting to the backend's store (to begin a typed transaction).
    fn as_any(&self) -> &dyn Any;

    /// The operators' statements of this backend (`store/<backend>/ops.rs`). Not
    /// bounded (an operator's page may take long): a sweep that runs one wraps it in
    /// [`bounded::bounded_op`].
    fn ops(&self) -> &dyn ops::OpsStore;

    /// The bound on each statement, and the note of abandoned ones, when this store
    /// bounds its statements ([`bounded::Bounded`], over the network); `None` otherwise.
    fn statements_bound(
        &self,
    ) -> Option<(std::time::Duration, std::sync::Arc<bounded::Abandoned>)> {
        None
    }

    /// Creates or updates the tables.
    async fn migrate(&self) -> Result<()>;

    /// The finished steps of request `id` (`ctx.step`), in order. On the execution path:
    /// [`bounded::Bounded`] bounds it as every other statement a body waits for.
    async fn execution_steps(&self, id: i64) -> Result<Vec<steps::StoredStep>> {
        use steps::StepStore as _;
        self.ops().steps_of(id).await
    }

    /// Keeps a finished step (see `StepStore::step_keep`); bounded as
    /// [`Store::execution_steps`].
    async fn execution_step_keep(&self, step: steps::NewStep<'_>) -> Result<bool> {
        use steps::StepStore as _;
        self.ops().step_keep(step).await
    }

    /// Writes a running body's progress (see `LifecycleOps::request_progress`); bounded as
    /// [`Store::execution_steps`].
    async fn execution_progress(
        &self,
        id: i64,
        owner: &str,
        attempt: i32,
        progress: (i64, i64),
    ) -> Result<bool> {
        self.ops()
            .request_progress(id, owner, attempt, progress)
            .await
    }

    /// Inserts one request in its own transaction.
    async fn request_insert(&self, request: &NewRequest) -> Result<Inserted>;

    /// Inserts many requests in one transaction; the result is in their order.
    async fn request_insert_many(&self, requests: &[NewRequest]) -> Result<Vec<Inserted>>;

    /// Claims the given `init` records (the hot path after commit). Returns, for each record
    /// claimed, its id, attempt and max attempts: the caller already holds the rest.
    async fn request_claim_ids(&self, params: ClaimIds<'_>) -> Result<Vec<ClaimedId>>;

    /// Claims records that are due (the sweeps).
    async fn request_claim_due(&self, params: ClaimDue<'_>) -> Result<Vec<Claimed>>;

    /// Writes attempts' outcomes, in one transaction. Each write is fenced by owner and
    /// attempt: a record claimed again by someone else since is left alone. Says which
    /// were not written, finding out only when fewer records were written than outcomes
    /// given (no statement more when all were).
    async fn request_complete_many(&self, completions: &[Completion]) -> Result<Wrote>;

    /// How many due records one claim takes: the dispatcher claims the next batch while
    /// the current one starts, so an instance holds up to two batches beyond its workers.
    /// 256 rather than 128: PostgreSQL and MariaDB drains measured 1.08x to 1.45x of the
    /// hand-written queue, not 0.95x to 1.31x. Larger claims would leave other instances
    /// idle while one holds the backlog.
    fn claim_batch(&self) -> i64 {
        256
    }

    /// How many batches of outcomes the completer may write at once. One for a backend
    /// with a single writer (SQLite) and for PostgreSQL (see its store); MySQL writes
    /// with a quarter of the pool (one or two writers measured alike there).
    fn concurrent_writes(&self) -> usize {
        1
    }

    /// The lease renewals of this store, on a connection of their own (not the pool the
    /// application's transactions wait on). Made once, at start.
    fn lease_keeper(&self) -> std::sync::Arc<dyn LeaseKeeper>;

    /// Hands records back to the queue at once, without counting the attempt: those of
    /// `held` that `owner` still holds as running at their attempt (a claim not started,
    /// shutdown). Returns how many.
    async fn lease_release(&self, owner: &str, held: &[Held], now: i64) -> Result<u64>;

    /// The records of `application` that `owner` holds as running and that a claim made
    /// at one of `claimed_at` took (the claim's `now`, written as their `update_time`),
    /// with their attempts, in id order: what claims that got no answer (abandoned, or
    /// their connection broke) may have taken all the same.
    async fn lease_claimed_at(
        &self,
        application: &str,
        owner: &str,
        claimed_at: &[i64],
    ) -> Result<Vec<Held>>;

    /// Running records whose lease ended more than `grace_ms` ago (by the database's
    /// clock): back to `failed`, or `dead` when out of attempts.
    async fn request_rescue(&self, batch: RescueBatch<'_>) -> Result<Rescued>;

    /// Wake-ups sent when other instances commit new requests for `application`
    /// (PostgreSQL `LISTEN`); `None` when the backend has no such thing and other
    /// instances' requests are found by polling. The listener ignores notifications sent by
    /// `owner` itself, re-connects with a backoff when its connection drops (also when the
    /// first connection fails), and sends one wake-up after re-connecting to cover the gap.
    /// Returns `Err` only when it cannot start at all.
    async fn listen(
        &self,
        application: &str,
        owner: &str,
    ) -> Result<Option<tokio::sync::mpsc::Receiver<()>>> {
        let _ = (application, owner);
        Ok(None)
    }

    /// How often the producer looks in the store for `init` records it was not told about
    /// (other instances' submissions, missed dispatches), unless the `poll_interval`
    /// setting says otherwise.
    fn default_poll_interval(&self) -> std::time::Duration {
        std::time::Duration::from_secs(1)
    }

    /// One record.
    async fn request_get(&self, application: &str, id: RequestId) -> Result<Option<Request>>;

    /// How many records are in each status.
    async fn request_count_by_status(&self, application: &str) -> Result<Vec<(Status, i64)>>;

    /// Makes a record due now. `failed` keeps its attempts; `dead` and `cancelled` (and
    /// `success`, with `replay_success`) start over with fresh attempts (an operator
    /// replay); with `reset_steps` its durable steps are deleted in the same transaction.
    /// Returns the status the record had.
    async fn request_retry_now(
        &self,
        application: &str,
        id: RequestId,
        now: i64,
        rerun: Rerun,
    ) -> Result<Option<Status>>;

    /// Cancels a record that is `init` or `failed`.
    async fn request_cancel(
        &self,
        application: &str,
        id: RequestId,
        now: i64,
    ) -> Result<Option<Status>>;

    /// Deletes up to `batch.limit` records of the application in one of `batch.statuses`
    /// last changed before `batch.before`, with their log rows, in one transaction.
    async fn request_purge(&self, batch: &PurgeBatch<'_>) -> Result<Purged>;

    /// Deletes up to `limit` log rows of `application` finished before `before` whose
    /// request is gone (deleted on success, or by an operator); returns how many. A log
    /// row names no application, but its `worker` does: every instance name is
    /// `<application>@<rest>`, the rest without `@` (see [`orphan_worker_prefix`]).
    async fn log_purge_orphans(&self, application: &str, before: i64, limit: i64) -> Result<u64>;

    /// Deletes a record that is not `running`, with its log rows.
    async fn request_delete(&self, application: &str, id: RequestId) -> Result<Option<Status>>;

    /// The attempts of one request, in the order they were written (replays included),
    /// unless the request belongs to another application.
    async fn log_list(&self, application: &str, id: RequestId) -> Result<Vec<AttemptLog>>;

    /// Makes records written in a transaction that committed late for their delay due
    /// no earlier than `after_ms` past this statement, by the database's clock in it (a
    /// wait for a connection or SQLite's writer does not count), so that their delay
    /// counts from the commit; a due time later already stays. Only records still `init`
    /// and never attempted move.
    async fn request_postpone(&self, moves: &[(RequestId, i64)]) -> Result<u64>;

    /// Makes every waiting record of `application` (`init`, `failed`) due now by the
    /// database's clock in the statement (a claim right after it finds them all):
    /// delays and retry backoffs end at once. For test modes (`Runtime::run_due`).
    /// Returns how many records moved.
    async fn request_make_due(&self, application: &str) -> Result<u64>;

    /// The idempotency key `key` of `application`, unless it expired by `now`.
    async fn key_find(&self, application: &str, key: &str, now: i64) -> Result<Option<StoredKey>>;

    /// Records the key of a `SyncSave` call whose body ran (no record), unless the key
    /// is in use and has not expired.
    async fn key_record(&self, request: &NewRequest) -> Result<()>;

    /// Deletes up to `limit` keys of `application` that expired by `now`.
    async fn key_expire(&self, application: &str, now: i64, limit: i64) -> Result<u64>;

    /// The database's clock, in unix milliseconds.
    async fn db_now_ms(&self) -> Result<i64>;

    /// Writes this instance's announcement, `seen` set to the database's clock, and
    /// removes instances of any application not seen for `forget_after_ms` (if given);
    /// returns the instances of its application seen within `list_within_ms` (as
    /// [`Store::instance_list`], on the same connection on PostgreSQL and MySQL).
    async fn instance_announce(
        &self,
        a: &Announce<'_>,
    ) -> Result<Vec<crate::base::record::InstanceInfo>>;

    /// Removes this instance's announcement (shutdown).
    async fn instance_leave(&self, owner: &str) -> Result<()>;

    /// The instances of an application seen within `seen_within_ms` by the database's
    /// clock, by name.
    async fn instance_list(
        &self,
        application: &str,
        seen_within_ms: i64,
    ) -> Result<Vec<crate::base::record::InstanceInfo>>;

    /// Waiting records (`init`, `failed`) of these executors filed under other
    /// application names, counted by name: records a renamed application left behind.
    async fn request_count_elsewhere(
        &self,
        application: &str,
        executors: &[&'static str],
    ) -> Result<Vec<(String, i64)>>;
}

#[cfg(all(test, any(feature = "postgres", feature = "mysql")))]
mod cancel_tests;
#[cfg(test)]
mod claim_tests;
#[cfg(test)]
mod deadline_tests;
#[cfg(test)]
mod due_tests;
#[cfg(test)]
mod flow_tests;
#[cfg(test)]
mod tests;

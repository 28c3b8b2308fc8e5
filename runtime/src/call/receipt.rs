//! What a call hands on to be submitted ([`Submission`]) and what it gets back
//! ([`Receipt`], with its [`Outcome`]).

use std::sync::Arc;
use std::time::Duration;

use crate::base::record::RequestId;
use crate::base::registry::ExecutorDef;
use crate::base::trace::TraceContext;

/// The arguments as `Debug` shows them: `#[secret]` ones hidden.
pub(crate) struct ParamsForDebug<'a>(
    pub(crate) &'static ExecutorDef,
    pub(crate) std::result::Result<&'a str, String>,
);

impl std::fmt::Debug for ParamsForDebug<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match &self.1 {
            Ok(params) => f.write_str(&crate::base::secret::for_debug(self.0, params)),
            Err(error) => write!(f, "(not serializable: {error})"),
        }
    }
}

/// Everything about a call that the runtime needs to submit it.
pub(crate) struct Submission {
    pub(crate) def: &'static ExecutorDef,
    pub(crate) params: Arc<str>,
    pub(crate) key: Option<String>,
    pub(crate) delay: Option<Duration>,
    /// Not started within this of the call, it goes `dead` (`SaveAsync` only).
    pub(crate) deadline: Option<Duration>,
    /// Its tags (`SaveAsync` only).
    pub(crate) tags: Vec<String>,
    /// Its owner (`Call::owner`), for the owner's quota; also among its tags.
    pub(crate) owner: Option<String>,
    /// Its partition of its queue (`Call::partition`, the attribute's, else its owner).
    pub(crate) partition: Option<String>,
    pub(crate) priority: i32,
    pub(crate) trace: Option<TraceContext>,
    /// Whether `params` has its `#[secret]` arguments sealed already
    /// (`Inner::seal`).
    pub(crate) sealed: bool,
}

impl std::fmt::Debug for Submission {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Submission")
            .field("executor", &self.def.name)
            .field("params", &ParamsForDebug(self.def, Ok(&self.params)))
            .field("key", &self.key)
            .field("delay", &self.delay)
            .field("deadline", &self.deadline)
            .field("tags", &self.tags)
            .field("priority", &self.priority)
            .field("sealed", &self.sealed)
            .finish_non_exhaustive()
    }
}

/// What a submitted call did. Serializes as `{"id": 7, "outcome": {"kind": "queued"}}`.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct Receipt {
    /// The request record, when one was written; with [`Outcome::Existing`], the request
    /// the key names (its record may be gone: deleted on success, or by an operator);
    /// with [`Outcome::Live`], the live request of the call's singleton; with
    /// [`Outcome::Debounced`], the waiting request that took the call's arguments.
    pub id: Option<RequestId>,
    /// What happened.
    pub outcome: Outcome,
}

impl Receipt {
    pub(crate) fn new(id: Option<RequestId>, outcome: Outcome) -> Self {
        Receipt { id, outcome }
    }
}

/// What happened to a call. Serializes with its kind in snake case and its fields:
/// `{"kind": "deferred", "error": "..."}`.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
#[non_exhaustive]
pub enum Outcome {
    /// `SaveAsync`: the record is written; it runs after the commit (or its delay).
    Queued,
    /// The idempotency key is in use and has not expired (a call's `.key(..)`, or the key
    /// of the executor's `unique_for` or leading `debounce`, over its period): nothing
    /// was added, and a `SyncSave` body did not run. `id` is the request the key names
    /// (its record may have been deleted since), or `None` when the key is that of a
    /// `SyncSave` call whose body ran at once (no record).
    Existing,
    /// `SaveAsync` in a [`singleton`](crate::QueueLimits::singleton) queue: a request of
    /// the call's partition is waiting or running, so nothing was added; `id` is that
    /// request.
    Live,
    /// `SaveAsync` of an executor with a trailing `debounce`: a request of the call's
    /// partition was waiting for its window's end; it took this call's arguments and now
    /// starts at the end of this call's window. Nothing was added; `id` is that request.
    Debounced,
    /// `SyncSave`: the body ran at the call and succeeded.
    Ran,
    /// `SyncSave`: the body ran at the call and failed; it is persisted for retry
    /// (or `dead`, when the failure was final or it has a single attempt).
    Deferred {
        /// The failure's message.
        error: String,
    },
    /// `AsyncSave`, `Async`, `Thread`: held in memory, dispatched after the commit.
    InMemory,
    /// `SaveAsync`, called without `.within(&mut tx)` inside
    /// [`Runtime::transaction`](crate::Runtime::transaction): the record is written with
    /// the scope's other calls in one INSERT just before its COMMIT, so nothing about it is
    /// known yet (`id` is `None`). The receipt it gets then (its id, or
    /// [`Outcome::Existing`] for a key in use) is `receipts[index]` of
    /// [`Runtime::transaction_with_receipts`](crate::Runtime::transaction_with_receipts).
    Pending {
        /// The call's position among the calls made in the scope, from 0.
        index: usize,
    },
    /// `SaveAsync` outside a transaction whose record could not be written: it runs in
    /// memory (the `degrade_to_memory` setting), and a crash before it runs loses it.
    Degraded {
        /// Why the record could not be written.
        error: String,
    },
}

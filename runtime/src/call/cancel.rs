//! A cancel inside a transaction: the caller's (`rt.cancel(id).within(&mut tx)`) or a
//! scope's, at its commit (`rt.cancel(id)` awaited inside `rt.transaction(..)`). The
//! public `Cancel` builder is `operate/cancel.rs`'s.

use crate::base::error::{Error, Result};
use crate::base::query::RequestQuery;
use crate::base::record::{RequestId, Status};
use crate::call::tx::Tx;
use crate::runtime::Inner;
use crate::store::Backend;

/// What a cancel did: returned by [`Runtime::cancel`](crate::Runtime::cancel) and
/// [`Runtime::cancel_key`](crate::Runtime::cancel_key), awaited or
/// [`.within(&mut tx)`](crate::Cancel::within).
///
/// ```no_run
/// use async_exec::{CancelOutcome, RequestId, Runtime};
///
/// # async fn demo(rt: Runtime, id: RequestId) -> async_exec::Result<()> {
/// if rt.cancel(id).await? == CancelOutcome::StopAsked {
///     println!("{id} is running: its body is told to stop");
/// }
/// # Ok(()) }
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum CancelOutcome {
    /// It was waiting (`init` or `failed`): it is `cancelled` now (or when the caller's
    /// transaction commits) and no instance starts it.
    Cancelled,
    /// It was running (claimed by an instance): its body is told to stop within about a
    /// second (through its [`Context`](crate::Context)) and ends `cancelled` unless it
    /// succeeds; a body that goes on is stopped at its timeout. It is not run again. A
    /// claim whose body had not started yet is usually not started; under faults (the
    /// claim's answer or a worker came late) its body can still start after this answer,
    /// and is then told within about a second of its start.
    StopAsked,
    /// Awaited inside [`Runtime::transaction`](crate::Runtime::transaction): the cancel is
    /// made in the scope's transaction just before its commit (what it finds is known
    /// only then; a refusal fails the scope).
    AtCommit,
}

/// What a cancel of every request a query matches did
/// ([`Runtime::cancel_matching`](crate::Runtime::cancel_matching)`.within(&mut tx)`): true
/// once the caller's transaction commits, nothing of it if it rolls back.
///
/// ```no_run
/// use async_exec::{RequestQuery, Runtime, Sqlite, Tx};
///
/// # async fn demo(rt: Runtime) -> async_exec::Result<()> {
/// let mut tx: Tx<Sqlite> = rt.begin().await?;
/// let done = rt.cancel_tagged("tenant:42").within(&mut tx).await?;
/// tx.commit().await?;
/// println!("{} cancelled, {} running asked to stop", done.cancelled, done.stop_asked);
/// # Ok(()) }
/// ```
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize)]
#[non_exhaustive]
pub struct CancelCount {
    /// Requests that were waiting (`init` or `failed`): `cancelled` now, and no instance
    /// starts them.
    pub cancelled: u64,
    /// Requests that were running: their bodies are told to stop (see
    /// [`CancelOutcome::StopAsked`]).
    pub stop_asked: u64,
}

impl CancelCount {
    /// Every request the cancel changed: cancelled or asked to stop.
    pub fn total(&self) -> u64 {
        self.cancelled + self.stop_asked
    }
}

/// Cancels, inside `tx`, every request of `application` that matches `query` and waits,
/// and asks every matching one that runs to stop: the records are locked, then decided on.
pub(crate) async fn cancel_matching_in<DB: Backend>(
    inner: &Inner,
    tx: &mut Tx<DB>,
    application: &str,
    query: &RequestQuery,
) -> Result<CancelCount> {
    inner.check_open()?;
    tx.check_before_write().await?;
    let now = inner.now_ms();
    let done = DB::cancel_matching_in(tx.raw_conn(), application, query, now).await;
    let done = tx.noting(done)?;
    Ok(CancelCount {
        cancelled: done.cancelled,
        stop_asked: done.stop_asked,
    })
}

/// Which request a cancel is of.
#[derive(Debug, Clone)]
pub(crate) enum Target {
    Id(RequestId),
    Key(String),
}

/// Cancels `target` inside `tx`: the record is changed (and locked) in it.
pub(crate) async fn cancel_in<DB: Backend>(
    inner: &Inner,
    tx: &mut Tx<DB>,
    target: &Target,
) -> Result<CancelOutcome> {
    inner.check_open()?;
    tx.check_before_write().await?;
    let now = inner.now_ms();
    let id = match target {
        Target::Id(id) => *id,
        Target::Key(key) => {
            let found = DB::key_find_in(tx.raw_conn(), &inner.app, key, now).await;
            match tx.noting(found)?.and_then(|stored| stored.request_id) {
                Some(id) => id,
                None => return Err(Error::KeyNotFound(key.clone())),
            }
        }
    };
    let done = DB::cancel_in(tx.raw_conn(), &inner.app, id, now).await;
    match tx.noting(done)? {
        Ok(()) => Ok(CancelOutcome::Cancelled),
        Err(status) => cancelled(id, status),
    }
}

/// What a cancel that found `status` (`None`: no such request) returns.
pub(crate) fn cancelled(id: RequestId, status: Option<Status>) -> Result<CancelOutcome> {
    match status {
        None => Err(Error::NotFound(id)),
        Some(Status::Init | Status::Failed) => Ok(CancelOutcome::Cancelled),
        // A running one was asked to stop.
        Some(Status::Running) => Ok(CancelOutcome::StopAsked),
        Some(other) => Err(Error::InvalidState {
            id,
            status: other.to_string(),
            reason: "only `init`, `failed` and `running` requests can be cancelled",
        }),
    }
}

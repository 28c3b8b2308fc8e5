//! A cancel inside a transaction: the caller's (`rt.cancel(id).within(&mut tx)`) or a
//! scope's, at its commit (`rt.cancel(id)` awaited inside `rt.transaction(..)`). The
//! public `Cancel` builder is `operate/cancel.rs`'s.

use crate::base::error::{Error, Result};
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

//! A cancel inside a transaction: the caller's (`rt.cancel(id).within(&mut tx)`) or a
//! scope's, at its commit (`rt.cancel(id)` awaited inside `rt.transaction(..)`). The
//! public `Cancel` builder is `operate/cancel.rs`'s.

use crate::base::error::{Error, Result};
use crate::base::record::{RequestId, Status};
use crate::call::tx::Tx;
use crate::runtime::Inner;
use crate::store::Backend;

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
) -> Result<()> {
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
        Ok(()) => Ok(()),
        Err(status) => cancelled(id, status),
    }
}

/// What a cancel that found `status` (`None`: no such request) returns.
pub(crate) fn cancelled(id: RequestId, status: Option<Status>) -> Result<()> {
    match status {
        None => Err(Error::NotFound(id)),
        // A running one was asked to stop.
        Some(Status::Init | Status::Failed | Status::Running) => Ok(()),
        Some(other) => Err(Error::InvalidState {
            id,
            status: other.to_string(),
            reason: "only `init`, `failed` and `running` requests can be cancelled",
        }),
    }
}

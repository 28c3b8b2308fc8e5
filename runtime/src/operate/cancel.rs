//! `rt.cancel(id)` and `rt.cancel_key(key)`: a cancel of a waiting request (or a stop
//! asked of a running one), now (awaited),
//! inside the caller's transaction (`.within(&mut tx)`), or, awaited inside
//! `rt.transaction(..)`, in the scope's transaction at its commit; a rollback keeps the
//! request as it was.

use std::future::{Future, IntoFuture};
use std::pin::Pin;

use crate::base::error::{Error, Result};
use crate::base::query::RequestQuery;
use crate::base::record::{RequestId, Status};
use crate::call::cancel::{
    cancel_in, cancel_matching_in, cancelled, CancelCount, CancelOutcome, Target,
};
use crate::call::tx::Tx;
use crate::runtime::Runtime;
use crate::store::sealed::BackendOps;
use crate::store::Backend;

/// A cancel of a request: made by [`Runtime::cancel`] or [`Runtime::cancel_key`].
/// Awaited, it cancels at once; [`within`](Cancel::within) cancels inside the caller's
/// transaction: nothing changes unless it commits. Either says what it did
/// ([`CancelOutcome`]): a waiting request (`init` or `failed`) is `cancelled`; a
/// `running` one is asked to stop (its body learns within about a second, and it ends
/// `cancelled` unless it succeeds).
///
/// A request that is finished or already cancelled is refused ([`Error::InvalidState`]);
/// an unknown id is [`Error::NotFound`] (a request that succeeded is deleted unless
/// `delete_on_success(false)`), a key no request holds [`Error::KeyNotFound`]. Inside
/// [`Runtime::transaction`] a cancel awaited on its own joins the scope
/// ([`CancelOutcome::AtCommit`]): it is made in the scope's transaction just before its
/// commit (after the scope's body returned), so the scope's rollback keeps the request,
/// and a cancel refused there fails the scope with the refusal.
///
/// ```no_run
/// use async_exec::{async_exec, Runtime, Sqlite, Tx};
///
/// #[async_exec(type = SaveAsync)]
/// async fn remind(subscription: i64) {}
///
/// # async fn demo(rt: Runtime) -> async_exec::Result<()> {
/// remind(42).key("reminder-42").delay(std::time::Duration::from_secs(86_400)).on(&rt).await?;
///
/// // The subscription ends: the reminder goes with it, or not at all.
/// let mut tx: Tx<Sqlite> = rt.begin().await?;
/// // ... UPDATE subscriptions SET ended = ... on tx.conn() ...
/// rt.cancel_key("reminder-42").within(&mut tx).await?;
/// tx.commit().await?;
/// # Ok(()) }
/// ```
#[must_use = "a cancel does nothing until it is awaited"]
#[derive(Debug)]
pub struct Cancel<'r> {
    runtime: &'r Runtime,
    target: Target,
}

impl Runtime {
    /// Cancels a request that has not started and has not succeeded (`init` or
    /// `failed`), or asks a running one to stop: awaited, at once; with
    /// [`.within(&mut tx)`](Cancel::within), in the caller's transaction. See [`Cancel`].
    pub fn cancel(&self, id: RequestId) -> Cancel<'_> {
        Cancel {
            runtime: self,
            target: Target::Id(id),
        }
    }

    /// Cancels the request that holds idempotency key `key` (see [`Runtime::cancel`]).
    pub fn cancel_key(&self, key: impl Into<String>) -> Cancel<'_> {
        Cancel {
            runtime: self,
            target: Target::Key(key.into()),
        }
    }
}

/// A cancel of every request that matches a [`RequestQuery`] (the filter
/// [`Runtime::list`] uses: a tag, a key, an executor, a status, a time range, ...), made
/// by [`Runtime::cancel_matching`] or [`Runtime::cancel_tagged`], inside the caller's
/// transaction ([`within`](CancelMatching::within)): every matching request that waits
/// (`init` or `failed`) is `cancelled`, every one that runs is asked to stop, and the
/// others (finished, cancelled) are left alone. The records are locked in the caller's
/// transaction before anything is decided (see [`Cancel`]), so the count it returns is
/// what is true when the transaction commits; a rollback keeps every request as it was.
///
/// One statement locks them all, and one statement per 500 of them changes them: no
/// request-by-request round trips. The locks are held until the transaction ends: keep
/// the transaction short, as for any write of many rows. Awaited instead, it cancels at
/// once, the same way in a transaction of the runtime's own (refused inside
/// [`Runtime::transaction`] with [`Error::NestedTransaction`]: pass the scope's `tx` to
/// `within`). [`Runtime::act`] with [`Action::Cancel`](crate::Action) goes in batches of
/// 500 and cancels waiting requests only.
///
/// ```no_run
/// use async_exec::{RequestQuery, Runtime, Status, Tx, Postgres};
///
/// # async fn demo(rt: Runtime) -> async_exec::Result<()> {
/// // A tenant leaves: its account row and its pending work go together, or not at all.
/// let mut tx: Tx<Postgres> = rt.begin().await?;
/// // ... UPDATE tenants SET closed = true WHERE id = 42 on tx.conn() ...
/// let done = rt.cancel_tagged("tenant:42").within(&mut tx).await?;
/// let mails = RequestQuery::default().executor("billing::mail_invoice").tag("tenant:42");
/// let _ = rt.cancel_matching(&mails).within(&mut tx).await?; // a narrower filter
/// tx.commit().await?;
/// println!("{} cancelled, {} asked to stop", done.cancelled, done.stop_asked);
/// # Ok(()) }
/// ```
#[must_use = "a cancel does nothing until it is awaited"]
#[derive(Debug)]
pub struct CancelMatching<'r> {
    runtime: &'r Runtime,
    query: RequestQuery,
}

impl Runtime {
    /// Cancels every request that matches `query` (of this application unless the query
    /// names another) inside the caller's transaction: see [`CancelMatching`]. A filter
    /// text over 1,024 bytes is an [`Error::InvalidFilter`].
    pub fn cancel_matching(&self, query: &RequestQuery) -> CancelMatching<'_> {
        CancelMatching {
            runtime: self,
            query: query.clone(),
        }
    }

    /// Cancels every request tagged `tag` inside the caller's transaction:
    /// [`cancel_matching`](Runtime::cancel_matching) of
    /// `RequestQuery::default().tag(tag)`.
    pub fn cancel_tagged(&self, tag: impl Into<String>) -> CancelMatching<'_> {
        self.cancel_matching(&RequestQuery::default().tag(tag))
    }
}

impl CancelMatching<'_> {
    /// Cancels inside `tx`: the records are locked and changed in it, and stay as they
    /// were if it rolls back. Returns how many were cancelled and how many asked to stop.
    pub async fn within<DB: Backend>(self, tx: &mut Tx<DB>) -> Result<CancelCount> {
        crate::operate::requests::check_query(&self.query)?;
        let inner = &self.runtime.inner;
        let application = self
            .query
            .application
            .as_deref()
            .unwrap_or(&inner.app)
            .to_owned();
        cancel_matching_in(inner, tx, &application, &self.query).await
    }
}

impl<'r> CancelMatching<'r> {
    /// At once: in a transaction of the runtime's own, committed.
    async fn now(self) -> Result<CancelCount> {
        crate::call::scope::refuse_nested(self.runtime, "rt.cancel_matching(..).await")?;
        let runtime = self.runtime;
        let store = runtime.inner.store.as_any();
        macro_rules! on {
            ($db:ty) => {
                if <$db as BackendOps>::begin_on(store).is_some() {
                    let mut tx: Tx<$db> = runtime.begin_any().await?;
                    let done = self.within(&mut tx).await?;
                    tx.commit().await?;
                    return Ok(done);
                }
            };
        }
        #[cfg(feature = "sqlite")]
        on!(sqlx::Sqlite);
        #[cfg(feature = "postgres")]
        on!(sqlx::Postgres);
        #[cfg(feature = "mysql")]
        on!(sqlx::MySql);
        unreachable!("the store is of a compiled backend")
    }
}

impl<'r> IntoFuture for CancelMatching<'r> {
    type Output = Result<CancelCount>;
    type IntoFuture = Pin<Box<dyn Future<Output = Result<CancelCount>> + Send + 'r>>;

    fn into_future(self) -> Self::IntoFuture {
        Box::pin(self.now())
    }
}

impl Cancel<'_> {
    /// Cancels inside the caller's transaction: the record is changed (and locked) in
    /// `tx`, and stays as it was if `tx` rolls back.
    pub async fn within<DB: Backend>(self, tx: &mut Tx<DB>) -> Result<CancelOutcome> {
        cancel_in(&self.runtime.inner, tx, &self.target).await
    }

    async fn now(self) -> Result<CancelOutcome> {
        let inner = &self.runtime.inner;
        // Inside a scope of this runtime: done in the scope's transaction at its commit.
        if let Some(scope) = crate::call::scope::current().filter(|s| s.is_of(self.runtime)) {
            inner.check_open()?;
            scope.cancel_at_commit(self.target);
            return Ok(CancelOutcome::AtCommit);
        }
        let id = match &self.target {
            Target::Id(id) => *id,
            Target::Key(key) => {
                let stored = inner
                    .store
                    .key_find(&inner.app, key, inner.now_ms())
                    .await?;
                match stored.and_then(|stored| stored.request_id) {
                    Some(id) => id,
                    None => return Err(Error::KeyNotFound(key.clone())),
                }
            }
        };
        let status: Option<Status> = inner
            .store
            .request_cancel(&inner.app, id, inner.now_ms())
            .await?;
        cancelled(id, status)
    }
}

impl<'r> IntoFuture for Cancel<'r> {
    type Output = Result<CancelOutcome>;
    type IntoFuture = Pin<Box<dyn Future<Output = Result<CancelOutcome>> + Send + 'r>>;

    fn into_future(self) -> Self::IntoFuture {
        Box::pin(self.now())
    }
}

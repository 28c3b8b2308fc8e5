//! `rt.act_matching(action, &query).within(&mut tx)`: an operator's action (retry,
//! replay, cancel, delete) on every request a query matches, inside the caller's
//! transaction: the records are locked, then changed; a rollback keeps them all.

use crate::base::error::Result;
use crate::base::query::{Action, RequestQuery};
use crate::call::tx::Tx;
use crate::runtime::Runtime;
use crate::store::Backend;

/// [`Runtime::act`] inside the caller's transaction: made by [`Runtime::act_matching`].
/// Every request that matches the query (the filter [`Runtime::list`] uses) and is in a
/// status the action applies to ([`Action::applies_to`]) is changed in the caller's
/// transaction, as `act` changes it: nothing of it is seen by others before the
/// transaction commits, and a rollback keeps every request as it was. The records are
/// locked first, by one statement in id order, then changed by one statement per 500
/// of them; the count returned is what the commit makes true. The locks are held until
/// the transaction ends: keep it short.
///
/// Unlike [`act`](Runtime::act) it writes no audit entry (it is your code's change, as a
/// call or [`Runtime::cancel`] is), and [`Action::Cancel`] cancels waiting requests
/// only: [`Runtime::cancel_matching`] also asks running ones to stop. Requests made due
/// (`Retry`, `ReplayDead`) are looked for by the workers as soon as the transaction
/// commits.
///
/// ```no_run
/// use async_exec::{Action, RequestQuery, Runtime, Status, Tx, Postgres};
///
/// # async fn demo(rt: Runtime) -> async_exec::Result<()> {
/// // The tenant's mail server is fixed: its dead mails go again, with the fix recorded.
/// let mut tx: Tx<Postgres> = rt.begin().await?;
/// // ... UPDATE tenants SET mail_fixed = true WHERE id = 7 on tx.conn() ...
/// let dead_mails = RequestQuery::default().tag("tenant:7").status(Status::Dead);
/// let replayed = rt.act_matching(Action::ReplayDead, &dead_mails).within(&mut tx).await?;
/// tx.commit().await?;
/// println!("{replayed} mails sent again");
/// # Ok(()) }
/// ```
#[must_use = "an action does nothing until `.within(&mut tx)` is awaited"]
#[derive(Debug)]
pub struct ActMatching<'r> {
    runtime: &'r Runtime,
    action: Action,
    query: RequestQuery,
}

impl Runtime {
    /// `action` on every request that matches `query` (of this application unless the
    /// query names another), inside the caller's transaction: see [`ActMatching`]. A
    /// filter text over 1,024 bytes is an [`Error::InvalidFilter`](crate::Error).
    pub fn act_matching(&self, action: Action, query: &RequestQuery) -> ActMatching<'_> {
        ActMatching {
            runtime: self,
            action,
            query: query.clone(),
        }
    }
}

impl ActMatching<'_> {
    /// Acts inside `tx`: the records are locked and changed in it, and stay as they were
    /// if it rolls back. Returns how many changed.
    pub async fn within<DB: Backend>(self, tx: &mut Tx<DB>) -> Result<u64> {
        crate::operate::requests::check_query(&self.query)?;
        let inner = &self.runtime.inner;
        inner.check_open()?;
        tx.check_before_write().await?;
        let application = self.query.application.as_deref().unwrap_or(&inner.app);
        let now = inner.now_ms();
        let done =
            DB::act_matching_in(tx.raw_conn(), application, &self.query, self.action, now).await;
        let changed = tx.noting(done)?;
        if changed > 0 && matches!(self.action, Action::Retry | Action::ReplayDead) {
            tx.look_in_store = true;
        }
        Ok(changed)
    }
}

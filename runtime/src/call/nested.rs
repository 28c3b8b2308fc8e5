//! A transaction that commits on its own, also inside another:
//! [`Runtime::transaction_requires_new`] (Spring's `REQUIRES_NEW`).

use crate::base::error::Error;
use crate::base::registry::BoxFuture;
use crate::call::receipt::Receipt;
use crate::call::tx::Tx;
use crate::runtime::Runtime;
use crate::store::Backend;

impl Runtime {
    /// Runs `body` in a transaction of its own, like [`transaction`](Runtime::transaction),
    /// **also inside another** `rt.transaction(..)`: it commits or rolls back on its own,
    /// whatever the enclosing one does afterwards (Spring's `REQUIRES_NEW`). Calls made in
    /// the body without `.within` join this transaction, not the enclosing one. Use it
    /// for work that must stay even if the caller's transaction rolls back (an audit
    /// record); the caller's transaction stays open meanwhile, on another connection.
    ///
    /// On **SQLite** (one writer at a time) the new transaction would wait for the one
    /// that the task holds until the busy timeout: there it is refused at once with
    /// [`Error::IndependentOnSqlite`] while the task holds a transaction of the runtime
    /// (and an enclosing scope rolls back); outside any transaction it is
    /// `rt.transaction(..)`.
    ///
    /// ```no_run
    /// use async_exec::{async_exec, Postgres, Runtime, Tx};
    ///
    /// #[async_exec(type = SaveAsync)]
    /// async fn audit(event: String) {}
    ///
    /// # async fn demo(rt: Runtime) -> async_exec::Result<()> {
    /// let audit_rt = rt.clone();
    /// let placed: async_exec::Result<()> = rt
    ///     .transaction(|_tx: &mut Tx<Postgres>| {
    ///         Box::pin(async move {
    ///             audit_rt
    ///                 .transaction_requires_new(|_tx: &mut Tx<Postgres>| {
    ///                     Box::pin(async move {
    ///                         audit("order attempted".into()).await?; // commits now
    ///                         Ok::<_, async_exec::Error>(())
    ///                     })
    ///                 })
    ///                 .await?;
    ///             Err(async_exec::Error::NotFound(7)) // this one rolls back
    ///         })
    ///     })
    ///     .await;
    /// # Ok(()) }
    /// ```
    pub async fn transaction_requires_new<DB, F, T, E>(&self, body: F) -> std::result::Result<T, E>
    where
        DB: Backend,
        F: for<'c> FnOnce(&'c mut Tx<DB>) -> BoxFuture<'c, std::result::Result<T, E>>,
        E: From<Error>,
    {
        let (value, _): (T, Vec<Receipt>) =
            self.transaction_requires_new_with_receipts(body).await?;
        Ok(value)
    }

    /// [`transaction_requires_new`](Runtime::transaction_requires_new), returning as well
    /// the final receipts of the calls made in it, as
    /// [`transaction_with_receipts`](Runtime::transaction_with_receipts) does.
    pub async fn transaction_requires_new_with_receipts<DB, F, T, E>(
        &self,
        body: F,
    ) -> std::result::Result<(T, Vec<Receipt>), E>
    where
        DB: Backend,
        F: for<'c> FnOnce(&'c mut Tx<DB>) -> BoxFuture<'c, std::result::Result<T, E>>,
        E: From<Error>,
    {
        if DB::NAME == "SQLite" {
            let scope = crate::call::scope::current().filter(|scope| scope.is_of(self));
            if let Some(scope) = &scope {
                scope.mark_rollback_only(crate::call::scope::NESTED);
            }
            if scope.is_some() || self.inner.open_txs.held_here() {
                return Err(Error::IndependentOnSqlite.into());
            }
        }
        self.run_scope(body).await
    }
}

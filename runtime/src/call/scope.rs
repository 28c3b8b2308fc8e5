//! The ambient transaction: [`Runtime::transaction`] runs a closure in a transaction, and
//! every call awaited in it without `.within(&mut tx)` joins that transaction.
//!
//! The scope is a tokio task-local: calls made in the closure's task find it; calls made
//! in tasks it spawns do not (task-locals are not inherited). Calls are held in the scope
//! and written together just before the COMMIT: the records of `SaveAsync` calls in one
//! multi-row INSERT (the batch insert of [`batch`](crate::batch)), then everything is
//! dispatched after the commit, as for `.within(&mut tx)`. `SyncSave` bodies run at the
//! call; what they leave to write (a failure to retry, the key of a body that ran) is
//! written in the transaction before the batch. Cancels awaited in the scope
//! (`rt.cancel(id)`) are made in the transaction first.

use std::collections::HashSet;
use std::sync::{Arc, Mutex, MutexGuard};

use crate::base::error::{Error, Result};
use crate::base::record::NewRequest;
use crate::base::registry::BoxFuture;
use crate::base::strategy::Strategy;
use crate::call::cancel::Target;
use crate::call::receipt::{Outcome, Receipt, Submission};
use crate::call::tx::Tx;
use crate::runtime::{Inner, Runtime};
use crate::store::Backend;

/// Why a scope in which a nested transaction was refused is rollback-only.
pub(crate) const NESTED: &str =
    "a nested `rt.transaction(..)`, `rt.begin()` or `rt.transaction_requires_new(..)` was \
     refused in it";

/// Refuses `asked` (`rt.begin()`) inside a scope of `runtime`, marking the scope
/// rollback-only.
pub(crate) fn refuse_nested(runtime: &Runtime, asked: &'static str) -> Result<()> {
    match current().filter(|scope| scope.is_of(runtime)) {
        Some(scope) => {
            scope.mark_rollback_only(NESTED);
            Err(Error::NestedTransaction { asked })
        }
        None => Ok(()),
    }
}

tokio::task_local! {
    static SCOPE: Arc<Scope>;
}

/// The scope this task is in, if any.
pub(crate) fn current() -> Option<Arc<Scope>> {
    SCOPE.try_with(Arc::clone).ok()
}

/// The calls made in one [`Runtime::transaction`], held until its commit.
#[derive(Debug)]
pub(crate) struct Scope {
    inner: Arc<Inner>,
    state: Mutex<ScopeState>,
}

#[derive(Debug, Default)]
struct ScopeState {
    /// One per call, in the order the calls were made.
    entries: Vec<Entry>,
    /// The idempotency keys of `SaveAsync` and `SyncSave` calls in the scope.
    keys: HashSet<String>,
    /// Why the scope must roll back whatever its body returns.
    rollback_only: Option<&'static str>,
    /// Cancels made in the scope, done in its transaction before its calls are written.
    cancels: Vec<Target>,
}

#[derive(Debug)]
enum Entry {
    /// Written (`SaveAsync`) and dispatched at the commit.
    Call(Submission),
    /// A `SyncSave` call whose body ran at the call: its receipt, and what to write.
    Ran {
        receipt: Receipt,
        write: Option<Box<SyncWrite>>,
    },
}

#[derive(Debug)]
enum SyncWrite {
    /// The key of a body that ran and succeeded.
    Key(NewRequest),
    /// The record of a body that failed, for retry (or `dead`).
    Failure(NewRequest),
}

impl Scope {
    fn new(inner: Arc<Inner>) -> Self {
        Scope {
            inner,
            state: Mutex::default(),
        }
    }

    fn lock(&self) -> MutexGuard<'_, ScopeState> {
        self.state.lock().expect("transaction scope lock")
    }

    /// The scope's runtime.
    pub(crate) fn runtime(&self) -> Runtime {
        Runtime {
            inner: self.inner.clone(),
        }
    }

    /// Whether the scope belongs to `runtime`.
    pub(crate) fn is_of(&self, runtime: &Runtime) -> bool {
        Arc::ptr_eq(&self.inner, &runtime.inner)
    }

    /// Makes the scope roll back whatever its body returns.
    pub(crate) fn mark_rollback_only(&self, reason: &'static str) {
        self.lock().rollback_only.get_or_insert(reason);
    }

    /// A cancel made in the scope: done in its transaction at the commit.
    pub(crate) fn cancel_at_commit(&self, target: Target) {
        self.lock().cancels.push(target);
    }

    /// A call made in the scope.
    pub(crate) async fn submit(&self, mut call: Submission) -> Result<Receipt> {
        self.inner.check_open()?;
        self.inner.seal(&mut call)?;
        if call.def.strategy == Strategy::SyncSave {
            return self.run_sync_save(call).await;
        }
        let mut state = self.lock();
        let index = state.entries.len();
        let outcome = if call.def.strategy == Strategy::SaveAsync {
            if let Some(key) = &call.key {
                state.keys.insert(key.clone());
            }
            Outcome::Pending { index }
        } else {
            Outcome::InMemory
        };
        state.entries.push(Entry::Call(call));
        Ok(Receipt::new(None, outcome))
    }

    /// A batch made in the scope: its calls join the scope one by one.
    pub(crate) async fn submit_batch(&self, calls: Vec<Submission>) -> Result<Vec<Receipt>> {
        let mut receipts = Vec::with_capacity(calls.len());
        for call in calls {
            receipts.push(self.submit(call).await?);
        }
        Ok(receipts)
    }

    /// `SyncSave` in the scope: the key is looked up (among the scope's calls, then in the
    /// store, as committed), the body runs now, and what is left to write waits for the
    /// commit.
    async fn run_sync_save(&self, call: Submission) -> Result<Receipt> {
        let inner = &self.inner;
        if let Some(key) = &call.key {
            let known = if self.lock().keys.contains(key) {
                Some(None)
            } else {
                let found = inner
                    .store
                    .key_find(&inner.app, key, inner.now_ms())
                    .await?;
                found.map(|known| known.request_id)
            };
            if let Some(id) = known {
                let receipt = Receipt::new(id, Outcome::Existing);
                self.lock().entries.push(Entry::Ran {
                    receipt: receipt.clone(),
                    write: None,
                });
                return Ok(receipt);
            }
        }
        let job = call.job();
        let attempt = inner.executor.run_body(&job).await;
        let (receipt, write) =
            match inner
                .executor
                .failure_record(&job, &attempt, call.key.clone(), call.priority)
            {
                None => (
                    Receipt::new(None, Outcome::Ran),
                    call.key
                        .is_some()
                        .then(|| SyncWrite::Key(call.request(inner))),
                ),
                Some(request) => {
                    let error = request
                        .log
                        .as_ref()
                        .and_then(|l| l.error.clone())
                        .unwrap_or_default();
                    (
                        Receipt::new(None, Outcome::Deferred { error }),
                        Some(SyncWrite::Failure(request)),
                    )
                }
            };
        let mut state = self.lock();
        if let Some(key) = &call.key {
            state.keys.insert(key.clone());
        }
        state.entries.push(Entry::Ran {
            receipt: receipt.clone(),
            write: write.map(Box::new),
        });
        Ok(receipt)
    }

    /// Writes the scope's calls in `tx`: first what `SyncSave` calls left (their keys
    /// then count for the calls after them), then the `SaveAsync` records in one batch.
    /// Returns the final receipts, in call order.
    async fn flush<DB: Backend>(&self, tx: &mut Tx<DB>) -> Result<Vec<Receipt>> {
        let cancels = std::mem::take(&mut self.lock().cancels);
        for target in &cancels {
            crate::call::cancel::cancel_in(&self.inner, tx, target).await?;
        }
        let entries = std::mem::take(&mut self.lock().entries);
        let writes = entries.iter().any(|entry| match entry {
            Entry::Call(call) => crate::call::submit::writes(call),
            Entry::Ran { write, .. } => write.is_some(),
        });
        if writes {
            tx.check_before_write().await?;
        }
        let mut receipts: Vec<Option<Receipt>> = vec![None; entries.len()];
        let mut calls = Vec::new();
        let mut positions = Vec::new();
        for (i, entry) in entries.into_iter().enumerate() {
            match entry {
                Entry::Call(call) => {
                    positions.push(i);
                    calls.push(call);
                }
                Entry::Ran { mut receipt, write } => {
                    match write.map(|write| *write) {
                        Some(SyncWrite::Key(request)) => {
                            let recorded = DB::key_record_in(tx.raw_conn(), &request).await;
                            tx.noting(recorded).map_err(DB::explain)?
                        }
                        Some(SyncWrite::Failure(request)) => {
                            let inserted = DB::insert_in(tx.raw_conn(), &request).await;
                            receipt.id = tx.noting(inserted).map_err(DB::explain)?.id();
                        }
                        None => {}
                    }
                    receipts[i] = Some(receipt);
                }
            }
        }
        if !calls.is_empty() {
            let inner = tx.inner.clone();
            let written = inner.submit_batch_checked_in(calls, tx).await?;
            for (i, receipt) in positions.into_iter().zip(written) {
                receipts[i] = Some(receipt);
            }
        }
        Ok(receipts
            .into_iter()
            .map(|r| r.expect("every call has a receipt"))
            .collect())
    }
}

impl Runtime {
    /// Begins a transaction on the runtime's database.
    ///
    /// `DB` is the backend's sqlx type (`Tx` alone means `Tx<sqlx::Sqlite>`); asking for
    /// another backend than the runtime's is an error that says which to use.
    ///
    /// Inside [`transaction`](Runtime::transaction) of this runtime (in the scope's task)
    /// it is refused with [`Error::NestedTransaction`], and the scope rolls back: pass the
    /// scope's `tx` down instead, or use
    /// [`transaction_requires_new`](Runtime::transaction_requires_new).
    pub async fn begin<DB: Backend>(&self) -> Result<Tx<DB>> {
        refuse_nested(self, "rt.begin()")?;
        self.begin_any().await
    }

    /// Runs `body` in a transaction in which calls **join the transaction without
    /// `.within(&mut tx)`**, the way Spring's `@Transactional` works: a call awaited in
    /// the body's task is held, written with the others just before the COMMIT (the
    /// `SaveAsync` records in one multi-row INSERT; those with an idempotency key one by
    /// one, each checked against the keys before it), and dispatched after it. When `body`
    /// returns `Ok`, the transaction commits and its value is returned; when it returns
    /// `Err` or panics, the transaction rolls back and no call made in it runs.
    ///
    /// - A call inside the scope returns at once: a `SaveAsync` call's receipt is
    ///   [`Outcome::Pending`] (its id is drawn at the commit; a duplicate idempotency key,
    ///   in the scope or against earlier records, is found then); use
    ///   [`transaction_with_receipts`](Runtime::transaction_with_receipts) for the final
    ///   receipts. `AsyncSave`, `Async` and `Thread` say [`Outcome::InMemory`].
    /// - `SyncSave` runs its body at the call, as everywhere; its key is looked up among
    ///   the scope's calls and in the committed store (a key used by a `.within(&mut tx)`
    ///   call in this transaction is not seen until the commit); a failure is written for
    ///   retry, and the key of a body that ran is recorded, in the transaction (so a
    ///   `Deferred` receipt has no id until the commit, and a rollback forgets both).
    /// - `.within(&mut tx)` still writes at the call; `.independent()` opts a call out (it
    ///   is written now and runs even if the transaction rolls back); a call `.on(&other)`
    ///   runtime is not part of this one.
    /// - **Inside another scope** of this runtime (in its task), `rt.transaction(..)` and
    ///   `rt.begin()` are refused ([`Error::NestedTransaction`]) and mark that scope
    ///   rollback-only: it then rolls back even if its body returns `Ok`
    ///   ([`Error::RollbackOnly`]). A body cannot be handed the scope's transaction from
    ///   outside it (its `&mut Tx` is the outer body's), so the work that should join the
    ///   scope takes the scope's `tx` as a parameter (`&mut Tx<DB>`; its calls without
    ///   `.within` join the scope anyway). For a transaction that commits on its own, use
    ///   [`transaction_requires_new`](Runtime::transaction_requires_new).
    /// - **Tasks spawned in the body do not inherit the scope** (tokio task-locals are not
    ///   inherited): a call awaited there is made on its own and autocommits. Await calls
    ///   in the body's own task (`join!` and `select!` are fine).
    ///
    /// `DB` is the runtime's backend (`Tx<Sqlite>`, `Tx<Postgres>`, `Tx<MySql>`); name it
    /// on the closure's parameter. The error type is the body's, which must take an
    /// [`Error`] (`async_exec::Error`, `anyhow::Error`, ...).
    ///
    /// ```no_run
    /// use async_exec::{async_exec, Runtime, Sqlite, Tx};
    ///
    /// #[async_exec(type = SaveAsync, remark = "send the welcome mail")]
    /// async fn send_welcome(user_id: i64, email: String) {}
    ///
    /// # async fn demo(rt: Runtime) -> anyhow::Result<()> {
    /// let user_id = rt
    ///     .transaction(|tx: &mut Tx<Sqlite>| {
    ///         Box::pin(async move {
    ///             sqlx::query("insert into users (id) values (1)").execute(tx.conn()).await?;
    ///             send_welcome(1, "a@b.c".into()).await?; // joins the transaction
    ///             Ok::<_, anyhow::Error>(1)
    ///         })
    ///     })
    ///     .await?; // committed, then dispatched
    /// # Ok(()) }
    /// ```
    pub async fn transaction<DB, F, T, E>(&self, body: F) -> std::result::Result<T, E>
    where
        DB: Backend,
        F: for<'c> FnOnce(&'c mut Tx<DB>) -> BoxFuture<'c, std::result::Result<T, E>>,
        E: From<Error>,
    {
        let (value, _) = self.transaction_with_receipts(body).await?;
        Ok(value)
    }

    /// [`transaction`](Runtime::transaction), returning as well one final [`Receipt`] per
    /// call made in the scope, in call order (an [`Outcome::Pending`] receipt's `index`
    /// is its position here): `Queued` with the id drawn at the commit, or `Existing`
    /// for an idempotency key in use.
    ///
    /// ```no_run
    /// use async_exec::{async_exec, Outcome, Runtime, Sqlite, Tx};
    ///
    /// #[async_exec(type = SaveAsync)]
    /// async fn ship(order_id: i64) {}
    ///
    /// # async fn demo(rt: Runtime) -> async_exec::Result<()> {
    /// let ((), receipts) = rt
    ///     .transaction_with_receipts(|_tx: &mut Tx<Sqlite>| {
    ///         Box::pin(async move {
    ///             ship(1).key("ship-1").await?;
    ///             ship(1).key("ship-1").await?; // the same key: written once
    ///             Ok::<_, async_exec::Error>(())
    ///         })
    ///     })
    ///     .await?;
    /// assert_eq!(receipts[0].outcome, Outcome::Queued);
    /// assert_eq!(receipts[1].outcome, Outcome::Existing);
    /// assert_eq!(receipts[1].id, receipts[0].id);
    /// # Ok(()) }
    /// ```
    pub async fn transaction_with_receipts<DB, F, T, E>(
        &self,
        body: F,
    ) -> std::result::Result<(T, Vec<Receipt>), E>
    where
        DB: Backend,
        F: for<'c> FnOnce(&'c mut Tx<DB>) -> BoxFuture<'c, std::result::Result<T, E>>,
        E: From<Error>,
    {
        if let Some(scope) = current().filter(|scope| scope.is_of(self)) {
            scope.mark_rollback_only(NESTED);
            return Err(Error::NestedTransaction {
                asked: "rt.transaction(..)",
            }
            .into());
        }
        self.run_scope(body).await
    }

    /// Runs `body` in a transaction scope of its own (also inside another scope).
    pub(crate) async fn run_scope<DB, F, T, E>(
        &self,
        body: F,
    ) -> std::result::Result<(T, Vec<Receipt>), E>
    where
        DB: Backend,
        F: for<'c> FnOnce(&'c mut Tx<DB>) -> BoxFuture<'c, std::result::Result<T, E>>,
        E: From<Error>,
    {
        let mut tx = self.begin_any::<DB>().await?;
        let scope = Arc::new(Scope::new(self.inner.clone()));
        let result = SCOPE.scope(scope.clone(), body(&mut tx)).await;
        let rollback_only = scope.lock().rollback_only;
        let result = match (result, rollback_only) {
            (Ok(_), Some(reason)) => Err(Error::RollbackOnly { reason }.into()),
            (result, _) => result,
        };
        match result {
            Ok(value) => {
                let receipts = scope.flush(&mut tx).await?;
                tx.commit().await?;
                Ok((value, receipts))
            }
            Err(error) => {
                if let Err(rollback) = tx.rollback().await {
                    crate::log::warn!(error = %crate::log::escaped(&rollback), "could not roll back the transaction scope; \
                        the database rolls it back when the connection closes");
                }
                Err(error)
            }
        }
    }
}

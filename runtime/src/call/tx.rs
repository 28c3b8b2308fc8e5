//! `Tx`: the caller's transaction, with the calls made in it held until it commits.

use std::sync::Arc;

use crate::base::error::{Error, Result};
use crate::base::record::RequestId;
use crate::call::delayed::DELAY_SLACK_MS;
use crate::call::open_tx::OpenTx;
use crate::runtime::{Inner, Runtime};
use crate::store::Backend;
use crate::work::executor::Job;

macro_rules! define_tx {
    ($($default:tt)*) => {
        /// A database transaction that carries calls: records written in it become visible, and
        /// run, only if it commits. Dropping it without `commit()` rolls back and runs nothing.
        ///
        /// While it is open, a call awaited without `.within(&mut tx)` from the task that began it
        /// is refused ([`Error::BareCallInTransaction`]) unless it says
        /// [`.independent()`](crate::Call::independent); inside
        /// [`Runtime::transaction`](crate::Runtime::transaction) such calls join the transaction.
        ///
        /// `Tx` without a type parameter means `Tx<Sqlite>`, and exists only when SQLite is the
        /// one backend compiled in: with `postgres` or `mysql` enabled, name the backend
        /// (`Tx<Postgres>`, `Tx<MySql>`, `Tx<Sqlite>`), so that a bare `Tx` cannot mean SQLite
        /// on a runtime that stores its records elsewhere (which [`Runtime::begin`] could only
        /// refuse when it runs, with [`Error::WrongBackend`]).
        ///
        /// ```no_run
        /// # use async_exec::{async_exec, Runtime, Sqlite, Tx};
        /// # #[async_exec(type = SaveAsync)]
        /// # async fn send_welcome(user_id: i64, email: String) -> anyhow::Result<()> { Ok(()) }
        /// # async fn demo(rt: Runtime) -> async_exec::Result<()> {
        /// let mut tx: Tx<Sqlite> = rt.begin().await?;
        /// sqlx::query("insert into users (id) values (1)").execute(tx.conn()).await?;
        /// send_welcome(1, "a@b.c".into()).within(&mut tx).await?;
        /// tx.commit().await?; // then dispatched at once
        /// # Ok(()) }
        /// ```
        ///
        /// With more than one backend compiled in, a bare `Tx` does not compile
        /// (``missing generics for struct `Tx` ``):
        ///
        #[cfg_attr(any(feature = "postgres", feature = "mysql"), doc = "```compile_fail,E0107")]
        #[cfg_attr(not(any(feature = "postgres", feature = "mysql")), doc = "```no_run")]
        /// # async fn demo(rt: async_exec::Runtime) -> async_exec::Result<()> {
        /// let tx: async_exec::Tx = rt.begin().await?;
        /// # Ok(()) }
        /// ```
        #[derive(Debug)]
        pub struct Tx<DB: Backend $($default)*> {
            tx: sqlx::Transaction<'static, DB>,
            pub(crate) inner: Arc<Inner>,
            /// Jobs to hand to the workers once committed.
            pub(crate) pending: Vec<Job>,
            /// Delayed records written here: (id, due time as written, delay in ms); their
            /// delay is moved to count from the commit.
            pub(crate) delayed: Vec<(RequestId, i64, i64)>,
            /// Whether a write of the runtime's in this transaction failed: on PostgreSQL that
            /// aborted it, and its commit is checked like one that carries calls.
            pub(crate) write_failed: bool,
            /// Whether the transaction is known to be open: the runtime's own statements in it
            /// succeeded (on MySQL/MariaDB, after a check) and the caller has not had its
            /// connection since. Only then are the checks before a write and before the COMMIT
            /// left out: every statement of the caller's goes through [`Tx::conn`] or
            /// [`Tx::transaction`], which clear it.
            proven_open: bool,
            /// Counts this transaction as open in the task that began it, until it ends: a call
            /// made there without `.within(&mut tx)` is refused.
            open: OpenTx,
            /// Requests written here under each quota (by the quota's row): not committed,
            /// so not in the count a quota's check reads (SQLite).
            pub(crate) quota_used: Vec<(String, u64)>,
            /// Records were made due in it (an action's retry or replay): once it commits,
            /// the producer looks in the store at once rather than at its next poll.
            pub(crate) look_in_store: bool,
            /// Places reserved under quotas by the calls made here (PostgreSQL,
            /// MySQL/MariaDB): settled at the commit, given back if it does not commit.
            pub(crate) quota_held: crate::call::reserved::Held,
        }

    };
}

// A bare `Tx` is `Tx<Sqlite>` only where it cannot mean the wrong backend.
#[cfg(all(feature = "sqlite", not(any(feature = "postgres", feature = "mysql"))))]
define_tx!(= sqlx::Sqlite);
#[cfg(not(all(feature = "sqlite", not(any(feature = "postgres", feature = "mysql")))))]
define_tx!();

impl<DB: Backend> Tx<DB> {
    /// The connection, for the caller's own queries in this transaction: `&mut` the
    /// backend's connection (`&mut SqliteConnection` for `Tx<Sqlite>`), an
    /// [`sqlx::Executor`] also in code generic over the backend (see [`Backend`]).
    pub fn conn(&mut self) -> DB::Conn<'_> {
        self.proven_open = false;
        DB::executor(&mut self.tx)
    }

    /// The connection, for the runtime's own statements in generic code.
    /// Requests written in this transaction under the quota `key`.
    pub(crate) fn quota_used(&self, key: &str) -> u64 {
        self.quota_used
            .iter()
            .find(|(k, _)| k == key)
            .map_or(0, |(_, n)| *n)
    }

    /// Notes `n` more requests written here under the quota `key`.
    pub(crate) fn quota_added(&mut self, key: &str, n: u64) {
        match self.quota_used.iter_mut().find(|(k, _)| k == key) {
            Some((_, used)) => *used += n,
            None => self.quota_used.push((key.to_string(), n)),
        }
    }

    pub(crate) fn raw_conn(&mut self) -> &mut DB::Connection {
        &mut self.tx
    }

    /// `result` of a write of the runtime's in this transaction, noted when it failed
    /// (see [`Tx::commit`]).
    pub(crate) fn noting<T>(&mut self, result: Result<T>) -> Result<T> {
        match &result {
            Err(_) => {
                self.write_failed = true;
                self.proven_open = false;
            }
            // On PostgreSQL (and SQLite) a statement that succeeded ran in an open,
            // not aborted, transaction; on MySQL/MariaDB it may have autocommitted.
            Ok(_) if DB::A_STATEMENT_PROVES_OPEN => self.proven_open = true,
            Ok(_) => {}
        }
        result
    }

    /// Before the runtime writes in this transaction: refuses
    /// ([`Error::TransactionRolledBack`]) when the server rolled it back and would commit
    /// the writes on their own (MySQL/MariaDB: a round trip there, unless the
    /// transaction is known to be open since the last one; none elsewhere).
    pub(crate) async fn check_before_write(&mut self) -> Result<()> {
        if self.proven_open {
            return Ok(());
        }
        DB::check_before_write(&mut self.tx).await?;
        if !DB::A_STATEMENT_PROVES_OPEN {
            self.proven_open = true;
        }
        Ok(())
    }

    /// The underlying sqlx transaction.
    pub fn transaction(&mut self) -> &mut sqlx::Transaction<'static, DB> {
        self.proven_open = false;
        &mut self.tx
    }

    /// Commits, then hands the calls made in it to the workers. Delayed calls count their
    /// delay from here: their due time moves by how long the transaction stayed open
    /// after each call (when the process dies between the commit and that move, the delay
    /// counts from the call).
    ///
    /// When the server had rolled the transaction back on its own (PostgreSQL after a
    /// statement in it failed, even if the error was caught; MySQL/MariaDB after a
    /// deadlock or a lock wait timeout with `innodb_rollback_on_timeout`), this returns
    /// [`Error::TransactionRolledBack`] and dispatches nothing. Telling costs one round
    /// trip before the COMMIT on PostgreSQL and MySQL/MariaDB, made only when the
    /// transaction carries calls or a call in it failed to be written, and your code has
    /// used its connection ([`Tx::conn`], [`Tx::transaction`]) since the runtime's last
    /// statement in it succeeded (until then it is known to be open). Any other
    /// transaction is committed as sqlx does it, and on PostgreSQL such a rolled-back
    /// COMMIT (after a failed statement of your own) still returns `Ok`.
    pub async fn commit(self) -> Result<()> {
        let Tx {
            mut tx,
            inner,
            pending,
            delayed,
            write_failed,
            proven_open,
            open,
            quota_used: _,
            look_in_store,
            quota_held,
        } = self;
        let carries = !pending.is_empty() || !delayed.is_empty();
        if write_failed || (carries && !proven_open) {
            // Dropped on an error: rolled back (sqlx queues the ROLLBACK).
            DB::check_open_in(&mut tx).await?;
        }
        // A failed COMMIT returns here: `quota_held` is dropped and its places given back.
        tx.commit().await.map_err(|e| DB::explain(e.into()))?;
        drop(open);
        quota_held.settle(true).await;
        // The due times first, then the jobs (their delays' timers last): a delay counts
        // from after both, never from before `commit` returns.
        inner.count_delays_from_commit(&delayed).await;
        inner.after_commit(pending).await;
        if look_in_store {
            inner.dispatcher.store_waker().look_in_store();
        }
        Ok(())
    }

    /// Rolls back: the calls made in it are discarded.
    pub async fn rollback(self) -> Result<()> {
        self.tx.rollback().await?;
        Ok(())
    }
}

impl Inner {
    /// Moves the due time of delayed records whose transaction returned too late for the
    /// [`DELAY_SLACK_MS`] their due time carries: to their delay and the slack past the
    /// moving statement, by the database's clock (so that a wait for SQLite's writer, or
    /// the round trip, does not count in the delay).
    async fn count_delays_from_commit(&self, delayed: &[(RequestId, i64, i64)]) {
        if delayed.is_empty() {
            return;
        }
        // The latest the commit can have been by the database's clock; half the slack is
        // left for what `commit` does before it returns.
        let committed = self.clock.latest_ms();
        let moves: Vec<(RequestId, i64)> = delayed
            .iter()
            .filter(|&&(_, due, delay_ms)| {
                due < committed
                    .saturating_add(delay_ms)
                    .saturating_add(DELAY_SLACK_MS / 2)
            })
            .map(|&(id, _, delay_ms)| (id, delay_ms.saturating_add(DELAY_SLACK_MS)))
            .collect();
        if moves.is_empty() {
            return;
        }
        if let Err(error) = self.store.request_postpone(&moves).await {
            crate::log::warn!(error = %crate::log::escaped(&error), requests = moves.len(),
                "could not move delayed requests to count from the commit; they count from the call");
        }
    }
}

impl Runtime {
    /// [`begin`](Runtime::begin), also inside a transaction scope.
    pub(crate) async fn begin_any<DB: Backend>(&self) -> Result<Tx<DB>> {
        self.inner.check_open()?;
        let begin = DB::begin_on(self.inner.store.as_any()).ok_or(Error::WrongBackend {
            actual: self.inner.store.backend_name(),
            requested: DB::NAME,
        })?;
        Ok(Tx {
            tx: begin.await?,
            inner: self.inner.clone(),
            pending: Vec::new(),
            delayed: Vec::new(),
            write_failed: false,
            proven_open: false,
            open: self.inner.open_txs.open(),
            quota_used: Vec::new(),
            look_in_store: false,
            quota_held: Default::default(),
        })
    }

    /// Wraps a transaction begun on the application's own pool. The pool must be on the
    /// runtime's database, or the records written in it would never be found.
    pub fn wrap<DB: Backend>(&self, tx: sqlx::Transaction<'static, DB>) -> Tx<DB> {
        Tx {
            tx,
            inner: self.inner.clone(),
            pending: Vec::new(),
            delayed: Vec::new(),
            write_failed: false,
            proven_open: false,
            open: self.inner.open_txs.open(),
            quota_used: Vec::new(),
            look_in_store: false,
            quota_held: Default::default(),
        }
    }
}

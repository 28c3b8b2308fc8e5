//! `Tx`: the caller's transaction, with the calls made in it held until it commits.

use std::sync::Arc;

use crate::error::{Error, Result};
use crate::executor::Job;
use crate::runtime::{Inner, Runtime};
use crate::store::Backend;

/// A database transaction that carries calls: records written in it become visible, and
/// run, only if it commits. Dropping it without `commit()` rolls back and runs nothing.
///
/// ```ignore
/// let mut tx: Tx = rt.begin().await?;
/// sqlx::query("insert into users (id) values (1)").execute(tx.conn()).await?;
/// send_welcome(1, "a@b.c".into()).within(&mut tx).await?;
/// tx.commit().await?; // then dispatched at once
/// ```
#[derive(Debug)]
pub struct Tx<DB: Backend = crate::store::DefaultBackend> {
    tx: sqlx::Transaction<'static, DB>,
    pub(crate) inner: Arc<Inner>,
    /// Jobs to hand to the workers once committed.
    pub(crate) pending: Vec<Job>,
}

impl<DB: Backend> Tx<DB> {
    /// The connection, for the caller's own queries in this transaction.
    pub fn conn(&mut self) -> &mut DB::Connection {
        &mut self.tx
    }

    /// The underlying sqlx transaction.
    pub fn transaction(&mut self) -> &mut sqlx::Transaction<'static, DB> {
        &mut self.tx
    }

    /// Commits, then hands the calls made in it to the workers.
    pub async fn commit(self) -> Result<()> {
        let Tx { tx, inner, pending } = self;
        tx.commit().await?;
        inner.after_commit(pending).await;
        Ok(())
    }

    /// Rolls back: the calls made in it are discarded.
    pub async fn rollback(self) -> Result<()> {
        self.tx.rollback().await?;
        Ok(())
    }
}

impl Runtime {
    /// Begins a transaction on the runtime's database.
    ///
    /// `DB` is the backend's sqlx type (`Tx` alone means `Tx<sqlx::Sqlite>`); asking for
    /// another backend than the runtime's is an error that says which to use.
    pub async fn begin<DB: Backend>(&self) -> Result<Tx<DB>> {
        self.inner.check_open()?;
        let begin = DB::begin_on(self.inner.store.as_any()).ok_or(Error::WrongBackend {
            actual: self.inner.store.backend_name(),
            requested: DB::NAME,
        })?;
        Ok(Tx {
            tx: begin.await?,
            inner: self.inner.clone(),
            pending: Vec::new(),
        })
    }

    /// Wraps a transaction begun on the application's own pool. The pool must be on the
    /// runtime's database, or the records written in it would never be found.
    pub fn wrap<DB: Backend>(&self, tx: sqlx::Transaction<'static, DB>) -> Tx<DB> {
        Tx {
            tx,
            inner: self.inner.clone(),
            pending: Vec::new(),
        }
    }
}

//! Transactions begun so that giving up on them cannot leave one open.
//!
//! sqlx 0.8.6 counts a transaction as begun only once `BEGIN` has answered (sqlx issues
//! 4385 and 4393, on PostgreSQL and MySQL, in 0.8.6 and 0.9.0): a future dropped in between
//! (a timeout, an aborted task, a client gone) returns its connection to the pool with the
//! server's transaction open and nothing to end it. Whoever borrows that connection next
//! then runs its autocommit statements inside that transaction: no other connection sees
//! them, their row locks are held until the connection closes, and on MySQL every later
//! `SET TRANSACTION ...; START TRANSACTION` on it fails (1568). The runtime gives up store
//! calls that outlast a lease, so a slow database did this (`store::cancel_tests`).
//!
//! Here `BEGIN` runs on a task of its own, which a caller giving up does not stop: the
//! transaction is then dropped once it has begun, which queues its `ROLLBACK`, and the
//! pool flushes that before it hands the connection out again.

use std::borrow::Cow;

use sqlx::{Database, Pool, Transaction};

use crate::base::error::{Error, Result};

/// Begins a transaction on a connection of `pool` (with `statement` in place of `BEGIN`
/// when given), on a task of its own: see the module documentation.
pub(crate) async fn begin_whole<DB: Database>(
    pool: &Pool<DB>,
    statement: Option<&'static str>,
) -> Result<Transaction<'static, DB>> {
    let pool = pool.clone();
    let begun = tokio::spawn(async move {
        match statement {
            Some(statement) => pool.begin_with(Cow::Borrowed(statement)).await,
            None => pool.begin().await,
        }
    })
    .await;
    match begun {
        Ok(begun) => Ok(begun?),
        Err(error) if error.is_panic() => std::panic::resume_unwind(error.into_panic()),
        // The tokio runtime is shutting down.
        Err(_) => Err(Error::ShutDown),
    }
}

//! A database connection of the runtime's own, outside any pool, for the one part that
//! must not wait behind the application: lease renewals.
//!
//! Not a one-connection `sqlx::Pool`: a pool pings a connection it takes back, with no
//! time limit, so a statement abandoned on a stalled network would hold the pool's only
//! connection until TCP gives up (minutes). Here a statement that does not answer in
//! time is abandoned with its connection, and the next one connects afresh.

use std::time::Duration;

use sqlx::{ConnectOptions, Connection, Database};
use tokio::sync::Mutex;

use crate::error::{Error, Result};
use crate::registry::BoxFuture;

/// One connection, opened on first use and again after any failure.
pub(crate) struct DedicatedConnection<DB: Database> {
    options: <DB::Connection as Connection>::Options,
    conn: Mutex<Option<DB::Connection>>,
}

impl<DB: Database> std::fmt::Debug for DedicatedConnection<DB> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DedicatedConnection")
            .finish_non_exhaustive()
    }
}

impl<DB: Database> DedicatedConnection<DB> {
    /// A connection made with `options` (taken from the store's pool) when first needed.
    pub(crate) fn new(options: <DB::Connection as Connection>::Options) -> Self {
        DedicatedConnection {
            options,
            conn: Mutex::new(None),
        }
    }

    /// Runs `op` on the connection, connecting first if needed; all of it within
    /// `patience`. On an error or when time runs out the connection is dropped (closed
    /// without a goodbye), so that a half-read answer never reaches the next statement.
    pub(crate) async fn run<T, F>(&self, patience: Duration, op: F) -> Result<T>
    where
        F: for<'c> FnOnce(&'c mut DB::Connection) -> BoxFuture<'c, Result<T>>,
    {
        let work = async {
            let mut guard = self.conn.lock().await;
            if guard.is_none() {
                *guard = Some(self.options.connect().await?);
            }
            let conn = guard.as_mut().expect("connected above");
            let result = op(conn).await;
            if result.is_err() {
                *guard = None;
            }
            result
        };
        match tokio::time::timeout(patience, work).await {
            Ok(result) => result,
            Err(_) => {
                // The guard was dropped with the abandoned future; drop the connection too,
                // unless another caller already replaced it.
                if let Ok(mut guard) = self.conn.try_lock() {
                    *guard = None;
                }
                Err(Error::NoAnswer(patience))
            }
        }
    }
}

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

use crate::base::error::{Error, Result};
use crate::base::registry::BoxFuture;

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
            // Out of the slot while `op` runs, and back only when it succeeded: a future
            // dropped mid-statement (this timeout, or a caller's own bound around `run`)
            // drops the connection with it, half-read answer and all. Left in the slot, the
            // next statement read the abandoned one's answer: MariaDB's driver panicked
            // ("advance out of bounds"), found in the chaos run.
            let mut conn = match guard.take() {
                Some(conn) => conn,
                None => self.options.connect().await?,
            };
            let result = op(&mut conn).await;
            if result.is_ok() {
                *guard = Some(conn);
            }
            result
        };
        tokio::time::timeout(patience, work)
            .await
            .unwrap_or(Err(Error::NoAnswer(patience)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A statement abandoned by a bound around `run` (the store's statement bound, shorter
    /// than `run`'s own patience) must not leave its connection for the next statement.
    async fn an_abandoned_statement_takes_its_connection_with_it<DB: Database>(
        options: <DB::Connection as Connection>::Options,
        slow: &'static str,
        bigint: &'static str,
    ) where
        for<'c> &'c mut DB::Connection: sqlx::Executor<'c, Database = DB>,
        for<'q> <DB as Database>::Arguments<'q>: sqlx::IntoArguments<'q, DB>,
        i64: sqlx::Type<DB> + for<'r> sqlx::Decode<'r, DB>,
        (i64,): for<'r> sqlx::FromRow<'r, DB::Row>,
    {
        let dedicated = DedicatedConnection::<DB>::new(options);
        let patience = Duration::from_secs(10);
        let abandoned = tokio::time::timeout(
            Duration::from_millis(200),
            dedicated.run(patience, |conn| {
                Box::pin(async move {
                    sqlx::query_as::<DB, (i64,)>(slow).fetch_one(conn).await?;
                    Ok(())
                })
            }),
        )
        .await;
        assert!(abandoned.is_err(), "the slow statement was to be abandoned");
        for n in 1..=3_i64 {
            let read = dedicated
                .run(patience, move |conn| {
                    Box::pin(async move {
                        let sql = format!("SELECT CAST({n} AS {bigint})");
                        let (got,) = sqlx::query_as::<DB, (i64,)>(&sql).fetch_one(conn).await?;
                        Ok(got)
                    })
                })
                .await;
            assert_eq!(read.ok(), Some(n), "statement {n} after the abandoned one");
        }
    }

    #[cfg(feature = "postgres")]
    #[tokio::test]
    #[cfg_attr(
        not(async_exec_test_postgres),
        ignore = "set ASYNC_EXEC_TEST_POSTGRES_URL to run it"
    )]
    async fn postgres_an_abandoned_statement_takes_its_connection_with_it() {
        let url = std::env::var("ASYNC_EXEC_TEST_POSTGRES_URL").unwrap();
        let options: sqlx::postgres::PgConnectOptions = url.parse().unwrap();
        an_abandoned_statement_takes_its_connection_with_it::<sqlx::Postgres>(
            options,
            "SELECT CAST(1 AS BIGINT) FROM pg_sleep(1)",
            "BIGINT",
        )
        .await;
    }

    #[cfg(feature = "mysql")]
    #[tokio::test]
    #[cfg_attr(
        not(async_exec_test_mysql),
        ignore = "set ASYNC_EXEC_TEST_MYSQL_URL to run it"
    )]
    async fn mysql_an_abandoned_statement_takes_its_connection_with_it() {
        let url = std::env::var("ASYNC_EXEC_TEST_MYSQL_URL").unwrap();
        let options: sqlx::mysql::MySqlConnectOptions = url.parse().unwrap();
        an_abandoned_statement_takes_its_connection_with_it::<sqlx::MySql>(
            options,
            "SELECT CAST(SLEEP(1) AS SIGNED)",
            "SIGNED",
        )
        .await;
    }
}

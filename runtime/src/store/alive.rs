//! Whether the server still holds the caller's transaction open.
//!
//! A server may end a transaction with a rollback on its own, and sqlx 0.8.6 does not say
//! so: PostgreSQL aborts a transaction in which a statement failed and answers its COMMIT
//! with ROLLBACK (the command tag, which sqlx ignores); MySQL/MariaDB roll the whole
//! transaction back on a deadlock (1213) or a lock wait timeout with
//! `innodb_rollback_on_timeout`, and the session goes on in autocommit, so that later
//! statements commit on their own. The server's own flag (PostgreSQL's ReadyForQuery
//! status, MySQL's `SERVER_STATUS_IN_TRANS`) is private in sqlx.
//!
//! The probe is a savepoint made and released in one round trip: both statements succeed
//! only inside an open transaction. PostgreSQL refuses them in an aborted transaction
//! (25P02) and outside one (25P01); MySQL/MariaDB accept the `SAVEPOINT` in autocommit,
//! where it ends with its statement, and then refuse the `RELEASE` (1305).

use crate::base::error::{Error, Result};

/// Made and released in one round trip (one text query, no arguments: PostgreSQL's simple
/// protocol and MySQL's `COM_QUERY` run both statements).
const PROBE: &str = "SAVEPOINT async_exec_open; RELEASE SAVEPOINT async_exec_open";

/// `error` as [`Error::TransactionRolledBack`] when `gone` says that the server ended the
/// transaction.
fn explain(error: Error, gone: fn(&sqlx::Error) -> bool, reason: &'static str) -> Error {
    match &error {
        Error::Database(cause) if gone(cause) => Error::TransactionRolledBack { reason },
        _ => error,
    }
}

/// PostgreSQL.
#[cfg(feature = "postgres")]
pub(crate) mod postgres {
    use super::*;

    const REASON: &str = "a statement in it failed, and PostgreSQL ends such a transaction \
                          with a rollback, also when asked to COMMIT";

    /// Whether PostgreSQL refused a statement because the transaction is aborted (25P02)
    /// or over (25P01).
    fn gone(cause: &sqlx::Error) -> bool {
        let code = cause.as_database_error().and_then(|e| e.code());
        matches!(code.as_deref(), Some("25P02" | "25P01"))
    }

    /// A statement's error in the caller's transaction, explained when the transaction
    /// was aborted.
    pub(crate) fn explain(error: Error) -> Error {
        super::explain(error, gone, REASON)
    }

    /// Fails with [`Error::TransactionRolledBack`] unless the transaction is open and not
    /// aborted (one round trip).
    pub(crate) async fn check(conn: &mut sqlx::PgConnection) -> Result<()> {
        let probed = sqlx::Executor::execute(conn, PROBE).await;
        probed.map(drop).map_err(|e| explain(e.into()))
    }
}

/// MySQL and MariaDB.
#[cfg(feature = "mysql")]
pub(crate) mod mysql {
    use super::*;

    const REASON: &str = "a deadlock or a lock wait timeout ended it, and MySQL/MariaDB then \
                          goes on in autocommit";

    /// Whether the probe's `RELEASE SAVEPOINT` found no savepoint (1305): the session is
    /// in autocommit.
    fn gone(cause: &sqlx::Error) -> bool {
        cause
            .as_database_error()
            .and_then(|e| e.try_downcast_ref::<sqlx::mysql::MySqlDatabaseError>())
            .is_some_and(|e| e.number() == 1305)
    }

    /// Fails with [`Error::TransactionRolledBack`] unless the transaction is open (one
    /// round trip).
    pub(crate) async fn check(conn: &mut sqlx::MySqlConnection) -> Result<()> {
        let probed = sqlx::Executor::execute(conn, PROBE).await;
        probed
            .map(drop)
            .map_err(|e| explain(e.into(), gone, REASON))
    }
}

//! Whether a failed write may succeed if tried again (transient: the connection, a lock,
//! the server's load) or will fail the same way every time (permanent: the data).
//!
//! The completer retries transient failures and isolates permanent ones. A failure that
//! would hit every write alike (the server down, read-only after a fail-over, a full disk)
//! must be transient, or one outage would turn every outcome of a batch `dead`.

use crate::base::error::Error;

/// Whether `error` is worth trying again with the same statement and data.
pub(crate) fn is_transient(error: &Error) -> bool {
    match error {
        Error::Database(error) => is_transient_sqlx(error),
        // A statement abandoned after its bound: the network, not the data.
        Error::NoAnswer(_) => true,
        _ => false,
    }
}

fn is_transient_sqlx(error: &sqlx::Error) -> bool {
    match error {
        sqlx::Error::Io(_)
        | sqlx::Error::Tls(_)
        | sqlx::Error::Protocol(_)
        | sqlx::Error::PoolTimedOut
        | sqlx::Error::PoolClosed
        | sqlx::Error::WorkerCrashed
        | sqlx::Error::BeginFailed => true,
        sqlx::Error::Database(error) => is_transient_database(error.as_ref()),
        _ => false,
    }
}

fn is_transient_database(error: &dyn sqlx::error::DatabaseError) -> bool {
    #[cfg(feature = "postgres")]
    if let Some(error) = error.try_downcast_ref::<sqlx::postgres::PgDatabaseError>() {
        return is_transient_sqlstate(error.code());
    }
    #[cfg(feature = "mysql")]
    if let Some(error) = error.try_downcast_ref::<sqlx::mysql::MySqlDatabaseError>() {
        return is_transient_mysql(error.number(), error.code());
    }
    #[cfg(feature = "sqlite")]
    if let Some(error) = error.try_downcast_ref::<sqlx::sqlite::SqliteError>() {
        let code = sqlx::error::DatabaseError::code(error).and_then(|c| c.parse::<i32>().ok());
        return code.is_some_and(is_transient_sqlite);
    }
    error
        .code()
        .is_some_and(|code| is_transient_sqlstate(&code))
}

/// PostgreSQL (and standard) SQLSTATE codes that concern the connection, the server or a
/// conflict with another transaction, never the data written.
fn is_transient_sqlstate(code: &str) -> bool {
    const CLASSES: [&str; 5] = [
        "08", // connection exception
        "40", // transaction rollback: serialization failure 40001, deadlock 40P01
        "53", // insufficient resources: disk full, out of memory, too many connections
        "57", // operator intervention: admin shutdown 57P01, crash 57P02, cannot connect now 57P03, query canceled 57014
        "58", // system error: I/O
    ];
    const CODES: [&str; 5] = [
        "55P03", // lock not available
        "55006", // object in use
        "25006", // read-only transaction (a standby after a fail-over)
        // The connection is inside a transaction it should not be in (another user of a
        // shared pool gave up a `BEGIN`: see `store::begin`): "active transaction" (MySQL
        // 1568) and "in failed transaction". Another connection takes the retry.
        "25001", "25P02",
    ];
    CLASSES.iter().any(|class| code.starts_with(class)) || CODES.contains(&code)
}

/// MySQL/MariaDB error numbers of the same kinds; the SQLSTATE decides the rest.
#[cfg(feature = "mysql")]
fn is_transient_mysql(number: u16, sqlstate: Option<&str>) -> bool {
    const NUMBERS: [u16; 14] = [
        1205, // lock wait timeout
        1213, // deadlock
        1040, // too many connections
        1053, // server shutdown in progress
        1021, // disk full
        1037, // out of memory
        1041, // out of memory
        1317, // query interrupted
        1927, // connection killed (MariaDB)
        1969, // statement timeout (MariaDB max_statement_time)
        3024, // statement timeout (MySQL max_execution_time)
        1290, // running with --read-only
        1792, // read-only transaction
        2013, // lost connection during query
    ];
    NUMBERS.contains(&number) || sqlstate.is_some_and(is_transient_sqlstate)
}

/// SQLite primary result codes that concern locks and the file, not the data.
#[cfg(feature = "sqlite")]
fn is_transient_sqlite(extended_code: i32) -> bool {
    const BUSY: i32 = 5;
    const LOCKED: i32 = 6;
    const NOMEM: i32 = 7;
    const READONLY: i32 = 8;
    const IOERR: i32 = 10;
    const FULL: i32 = 13;
    const CANTOPEN: i32 = 14;
    const PROTOCOL: i32 = 15;
    matches!(
        extended_code & 0xff,
        BUSY | LOCKED | NOMEM | READONLY | IOERR | FULL | CANTOPEN | PROTOCOL
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn io(kind: std::io::ErrorKind) -> Error {
        Error::Database(sqlx::Error::Io(std::io::Error::from(kind)))
    }

    #[test]
    fn connection_and_pool_failures_are_transient() {
        assert!(is_transient(&io(std::io::ErrorKind::ConnectionReset)));
        assert!(is_transient(&io(std::io::ErrorKind::BrokenPipe)));
        assert!(is_transient(&Error::Database(sqlx::Error::PoolTimedOut)));
        assert!(is_transient(&Error::Database(sqlx::Error::PoolClosed)));
    }

    #[test]
    fn data_failures_are_permanent() {
        assert!(!is_transient(&Error::Database(sqlx::Error::Encode(
            "too big".into()
        ))));
        assert!(!is_transient(&Error::Database(
            sqlx::Error::ColumnNotFound("x".into())
        )));
        assert!(!is_transient(&Error::NotFound(1)));
    }

    #[test]
    fn sqlstates_are_classified() {
        for code in [
            "40001", "40P01", "57P01", "57014", "08006", "53100", "55P03", "25006", "25001",
            "25P02",
        ] {
            assert!(is_transient_sqlstate(code), "{code}");
        }
        for code in ["22021", "22001", "23505", "42601", "XX000"] {
            assert!(!is_transient_sqlstate(code), "{code}");
        }
    }

    #[cfg(feature = "mysql")]
    #[test]
    fn mysql_numbers_are_classified() {
        assert!(is_transient_mysql(1213, Some("40001")));
        assert!(is_transient_mysql(1205, Some("HY000")));
        assert!(
            is_transient_mysql(1568, Some("25001")),
            "transaction characteristics can't be changed while a transaction is in progress"
        );
        assert!(
            !is_transient_mysql(1366, Some("22007")),
            "incorrect string value"
        );
        assert!(!is_transient_mysql(1406, Some("22001")), "data too long");
    }

    #[cfg(feature = "sqlite")]
    #[test]
    fn sqlite_codes_are_classified() {
        assert!(is_transient_sqlite(5), "busy");
        assert!(is_transient_sqlite(517), "busy snapshot");
        assert!(is_transient_sqlite(266), "I/O read");
        assert!(!is_transient_sqlite(19), "constraint");
        assert!(!is_transient_sqlite(1811), "constraint raised by a trigger");
        assert!(!is_transient_sqlite(18), "too big");
    }
}

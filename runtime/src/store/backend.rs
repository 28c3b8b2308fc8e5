//! The [`Backend`] trait, which makes `Tx<DB>` work for each backend's sqlx type, and
//! what the runtime needs of a backend's connection inside the caller's transaction
//! (`sealed::BackendOps`, implemented next to each backend's store).

use std::any::Any;

use crate::base::error::Result;
use crate::base::record::{Inserted, NewRequest};
use crate::base::registry::BoxFuture;

use super::StoredKey;

/// The backend `Tx` means without a type parameter: SQLite when compiled in, else
/// PostgreSQL, else MySQL.
#[cfg(feature = "sqlite")]
pub type DefaultBackend = sqlx::Sqlite;
/// The backend `Tx` means without a type parameter.
#[cfg(all(not(feature = "sqlite"), feature = "postgres"))]
pub type DefaultBackend = sqlx::Postgres;
/// The backend `Tx` means without a type parameter.
#[cfg(all(not(feature = "sqlite"), not(feature = "postgres"), feature = "mysql"))]
pub type DefaultBackend = sqlx::MySql;

/// A database kind whose transactions can carry requests: `Tx<DB>` works for each.
/// Implemented for the sqlx database types of the compiled backends (`Sqlite`,
/// `Postgres`, `MySql`).
///
/// It packs in what code generic over the backend needs to run its own statements, so
/// that one handler serves every backend with no higher-ranked bounds written by hand:
/// [`Tx::conn`](crate::Tx::conn) is an [`sqlx::Executor`] (`DB::Conn<'_>`), and
/// `sqlx::query(..)` runs on it. To bind values, ask for them with [`Value`]:
///
/// ```no_run
/// use async_exec::{async_exec, Backend, Tx, Value};
///
/// #[async_exec(type = SaveAsync)]
/// async fn send_receipt(order_id: i64) -> anyhow::Result<()> {
///     Ok(())
/// }
///
/// /// Runs on SQLite, PostgreSQL and MySQL alike.
/// async fn place_order<DB: Backend>(tx: &mut Tx<DB>, order_id: i64) -> anyhow::Result<()>
/// where
///     i64: Value<DB>,
/// {
///     sqlx::query("update orders set placed = 1 where id = 7")
///         .execute(tx.conn())
///         .await?;
///     // Placeholders differ by backend: `?` (SQLite, MySQL), `$1` (PostgreSQL).
///     let sql = if DB::NAME == "PostgreSQL" { "delete from carts where order_id = $1" }
///               else { "delete from carts where order_id = ?" };
///     sqlx::query(sql).bind(order_id).execute(tx.conn()).await?;
///     send_receipt(order_id).within(tx).await?;
///     Ok(())
/// }
/// ```
pub trait Backend:
    sqlx::Database
    + sqlx::database::HasStatementCache
    + for<'q> sqlx::Database<Arguments<'q>: sqlx::IntoArguments<'q, Self>>
    + sealed::BackendOps
{
    /// The connection of a transaction, as a statement executor: `&'c mut
    /// Self::Connection`, which every backend's statements run on.
    type Conn<'c>: sqlx::Executor<'c, Database = Self>;

    /// The connection as an executor.
    #[doc(hidden)]
    fn executor(conn: &mut Self::Connection) -> Self::Conn<'_>;
}

/// A value that binds as a statement parameter on `DB` (`sqlx::Encode` for every
/// lifetime, and `sqlx::Type`): `where i64: Value<DB>` in a handler generic over the
/// backend, instead of the higher-ranked bound it stands for. See [`Backend`].
pub trait Value<DB: sqlx::Database>: for<'q> sqlx::Encode<'q, DB> + sqlx::Type<DB> + Send {}

impl<T, DB> Value<DB> for T
where
    DB: sqlx::Database,
    T: for<'q> sqlx::Encode<'q, DB> + sqlx::Type<DB> + Send,
{
}

#[allow(private_interfaces)]
pub(crate) mod sealed {
    use super::*;

    /// What the runtime needs of a backend's own connection type. Sealed: implemented
    /// only by this crate, next to the backend's store.
    pub trait BackendOps: sqlx::Database {
        /// Begins a transaction on the store, if the store is of this backend.
        fn begin_on(
            store: &dyn Any,
        ) -> Option<BoxFuture<'_, Result<sqlx::Transaction<'static, Self>>>>;

        /// Inserts a request inside the caller's transaction.
        fn insert_in<'c>(
            conn: &'c mut Self::Connection,
            request: &'c NewRequest,
        ) -> BoxFuture<'c, Result<Inserted>>;

        /// The idempotency key `key` of `application`, unless it expired by `now`, as the
        /// caller's transaction sees it.
        fn key_find_in<'c>(
            conn: &'c mut Self::Connection,
            application: &'c str,
            key: &'c str,
            now: i64,
        ) -> BoxFuture<'c, Result<Option<StoredKey>>>;

        /// How many rows a statement changed.
        fn rows_affected(result: &Self::QueryResult) -> u64;

        /// Cancels record `id` if it is `init` or `failed`, inside the caller's
        /// transaction; `Err(status)` when not (`None`: no such record).
        fn cancel_in<'c>(
            conn: &'c mut Self::Connection,
            application: &'c str,
            id: crate::base::record::RequestId,
            now: i64,
        ) -> BoxFuture<'c, Result<std::result::Result<(), Option<crate::base::record::Status>>>>;

        /// Cancels every record of `application` that matches `query` and waits, and asks
        /// every matching one that runs to stop, inside the caller's transaction: the
        /// records are locked, then decided on (`store::actions_in`).
        fn cancel_matching_in<'c>(
            conn: &'c mut Self::Connection,
            application: &'c str,
            query: &'c crate::base::query::RequestQuery,
            now: i64,
        ) -> BoxFuture<'c, Result<crate::store::CancelCounts>>;

        /// Applies `action` to every record of `application` that matches `query` and
        /// is in a status it applies to, inside the caller's transaction: the records
        /// are locked, then changed (`store::actions_in`). How many changed.
        fn act_matching_in<'c>(
            conn: &'c mut Self::Connection,
            application: &'c str,
            query: &'c crate::base::query::RequestQuery,
            action: crate::base::query::Action,
            now: i64,
        ) -> BoxFuture<'c, Result<u64>>;

        /// Locks the row of quota `scope` inside the caller's transaction, until it ends.
        fn quota_lock_in<'c>(
            conn: &'c mut Self::Connection,
            application: &'c str,
            scope: &'c str,
        ) -> BoxFuture<'c, Result<()>>;

        /// Records the key of a `SyncSave` call whose body ran, inside the caller's
        /// transaction, unless the key is in use and has not expired.
        fn key_record_in<'c>(
            conn: &'c mut Self::Connection,
            request: &'c NewRequest,
        ) -> BoxFuture<'c, Result<()>>;

        /// Fails with [`Error::TransactionRolledBack`](crate::Error::TransactionRolledBack)
        /// when the server no longer holds the transaction on `conn` open (it rolled it
        /// back on its own; see `store::alive`): one round trip on PostgreSQL and
        /// MySQL/MariaDB, none on SQLite (whose COMMIT fails when no transaction is active).
        fn check_open_in(conn: &mut Self::Connection) -> BoxFuture<'_, Result<()>> {
            let _ = conn;
            Box::pin(async { Ok(()) })
        }

        /// Whether a statement that succeeded in a transaction shows that the transaction
        /// is open: on PostgreSQL every statement of an aborted transaction fails (and
        /// SQLite's COMMIT fails when none is active); MySQL/MariaDB run it in autocommit
        /// after the server rolled the transaction back.
        const A_STATEMENT_PROVES_OPEN: bool = true;

        /// Checked before the runtime writes in the caller's transaction, so that nothing
        /// is written outside it: MySQL/MariaDB, whose session goes on in autocommit after
        /// the server rolled the transaction back, checks (one round trip); PostgreSQL
        /// refuses the statements themselves ([`explain`](Self::explain) says why).
        fn check_before_write(conn: &mut Self::Connection) -> BoxFuture<'_, Result<()>> {
            let _ = conn;
            Box::pin(async { Ok(()) })
        }

        /// An error of a statement in the caller's transaction, as
        /// [`Error::TransactionRolledBack`](crate::Error::TransactionRolledBack) when it
        /// says that the server had rolled the transaction back.
        fn explain(error: crate::Error) -> crate::Error {
            error
        }

        /// Inserts many requests inside the caller's transaction; the result is in the
        /// order of `requests`. Backends override it with multi-row statements.
        fn insert_many_in<'c>(
            conn: &'c mut Self::Connection,
            requests: &'c [NewRequest],
        ) -> BoxFuture<'c, Result<Vec<Inserted>>> {
            Box::pin(async move {
                let mut inserted = Vec::with_capacity(requests.len());
                for request in requests {
                    inserted.push(Self::insert_in(&mut *conn, request).await?);
                }
                Ok(inserted)
            })
        }
    }
}

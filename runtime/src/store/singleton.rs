//! Singletons (`QueueLimits::singleton`) and trailing debounces (`debounce = ".."`).
//!
//! Singletons: at most one live (waiting or running) request
//! per `singleton_key`, held by a unique index over the live records (migration
//! `20261209000002_async_exec_modes`). Each backend's insert writes the record unless the
//! index refuses it (PostgreSQL and SQLite: `ON CONFLICT .. DO NOTHING`; MariaDB: its
//! duplicate-key error, which undoes the statement only), then reads the live request
//! that holds the key with [`holder`], here for all three. The insert waits for a
//! transaction that wrote the key and has not ended: a rollback lets it write, a commit
//! makes it find that request. The holder may finish between the two statements: then
//! the insert is tried again, up to [`TRIES`] times.

use sqlx::{Encode, FromRow, Type};

use super::sql::{Dialect, HasDialect, Statement};
use super::Backend;
use crate::base::error::{Error, Result};
use crate::base::record::{Inserted, NewRequest, RequestId};

/// The conflict clause of PostgreSQL's and SQLite's insert of a singleton's request: the
/// index's own columns and predicate, so that no other conflict is ignored.
#[cfg_attr(not(any(feature = "postgres", feature = "sqlite")), allow(dead_code))]
pub(crate) const ON_CONFLICT: &str = " ON CONFLICT (application_name, singleton_key) \
     WHERE singleton_key IS NOT NULL AND status IN ('init', 'failed', 'running') DO NOTHING";

/// The conflict clause of PostgreSQL's and SQLite's insert of a trailing debounce's
/// request: a waiting request of the key takes the call's arguments and start, and
/// counts the call in `merged` (so `RETURNING id, merged` says which happened: 0, the
/// insert).
#[cfg_attr(not(any(feature = "postgres", feature = "sqlite")), allow(dead_code))]
pub(crate) const ON_CONFLICT_MERGE: &str = " ON CONFLICT (application_name, debounce_key) \
     WHERE debounce_key IS NOT NULL AND status = 'init' DO UPDATE SET \
     param_json = excluded.param_json, run_at = excluded.run_at, \
     update_time = excluded.update_time, merged = async_req.merged + 1";

/// The conflict clause of a request's insert on PostgreSQL and SQLite: a singleton's,
/// a trailing debounce's, or none.
#[cfg_attr(not(any(feature = "postgres", feature = "sqlite")), allow(dead_code))]
pub(crate) fn on_conflict(r: &NewRequest) -> &'static str {
    if r.singleton.is_some() {
        ON_CONFLICT
    } else if r.debounce.is_some() {
        ON_CONFLICT_MERGE
    } else {
        ""
    }
}

/// Inserts tried before giving up, each after the holder it met finished.
pub(crate) const TRIES: usize = 5;

/// The live request of a singleton: on PostgreSQL and SQLite through the partial index;
/// at READ COMMITTED its own statement sees the holder the insert met (at REPEATABLE
/// READ, PostgreSQL's insert failed with 40001 already when the holder is newer than the
/// transaction's snapshot).
static HOLDER: Statement = Statement::new(
    "SELECT id FROM async_req WHERE application_name = ? AND singleton_key = ? \
     AND status IN ('init', 'failed', 'running')",
);

/// MariaDB's: through the generated column's unique index; a locking read, which sees
/// the latest committed row whatever the transaction's snapshot (the duplicate-key error
/// already left a shared lock on that index entry until the transaction ends).
static HOLDER_MYSQL: Statement = Statement::new(
    "SELECT id FROM async_req WHERE application_name = ? AND singleton_live = ? \
     LOCK IN SHARE MODE",
);

/// The live request that holds `r`'s singleton key, if any.
pub(crate) async fn holder<'q, DB>(
    conn: &mut DB::Connection,
    r: &'q NewRequest,
) -> Result<Option<RequestId>>
where
    DB: Backend + HasDialect,
    &'q str: Encode<'q, DB> + Type<DB>,
    &'q Option<String>: Encode<'q, DB> + Type<DB>,
    for<'r> (i64,): FromRow<'r, DB::Row>,
{
    let statement = match DB::DIALECT {
        Dialect::MySql => &HOLDER_MYSQL,
        Dialect::Sqlite | Dialect::Postgres => &HOLDER,
    };
    let row: Option<(RequestId,)> = sqlx::query_as(statement.text(DB::DIALECT))
        .bind(&*r.application_name)
        .bind(&r.singleton)
        .fetch_optional(DB::executor(conn))
        .await?;
    Ok(row.map(|(id,)| id))
}

/// What the call gets when it joined request `joined` (`Inserted::Live`, its singleton's
/// live one, or `Inserted::Merged`, its debounce's waiting one): that request; a key the
/// call claimed names it too (a retried call with the key gets it again).
pub(crate) async fn joined<'q, DB>(
    conn: &mut DB::Connection,
    r: &'q NewRequest,
    joined: Inserted,
) -> Result<Inserted>
where
    DB: Backend + HasDialect,
    &'q str: Encode<'q, DB> + Type<DB>,
    &'q Option<String>: Encode<'q, DB> + Type<DB>,
    Option<i64>: Encode<'q, DB> + Type<DB>,
{
    if r.idempotency_key.is_some() {
        super::shared::key_assign::<DB>(conn, r, joined.id()).await?;
    }
    Ok(joined)
}

/// The error once [`TRIES`] inserts each met a holder that finished before it was read.
pub(crate) fn contended(r: &NewRequest) -> Error {
    Error::SingletonContended {
        executor: r.executor,
        tries: TRIES,
    }
}

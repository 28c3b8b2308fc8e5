//! Cancels inside the caller's transaction, of one record or of every record a
//! [`RequestQuery`] matches, and the operators' other actions on what a query matches
//! ([`Action`]: retry, replay, cancel, delete), written once for the three backends over
//! the sqlx database type: lock, then decide. The records are first read locked (`FOR
//! UPDATE` on PostgreSQL and MySQL/MariaDB; on SQLite a write, which takes the file's one
//! writer lock), so the status each decision reads is the latest committed one and stays
//! so until the transaction ends: a locking read does not read MariaDB's REPEATABLE READ
//! snapshot, and on PostgreSQL at READ COMMITTED it waits for a claim or an outcome being
//! written and reads what it wrote (at REPEATABLE READ a record changed since the
//! snapshot is refused with a serialization failure, for the caller to retry). Then the
//! locked records are changed by id: a cancel marks the waiting ones (`init`, `failed`)
//! `cancelled` and asks the running ones to stop. Nothing is decided from a plain read,
//! at any isolation.

use sqlx::{ColumnIndex, Decode, Encode, Row, Type};

use super::sql::{Bind, Dialect, HasDialect, Sql, Statement};
use super::Backend;
use crate::base::error::{Error, Result};
use crate::base::query::{Action, RequestQuery};
use crate::base::record::{RequestId, Status};

/// Record `id`'s id and status, locked until the transaction ends.
static LOCK_ONE: Statement = Statement::new(
    "SELECT id, status FROM async_req WHERE application_name = ? AND id = ? FOR UPDATE",
);

/// The same on SQLite: a write, so that the transaction holds the writer lock (a deferred
/// transaction that read before fails here if another wrote since, rather than deciding
/// on what it read).
static LOCK_ONE_SQLITE: Statement = Statement::new(
    "UPDATE async_req SET update_time = update_time WHERE application_name = ? AND id = ? \
     RETURNING id, status",
);

/// How many ids one statement of a cancel names.
const IDS_PER_STATEMENT: usize = 500;

/// What a cancel of the records a query matches did (counted from the locked records).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct CancelCounts {
    /// Waiting records (`init`, `failed`) now `cancelled`.
    pub(crate) cancelled: u64,
    /// Running records asked to stop.
    pub(crate) stop_asked: u64,
}

/// Cancels record `id` of `application` if it is `init` or `failed`, or asks it to stop
/// if it is `running`, deciding on its status read locked. `Err(status)` when it was not
/// cancelled: the status it has (`Running`: asked to stop), or `None` without such a
/// record.
pub(crate) async fn cancel_one<DB>(
    conn: &mut DB::Connection,
    application: &str,
    id: RequestId,
    now: i64,
) -> Result<std::result::Result<(), Option<Status>>>
where
    DB: Backend + HasDialect,
    for<'q> i64: Encode<'q, DB> + Type<DB>,
    for<'q> &'q str: Encode<'q, DB> + Type<DB>,
    for<'r> i64: Decode<'r, DB>,
    for<'r> String: Decode<'r, DB>,
    usize: ColumnIndex<DB::Row>,
{
    let lock = match DB::DIALECT {
        Dialect::Sqlite => &LOCK_ONE_SQLITE,
        Dialect::Postgres | Dialect::MySql => &LOCK_ONE,
    };
    let rows = sqlx::query(lock.text(DB::DIALECT))
        .bind(application)
        .bind(id)
        .fetch_all(DB::executor(&mut *conn))
        .await?;
    let locked = decode::<DB>(&rows)?;
    let Some(&(_, status)) = locked.first() else {
        return Ok(Err(None));
    };
    decide::<DB>(conn, application, &locked, now).await?;
    match status {
        Status::Init | Status::Failed => Ok(Ok(())),
        other => Ok(Err(Some(other))),
    }
}

/// Cancels every record of `application` that matches `query` and waits (`init`,
/// `failed`), and asks every matching one that runs to stop, deciding on their statuses
/// read locked, in id order.
pub(crate) async fn cancel_matching<DB>(
    conn: &mut DB::Connection,
    application: &str,
    query: &RequestQuery,
    now: i64,
) -> Result<CancelCounts>
where
    DB: Backend + HasDialect,
    for<'q> i64: Encode<'q, DB> + Type<DB>,
    for<'q> &'q str: Encode<'q, DB> + Type<DB>,
    for<'r> i64: Decode<'r, DB>,
    for<'r> String: Decode<'r, DB>,
    usize: ColumnIndex<DB::Row>,
{
    let live = [Status::Init, Status::Failed, Status::Running];
    let locked = lock_matching::<DB>(conn, application, query, &live).await?;
    decide::<DB>(conn, application, &locked, now).await
}

/// Applies `action` to every record of `application` that matches `query` and is in a
/// status the action applies to ([`Action::applies_to`]), deciding on the records read
/// locked, in id order; how many changed.
pub(crate) async fn act_matching<DB>(
    conn: &mut DB::Connection,
    application: &str,
    query: &RequestQuery,
    action: Action,
    now: i64,
) -> Result<u64>
where
    DB: Backend + HasDialect,
    for<'q> i64: Encode<'q, DB> + Type<DB>,
    for<'q> &'q str: Encode<'q, DB> + Type<DB>,
    for<'r> i64: Decode<'r, DB>,
    for<'r> String: Decode<'r, DB>,
    usize: ColumnIndex<DB::Row>,
{
    let locked = lock_matching::<DB>(conn, application, query, action.applies_to()).await?;
    let ids: Vec<RequestId> = locked.iter().map(|&(id, _)| id).collect();
    let mut changed = 0;
    for chunk in ids.chunks(IDS_PER_STATEMENT) {
        // The operators' statements of one batch (`store::ops`), re-checked against the
        // query and the statuses: the change first, then (deletes) the attempt logs.
        let statements = super::ops::act_batch(DB::DIALECT, application, query, action, now, chunk);
        for (i, statement) in statements.iter().enumerate() {
            let done = bound::<DB>(statement)
                .persistent(false)
                .execute(DB::executor(&mut *conn))
                .await?;
            if i == 0 {
                changed += DB::rows_affected(&done);
            }
        }
    }
    Ok(changed)
}

/// The `(id, status)` of every record of `application` that matches `query` and is in one
/// of `statuses`, read locked until the transaction ends, in id order.
async fn lock_matching<DB>(
    conn: &mut DB::Connection,
    application: &str,
    query: &RequestQuery,
    statuses: &[Status],
) -> Result<Vec<(RequestId, Status)>>
where
    DB: Backend + HasDialect,
    for<'q> i64: Encode<'q, DB> + Type<DB>,
    for<'q> &'q str: Encode<'q, DB> + Type<DB>,
    for<'r> i64: Decode<'r, DB>,
    for<'r> String: Decode<'r, DB>,
    usize: ColumnIndex<DB::Row>,
{
    let dialect = DB::DIALECT;
    let mut lock = match dialect {
        Dialect::Sqlite => Sql::new(
            dialect,
            "UPDATE async_req SET update_time = update_time WHERE",
        ),
        Dialect::Postgres | Dialect::MySql => {
            Sql::new(dialect, "SELECT id, status FROM async_req WHERE")
        }
    };
    lock.filter(application, query).statuses(statuses);
    lock.push(match dialect {
        Dialect::Sqlite => " RETURNING id, status",
        // In id order: two such actions lock their common records in one order.
        Dialect::Postgres | Dialect::MySql => " ORDER BY id FOR UPDATE",
    });
    let rows = bound::<DB>(&lock)
        .persistent(false)
        .fetch_all(DB::executor(&mut *conn))
        .await?;
    let mut locked = decode::<DB>(&rows)?;
    // SQLite's `RETURNING` is in no set order.
    locked.sort_unstable_by_key(|&(id, _)| id);
    Ok(locked)
}

/// The `(id, status)` of each locked row.
fn decode<DB>(rows: &[DB::Row]) -> Result<Vec<(RequestId, Status)>>
where
    DB: Backend,
    for<'r> i64: Decode<'r, DB>,
    for<'r> String: Decode<'r, DB>,
    usize: ColumnIndex<DB::Row>,
{
    rows.iter()
        .map(|row| {
            // Unchecked: MySQL/MariaDB's binary-collated VARCHAR reads as VARBINARY.
            let id: i64 = row.try_get_unchecked(0)?;
            let status: String = row.try_get_unchecked(1)?;
            let status = status
                .parse::<Status>()
                .map_err(|e| Error::Database(sqlx::Error::Decode(e.into())))?;
            Ok((id, status))
        })
        .collect()
}

/// Cancels the waiting records of `locked` and asks the running ones to stop; the others
/// are left alone. The rows are locked: each statement changes the records it names.
async fn decide<DB>(
    conn: &mut DB::Connection,
    application: &str,
    locked: &[(RequestId, Status)],
    now: i64,
) -> Result<CancelCounts>
where
    DB: Backend + HasDialect,
    for<'q> i64: Encode<'q, DB> + Type<DB>,
    for<'q> &'q str: Encode<'q, DB> + Type<DB>,
{
    let of = |wanted: &[Status]| -> Vec<RequestId> {
        locked
            .iter()
            .filter(|(_, status)| wanted.contains(status))
            .map(|&(id, _)| id)
            .collect()
    };
    let (waiting, running) = (of(&[Status::Init, Status::Failed]), of(&[Status::Running]));
    // (the records, the `SET` around `now`, the status they are in)
    let changes = [
        (
            &waiting,
            (
                "UPDATE async_req SET status = 'cancelled', update_time = ",
                "",
            ),
            " AND status IN ('init', 'failed')",
        ),
        (
            &running,
            (
                "UPDATE async_req SET cancel_requested = COALESCE(cancel_requested, ",
                ")",
            ),
            " AND status = 'running'",
        ),
    ];
    for (ids, (set, set_end), guard) in changes {
        for chunk in ids.chunks(IDS_PER_STATEMENT) {
            let mut s = Sql::new(DB::DIALECT, set);
            s.bind(Bind::Int(now)).push(set_end);
            s.push(" WHERE application_name = ")
                .bind_text(application)
                .push(guard)
                .push(" AND id IN (");
            for (i, &id) in chunk.iter().enumerate() {
                if i > 0 {
                    s.push(", ");
                }
                s.bind_int(id);
            }
            s.push(")");
            bound::<DB>(&s)
                .persistent(chunk.len() == 1)
                .execute(DB::executor(&mut *conn))
                .await?;
        }
    }
    Ok(CancelCounts {
        cancelled: waiting.len() as u64,
        stop_asked: running.len() as u64,
    })
}

/// `sql` with its values bound.
fn bound<'q, DB>(sql: &'q Sql) -> sqlx::query::Query<'q, DB, <DB as sqlx::Database>::Arguments<'q>>
where
    DB: Backend,
    i64: Encode<'q, DB> + Type<DB>,
    &'q str: Encode<'q, DB> + Type<DB>,
{
    let mut query = sqlx::query(&sql.text);
    for bind in &sql.binds {
        query = match bind {
            Bind::Int(n) => query.bind(*n),
            Bind::Text(t) => query.bind(t.as_str()),
        };
    }
    query
}

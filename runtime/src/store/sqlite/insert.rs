//! Writing request records on SQLite: one, or many in multi-row INSERTs whose values
//! shared by every row of a statement are bound once (numbered parameters, `?N`); an
//! idempotency key is claimed first, in the same transaction.

use std::fmt::Write as _;

use sqlx::sqlite::SqliteArguments;
use sqlx::{Arguments as _, Sqlite, SqliteConnection};

use super::keys;
use crate::base::error::Result;
use crate::base::record::{AttemptLog, Inserted, NewRequest};
use crate::store::{singleton, KeyClaim};

/// The columns a new request writes, in the order of [`values`].
const COLUMNS: &str = "application_name, executor, sign, strategy, status, exec_count, \
     max_attempts, param_json, remark, idempotency_key, priority, run_at, last_error, trace_json, \
     create_time, update_time, deadline_at, queue_name, partition_key";

/// How many columns [`COLUMNS`] names.
const WIDTH: usize = 19;

/// Rows per multi-row INSERT: at most `WIDTH` parameters each, well under SQLite's limit
/// of 32,766.
const INSERT_CHUNK: usize = 1000;

/// One value of a row, as bound.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Value<'a> {
    Text(&'a str),
    Int(i64),
    Null,
}

impl<'a> Value<'a> {
    fn text(value: Option<&'a str>) -> Self {
        value.map_or(Value::Null, Value::Text)
    }

    fn int(value: Option<i64>) -> Self {
        value.map_or(Value::Null, Value::Int)
    }

    fn bind(self, arguments: &mut SqliteArguments<'a>) -> Result<()> {
        let added = match self {
            Value::Text(text) => arguments.add(text),
            Value::Int(int) => arguments.add(int),
            Value::Null => arguments.add(None::<i64>),
        };
        added.map_err(|cause| crate::Error::Database(sqlx::Error::Encode(cause)))
    }
}

/// The values of `r`'s row, in the order of [`COLUMNS`].
fn values(r: &NewRequest) -> [Value<'_>; WIDTH] {
    [
        Value::Text(&r.application_name),
        Value::Text(r.executor),
        Value::Text(r.sign),
        Value::Text(r.strategy),
        Value::Text(r.status.as_str()),
        Value::Int(r.exec_count.into()),
        Value::Int(r.max_attempts.into()),
        Value::Text(&r.param_json),
        Value::Text(r.remark),
        Value::text(r.idempotency_key.as_deref()),
        Value::Int(r.priority.into()),
        Value::Int(r.run_at),
        Value::text(r.last_error.as_deref()),
        Value::text(r.trace_json.as_deref()),
        Value::Int(r.now),
        Value::Int(r.now),
        Value::int(r.deadline_at),
        Value::Text(r.queue),
        Value::Text(r.partition.as_deref().unwrap_or("")),
    ]
}

/// One multi-row INSERT of `rows`: a column whose value is the same in every row is bound
/// once, in a one-row common table expression joined to every row; the others are bound
/// row by row in a `VALUES` list. A batch of one executor's calls binds about one value per
/// row (its arguments) instead of 17: SQLite copies every bound text, and the copies were
/// most of the batch's cost. Parameters are anonymous (`?`): sqlx looks up the name of
/// every parameter of a statement, and SQLite finds a numbered one (`?N`) by a walk of the
/// list of names, which made a statement of a thousand rows slower than binding it all.
///
/// Each row gets its id from its position: the table's `AUTOINCREMENT` counter (read in
/// the statement, under its write lock) plus one plus the position, so that the ids
/// follow the input's order whatever order SQLite inserts the rows in (an `ORDER BY` that
/// ensured it cost 12 %). See [`insert_many`] for how the ids are read back.
fn multi_row_insert<'a>(rows: &[[Value<'a>; WIDTH]]) -> Result<(String, SqliteArguments<'a>)> {
    let first = &rows[0];
    let shared: [bool; WIDTH] = std::array::from_fn(|c| rows.iter().all(|row| row[c] == first[c]));
    let mut arguments = SqliteArguments::default();
    let mut sql = String::with_capacity(512 + COLUMNS.len() * 2 + rows.len() * (WIDTH * 3 + 8));
    sql.push_str("WITH shared AS (SELECT ");
    for c in (0..WIDTH).filter(|&c| shared[c]) {
        first[c].bind(&mut arguments)?;
        let _ = write!(sql, "? AS c{c}, ");
    }
    sql.push_str(
        "(SELECT COALESCE(MAX(seq), 0) FROM sqlite_sequence WHERE name = 'async_req') AS base) ",
    );
    let own = shared.iter().filter(|&&shared| !shared).count();
    // `VALUES` names its columns column1, column2, ...; the position is the last.
    let _ = write!(
        sql,
        "INSERT INTO async_req (id, {COLUMNS}) SELECT shared.base + row.column{} + 1",
        own + 1
    );
    let mut k = 0;
    for (c, shared) in shared.iter().enumerate() {
        if *shared {
            let _ = write!(sql, ", shared.c{c}");
        } else {
            k += 1;
            let _ = write!(sql, ", row.column{k}");
        }
    }
    sql.push_str(" FROM (VALUES ");
    for (position, row) in rows.iter().enumerate() {
        sql.push_str(if position == 0 { "(" } else { ", (" });
        for (value, _) in row.iter().zip(shared).filter(|&(_, shared)| !shared) {
            value.bind(&mut arguments)?;
            sql.push_str("?, ");
        }
        let _ = write!(sql, "{position})");
    }
    sql.push_str(") AS row CROSS JOIN shared");
    Ok((sql, arguments))
}

pub(super) async fn insert_request(
    conn: &mut SqliteConnection,
    r: &NewRequest,
) -> Result<Inserted> {
    // A key is claimed first, in the same transaction.
    if r.idempotency_key.is_some() {
        if let KeyClaim::Taken(id) = keys::claim(&mut *conn, r).await? {
            return Ok(Inserted::Existing(id));
        }
    }
    let written = write_request(&mut *conn, r).await;
    if written.is_err() && r.idempotency_key.is_some() {
        if let Err(error) = keys::release_pending(&mut *conn, r).await {
            crate::log::warn!(error = %crate::log::escaped(&error), "could not undo the claim of a key whose request was not written");
        }
    }
    written
}

/// Writes the request (its key claimed), names it in its key, writes its attempt log; a
/// singleton's request is written unless a live one holds its key (that one is returned).
async fn write_request(conn: &mut SqliteConnection, r: &NewRequest) -> Result<Inserted> {
    let conflict = singleton::on_conflict(r);
    let sql = format!(
        "INSERT INTO async_req (application_name, executor, sign, strategy, status, exec_count, \
         max_attempts, param_json, remark, idempotency_key, priority, run_at, last_error, trace_json, \
         create_time, update_time, deadline_at, queue_name, partition_key, singleton_key, \
         debounce_key) \
         VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?){conflict} \
         RETURNING id, merged"
    );
    let mut tries = 0;
    let id = loop {
        let mut arguments = SqliteArguments::default();
        for value in values(r) {
            value.bind(&mut arguments)?;
        }
        Value::text(r.singleton.as_deref()).bind(&mut arguments)?;
        Value::text(r.debounce.as_deref()).bind(&mut arguments)?;
        let written: Option<(i64, i64)> = sqlx::query_as_with(&sql, arguments)
            .fetch_optional(&mut *conn)
            .await?;
        match written {
            Some((id, 0)) => break id,
            Some((id, _)) => {
                return singleton::joined::<Sqlite>(conn, r, Inserted::Merged(id)).await;
            }
            None => {}
        }
        if let Some(id) = singleton::holder::<Sqlite>(&mut *conn, r).await? {
            return singleton::joined::<Sqlite>(conn, r, Inserted::Live(id)).await;
        }
        tries += 1;
        if tries == singleton::TRIES {
            return Err(singleton::contended(r));
        }
    };
    if r.idempotency_key.is_some() {
        crate::store::shared::key_assign::<Sqlite>(&mut *conn, r, Some(id)).await?;
    }
    if !r.tags.is_empty() {
        crate::store::shared::tags_insert::<Sqlite>(&mut *conn, r, id).await?;
    }
    if let Some(log) = &r.log {
        let log = AttemptLog {
            request_id: id,
            ..log.clone()
        };
        crate::store::shared::log_insert::<Sqlite>(conn, &log).await?;
    }
    Ok(Inserted::New(id))
}

/// Inserts many requests: those without an idempotency key, tags, a logged attempt, a
/// singleton or a debounce in multi-row statements, the others one by one. Ids come back in input order.
pub(super) async fn insert_many(
    conn: &mut SqliteConnection,
    requests: &[NewRequest],
) -> Result<Vec<Inserted>> {
    let mut inserted = vec![Inserted::New(0); requests.len()];
    let (plain, special): (Vec<usize>, Vec<usize>) = (0..requests.len()).partition(|&i| {
        requests[i].idempotency_key.is_none()
            && requests[i].log.is_none()
            && requests[i].tags.is_empty()
            && requests[i].singleton.is_none()
            && requests[i].debounce.is_none()
    });
    for chunk in plain.chunks(INSERT_CHUNK) {
        let rows: Vec<[Value<'_>; WIDTH]> = chunk.iter().map(|&i| values(&requests[i])).collect();
        let (sql, arguments) = multi_row_insert(&rows)?;
        // One statement inserts its rows in order, each with the next id (`AUTOINCREMENT`
        // ids only grow, and the transaction holds the write lock): the last id says them
        // all. (`RETURNING id` sent the ids back row by row: 193k against 334k calls/s.)
        let done = sqlx::query_with(&sql, arguments)
            .execute(&mut *conn)
            .await?;
        let first = done.last_insert_rowid() - chunk.len() as i64 + 1;
        for (k, &i) in chunk.iter().enumerate() {
            inserted[i] = Inserted::New(first + k as i64);
        }
    }
    for i in special {
        inserted[i] = insert_request(&mut *conn, &requests[i]).await?;
    }
    Ok(inserted)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn values_shared_by_every_row_are_bound_once_and_the_others_row_by_row() {
        let row = |arguments: &'static str, run_at: i64| {
            let mut row = [Value::Null; WIDTH];
            row[0] = Value::Text("app");
            row[7] = Value::Text(arguments);
            row[11] = Value::Int(run_at);
            row
        };
        let rows = [
            row("{\"n\":1}", 5),
            row("{\"n\":2}", 5),
            row("{\"n\":3}", 6),
        ];
        let (sql, arguments) = multi_row_insert(&rows).expect("binds");
        // 17 shared columns once, then each row's arguments and run_at.
        assert_eq!(arguments.len(), 17 + 3 * 2);
        assert!(
            sql.starts_with("WITH shared AS (SELECT ? AS c0, ? AS c1, "),
            "{sql}"
        );
        assert!(
            sql.contains("SELECT shared.base + row.column3 + 1, shared.c0, "),
            "{sql}"
        );
        assert!(
            sql.ends_with("FROM (VALUES (?, ?, 0), (?, ?, 1), (?, ?, 2)) AS row CROSS JOIN shared"),
            "{sql}"
        );
        assert!(sql.contains("shared.c6, row.column1, shared.c8"), "{sql}");
        assert!(sql.contains("shared.c10, row.column2, shared.c12"), "{sql}");
    }
}

//! Writing request records on MySQL/MariaDB: one, many (multi-row `INSERT`s when the
//! server hands one statement consecutive ids), and their attempt logs; an idempotency
//! key is claimed first, in the same transaction.

use sqlx::{MySql, MySqlConnection};

use super::keys;
use crate::base::error::Result;
use crate::base::record::{AttemptLog, Inserted, NewRequest};
use crate::store::{singleton, KeyClaim};

/// Inserts a request on `conn`, in its transaction if it is in one; a request with a key
/// needs one (its key is claimed first, then the request is written).
pub(super) async fn insert_request(conn: &mut MySqlConnection, r: &NewRequest) -> Result<Inserted> {
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
async fn write_request(conn: &mut MySqlConnection, r: &NewRequest) -> Result<Inserted> {
    let mut tries = 0;
    let done = loop {
        let written = sqlx::query(if r.debounce.is_some() { MERGE } else { INSERT })
            .bind(&*r.application_name)
            .bind(r.executor)
            .bind(r.sign)
            .bind(r.strategy)
            .bind(r.status.as_str())
            .bind(r.exec_count)
            .bind(r.max_attempts)
            .bind(&*r.param_json)
            .bind(r.remark)
            .bind(&r.idempotency_key)
            .bind(r.priority)
            .bind(r.run_at)
            .bind(&r.last_error)
            .bind(&r.trace_json)
            .bind(r.now)
            .bind(r.now)
            .bind(r.deadline_at)
            .bind(r.queue)
            .bind(r.partition.as_deref().unwrap_or(""))
            .bind(&r.singleton)
            .bind(&r.debounce)
            .execute(&mut *conn)
            .await;
        match written {
            // With `FOUND_ROWS` (sqlx's), 1 for a new row, 2 for a merge (`merged` grows).
            Ok(done) if r.debounce.is_some() && done.rows_affected() == 2 => {
                let merged = Inserted::Merged(done.last_insert_id() as i64);
                return singleton::joined::<MySql>(conn, r, merged).await;
            }
            Ok(done) => break done,
            // The singleton's index refused it (the statement alone is undone): read the
            // live request that holds the key.
            Err(error) if r.singleton.is_some() && is_singleton_duplicate(&error) => {}
            Err(error) => return Err(error.into()),
        }
        if let Some(id) = singleton::holder::<MySql>(&mut *conn, r).await? {
            return singleton::joined::<MySql>(conn, r, Inserted::Live(id)).await;
        }
        tries += 1;
        if tries == singleton::TRIES {
            return Err(singleton::contended(r));
        }
    };
    let id = done.last_insert_id() as i64;
    if r.idempotency_key.is_some() {
        crate::store::shared::key_assign::<sqlx::MySql>(&mut *conn, r, Some(id)).await?;
    }
    if !r.tags.is_empty() {
        crate::store::shared::tags_insert::<sqlx::MySql>(&mut *conn, r, id).await?;
    }
    if let Some(log) = &r.log {
        let log = AttemptLog {
            request_id: id,
            ..log.clone()
        };
        crate::store::shared::log_insert::<sqlx::MySql>(conn, &log).await?;
    }
    Ok(Inserted::New(id))
}

/// The insert of one request.
const INSERT: &str = "INSERT INTO async_req (application_name, executor, sign, strategy, status, \
     exec_count, max_attempts, param_json, remark, idempotency_key, priority, run_at, last_error, \
     trace_json, create_time, update_time, deadline_at, queue_name, partition_key, singleton_key, \
     debounce_key) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)";

/// The insert of a trailing debounce's request: a waiting request of its key takes the
/// call's arguments and start instead, counts the call in `merged`, and gives its id to
/// `LAST_INSERT_ID()`.
const MERGE: &str = "INSERT INTO async_req (application_name, executor, sign, strategy, status, \
     exec_count, max_attempts, param_json, remark, idempotency_key, priority, run_at, last_error, \
     trace_json, create_time, update_time, deadline_at, queue_name, partition_key, singleton_key, \
     debounce_key) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?) \
     ON DUPLICATE KEY UPDATE param_json = VALUES(param_json), run_at = VALUES(run_at), \
     update_time = VALUES(update_time), merged = merged + 1, id = LAST_INSERT_ID(id)";

/// Whether `error` is the duplicate-key error (1062) of the singletons' unique index.
fn is_singleton_duplicate(error: &sqlx::Error) -> bool {
    error.as_database_error().is_some_and(|e| {
        e.try_downcast_ref::<sqlx::mysql::MySqlDatabaseError>()
            .is_some_and(|e| e.number() == 1062)
            && e.message().contains("async_req_singleton")
    })
}

/// Rows per multi-row INSERT.
pub(super) const INSERT_CHUNK: usize = 500;

/// Inserts many requests: those without an idempotency key, a logged attempt, a
/// singleton or a debounce in multi-row statements when the server hands out consecutive ids to one
/// statement (`innodb_autoinc_lock_mode` 0 or 1, MariaDB's default), the others one by
/// one. Ids come back in input order.
pub(super) async fn insert_many(
    conn: &mut MySqlConnection,
    requests: &[NewRequest],
) -> Result<Vec<Inserted>> {
    let (lock_mode, step): (i64, i64) =
        sqlx::query_as("SELECT CAST(@@innodb_autoinc_lock_mode AS SIGNED), CAST(@@auto_increment_increment AS SIGNED)")
            .fetch_one(&mut *conn)
            .await?;
    let mut inserted = vec![Inserted::New(0); requests.len()];
    let (plain, special): (Vec<usize>, Vec<usize>) = if lock_mode == 2 {
        (Vec::new(), (0..requests.len()).collect())
    } else {
        (0..requests.len()).partition(|&i| {
            requests[i].idempotency_key.is_none()
                && requests[i].log.is_none()
                && requests[i].tags.is_empty()
                && requests[i].singleton.is_none()
                && requests[i].debounce.is_none()
        })
    };
    for chunk in plain.chunks(INSERT_CHUNK) {
        let mut query = sqlx::QueryBuilder::<MySql>::new(
            "INSERT INTO async_req (application_name, executor, sign, strategy, status, exec_count, \
             max_attempts, param_json, remark, priority, run_at, trace_json, create_time, update_time, \
             deadline_at, queue_name, partition_key) ",
        );
        query.push_values(chunk.iter().map(|&i| &requests[i]), |mut row, r| {
            row.push_bind(&*r.application_name)
                .push_bind(r.executor)
                .push_bind(r.sign)
                .push_bind(r.strategy)
                .push_bind(r.status.as_str())
                .push_bind(r.exec_count)
                .push_bind(r.max_attempts)
                .push_bind(&*r.param_json)
                .push_bind(r.remark)
                .push_bind(r.priority)
                .push_bind(r.run_at)
                .push_bind(&r.trace_json)
                .push_bind(r.now)
                .push_bind(r.now)
                .push_bind(r.deadline_at)
                .push_bind(r.queue)
                .push_bind(r.partition.as_deref().unwrap_or(""));
        });
        let done = query.build().execute(&mut *conn).await?;
        // The first id of the statement; the others follow it, `step` apart.
        let first = done.last_insert_id() as i64;
        for (k, &i) in chunk.iter().enumerate() {
            inserted[i] = Inserted::New(first + k as i64 * step);
        }
    }
    for i in special {
        inserted[i] = insert_request(&mut *conn, &requests[i]).await?;
    }
    Ok(inserted)
}

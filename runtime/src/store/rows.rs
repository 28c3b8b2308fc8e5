//! Rows to records, for every backend whose text columns decode as `String`.

use std::str::FromStr;

use sqlx::{ColumnIndex, Decode, Row, Type};

use crate::base::error::{Error, Result};
use crate::base::record::{AttemptLog, Claimed, Progress, Request, Status};

/// The columns of [`Claimed`], in `RETURNING` order.
pub(crate) const CLAIMED_COLUMNS: &str =
    "id, executor, sign, param_json, exec_count, max_attempts, trace_json, priority, run_at, \
    idempotency_key, deadline_at";

pub(crate) fn status(text: &str) -> Result<Status> {
    Status::from_str(text).map_err(|e| Error::Database(sqlx::Error::Decode(e.into())))
}

pub(crate) fn request_from_row<'r, R: Row>(row: &'r R) -> Result<Request>
where
    &'static str: ColumnIndex<R>,
    i64: Decode<'r, R::Database> + Type<R::Database>,
    i32: Decode<'r, R::Database> + Type<R::Database>,
    String: Decode<'r, R::Database> + Type<R::Database>,
{
    let status_text: String = row.try_get("status")?;
    Ok(Request {
        id: row.try_get("id")?,
        application_name: row.try_get("application_name")?,
        executor: row.try_get("executor")?,
        sign: row.try_get("sign")?,
        strategy: row.try_get("strategy")?,
        status: status(&status_text)?,
        exec_count: row.try_get("exec_count")?,
        max_attempts: row.try_get("max_attempts")?,
        param_json: row.try_get("param_json")?,
        remark: row.try_get("remark")?,
        idempotency_key: row.try_get("idempotency_key")?,
        priority: row.try_get("priority")?,
        run_at: row.try_get("run_at")?,
        lease_owner: row.try_get("lease_owner")?,
        lease_until: row.try_get("lease_until")?,
        last_error: row.try_get("last_error")?,
        trace_json: row.try_get("trace_json")?,
        create_time: row.try_get("create_time")?,
        update_time: row.try_get("update_time")?,
        progress: Progress::from_columns(
            row.try_get("progress_done")?,
            row.try_get("progress_total")?,
        ),
        deadline_at: row.try_get("deadline_at")?,
        cancel_requested: row.try_get("cancel_requested")?,
        tags: Vec::new(),
    })
}

// Used by PostgreSQL and MySQL only.
#[cfg_attr(not(any(feature = "postgres", feature = "mysql")), allow(dead_code))]
pub(crate) fn claimed_from_row<'r, R: Row>(row: &'r R) -> Result<Claimed>
where
    usize: ColumnIndex<R>,
    i64: Decode<'r, R::Database> + Type<R::Database>,
    i32: Decode<'r, R::Database> + Type<R::Database>,
    String: Decode<'r, R::Database> + Type<R::Database>,
{
    // By position in [`CLAIMED_COLUMNS`] (`claimed_positions_follow_the_columns` checks):
    // a name is hashed and looked up on every row, and a claim decodes hundreds at once.
    let params: String = row.try_get(3)?;
    Ok(Claimed {
        id: row.try_get(0)?,
        executor: row.try_get(1)?,
        sign: row.try_get(2)?,
        param_json: params.into(),
        attempt: row.try_get(4)?,
        max_attempts: row.try_get(5)?,
        trace_json: row.try_get(6)?,
        priority: row.try_get(7)?,
        run_at: row.try_get(8)?,
        idempotency_key: row.try_get(9)?,
        deadline_at: row.try_get(10)?,
    })
}

/// A claimed record from one JSON array of its [`CLAIMED_COLUMNS`], in their order (how
/// SQLite returns claims: see `store::sqlite::claims::claim_due`).
// Used by SQLite and MySQL only.
#[cfg_attr(not(any(feature = "sqlite", feature = "mysql")), allow(dead_code))]
pub(crate) fn claimed_from_json(text: &str) -> Result<Claimed> {
    type Columns = (
        i64,
        String,
        String,
        String,
        i32,
        i32,
        Option<String>,
        i32,
        i64,
        Option<String>,
        Option<i64>,
    );
    let (
        id,
        executor,
        sign,
        params,
        attempt,
        max_attempts,
        trace_json,
        priority,
        run_at,
        key,
        deadline_at,
    ): Columns =
        serde_json::from_str(text).map_err(|e| Error::Database(sqlx::Error::Decode(e.into())))?;
    Ok(Claimed {
        id,
        executor,
        sign,
        param_json: params.into(),
        attempt,
        max_attempts,
        trace_json,
        priority,
        run_at,
        idempotency_key: key,
        deadline_at,
    })
}

pub(crate) fn log_from_row<'r, R: Row>(row: &'r R) -> Result<AttemptLog>
where
    &'static str: ColumnIndex<R>,
    i64: Decode<'r, R::Database> + Type<R::Database>,
    i32: Decode<'r, R::Database> + Type<R::Database>,
    String: Decode<'r, R::Database> + Type<R::Database>,
{
    Ok(AttemptLog {
        request_id: row.try_get("req_id")?,
        attempt: row.try_get("attempt")?,
        worker: row.try_get("worker")?,
        started: row.try_get("started")?,
        finished: row.try_get("finished")?,
        outcome: row.try_get("outcome")?,
        error: row.try_get("error")?,
    })
}

#[cfg(test)]
mod claimed_tests {
    use super::CLAIMED_COLUMNS;

    /// `claimed_from_row` reads by position: the columns must stay in this order.
    #[test]
    fn claimed_positions_follow_the_columns() {
        let columns: Vec<&str> = CLAIMED_COLUMNS.split(',').map(str::trim).collect();
        assert_eq!(
            columns,
            [
                "id",
                "executor",
                "sign",
                "param_json",
                "exec_count",
                "max_attempts",
                "trace_json",
                "priority",
                "run_at",
                "idempotency_key",
                "deadline_at"
            ]
        );
    }
}

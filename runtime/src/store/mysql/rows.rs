//! MySQL/MariaDB rows to records. Text columns are read without sqlx's type check (see
//! [`text`]).

use std::str::FromStr;

use sqlx::mysql::MySqlRow;
use sqlx::Row;

use crate::base::error::{Error, Result};
use crate::base::record::{AttemptLog, Claimed, Progress, Request, Status};

/// Text columns have a binary collation, which MySQL reports with the `BINARY` flag that
/// sqlx reads as "not text": decode them without the type check (they hold UTF-8).
pub(super) fn text(row: &MySqlRow, column: &str) -> Result<String> {
    Ok(row.try_get_unchecked(column)?)
}

/// A nullable text column; see [`text`].
pub(super) fn opt_text(row: &MySqlRow, column: &str) -> Result<Option<String>> {
    Ok(row.try_get_unchecked(column)?)
}

pub(super) fn status_from(s: &str) -> Result<Status> {
    Status::from_str(s).map_err(|e| Error::Database(sqlx::Error::Decode(e.into())))
}

pub(super) fn request_from_row(row: &MySqlRow) -> Result<Request> {
    Ok(Request {
        id: row.try_get("id")?,
        application_name: text(row, "application_name")?,
        executor: text(row, "executor")?,
        sign: text(row, "sign")?,
        strategy: text(row, "strategy")?,
        status: status_from(&text(row, "status")?)?,
        exec_count: row.try_get("exec_count")?,
        max_attempts: row.try_get("max_attempts")?,
        param_json: text(row, "param_json")?,
        remark: text(row, "remark")?,
        idempotency_key: opt_text(row, "idempotency_key")?,
        priority: row.try_get("priority")?,
        run_at: row.try_get("run_at")?,
        lease_owner: opt_text(row, "lease_owner")?,
        lease_until: row.try_get("lease_until")?,
        last_error: opt_text(row, "last_error")?,
        trace_json: opt_text(row, "trace_json")?,
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

/// A row locked for a claim; `exec_count` is read before the claim counts the attempt.
pub(super) fn claimed_from_row(row: &MySqlRow) -> Result<Claimed> {
    let exec_count: i32 = row.try_get("exec_count")?;
    Ok(Claimed {
        id: row.try_get("id")?,
        executor: text(row, "executor")?,
        sign: text(row, "sign")?,
        param_json: text(row, "param_json")?.into(),
        attempt: exec_count + 1,
        max_attempts: row.try_get("max_attempts")?,
        trace_json: opt_text(row, "trace_json")?,
        priority: row.try_get("priority")?,
        run_at: row.try_get("run_at")?,
        idempotency_key: opt_text(row, "idempotency_key")?,
        deadline_at: row.try_get("deadline_at")?,
    })
}

pub(super) fn log_from_row(row: &MySqlRow) -> Result<AttemptLog> {
    Ok(AttemptLog {
        request_id: row.try_get("req_id")?,
        attempt: row.try_get("attempt")?,
        worker: text(row, "worker")?,
        started: row.try_get("started")?,
        finished: row.try_get("finished")?,
        outcome: text(row, "outcome")?,
        error: opt_text(row, "error")?,
    })
}

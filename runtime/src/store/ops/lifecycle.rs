//! Statements about one request along its life: a running body's progress, the result it
//! kept, the stops asked of running records (a cancel, a deadline), waiting records whose
//! deadline passed, and the rows left about requests that are gone.

use async_trait::async_trait;

use crate::base::error::Result;
use crate::base::record::StopAsked;
use crate::store::sql::{Col, Dialect, Sql, SqlRunner};

/// The `last_error` of a waiting request whose deadline passed (it goes `dead`).
const DEADLINE_PASSED: &str = "deadline passed while it waited";

/// The statements about requests along their life: progress, results, stops, deadlines.
/// Every backend has them through its [`SqlRunner`].
#[async_trait]
pub(crate) trait LifecycleOps: SqlRunner {
    /// Writes the progress a running body reported, while `owner` holds the record at
    /// `attempt`; whether it was written.
    async fn request_progress(
        &self,
        id: i64,
        owner: &str,
        attempt: i32,
        (done, total): (i64, i64),
    ) -> Result<bool> {
        let mut s = self.sql("UPDATE async_req SET progress_done = ");
        s.bind_int(done)
            .push(", progress_total = ")
            .bind_int(total)
            .push(" WHERE id = ")
            .bind_int(id)
            .push(" AND status = 'running' AND lease_owner = ")
            .bind_text(owner)
            .push(" AND exec_count = ")
            .bind_int(i64::from(attempt));
        Ok(self.execute(&s).await? > 0)
    }

    /// The kept result of record `id` of `application`: `None` without such a record,
    /// `Some(None)` when it keeps none.
    async fn request_result(&self, application: &str, id: i64) -> Result<Option<Option<String>>> {
        let mut s = self.sql("SELECT result_json FROM async_req WHERE application_name = ");
        s.bind_text(application).push(" AND id = ").bind_int(id);
        let mut rows = self.fetch_rows(&s, &[Col::Text]).await?;
        match rows.pop() {
            None => Ok(None),
            Some(mut row) => Ok(Some(row.opt_text()?)),
        }
    }

    /// Of the records `held` ((id, attempt) pairs) that `owner` runs, those asked to stop:
    /// a cancel was asked for, or their deadline passed by `now`.
    async fn request_stops(
        &self,
        owner: &str,
        held: &[(i64, i32)],
        now: i64,
    ) -> Result<Vec<(i64, i32, StopAsked)>> {
        let mut stops = Vec::new();
        for chunk in held.chunks(500) {
            let mut s = self.sql(&format!(
                "SELECT id, {}, cancel_requested FROM async_req \
                 WHERE status = 'running' AND lease_owner = ",
                self.dialect().int64("exec_count")
            ));
            s.bind_text(owner).push(" AND id IN (");
            for (i, (id, _)) in chunk.iter().enumerate() {
                if i > 0 {
                    s.push(", ");
                }
                s.bind_int(*id);
            }
            s.push(") AND (cancel_requested IS NOT NULL OR deadline_at <= ")
                .bind_int(now)
                .push(")");
            for mut row in self.fetch_rows(&s, &[Col::Int, Col::Int, Col::Int]).await? {
                let (id, attempt, cancel) = (row.int()?, row.int()?, row.opt_int()?);
                let why = match cancel {
                    Some(_) => StopAsked::Cancel,
                    None => StopAsked::Deadline,
                };
                let attempt = i32::try_from(attempt).unwrap_or(i32::MAX);
                if chunk.contains(&(id, attempt)) {
                    stops.push((id, attempt, why));
                }
            }
        }
        Ok(stops)
    }

    /// Makes at most `limit` waiting (`init`, `failed`) records of `application` whose
    /// deadline passed by `now` `dead`; how many.
    async fn request_expire_deadlines(
        &self,
        application: &str,
        now: i64,
        limit: i64,
    ) -> Result<u64> {
        let mut s = self.sql("UPDATE async_req SET status = 'dead', last_error = ");
        s.bind_text(DEADLINE_PASSED)
            .push(", update_time = ")
            .bind_int(now)
            .push(" WHERE ");
        let expired = |s: &mut Sql| {
            s.push("deadline_at <= ")
                .bind_int(now)
                .push(" AND application_name = ")
                .bind_text(application)
                .push(" AND status IN ('init', 'failed')");
        };
        match self.dialect() {
            // MySQL/MariaDB cannot read the table it updates in a sub-select.
            Dialect::MySql => {
                expired(&mut s);
                s.push(" LIMIT ").bind_int(limit);
            }
            Dialect::Postgres | Dialect::Sqlite => {
                // The outer condition again: a row a claim took meanwhile is left alone.
                s.push("id IN (SELECT id FROM async_req WHERE ");
                expired(&mut s);
                s.push(" LIMIT ").bind_int(limit).push(") AND ");
                expired(&mut s);
            }
        }
        self.execute(&s).await
    }

    /// Deletes at most `limit` tags of `application` written before `before` whose
    /// request is gone (deleted on success, purged, deleted by an operator); how many.
    async fn tag_purge_orphans(&self, application: &str, before: i64, limit: i64) -> Result<u64> {
        let s = orphan_purge(self.dialect(), "async_tag", application, before, limit);
        self.execute(&s).await
    }
}

impl<S: SqlRunner> LifecycleOps for S {}

/// Deletes at most `limit` rows of `table` (a table of rows about a request: `req_id`,
/// `application_name`, `create_time`) of `application` written before `before` whose
/// request is gone.
pub(crate) fn orphan_purge(
    dialect: Dialect,
    table: &str,
    application: &str,
    before: i64,
    limit: i64,
) -> Sql {
    let orphaned = |s: &mut Sql| {
        s.push("application_name = ")
            .bind_text(application)
            .push(" AND create_time < ")
            .bind_int(before)
            .push(&format!(
                " AND NOT EXISTS (SELECT 1 FROM async_req r WHERE r.id = {table}.req_id)"
            ));
    };
    let mut s = Sql::new(dialect, &format!("DELETE FROM {table} WHERE "));
    match dialect {
        // MySQL/MariaDB cannot read the table it deletes from in a sub-select.
        Dialect::MySql => {
            orphaned(&mut s);
            s.push(" LIMIT ").bind_int(limit);
        }
        Dialect::Postgres | Dialect::Sqlite => {
            let row = match dialect {
                Dialect::Postgres => "ctid",
                _ => "rowid",
            };
            s.push(&format!("{row} IN (SELECT {row} FROM {table} WHERE "));
            orphaned(&mut s);
            s.push(" LIMIT ").bind_int(limit).push(")");
        }
    }
    s
}

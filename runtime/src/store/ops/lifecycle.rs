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
    /// deadline passed by `now` `dead`; how many. It reads the index of waiting requests
    /// with a deadline only ([`deadline_expired`]), never the finished history.
    async fn request_expire_deadlines(
        &self,
        application: &str,
        now: i64,
        limit: i64,
    ) -> Result<u64> {
        let dialect = self.dialect();
        match dialect {
            // MySQL/MariaDB cannot read the table it updates in a sub-select, and an
            // `UPDATE` through a range takes next-key locks on it (an ordinary insert, its
            // deadline NULL, waits for the gap before the first deadline). The ids by a
            // plain read (no lock), then the records by primary key, the condition again
            // (a row a claim took meanwhile is left alone).
            Dialect::MySql => {
                let expired = deadline_expired(dialect, application, now, limit);
                let ids: Vec<i64> = self
                    .fetch_rows(&expired, &[Col::Int])
                    .await?
                    .into_iter()
                    .map(|mut row| row.int())
                    .collect::<Result<_>>()?;
                if ids.is_empty() {
                    return Ok(0);
                }
                self.execute(&deadline_expire_ids(dialect, application, now, &ids))
                    .await
            }
            Dialect::Postgres | Dialect::Sqlite => {
                let mut s = deadline_expire_head(dialect, now);
                // The outer condition again: a row a claim took meanwhile is left alone.
                s.push("id IN (");
                select_expired(&mut s, application, now, limit);
                s.push(") AND ");
                deadline_passed(&mut s, application, now);
                self.execute(&s).await
            }
        }
    }

    /// Deletes at most `limit` tags of `application` written before `before` whose
    /// request is gone (deleted on success, purged, deleted by an operator); how many.
    async fn tag_purge_orphans(&self, application: &str, before: i64, limit: i64) -> Result<u64> {
        let s = orphan_purge(self.dialect(), "async_tag", application, before, limit);
        self.execute(&s).await
    }
}

impl<S: SqlRunner> LifecycleOps for S {}

/// The ids of at most `limit` waiting records of `application` whose deadline passed by
/// `now`, read through the index of waiting requests with a deadline
/// (`async_req_deadline_waiting`: partial on PostgreSQL and SQLite, on the virtual column
/// `deadline_waiting` on MySQL/MariaDB, NULL unless the request waits). A plain read: at
/// any isolation it locks nothing on MySQL/MariaDB and PostgreSQL.
pub(crate) fn deadline_expired(dialect: Dialect, application: &str, now: i64, limit: i64) -> Sql {
    let mut s = Sql::new(dialect, "");
    select_expired(&mut s, application, now, limit);
    s
}

/// Appends [`deadline_expired`]'s statement to `s`.
fn select_expired(s: &mut Sql, application: &str, now: i64, limit: i64) {
    s.push("SELECT id FROM async_req WHERE ");
    match s.dialect() {
        Dialect::MySql => {
            s.push("application_name = ")
                .bind_text(application)
                .push(" AND deadline_waiting <= ")
                .bind_int(now)
                .push(" AND status IN ('init', 'failed')");
        }
        // The index's predicate, word for word (SQLite matches it by its terms).
        Dialect::Postgres | Dialect::Sqlite => deadline_passed(s, application, now),
    }
    s.push(" LIMIT ").bind_int(limit);
}

/// `UPDATE .. SET` a waiting record `dead` because its deadline passed, up to `WHERE `.
fn deadline_expire_head(dialect: Dialect, now: i64) -> Sql {
    let mut s = Sql::new(
        dialect,
        "UPDATE async_req SET status = 'dead', last_error = ",
    );
    s.bind_text(DEADLINE_PASSED)
        .push(", update_time = ")
        .bind_int(now)
        .push(" WHERE ");
    s
}

/// Makes the records `ids` of `application` `dead` if they still wait and their deadline
/// passed by `now`: by primary key, so that MySQL/MariaDB locks those records and no gap.
pub(crate) fn deadline_expire_ids(
    dialect: Dialect,
    application: &str,
    now: i64,
    ids: &[i64],
) -> Sql {
    let mut s = deadline_expire_head(dialect, now);
    s.push("id IN (");
    for (i, id) in ids.iter().enumerate() {
        if i > 0 {
            s.push(", ");
        }
        s.bind_int(*id);
    }
    s.push(") AND ");
    deadline_passed(&mut s, application, now);
    s
}

/// A waiting record of `application` whose deadline passed by `now`.
fn deadline_passed(s: &mut Sql, application: &str, now: i64) {
    s.push("application_name = ")
        .bind_text(application)
        .push(" AND deadline_at <= ")
        .bind_int(now)
        .push(" AND deadline_at IS NOT NULL AND status IN ('init', 'failed')");
}

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

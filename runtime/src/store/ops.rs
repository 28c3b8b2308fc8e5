//! The statements about many requests: filtered pages, counts and actions on every
//! request matching a [`RequestQuery`], statistics, pauses and the audit trail.
//! Written once, for every backend, over the backend's [`SqlRunner`] (`sqlite/ops.rs`,
//! `postgres/ops.rs`, `mysql/ops.rs` run the SQL): the filter of a query and a page mean
//! the same on every backend ([`Sql::filter`]); what the dialects write differently
//! (placeholders, upserts, integer casts) the [`Dialect`] renders.

use async_trait::async_trait;

use super::sql::{Bind, Cells, Col, Dialect, Sql, SqlRunner, Txn};
use crate::base::error::Result;
use crate::base::query::{
    Action, AuditEntry, DepthSample, ExecutorCount, MinuteStat, Page, PageSpec, Pause, QueueCount,
    QueuePolicy, RequestQuery, StatDelta,
};
use crate::base::record::{Status, StopAsked};

/// The `last_error` of a waiting request whose deadline passed (it goes `dead`).
pub(crate) const DEADLINE_PASSED: &str = "deadline passed while it waited";

/// The operators' statements, written once over a backend's [`SqlRunner`]: every
/// backend implements `OpsStore` with nothing but its runner.
#[async_trait]
pub(crate) trait OpsStore: SqlRunner {
    /// A page of the requests of `application` that match `query` (see
    /// [`super::page`]: finished and live records read apart, a time range turned into
    /// ids, a text search bounded by its window).
    async fn request_page(
        &self,
        application: &str,
        query: &RequestQuery,
        page: &PageSpec,
    ) -> Result<Page> {
        let mut page = super::page::request_page(self, application, query, page).await?;
        super::records::attach_tags(self, application, &mut page.requests).await?;
        Ok(page)
    }

    /// How many requests of `application` match `query` and are in one of `statuses`
    /// (all statuses when empty).
    async fn request_count_matching(
        &self,
        application: &str,
        query: &RequestQuery,
        statuses: &[Status],
    ) -> Result<i64> {
        let mut s = self.sql("SELECT COUNT(*) FROM async_req WHERE");
        s.filter(application, query).statuses(statuses);
        let counted = self.fetch_ints(&s).await?;
        Ok(counted.first().copied().flatten().unwrap_or(0))
    }

    /// Applies `action` to every request of `application` that matches `query` and that
    /// the action applies to, [`ACT_BATCH`] requests to a transaction in id order;
    /// returns how many changed.
    async fn request_act(
        &self,
        application: &str,
        query: &RequestQuery,
        action: Action,
        now: i64,
    ) -> Result<u64> {
        let dialect = self.dialect();
        let (mut changed, mut after) = (0, 0);
        loop {
            let ids = act_batch_ids(dialect, application, query, action, after);
            let change = |rows: &[Cells]| {
                let ids: Vec<i64> = rows.iter().filter_map(Cells::first_int).collect();
                act_batch(dialect, application, query, action, now, &ids)
            };
            let (rows, written) = self
                .read_then_write(Txn::Batch, Some((&ids, &[Col::Int])), &change)
                .await?;
            changed += written;
            let ids: Vec<i64> = rows.iter().filter_map(Cells::first_int).collect();
            match ids.last() {
                Some(&last) if ids.len() == ACT_BATCH => after = last,
                _ => return Ok(changed),
            }
        }
    }

    /// The ids of the first `limit` requests of `application` (in id order) that match
    /// `query` and that `action` applies to: what an action confirmed for at most a
    /// number of requests acts on.
    async fn request_ids_actionable(
        &self,
        application: &str,
        query: &RequestQuery,
        action: Action,
        limit: u64,
    ) -> Result<Vec<i64>> {
        let mut s = self.sql("SELECT id FROM async_req WHERE");
        s.filter(application, query).statuses(action.applies_to());
        s.push(&format!(" ORDER BY id LIMIT {limit}"));
        let rows = self.fetch_rows(&s, &[Col::Int]).await?;
        Ok(rows.iter().filter_map(Cells::first_int).collect())
    }

    /// Applies `action` to the requests of `ids` that still match `query` and are in a
    /// status it applies to, [`ACT_BATCH`] to a transaction; returns how many changed.
    async fn request_act_ids(
        &self,
        application: &str,
        query: &RequestQuery,
        action: Action,
        now: i64,
        ids: &[i64],
    ) -> Result<u64> {
        let dialect = self.dialect();
        let mut changed = 0;
        for batch in ids.chunks(ACT_BATCH) {
            let change = |_: &[Cells]| act_batch(dialect, application, query, action, now, batch);
            let (_, written) = self.read_then_write(Txn::Batch, None, &change).await?;
            changed += written;
        }
        Ok(changed)
    }

    /// Requests of `application` by executor and status.
    async fn request_count_by_executor(&self, application: &str) -> Result<Vec<ExecutorCount>> {
        let mut s =
            self.sql("SELECT executor, status, COUNT(*) FROM async_req WHERE application_name = ");
        s.bind_text(application)
            .push(" GROUP BY executor, status ORDER BY executor, status");
        let rows = self
            .fetch_rows(&s, &[Col::Text, Col::Text, Col::Int])
            .await?;
        rows.into_iter()
            .map(|mut row| {
                Ok(ExecutorCount {
                    executor: row.text()?,
                    status: row.status()?,
                    count: row.int()?,
                })
            })
            .collect()
    }

    /// Running requests of `application` by the instance holding them.
    async fn request_count_running_by_owner(
        &self,
        application: &str,
    ) -> Result<Vec<(String, i64)>> {
        let mut s =
            self.sql("SELECT lease_owner, COUNT(*) FROM async_req WHERE application_name = ");
        s.bind_text(application)
            .push(" AND status = 'running' AND lease_owner IS NOT NULL GROUP BY lease_owner");
        let rows = self.fetch_rows(&s, &[Col::Text, Col::Int]).await?;
        rows.into_iter()
            .map(|mut row| Ok((row.text()?, row.int()?)))
            .collect()
    }

    /// The due time of the longest-waiting due record (`init` or `failed`, due by `now`).
    async fn request_oldest_waiting(&self, application: &str, now: i64) -> Result<Option<i64>> {
        let mut s = self.sql("SELECT MIN(run_at) FROM async_req WHERE application_name = ");
        s.bind_text(application)
            .push(" AND status IN ('init', 'failed') AND run_at <= ")
            .bind_int(now);
        Ok(self.fetch_ints(&s).await?.first().copied().flatten())
    }

    /// The durations (ms) of the last `limit` logged attempts of `executor` whose request
    /// is still kept.
    async fn log_durations(
        &self,
        application: &str,
        executor: &str,
        limit: i64,
    ) -> Result<Vec<i64>> {
        let mut s = self.sql(
            "SELECT l.finished - l.started FROM async_log l JOIN async_req r ON r.id = l.req_id \
             WHERE r.application_name = ",
        );
        s.bind_text(application)
            .push(" AND r.executor = ")
            .bind_text(executor)
            .push(" ORDER BY l.id DESC LIMIT ")
            .bind_int(limit);
        let rows = self.fetch_rows(&s, &[Col::Int]).await?;
        rows.into_iter().map(|mut row| row.int()).collect()
    }

    /// Adds finished counts to `async_stat`.
    async fn stat_add(&self, application: &str, deltas: &[StatDelta]) -> Result<()> {
        let dialect = self.dialect();
        let upsert = dialect.upsert(
            "async_stat",
            "application_name, minute, executor",
            &["succeeded", "failed", "retried"],
            &[],
        );
        let statements = |_: &[Cells]| {
            deltas
                .iter()
                .map(|d| {
                    let mut s = Sql::new(
                        dialect,
                        "INSERT INTO async_stat (application_name, executor, minute, succeeded, \
                         failed, retried) VALUES (",
                    );
                    s.bind_text(application).push(", ").bind_text(d.executor);
                    for n in [d.minute, d.succeeded, d.failed, d.retried] {
                        s.push(", ").bind_int(n);
                    }
                    s.push(")").push(&upsert);
                    s
                })
                .collect()
        };
        self.read_then_write(Txn::Batch, None, &statements).await?;
        Ok(())
    }

    /// Finished counts per minute from `since_minute` (unix ms), all executors summed.
    async fn stat_series(&self, application: &str, since_minute: i64) -> Result<Vec<MinuteStat>> {
        let d = self.dialect();
        let mut s = self.sql(&format!(
            "SELECT minute, {}, {}, {} FROM async_stat WHERE application_name = ",
            d.int64("SUM(succeeded)"),
            d.int64("SUM(failed)"),
            d.int64("SUM(retried)"),
        ));
        s.bind_text(application)
            .push(" AND minute >= ")
            .bind_int(since_minute)
            .push(" GROUP BY minute ORDER BY minute");
        let rows = self.fetch_rows(&s, &[Col::Int; 4]).await?;
        rows.into_iter()
            .map(|mut row| {
                Ok(MinuteStat {
                    minute: row.int()?,
                    succeeded: row.int()?,
                    failed: row.int()?,
                    retried: row.int()?,
                })
            })
            .collect()
    }

    /// Samples the queue depth of `application` into `async_depth` for `minute`.
    async fn depth_sample(&self, application: &str, minute: i64) -> Result<()> {
        // `COUNT` of a `CASE`: a `BIGINT` on every backend (PostgreSQL sums no booleans).
        let mut s = self.sql(
            "SELECT COUNT(CASE WHEN status IN ('init', 'failed') THEN 1 END), \
             COUNT(CASE WHEN status = 'running' THEN 1 END) FROM async_req \
             WHERE application_name = ",
        );
        s.bind_text(application)
            .push(" AND status IN ('init', 'failed', 'running')");
        let counts = self.fetch_ints(&s).await?;
        let count = |i: usize| counts.get(i).copied().flatten().unwrap_or(0);
        let mut s = self
            .sql("INSERT INTO async_depth (application_name, minute, waiting, running) VALUES (");
        s.bind_text(application)
            .push(", ")
            .bind_int(minute)
            .push(", ")
            .bind_int(count(0))
            .push(", ")
            .bind_int(count(1))
            .push(")");
        let upsert = self.dialect().upsert(
            "async_depth",
            "application_name, minute",
            &[],
            &["waiting", "running"],
        );
        s.push(&upsert);
        self.execute(&s).await?;
        Ok(())
    }

    /// Records of `application` that may still run (`init`, `running`, `failed`), by
    /// executor and status, with the earliest due time of those due by `now`: one
    /// statement, for the queue gauges.
    async fn queue_depth(&self, application: &str, now: i64) -> Result<Vec<QueueCount>> {
        let mut s = self.sql(
            "SELECT executor, status, COUNT(*), \
             MIN(CASE WHEN status <> 'running' AND run_at <= ",
        );
        s.bind_int(now)
            .push(" THEN run_at END) FROM async_req WHERE application_name = ")
            .bind_text(application)
            .push(" AND status IN ('init', 'failed', 'running') GROUP BY executor, status");
        let rows = self
            .fetch_rows(&s, &[Col::Text, Col::Text, Col::Int, Col::Int])
            .await?;
        rows.into_iter()
            .map(|mut row| {
                Ok(QueueCount {
                    executor: row.text()?,
                    status: row.status()?,
                    count: row.int()?,
                    oldest_due: row.opt_int()?,
                })
            })
            .collect()
    }

    /// Queue depth samples from `since_minute` (unix ms).
    async fn depth_series(&self, application: &str, since_minute: i64) -> Result<Vec<DepthSample>> {
        let mut s =
            self.sql("SELECT minute, waiting, running FROM async_depth WHERE application_name = ");
        s.bind_text(application)
            .push(" AND minute >= ")
            .bind_int(since_minute)
            .push(" ORDER BY minute");
        let rows = self.fetch_rows(&s, &[Col::Int; 3]).await?;
        rows.into_iter()
            .map(|mut row| {
                Ok(DepthSample {
                    minute: row.int()?,
                    waiting: row.int()?,
                    running: row.int()?,
                })
            })
            .collect()
    }

    /// Removes statistics of minutes before `before_minute` (unix ms).
    async fn stat_prune(&self, before_minute: i64) -> Result<()> {
        for table in ["async_stat", "async_depth"] {
            let mut s = self.sql(&format!("DELETE FROM {table} WHERE minute < "));
            s.bind_int(before_minute);
            self.execute(&s).await?;
        }
        Ok(())
    }

    /// Pauses claims of `executor` (again: keeps the first pause).
    async fn pause_set(&self, application: &str, executor: &str, by: &str, now: i64) -> Result<()> {
        let (insert, or_ignore) = self.dialect().insert_or_ignore();
        let mut s = self.sql(&format!(
            "{insert} async_pause (application_name, executor, paused_by, paused_at) VALUES ("
        ));
        s.bind_text(application)
            .push(", ")
            .bind_text(executor)
            .push(", ")
            .bind_text(by)
            .push(", ")
            .bind_int(now)
            .push(")")
            .push(or_ignore);
        self.execute(&s).await?;
        Ok(())
    }

    /// Resumes claims of `executor`; whether it was paused.
    async fn pause_clear(&self, application: &str, executor: &str) -> Result<bool> {
        let mut s = self.sql("DELETE FROM async_pause WHERE application_name = ");
        s.bind_text(application)
            .push(" AND executor = ")
            .bind_text(executor);
        Ok(self.execute(&s).await? > 0)
    }

    /// The paused executors of `application`.
    async fn pause_list(&self, application: &str) -> Result<Vec<Pause>> {
        let mut s = self.sql(
            "SELECT executor, paused_by, paused_at FROM async_pause WHERE application_name = ",
        );
        s.bind_text(application).push(" ORDER BY executor");
        let rows = self
            .fetch_rows(&s, &[Col::Text, Col::Text, Col::Int])
            .await?;
        rows.into_iter()
            .map(|mut row| {
                Ok(Pause {
                    executor: row.text()?,
                    paused_by: row.text()?,
                    paused_at: row.int()?,
                })
            })
            .collect()
    }

    /// Sets the limits of `queue` that override the builder's (`None`: the builder's).
    async fn queue_policy_set(
        &self,
        application: &str,
        queue: &str,
        (concurrency, per_instance, rate): (Option<i64>, Option<i64>, Option<i64>),
        by: &str,
        now: i64,
    ) -> Result<()> {
        let mut s = self.sql(
            "INSERT INTO async_queue (application_name, name, concurrency, per_instance, rate, \
             changed_by, changed_at) VALUES (",
        );
        s.bind_text(application)
            .push(", ")
            .bind_text(queue)
            .push(", ");
        for limit in [concurrency, per_instance, rate] {
            match limit {
                Some(n) => s.bind_int(n),
                None => s.push("NULL"),
            };
            s.push(", ");
        }
        s.bind_text(by).push(", ").bind_int(now).push(")");
        let upsert = self.dialect().upsert(
            "async_queue",
            "application_name, name",
            &[],
            &[
                "concurrency",
                "per_instance",
                "rate",
                "changed_by",
                "changed_at",
            ],
        );
        s.push(&upsert);
        self.execute(&s).await?;
        Ok(())
    }

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

    /// Makes the row of quota `scope` of `application` unless it has one (autocommit). A
    /// plain read first: on MySQL/MariaDB an `INSERT IGNORE` of a row that a submission
    /// holds locked waits for that transaction.
    async fn quota_register(&self, application: &str, scope: &str) -> Result<()> {
        let mut found = self.sql("SELECT COUNT(*) FROM async_quota WHERE application_name = ");
        found
            .bind_text(application)
            .push(" AND scope = ")
            .bind_text(scope);
        if self.fetch_ints(&found).await?.first().copied().flatten() == Some(1) {
            return Ok(());
        }
        let (insert, or_ignore) = self.dialect().insert_or_ignore();
        let mut s = self.sql(&format!(
            "{insert} async_quota (application_name, scope) VALUES ("
        ));
        s.bind_text(application)
            .push(", ")
            .bind_text(scope)
            .push(")")
            .push(or_ignore);
        self.execute(&s).await?;
        Ok(())
    }

    /// How many requests of `application` wait (`init`, `failed`), counted up to `limit`
    /// at most: all of them, those of `executors`, or those tagged `tag`.
    async fn quota_count(
        &self,
        application: &str,
        executors: Option<&[&'static str]>,
        tag: Option<&str>,
        limit: i64,
    ) -> Result<i64> {
        let mut s = match tag {
            Some(tag) => {
                let mut s = self.sql(
                    "SELECT COUNT(*) FROM (SELECT 1 FROM async_tag t JOIN async_req r \
                     ON r.id = t.req_id WHERE t.application_name = ",
                );
                s.bind_text(application)
                    .push(" AND t.tag = ")
                    .bind_text(tag)
                    .push(" AND r.status IN ('init', 'failed')");
                s
            }
            None => {
                let mut s = self
                    .sql("SELECT COUNT(*) FROM (SELECT 1 FROM async_req WHERE application_name = ");
                s.bind_text(application)
                    .push(" AND status IN ('init', 'failed')");
                if let Some(executors) = executors {
                    s.push(" AND executor IN (");
                    for (i, executor) in executors.iter().enumerate() {
                        if i > 0 {
                            s.push(", ");
                        }
                        s.bind_text(executor);
                    }
                    s.push(")");
                }
                s
            }
        };
        s.push(" LIMIT ").bind_int(limit).push(") AS waiting");
        let counted = self.fetch_ints(&s).await?;
        Ok(counted.first().copied().flatten().unwrap_or(0))
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

    /// Makes the row of `queue` (its limits the builder's) unless it has one.
    async fn queue_register(&self, application: &str, queue: &str) -> Result<()> {
        let (insert, or_ignore) = self.dialect().insert_or_ignore();
        let mut s = self.sql(&format!(
            "{insert} async_queue (application_name, name) VALUES ("
        ));
        s.bind_text(application)
            .push(", ")
            .bind_text(queue)
            .push(")")
            .push(or_ignore);
        self.execute(&s).await?;
        Ok(())
    }

    /// The queues of `application` that have a row: named by a service's executors, or
    /// given limits.
    async fn queue_policy_list(&self, application: &str) -> Result<Vec<QueuePolicy>> {
        let d = self.dialect();
        let ints = [
            "concurrency",
            "per_instance",
            "rate",
            "paused",
            "max_attempts",
            "backoff_base_ms",
            "backoff_cap_ms",
            "timeout_ms",
            "priority_boost",
        ]
        .map(|c| d.int64(c))
        .join(", ");
        let mut s = self.sql(&format!(
            "SELECT name, {ints}, changed_by, changed_at FROM async_queue \
             WHERE application_name = "
        ));
        s.bind_text(application).push(" ORDER BY name");
        let mut columns = vec![Col::Text];
        columns.extend([Col::Int; 9]);
        columns.extend([Col::Text, Col::Int]);
        let rows = self.fetch_rows(&s, &columns).await?;
        rows.into_iter()
            .map(|mut row| {
                Ok(QueuePolicy {
                    queue: row.text()?,
                    concurrency: row.opt_int()?,
                    per_instance: row.opt_int()?,
                    rate: row.opt_int()?,
                    paused: row.opt_int()?.is_some_and(|p| p != 0),
                    max_attempts: row.opt_int()?,
                    backoff_base_ms: row.opt_int()?,
                    backoff_cap_ms: row.opt_int()?,
                    timeout_ms: row.opt_int()?,
                    priority_boost: row.opt_int()?,
                    changed_by: row.opt_text()?,
                    changed_at: row.opt_int()?,
                })
            })
            .collect()
    }

    /// Writes the fields `change` sets of the policy row `name` (made if missing), NULL
    /// for those it resets, as changed by `by` at `now`.
    async fn policy_write(
        &self,
        application: &str,
        name: &str,
        change: &[(&'static str, Option<i64>)],
        by: &str,
        now: i64,
    ) -> Result<()> {
        let mut columns = String::from("application_name, name");
        for (column, _) in change {
            columns.push_str(", ");
            columns.push_str(column);
        }
        let mut s = self.sql(&format!(
            "INSERT INTO async_queue ({columns}, changed_by, changed_at) VALUES ("
        ));
        s.bind_text(application).push(", ").bind_text(name);
        for (_, value) in change {
            s.push(", ");
            match value {
                Some(n) => s.bind_int(*n),
                None => s.push("NULL"),
            };
        }
        s.push(", ")
            .bind_text(by)
            .push(", ")
            .bind_int(now)
            .push(")");
        let mut updated: Vec<&str> = change.iter().map(|(c, _)| *c).collect();
        updated.extend(["changed_by", "changed_at"]);
        let upsert = self
            .dialect()
            .upsert("async_queue", "application_name, name", &[], &updated);
        s.push(&upsert);
        self.execute(&s).await?;
        Ok(())
    }

    /// Writes an audit entry.
    async fn audit_add(&self, e: &AuditEntry) -> Result<()> {
        let mut s = self.sql(
            "INSERT INTO async_audit (application_name, actor, action, target, affected, \
             create_time) VALUES (",
        );
        s.bind_text(&e.application)
            .push(", ")
            .bind_text(&e.actor)
            .push(", ")
            .bind_text(&e.action)
            .push(", ")
            .bind_text(&e.target)
            .push(", ")
            .bind_int(e.affected)
            .push(", ")
            .bind_int(e.create_time)
            .push(")");
        self.execute(&s).await?;
        Ok(())
    }

    /// The last `limit` audit entries of `application`, newest first.
    async fn audit_list(&self, application: &str, limit: i64) -> Result<Vec<AuditEntry>> {
        let mut s = self.sql(
            "SELECT id, application_name, actor, action, target, affected, create_time \
             FROM async_audit WHERE application_name = ",
        );
        s.bind_text(application)
            .push(" ORDER BY id DESC LIMIT ")
            .bind_int(limit);
        let columns = [
            Col::Int,
            Col::Text,
            Col::Text,
            Col::Text,
            Col::Text,
            Col::Int,
            Col::Int,
        ];
        let rows = self.fetch_rows(&s, &columns).await?;
        rows.into_iter()
            .map(|mut row| {
                Ok(AuditEntry {
                    id: row.int()?,
                    application: row.text()?,
                    actor: row.text()?,
                    action: row.text()?,
                    target: row.text()?,
                    affected: row.int()?,
                    create_time: row.int()?,
                })
            })
            .collect()
    }
}

impl<S: SqlRunner> OpsStore for S {}

/// The `SET` clause of an action's `UPDATE` (none for `Delete`), with `now` bound where
/// the text says `{now}`: written for `Sql::push` and one bind.
pub(crate) fn action_set(action: Action) -> Option<&'static str> {
    match action {
        // Due now, as `init`, so that the producer's claim of waiting records (woken by
        // the action, and every poll interval on other instances) takes it at once rather
        // than the next retry sweep; a failed record keeps its attempts, others start over.
        // `exec_count` first: MySQL assigns left to right, reading the values it set.
        Action::Retry | Action::ReplayDead => Some(
            "exec_count = CASE WHEN status = 'failed' THEN exec_count ELSE 0 END, \
             status = 'init', lease_owner = NULL, lease_until = NULL, \
             run_at = {now}, update_time = {now}",
        ),
        Action::Cancel => Some("status = 'cancelled', update_time = {now}"),
        Action::Delete => None,
    }
}

/// Pushes an action's `SET` clause, binding `now` in its places.
pub(crate) fn push_set(sql: &mut Sql, set: &str, now: i64) {
    let mut parts = set.split("{now}").peekable();
    while let Some(part) = parts.next() {
        sql.push(part);
        if parts.peek().is_some() {
            sql.bind(Bind::Int(now));
        }
    }
}

/// How many records one transaction of an operator's action changes: an action on many
/// records goes in batches of this many, each committed on its own, so that it does not
/// hold SQLite's one writer (or PostgreSQL's and MariaDB's row locks on all of them) for
/// seconds.
pub(crate) const ACT_BATCH: usize = 500;

/// The ids of the next batch of an action: records of `application` that match `query`,
/// in a status the action applies to, with an id above `after`, in id order.
pub(crate) fn act_batch_ids(
    dialect: Dialect,
    application: &str,
    query: &RequestQuery,
    action: Action,
    after: i64,
) -> Sql {
    let mut s = Sql::new(dialect, "SELECT id FROM async_req WHERE");
    s.filter(application, query).statuses(action.applies_to());
    s.push(" AND id > ").bind(Bind::Int(after));
    s.push(&format!(" ORDER BY id LIMIT {ACT_BATCH}"));
    s
}

/// The change of one batch: the action on `ids`, re-checked against the query and the
/// statuses it applies to (a record may have moved since its id was read).
pub(crate) fn act_batch_change(
    dialect: Dialect,
    application: &str,
    query: &RequestQuery,
    action: Action,
    now: i64,
    ids: &[i64],
) -> Sql {
    let mut s = match action_set(action) {
        Some(set) => {
            let mut s = Sql::new(dialect, "UPDATE async_req SET ");
            push_set(&mut s, set, now);
            s.push(" WHERE");
            s
        }
        None => Sql::new(dialect, "DELETE FROM async_req WHERE"),
    };
    s.filter(application, query).statuses(action.applies_to());
    push_ids(&mut s, "id", ids);
    s
}

/// The statements of one batch of an action on `ids` (none when there are none): the
/// change, then for deletes the attempt logs of the records that went.
fn act_batch(
    dialect: Dialect,
    application: &str,
    query: &RequestQuery,
    action: Action,
    now: i64,
    ids: &[i64],
) -> Vec<Sql> {
    if ids.is_empty() {
        return Vec::new();
    }
    let mut statements = vec![act_batch_change(
        dialect,
        application,
        query,
        action,
        now,
        ids,
    )];
    if action_set(action).is_none() {
        statements.push(act_batch_logs(dialect, ids));
    }
    statements
}

/// The attempt logs of the records of `ids` that are gone (after a batch of deletes).
pub(crate) fn act_batch_logs(dialect: Dialect, ids: &[i64]) -> Sql {
    let mut s = Sql::new(dialect, "DELETE FROM async_log WHERE");
    push_ids(&mut s, "", ids);
    s.push(" AND NOT EXISTS (SELECT 1 FROM async_req r WHERE r.id = async_log.req_id)");
    s
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

/// Appends ` AND <column> IN (...)` (`req_id` when `column` is empty, with no `AND`).
fn push_ids(s: &mut Sql, column: &str, ids: &[i64]) {
    if column.is_empty() {
        s.push(" req_id IN (");
    } else {
        s.push(&format!(" AND {column} IN ("));
    }
    for (i, &id) in ids.iter().enumerate() {
        if i > 0 {
            s.push(", ");
        }
        s.bind(Bind::Int(id));
    }
    s.push(")");
}

/// The minute (its start, unix ms) that `ms` falls in.
pub(crate) fn minute_of(ms: i64) -> i64 {
    ms.div_euclid(60_000) * 60_000
}

//! The controls kept in tables: pauses (`async_pause`), queues and their policies
//! (`async_queue`), and the quota rows and counts (`async_quota`) that submissions lock.

use async_trait::async_trait;

use crate::base::error::Result;
use crate::base::query::{Pause, QueuePolicy};
use crate::store::sql::{Col, SqlRunner};

/// The statements of pauses, queue policies and quotas.
/// Every backend has them through its [`SqlRunner`].
#[async_trait]
pub(crate) trait ControlOps: SqlRunner {
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

    /// Reserves `n` places under quota `scope` of `application` whose limit is `limit`,
    /// in one statement of its own (autocommit; the row is locked for that statement
    /// only): taken while what the row holds (`counted + reserved + settled`) stays
    /// within the limit. Needs an `UPDATE` that reads the latest committed row: READ
    /// COMMITTED on PostgreSQL (above it, a concurrent reservation fails it with SQLSTATE
    /// 40001, which the caller tries again); any isolation on MySQL/MariaDB.
    async fn quota_reserve(
        &self,
        application: &str,
        scope: &str,
        n: i64,
        limit: i64,
        now: i64,
    ) -> Result<QuotaReserve> {
        let mut s = self.sql("UPDATE async_quota SET reserved = reserved + ");
        s.bind_int(n)
            .push(", touched = ")
            .bind_int(now)
            .push(" WHERE application_name = ")
            .bind_text(application)
            .push(" AND scope = ")
            .bind_text(scope)
            .push(" AND counted + reserved + settled + ")
            .bind_int(n)
            .push(" <= ")
            .bind_int(limit);
        if self.execute(&s).await? > 0 {
            return Ok(QuotaReserve::Taken);
        }
        let mut held = self.sql(
            "SELECT counted + reserved + settled, settled, reconciled FROM async_quota \
             WHERE application_name = ",
        );
        held.bind_text(application)
            .push(" AND scope = ")
            .bind_text(scope);
        let row = self.fetch_ints(&held).await?;
        Ok(match row[..] {
            [held, settled, reconciled] => QuotaReserve::Full {
                held: held.unwrap_or(0),
                seen: (settled.unwrap_or(0), reconciled.unwrap_or(0)),
            },
            _ => QuotaReserve::NoRow,
        })
    }

    /// Makes the row of quota `scope` of `application`, holding `counted` waiting
    /// requests, unless it has one (autocommit).
    async fn quota_make(
        &self,
        application: &str,
        scope: &str,
        counted: i64,
        now: i64,
    ) -> Result<()> {
        let (insert, or_ignore) = self.dialect().insert_or_ignore();
        let mut s = self.sql(&format!(
            "{insert} async_quota (application_name, scope, counted, reserved, settled, \
             touched, reconciled) VALUES ("
        ));
        s.bind_text(application)
            .push(", ")
            .bind_text(scope)
            .push(", ")
            .bind_int(counted)
            .push(", 0, 0, ")
            .bind_int(now)
            .push(", ")
            .bind_int(now)
            .push(")")
            .push(or_ignore);
        self.execute(&s).await?;
        Ok(())
    }

    /// Ends `n` reservations under quota `scope` (autocommit): their transaction
    /// committed (`committed`: counted as `settled` until the next count) or not.
    async fn quota_settle(
        &self,
        application: &str,
        scope: &str,
        n: i64,
        committed: bool,
    ) -> Result<()> {
        let mut s = self.sql("UPDATE async_quota SET reserved = CASE WHEN reserved > ");
        s.bind_int(n)
            .push(" THEN reserved - ")
            .bind_int(n)
            .push(" ELSE 0 END, settled = settled + ")
            .bind_int(if committed { n } else { 0 })
            .push(" WHERE application_name = ")
            .bind_text(application)
            .push(" AND scope = ")
            .bind_text(scope);
        self.execute(&s).await?;
        Ok(())
    }

    /// Up to `limit` quota rows of `application`, those counted longest ago first:
    /// (scope, settled, reconciled).
    async fn quota_rows(&self, application: &str, limit: i64) -> Result<Vec<(String, i64, i64)>> {
        let mut s = self
            .sql("SELECT scope, settled, reconciled FROM async_quota WHERE application_name = ");
        s.bind_text(application)
            .push(" ORDER BY reconciled LIMIT ")
            .bind_int(limit);
        let rows = self
            .fetch_rows(&s, &[Col::Text, Col::Int, Col::Int])
            .await?;
        rows.into_iter()
            .map(|mut row| Ok((row.text()?, row.int()?, row.int()?)))
            .collect()
    }

    /// Writes the count of quota `scope`'s waiting requests (`counted`, read after
    /// `settled_seen` and `reconciled_seen` were read from the row), takes `settled_seen`
    /// from `settled` (those requests are in the count), drops reservations untouched since
    /// `stale_before` (their process is gone), unless another instance counted it since:
    /// whether it was written. One statement (autocommit).
    async fn quota_reconcile(
        &self,
        application: &str,
        scope: &str,
        counted: i64,
        (settled_seen, reconciled_seen): (i64, i64),
        stale_before: i64,
        now: i64,
    ) -> Result<bool> {
        let mut s = self.sql("UPDATE async_quota SET counted = ");
        s.bind_int(counted)
            .push(", settled = CASE WHEN settled > ")
            .bind_int(settled_seen)
            .push(" THEN settled - ")
            .bind_int(settled_seen)
            .push(" ELSE 0 END, reserved = CASE WHEN touched < ")
            .bind_int(stale_before)
            .push(" THEN 0 ELSE reserved END, reconciled = ")
            .bind_int(now)
            .push(" WHERE application_name = ")
            .bind_text(application)
            .push(" AND scope = ")
            .bind_text(scope)
            .push(" AND reconciled = ")
            .bind_int(reconciled_seen);
        Ok(self.execute(&s).await? > 0)
    }

    /// Deletes the quota rows of `application` that hold nothing and saw no call since
    /// `before`; how many.
    async fn quota_sweep_empty(&self, application: &str, before: i64) -> Result<u64> {
        let mut s = self.sql("DELETE FROM async_quota WHERE application_name = ");
        s.bind_text(application)
            .push(" AND counted = 0 AND reserved = 0 AND settled = 0 AND touched < ")
            .bind_int(before);
        self.execute(&s).await
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

    /// Puts the waiting and running requests of `executors` that are in no queue in
    /// `queue`: the records of an older version, written before records knew their
    /// queue. At start, by an instance that has the executors (reads the queue's
    /// executors' entries among those in no queue, through the claim index). Returns how
    /// many moved. A record keeps the queue it was written in otherwise.
    async fn queue_assign(
        &self,
        application: &str,
        queue: &str,
        executors: &[&'static str],
    ) -> Result<u64> {
        if executors.is_empty() || queue.is_empty() {
            return Ok(0);
        }
        let mut s = self.sql("UPDATE async_req SET queue_name = ");
        s.bind_text(queue)
            .push(" WHERE application_name = ")
            .bind_text(application)
            .push(" AND queue_name = '' AND status IN ('init', 'failed', 'running')")
            .push(" AND executor IN (");
        for (i, executor) in executors.iter().enumerate() {
            if i > 0 {
                s.push(", ");
            }
            s.bind_text(executor);
        }
        s.push(")");
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
}

impl<S: SqlRunner> ControlOps for S {}

/// What [`ControlOps::quota_reserve`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum QuotaReserve {
    /// The places are reserved.
    Taken,
    /// The quota is full: what its row holds, and its `settled` and `reconciled` (for
    /// [`ControlOps::quota_reconcile`]).
    Full { held: i64, seen: (i64, i64) },
    /// The quota has no row yet (or it was swept, empty).
    NoRow,
}

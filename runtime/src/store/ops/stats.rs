//! Counts and statistics: requests by executor and status, running ones by instance, the
//! oldest waiting one, attempt durations, and the per-minute series (`async_stat`,
//! `async_depth`) behind the console's charts and the metrics.

use async_trait::async_trait;

use crate::base::error::Result;
use crate::base::query::{DepthSample, ExecutorCount, MinuteStat, QueueCount, StatDelta};
use crate::store::sql::{Cells, Col, Sql, SqlRunner, Txn};

/// The counts and per-minute statistics.
/// Every backend has them through its [`SqlRunner`].
#[async_trait]
pub(crate) trait StatOps: SqlRunner {
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
        for table in ["async_stat", "async_depth", "async_queue_stat"] {
            let mut s = self.sql(&format!("DELETE FROM {table} WHERE minute < "));
            s.bind_int(before_minute);
            self.execute(&s).await?;
        }
        Ok(())
    }
}

impl<S: SqlRunner> StatOps for S {}

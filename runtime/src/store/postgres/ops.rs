//! The PostgreSQL SQL of the operators' statements ([`OpsStore`]).

use async_trait::async_trait;
use sqlx::postgres::PgArguments;
use sqlx::query::Query;
use sqlx::{Postgres, Row};

use super::PostgresStore;
use crate::base::error::Result;
use crate::base::query::{
    AuditEntry, DepthSample, ExecutorCount, MinuteStat, Pause, QueueCount, RequestQuery, StatDelta,
};
use crate::base::record::{Request, Status};
use crate::store::ops::{Bind, Dialect, OpsStore, Sql};
use crate::store::rows::{request_from_row, status};

fn bound(sql: &Sql) -> Query<'_, Postgres, PgArguments> {
    let mut query = sqlx::query(&sql.text);
    for bind in &sql.binds {
        query = match bind {
            Bind::Int(n) => query.bind(*n),
            Bind::Text(t) => query.bind(t.as_str()),
        };
    }
    query
}

fn sql(text: &str) -> Sql {
    Sql::new(Dialect::Postgres, text)
}

#[async_trait]
impl OpsStore for PostgresStore {
    fn dialect(&self) -> Dialect {
        Dialect::Postgres
    }

    async fn fetch_requests(&self, sql: &Sql) -> Result<Vec<Request>> {
        let rows = bound(sql).fetch_all(&self.pool).await?;
        rows.iter().map(request_from_row).collect()
    }

    async fn fetch_ints(&self, sql: &Sql) -> Result<Vec<Option<i64>>> {
        let row = bound(sql).fetch_optional(&self.pool).await?;
        let Some(row) = row else {
            return Ok(Vec::new());
        };
        (0..row.len())
            .map(|i| Ok(row.try_get::<Option<i64>, _>(i)?))
            .collect()
    }

    async fn request_count_matching(
        &self,
        application: &str,
        query: &RequestQuery,
        statuses: &[Status],
    ) -> Result<i64> {
        let mut s = sql("SELECT COUNT(*) FROM async_req WHERE");
        s.filter(application, query).statuses(statuses);
        Ok(bound(&s).fetch_one(&self.pool).await?.try_get(0)?)
    }

    async fn act_batch(
        &self,
        ids: &Sql,
        change: &(dyn for<'a> Fn(&'a [i64]) -> Vec<Sql> + Sync),
    ) -> Result<(Vec<i64>, u64)> {
        let mut tx = crate::store::begin::begin_whole(&self.pool, None).await?;
        let ids: Vec<i64> = bound(ids)
            .fetch_all(&mut *tx)
            .await?
            .iter()
            .map(|row| row.try_get(0))
            .collect::<std::result::Result<_, _>>()?;
        let mut changed = None;
        if !ids.is_empty() {
            for statement in change(&ids) {
                let rows = bound(&statement).execute(&mut *tx).await?.rows_affected();
                changed.get_or_insert(rows);
            }
        }
        tx.commit().await?;
        Ok((ids, changed.unwrap_or(0)))
    }

    async fn request_count_by_executor(&self, application: &str) -> Result<Vec<ExecutorCount>> {
        let rows = sqlx::query(
            "SELECT executor, status, COUNT(*) FROM async_req WHERE application_name = $1 \
             GROUP BY executor, status ORDER BY executor, status",
        )
        .bind(application)
        .fetch_all(&self.pool)
        .await?;
        rows.iter()
            .map(|row| {
                let status_text: String = row.try_get(1)?;
                Ok(ExecutorCount {
                    executor: row.try_get(0)?,
                    status: status(&status_text)?,
                    count: row.try_get(2)?,
                })
            })
            .collect()
    }

    async fn request_count_running_by_owner(
        &self,
        application: &str,
    ) -> Result<Vec<(String, i64)>> {
        let rows = sqlx::query(
            "SELECT lease_owner, COUNT(*) FROM async_req WHERE application_name = $1 \
             AND status = 'running' AND lease_owner IS NOT NULL GROUP BY lease_owner",
        )
        .bind(application)
        .fetch_all(&self.pool)
        .await?;
        rows.iter()
            .map(|row| Ok((row.try_get(0)?, row.try_get(1)?)))
            .collect()
    }

    async fn request_oldest_waiting(&self, application: &str, now: i64) -> Result<Option<i64>> {
        Ok(sqlx::query_scalar(
            "SELECT MIN(run_at) FROM async_req WHERE application_name = $1 \
             AND status IN ('init', 'failed') AND run_at <= $2",
        )
        .bind(application)
        .bind(now)
        .fetch_one(&self.pool)
        .await?)
    }

    async fn log_durations(
        &self,
        application: &str,
        executor: &str,
        limit: i64,
    ) -> Result<Vec<i64>> {
        Ok(sqlx::query_scalar(
            "SELECT l.finished - l.started FROM async_log l JOIN async_req r ON r.id = l.req_id \
             WHERE r.application_name = $1 AND r.executor = $2 ORDER BY l.id DESC LIMIT $3",
        )
        .bind(application)
        .bind(executor)
        .bind(limit)
        .fetch_all(&self.pool)
        .await?)
    }

    async fn stat_add(&self, application: &str, deltas: &[StatDelta]) -> Result<()> {
        let mut tx = crate::store::begin::begin_whole(&self.pool, None).await?;
        for d in deltas {
            sqlx::query(
                "INSERT INTO async_stat (application_name, executor, minute, succeeded, failed, retried) \
                 VALUES ($1, $2, $3, $4, $5, $6) ON CONFLICT (application_name, minute, executor) DO UPDATE \
                 SET succeeded = async_stat.succeeded + excluded.succeeded, \
                   failed = async_stat.failed + excluded.failed, \
                   retried = async_stat.retried + excluded.retried",
            )
            .bind(application)
            .bind(d.executor)
            .bind(d.minute)
            .bind(d.succeeded)
            .bind(d.failed)
            .bind(d.retried)
            .execute(&mut *tx)
            .await?;
        }
        tx.commit().await?;
        Ok(())
    }

    async fn stat_series(&self, application: &str, since_minute: i64) -> Result<Vec<MinuteStat>> {
        let rows: Vec<(i64, i64, i64, i64)> = sqlx::query_as(
            "SELECT minute, CAST(SUM(succeeded) AS BIGINT), CAST(SUM(failed) AS BIGINT), CAST(SUM(retried) AS BIGINT) FROM async_stat \
             WHERE application_name = $1 AND minute >= $2 GROUP BY minute ORDER BY minute",
        )
        .bind(application)
        .bind(since_minute)
        .fetch_all(&self.pool)
        .await?;
        Ok(rows
            .into_iter()
            .map(|(minute, succeeded, failed, retried)| MinuteStat {
                minute,
                succeeded,
                failed,
                retried,
            })
            .collect())
    }

    async fn depth_sample(&self, application: &str, minute: i64) -> Result<()> {
        let (waiting, running): (i64, i64) = sqlx::query_as(
            "SELECT COUNT(*) FILTER (WHERE status IN ('init', 'failed')), \
             COUNT(*) FILTER (WHERE status = 'running') FROM async_req \
             WHERE application_name = $1 AND status IN ('init', 'failed', 'running')",
        )
        .bind(application)
        .fetch_one(&self.pool)
        .await?;
        sqlx::query(
            "INSERT INTO async_depth (application_name, minute, waiting, running) VALUES ($1, $2, $3, $4) \
             ON CONFLICT (application_name, minute) DO UPDATE \
             SET waiting = excluded.waiting, running = excluded.running",
        )
        .bind(application)
        .bind(minute)
        .bind(waiting)
        .bind(running)
        .execute(&self.pool)
        .await?;
        Ok(())
    }

    async fn queue_depth(&self, application: &str, now: i64) -> Result<Vec<QueueCount>> {
        let rows = sqlx::query(
            "SELECT executor, status, COUNT(*), \
             MIN(CASE WHEN status <> 'running' AND run_at <= $2 THEN run_at END) FROM async_req \
             WHERE application_name = $1 AND status IN ('init', 'failed', 'running') \
             GROUP BY executor, status",
        )
        .bind(application)
        .bind(now)
        .fetch_all(&self.pool)
        .await?;
        rows.iter()
            .map(|row| {
                let status_text: String = row.try_get(1)?;
                Ok(QueueCount {
                    executor: row.try_get(0)?,
                    status: status(&status_text)?,
                    count: row.try_get(2)?,
                    oldest_due: row.try_get(3)?,
                })
            })
            .collect()
    }

    async fn depth_series(&self, application: &str, since_minute: i64) -> Result<Vec<DepthSample>> {
        let rows: Vec<(i64, i64, i64)> = sqlx::query_as(
            "SELECT minute, waiting, running FROM async_depth \
             WHERE application_name = $1 AND minute >= $2 ORDER BY minute",
        )
        .bind(application)
        .bind(since_minute)
        .fetch_all(&self.pool)
        .await?;
        Ok(rows
            .into_iter()
            .map(|(minute, waiting, running)| DepthSample {
                minute,
                waiting,
                running,
            })
            .collect())
    }

    async fn stat_prune(&self, before_minute: i64) -> Result<()> {
        sqlx::query("DELETE FROM async_stat WHERE minute < $1")
            .bind(before_minute)
            .execute(&self.pool)
            .await?;
        sqlx::query("DELETE FROM async_depth WHERE minute < $1")
            .bind(before_minute)
            .execute(&self.pool)
            .await?;
        Ok(())
    }

    async fn pause_set(&self, application: &str, executor: &str, by: &str, now: i64) -> Result<()> {
        sqlx::query(
            "INSERT INTO async_pause (application_name, executor, paused_by, paused_at) \
             VALUES ($1, $2, $3, $4) ON CONFLICT DO NOTHING",
        )
        .bind(application)
        .bind(executor)
        .bind(by)
        .bind(now)
        .execute(&self.pool)
        .await?;
        Ok(())
    }

    async fn pause_clear(&self, application: &str, executor: &str) -> Result<bool> {
        let done =
            sqlx::query("DELETE FROM async_pause WHERE application_name = $1 AND executor = $2")
                .bind(application)
                .bind(executor)
                .execute(&self.pool)
                .await?;
        Ok(done.rows_affected() > 0)
    }

    async fn pause_list(&self, application: &str) -> Result<Vec<Pause>> {
        let rows: Vec<(String, String, i64)> = sqlx::query_as(
            "SELECT executor, paused_by, paused_at FROM async_pause \
             WHERE application_name = $1 ORDER BY executor",
        )
        .bind(application)
        .fetch_all(&self.pool)
        .await?;
        Ok(rows
            .into_iter()
            .map(|(executor, paused_by, paused_at)| Pause {
                executor,
                paused_by,
                paused_at,
            })
            .collect())
    }

    async fn audit_add(&self, e: &AuditEntry) -> Result<()> {
        sqlx::query(
            "INSERT INTO async_audit (application_name, actor, action, target, affected, create_time) \
             VALUES ($1, $2, $3, $4, $5, $6)",
        )
        .bind(&e.application)
        .bind(&e.actor)
        .bind(&e.action)
        .bind(&e.target)
        .bind(e.affected)
        .bind(e.create_time)
        .execute(&self.pool)
        .await?;
        Ok(())
    }

    async fn audit_list(&self, application: &str, limit: i64) -> Result<Vec<AuditEntry>> {
        let rows: Vec<(i64, String, String, String, String, i64, i64)> = sqlx::query_as(
            "SELECT id, application_name, actor, action, target, affected, create_time \
             FROM async_audit WHERE application_name = $1 ORDER BY id DESC LIMIT $2",
        )
        .bind(application)
        .bind(limit)
        .fetch_all(&self.pool)
        .await?;
        Ok(rows.into_iter().map(audit_from).collect())
    }
}

/// An audit row, in `SELECT` order.
fn audit_from(
    (id, application, actor, action, target, affected, create_time): (
        i64,
        String,
        String,
        String,
        String,
        i64,
        i64,
    ),
) -> AuditEntry {
    AuditEntry {
        id,
        application,
        actor,
        action,
        target,
        affected,
        create_time,
    }
}

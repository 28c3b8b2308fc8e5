//! The MySQL/MariaDB SQL of the operators' statements ([`OpsStore`]).

use async_trait::async_trait;
use sqlx::mysql::{MySqlArguments, MySqlRow};
use sqlx::query::Query;
use sqlx::{MySql, Row};

use super::{request_from_row, status_from, MySqlStore};
use crate::base::error::Result;
use crate::base::query::{
    AuditEntry, DepthSample, ExecutorCount, MinuteStat, Pause, QueueCount, RequestQuery, StatDelta,
};
use crate::base::record::{Request, Status};
use crate::store::ops::{Bind, Dialect, OpsStore, Sql};

fn bound(sql: &Sql) -> Query<'_, MySql, MySqlArguments> {
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
    Sql::new(Dialect::MySql, text)
}

#[async_trait]
impl OpsStore for MySqlStore {
    fn dialect(&self) -> Dialect {
        Dialect::MySql
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
            "SELECT executor, status, COUNT(*) FROM async_req WHERE application_name = ? \
             GROUP BY executor, status ORDER BY executor, status",
        )
        .bind(application)
        .fetch_all(&self.pool)
        .await?;
        rows.iter()
            .map(|row| {
                let status_text: String = row.try_get_unchecked(1)?;
                Ok(ExecutorCount {
                    executor: row.try_get_unchecked(0)?,
                    status: status_from(&status_text)?,
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
            "SELECT lease_owner, COUNT(*) FROM async_req WHERE application_name = ? \
             AND status = 'running' AND lease_owner IS NOT NULL GROUP BY lease_owner",
        )
        .bind(application)
        .fetch_all(&self.pool)
        .await?;
        rows.iter()
            .map(|row| Ok((row.try_get_unchecked(0)?, row.try_get(1)?)))
            .collect()
    }

    async fn request_oldest_waiting(&self, application: &str, now: i64) -> Result<Option<i64>> {
        Ok(sqlx::query_scalar(
            "SELECT MIN(run_at) FROM async_req WHERE application_name = ? \
             AND status IN ('init', 'failed') AND run_at <= ?",
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
             WHERE r.application_name = ? AND r.executor = ? ORDER BY l.id DESC LIMIT ?",
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
                 VALUES (?, ?, ?, ?, ?, ?) ON DUPLICATE KEY UPDATE succeeded = succeeded + VALUES(succeeded), \
                   failed = failed + VALUES(failed), retried = retried + VALUES(retried)",
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
            "SELECT minute, CAST(SUM(succeeded) AS SIGNED), CAST(SUM(failed) AS SIGNED), CAST(SUM(retried) AS SIGNED) FROM async_stat \
             WHERE application_name = ? AND minute >= ? GROUP BY minute ORDER BY minute",
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
            "SELECT CAST(COALESCE(SUM(status IN ('init', 'failed')), 0) AS SIGNED), \
             CAST(COALESCE(SUM(status = 'running'), 0) AS SIGNED) FROM async_req \
             WHERE application_name = ? AND status IN ('init', 'failed', 'running')",
        )
        .bind(application)
        .fetch_one(&self.pool)
        .await?;
        sqlx::query(
            "INSERT INTO async_depth (application_name, minute, waiting, running) VALUES (?, ?, ?, ?) \
             ON DUPLICATE KEY UPDATE waiting = VALUES(waiting), running = VALUES(running)",
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
             MIN(CASE WHEN status <> 'running' AND run_at <= ? THEN run_at END) FROM async_req \
             WHERE application_name = ? AND status IN ('init', 'failed', 'running') \
             GROUP BY executor, status",
        )
        .bind(now)
        .bind(application)
        .fetch_all(&self.pool)
        .await?;
        rows.iter()
            .map(|row| {
                let status_text: String = row.try_get_unchecked(1)?;
                Ok(QueueCount {
                    executor: row.try_get_unchecked(0)?,
                    status: status_from(&status_text)?,
                    count: row.try_get(2)?,
                    oldest_due: row.try_get(3)?,
                })
            })
            .collect()
    }

    async fn depth_series(&self, application: &str, since_minute: i64) -> Result<Vec<DepthSample>> {
        let rows: Vec<(i64, i64, i64)> = sqlx::query_as(
            "SELECT minute, waiting, running FROM async_depth \
             WHERE application_name = ? AND minute >= ? ORDER BY minute",
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
        sqlx::query("DELETE FROM async_stat WHERE minute < ?")
            .bind(before_minute)
            .execute(&self.pool)
            .await?;
        sqlx::query("DELETE FROM async_depth WHERE minute < ?")
            .bind(before_minute)
            .execute(&self.pool)
            .await?;
        Ok(())
    }

    async fn pause_set(&self, application: &str, executor: &str, by: &str, now: i64) -> Result<()> {
        sqlx::query(
            "INSERT IGNORE INTO async_pause (application_name, executor, paused_by, paused_at) \
             VALUES (?, ?, ?, ?)",
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
            sqlx::query("DELETE FROM async_pause WHERE application_name = ? AND executor = ?")
                .bind(application)
                .bind(executor)
                .execute(&self.pool)
                .await?;
        Ok(done.rows_affected() > 0)
    }

    async fn pause_list(&self, application: &str) -> Result<Vec<Pause>> {
        let rows = sqlx::query(
            "SELECT executor, paused_by, paused_at FROM async_pause \
             WHERE application_name = ? ORDER BY executor",
        )
        .bind(application)
        .fetch_all(&self.pool)
        .await?;
        rows.iter()
            .map(|row: &MySqlRow| {
                Ok(Pause {
                    executor: row.try_get_unchecked(0)?,
                    paused_by: row.try_get_unchecked(1)?,
                    paused_at: row.try_get(2)?,
                })
            })
            .collect()
    }

    async fn audit_add(&self, e: &AuditEntry) -> Result<()> {
        sqlx::query(
            "INSERT INTO async_audit (application_name, actor, action, target, affected, create_time) \
             VALUES (?, ?, ?, ?, ?, ?)",
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
        let rows = sqlx::query(
            "SELECT id, application_name, actor, action, target, affected, create_time \
             FROM async_audit WHERE application_name = ? ORDER BY id DESC LIMIT ?",
        )
        .bind(application)
        .bind(limit)
        .fetch_all(&self.pool)
        .await?;
        rows.iter().map(audit_from).collect()
    }
}

/// An audit row, in `SELECT` order.
fn audit_from(row: &MySqlRow) -> Result<AuditEntry> {
    Ok(AuditEntry {
        id: row.try_get(0)?,
        application: row.try_get_unchecked(1)?,
        actor: row.try_get_unchecked(2)?,
        action: row.try_get_unchecked(3)?,
        target: row.try_get_unchecked(4)?,
        affected: row.try_get(5)?,
        create_time: row.try_get(6)?,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::base::query::{PageSpec, RequestQuery};
    use crate::store::mysql::plan_fixture;
    use crate::store::page::PageSql;

    /// A page of one finished status reads `async_req_done_status` on its indexed
    /// virtual column (migration 20261202000002), both columns of it, in id order: the
    /// index a claim no longer moves an entry of.
    #[tokio::test]
    #[cfg_attr(
        not(async_exec_test_mysql),
        ignore = "set ASYNC_EXEC_TEST_MYSQL_URL to run it"
    )]
    async fn a_status_page_reads_the_virtual_status_index() {
        let store = plan_fixture::store().await;
        let application = plan_fixture::seeded_application(&store, "status").await;
        let query = RequestQuery::default().status(Status::Dead);
        let page = PageSpec::default();
        let s = PageSql::for_test(Dialect::MySql, &application, &query, &page, None).requests(50);
        let explain = s.prefixed("EXPLAIN");
        let row = bound(&explain).fetch_one(&store.pool).await.unwrap();
        let plan = plan_fixture::Plan::of(&row);
        let said = format!("{plan:?}: {}", s.text);
        assert_eq!(plan.key.as_deref(), Some("async_req_done_status"), "{said}");
        assert!(!plan.extra.contains("filesort"), "{said}");
        assert_eq!(plan.reference.as_deref(), Some("const,const"), "{said}");
        plan_fixture::remove(&store, &application).await;
    }

    /// The end of a text search's window, unfiltered: one read of the table, not the union
    /// of the two parts, which sorted every waiting and running record (44 to 95 ms at
    /// 1,000,000 records with 150,000 waiting; one read of the primary key in id order,
    /// 5 ms). Which index the one read takes is the optimizer's: the primary key there, an
    /// index by application and a sort of its 5,000 entries here.
    #[tokio::test]
    #[cfg_attr(
        not(async_exec_test_mysql),
        ignore = "set ASYNC_EXEC_TEST_MYSQL_URL to run it"
    )]
    async fn a_search_window_ends_by_one_read_of_the_table() {
        let store = plan_fixture::store().await;
        let application = plan_fixture::seeded_application(&store, "window").await;
        let query = RequestQuery::default();
        let page = PageSpec::default();
        let s =
            PageSql::for_test(Dialect::MySql, &application, &query, &page, None).window_end(2_000);
        let explain = s.prefixed("EXPLAIN");
        let rows = bound(&explain).fetch_all(&store.pool).await.unwrap();
        let plans: Vec<plan_fixture::Plan> = rows.iter().map(plan_fixture::Plan::of).collect();
        let said = format!("{plans:?}: {}", s.text);
        assert_eq!(plans.len(), 1, "{said}");
        let end: Option<i64> = bound(&s)
            .fetch_optional(&store.pool)
            .await
            .unwrap()
            .map(|r| r.get(0));
        let expected: i64 = sqlx::query_scalar(
            "SELECT id FROM async_req WHERE application_name = ? ORDER BY id DESC LIMIT 1 OFFSET 1999",
        )
        .bind(&application)
        .fetch_one(&store.pool)
        .await
        .unwrap();
        assert_eq!(end, Some(expected), "{said}");
        plan_fixture::remove(&store, &application).await;
    }
}

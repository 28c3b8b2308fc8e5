//! The SQLite SQL of the operators' statements ([`OpsStore`]).

use async_trait::async_trait;
use sqlx::query::Query;
use sqlx::sqlite::SqliteArguments;
use sqlx::{Row, Sqlite};

use super::SqliteStore;
use crate::base::error::Result;
use crate::base::query::{
    AuditEntry, DepthSample, ExecutorCount, MinuteStat, Pause, QueueCount, RequestQuery, StatDelta,
};
use crate::base::record::{Request, Status};
use crate::store::ops::{Bind, Dialect, OpsStore, Sql};
use crate::store::rows::{request_from_row, status};

fn bound(sql: &Sql) -> Query<'_, Sqlite, SqliteArguments<'_>> {
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
    Sql::new(Dialect::Sqlite, text)
}

#[async_trait]
impl OpsStore for SqliteStore {
    fn dialect(&self) -> Dialect {
        Dialect::Sqlite
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
        // It reads, then writes: IMMEDIATE takes the write lock first (a deferred
        // transaction would fail with SQLITE_BUSY_SNAPSHOT when another connection
        // commits in between).
        let mut tx = self.pool.begin_with("BEGIN IMMEDIATE").await?;
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
            "SELECT lease_owner, COUNT(*) FROM async_req WHERE application_name = ? \
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
        let mut tx = self.pool.begin().await?;
        for d in deltas {
            sqlx::query(
                "INSERT INTO async_stat (application_name, executor, minute, succeeded, failed, retried) \
                 VALUES (?, ?, ?, ?, ?, ?) ON CONFLICT (application_name, minute, executor) DO UPDATE \
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
            "SELECT minute, SUM(succeeded), SUM(failed), SUM(retried) FROM async_stat \
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
            "SELECT COALESCE(SUM(status IN ('init', 'failed')), 0), \
             COALESCE(SUM(status = 'running'), 0) FROM async_req \
             WHERE application_name = ? AND status IN ('init', 'failed', 'running')",
        )
        .bind(application)
        .fetch_one(&self.pool)
        .await?;
        sqlx::query(
            "INSERT INTO async_depth (application_name, minute, waiting, running) VALUES (?, ?, ?, ?) \
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
            "INSERT OR IGNORE INTO async_pause (application_name, executor, paused_by, paused_at) \
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
        let rows: Vec<(String, String, i64)> = sqlx::query_as(
            "SELECT executor, paused_by, paused_at FROM async_pause \
             WHERE application_name = ? ORDER BY executor",
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
        let rows: Vec<(i64, String, String, String, String, i64, i64)> = sqlx::query_as(
            "SELECT id, application_name, actor, action, target, affected, create_time \
             FROM async_audit WHERE application_name = ? ORDER BY id DESC LIMIT ?",
        )
        .bind(application)
        .bind(limit)
        .fetch_all(&self.pool)
        .await?;
        Ok(rows.into_iter().map(audit_from).collect())
    }
}

/// An audit row, in `SELECT` order.
pub(crate) fn audit_from(
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::base::query::{PageSpec, RequestQuery};
    use crate::store::page::PageSql;
    use crate::store::Store;

    /// The plan SQLite picks for the page of `query`.
    async fn plan(store: &SqliteStore, query: &RequestQuery) -> String {
        let page = PageSpec::default().after(crate::base::query::Cursor { id: 1_000 });
        let time = query.created_from.map(|_| (10, 900));
        let s = PageSql::for_test(Dialect::Sqlite, "app", query, &page, time).requests(50);
        explain(store, &s).await
    }

    async fn explain(store: &SqliteStore, s: &Sql) -> String {
        let explain = s.prefixed("EXPLAIN QUERY PLAN");
        let rows = bound(&explain).fetch_all(&store.pool).await.unwrap();
        rows.iter()
            .map(|r| r.get::<String, _>("detail"))
            .collect::<Vec<_>>()
            .join(" | ")
    }

    /// A store on a new in-memory database, migrated.
    async fn migrated_memory_store() -> SqliteStore {
        let store = SqliteStore::connect(
            "sqlite::memory:",
            1,
            Default::default(),
            std::time::Duration::from_secs(10),
        )
        .await
        .unwrap();
        store.migrate().await.unwrap();
        store
    }

    /// SQLite uses a partial index only when the query names its predicate: the list's
    /// pages must say it (`store::ops::finished`) exactly as the migrations do, or a page
    /// of dead requests scans the table. And no page sorts.
    #[tokio::test]
    async fn list_pages_read_the_partial_indexes_in_order() {
        let store = migrated_memory_store().await;
        let dead = plan(&store, &RequestQuery::default().status(Status::Dead)).await;
        assert!(dead.contains("async_req_done_status"), "{dead}");
        let by_executor = plan(&store, &RequestQuery::default().executor("mail")).await;
        assert!(
            by_executor.contains("async_req_done_executor"),
            "{by_executor}"
        );
        let everything = plan(&store, &RequestQuery::default()).await;
        assert!(!dead.contains("TEMP B-TREE"), "the page sorts: {dead}");
        for p in [&by_executor, &everything] {
            // Each part reads an index in order; only the merge sorts its two parts of at
            // most a page each.
            assert!(!p.contains("SCAN async_req"), "a part scans the table: {p}");
            assert_eq!(p.matches("TEMP B-TREE").count(), 2, "{p}");
            assert!(p.contains("SCAN finished | USE TEMP B-TREE"), "{p}");
            assert!(p.contains("SCAN live | USE TEMP B-TREE"), "{p}");
        }
        // A time range: its ids from the creation-time index, then the finished part from
        // the index by application and id between them, not the whole range sorted.
        let day = RequestQuery::default().created_between(Some(1), Some(2));
        let ids = crate::store::page::time_ids_sql(Dialect::Sqlite, &day).unwrap();
        let ids = explain(&store, &ids).await;
        assert!(ids.contains("USING INDEX async_req_done_created"), "{ids}");
        let in_range = plan(&store, &day).await;
        assert!(
            in_range.contains("USING INDEX async_req_done (application_name=? AND id>? AND id<?)"),
            "{in_range}"
        );
        assert_eq!(in_range.matches("TEMP B-TREE").count(), 2, "{in_range}");
    }

    /// Every record written, claimed and deleted evaluates the list indexes' predicates
    /// (SQLite checks a partial index's predicate on each row a write touches). Written
    /// `status NOT IN ('init', 'running')`, each check began with `status & status` (the
    /// NULL test of `NOT IN`), a conversion of the text to a number: about 90M of the 180M
    /// instructions the four indexes cost 20,000 records' inserts, claims and deletes
    /// (SQLite 3.46). The hot path's statements must do without it.
    #[tokio::test]
    async fn the_hot_path_checks_the_list_indexes_without_converting_the_status() {
        let store = migrated_memory_store().await;
        let statements = [
            "INSERT INTO async_req (application_name, executor, sign, strategy, status, \
             max_attempts, param_json, run_at, create_time, update_time) \
             VALUES ('a', 'e', 's', 'SaveAsync', 'init', 3, '{}', 1, 1, 1)",
            "UPDATE async_req SET status = 'running', lease_owner = 'o', \
             exec_count = exec_count + 1 WHERE id = 1 AND status = 'init'",
            "UPDATE async_req SET status = 'failed', lease_owner = NULL WHERE id = 1",
            "DELETE FROM async_req WHERE id = 1 AND status = 'running'",
        ];
        for statement in statements {
            // `EXPLAIN`'s second column is the opcode.
            let rows = sqlx::query(&format!("EXPLAIN {statement}"))
                .fetch_all(&store.pool)
                .await
                .unwrap_or_else(|e| panic!("{statement}: {e}"));
            let ops: Vec<String> = rows.iter().map(|r| r.get::<String, _>(1)).collect();
            assert!(ops
                .iter()
                .any(|op| op == "IdxInsert" || op == "IdxDelete" || op == "Delete"));
            assert!(
                !ops.iter().any(|op| op == "BitAnd"),
                "{statement}: {}",
                ops.join(" ")
            );
        }
    }
}

//! The MySQL/MariaDB rescuer's SQL: running records whose lease ended go back to
//! `failed` (or `dead` after their last attempt), each with an `async_log` row.

use sqlx::mysql::MySqlRow;
use sqlx::Row;

use super::{bind_list, marks, MySqlStore, DB_NOW};
use crate::base::error::Result;
use crate::base::record::AttemptLog;
use crate::store::{ExpiredLease, RescueBatch, Rescued};

/// Running records of `executors` whose lease ended more than `grace_ms` ago: back to
/// `failed`, or `dead`.
pub(super) async fn rescue_once(store: &MySqlStore, batch: RescueBatch<'_>) -> Result<Rescued> {
    let RescueBatch {
        application,
        executors,
        queues,
        now,
        grace_ms,
        limit,
    } = batch;
    let mut tx = store.begin().await?;
    let sql = expired_leases_sql(queues.len(), executors.len());
    let query = bind_list(sqlx::query(&sql).bind(application), queues).bind(grace_ms);
    let mut expired: Vec<ExpiredLease> = bind_list(query, executors)
        .bind(limit)
        .try_map(|row: MySqlRow| {
            Ok((
                row.try_get(0)?,
                row.try_get(1)?,
                row.try_get(2)?,
                row.try_get_unchecked(3)?,
                row.try_get(4)?,
            ))
        })
        .fetch_all(&mut *tx)
        .await?;
    // Rows are locked in id order, as the completer locks them: fewer deadlocks.
    expired.sort_by_key(|e| e.0);
    let mut rescued = Rescued::default();
    for (id, attempt, max_attempts, owner, until) in expired {
        let owner = owner.unwrap_or_default();
        let error = format!(
            "attempt {attempt} was lost: the lease of `{owner}` expired at {} without a result",
            until.unwrap_or_default()
        );
        let dead = attempt >= max_attempts;
        let done = sqlx::query(&format!(
            // A record asked to stop is not run again: `cancelled`.
            "UPDATE async_req SET status = CASE WHEN cancel_requested IS NOT NULL \
             THEN 'cancelled' ELSE ? END, last_error = ?, run_at = ?, lease_owner = NULL, \
             lease_until = NULL, update_time = ? WHERE id = ? AND status = 'running' AND exec_count = ? \
             AND lease_until < {DB_NOW} - ?"
        ))
        .bind(if dead { "dead" } else { "failed" })
        .bind(&error)
        .bind(now)
        .bind(now)
        .bind(id)
        .bind(attempt)
        .bind(grace_ms)
        .execute(&mut *tx)
        .await?;
        if done.rows_affected() == 0 {
            continue;
        }
        let log = AttemptLog {
            request_id: id,
            attempt,
            worker: owner,
            started: until.unwrap_or(now),
            finished: now,
            outcome: "lease_expired".into(),
            error: Some(error),
        };
        crate::store::shared::log_insert::<sqlx::MySql>(&mut tx, &log).await?;
        if dead {
            rescued.dead.push(id);
        } else {
            rescued.retried.push(id);
        }
    }
    tx.commit().await?;
    Ok(rescued)
}

/// The running records of an application whose lease ended more than `?` ms ago, of `executors` (one
/// mark each), the first to end first, at most `?` of them. Read through the claim index's
/// (application, `running`) range, the records claimed now (MariaDB/MySQL has no lease
/// index since migration 20261203000001). Named: beside `executor IN (...)` the optimizer
/// sometimes took the executor list index, which holds every finished record too.
pub(super) fn expired_leases_sql(queues: usize, executors: usize) -> String {
    format!(
        "SELECT id, exec_count, max_attempts, lease_owner, lease_until \
         FROM async_req FORCE INDEX (async_req_due) WHERE application_name = ? \
         AND queue_name IN ({}) AND status = 'running' AND lease_until < {DB_NOW} - ? \
         AND executor IN ({}) ORDER BY lease_until LIMIT ?",
        marks(queues),
        marks(executors)
    )
}

#[cfg(test)]
mod tests {
    use super::super::plan_fixture;
    use super::expired_leases_sql;

    /// The rescuer finds ended leases in the claim index's range of running records (its
    /// two leading columns), not in a lease index that every claim and heartbeat would
    /// move an entry of (migration 20261203000001 dropped it), nor by a scan.
    #[tokio::test]
    #[cfg_attr(
        not(async_exec_test_mysql),
        ignore = "set ASYNC_EXEC_TEST_MYSQL_URL to run it"
    )]
    async fn the_rescuer_reads_the_running_records_of_the_claim_index() {
        let store = plan_fixture::store().await;
        let application = plan_fixture::seeded_application(&store, "rescue").await;
        let sql = format!("EXPLAIN {}", expired_leases_sql(1, 2));
        let row = sqlx::query(&sql)
            .bind(&application)
            .bind("")
            .bind(10_000_i64)
            .bind("executor_0")
            .bind("executor_1")
            .bind(100_i64)
            .fetch_one(&store.pool)
            .await
            .unwrap();
        let plan = plan_fixture::Plan::of(&row);
        let said = format!("{plan:?}: {sql}");
        assert_eq!(plan.key.as_deref(), Some("async_req_due"), "{said}");
        // The application, the queue and the status.
        assert_eq!(
            plan.reference.as_deref(),
            Some("const,const,const"),
            "{said}"
        );
        // About 570 of the 5,000 records run; the optimizer's estimate, not a count.
        assert!(plan.rows.is_some_and(|r| r < 2_000), "{said}");
        let lease_indexes: i64 = sqlx::query_scalar(
            "SELECT COUNT(*) FROM information_schema.statistics WHERE table_schema = DATABASE() \
             AND table_name = 'async_req' AND column_name = 'lease_until'",
        )
        .fetch_one(&store.pool)
        .await
        .unwrap();
        assert_eq!(lease_indexes, 0, "an index holds lease_until: {said}");
        plan_fixture::remove(&store, &application).await;
    }
}

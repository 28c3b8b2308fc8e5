//! Claims of due records on PostgreSQL: one `UPDATE` over the rows a sub-select locks
//! (`FOR UPDATE SKIP LOCKED`: another instance's claim is skipped, not waited for). A
//! claim of a queue's records runs in a transaction that first locks the queue's row in
//! `async_queue`, so that claims of one queue take turns, then counts the queue's running
//! records (by the records' `queue_name`), and takes no more than the slots left, taking
//! turns between the queue's partitions within their limit. Every claim runs at READ
//! COMMITTED, stated, whatever the server's default: under REPEATABLE READ a count
//! would miss what the claim before it took, and a row changed since the snapshot fails
//! the claim (40001).

use sqlx::{PgConnection, PgPool};

use super::DB_NOW;
use crate::base::error::Result;
use crate::base::record::Claimed;
use crate::base::record::RequestId;
use crate::store::claim::{take_turns, Candidate, Cursor, QueueRowColumns};
use crate::store::partitions::{
    rows_sql, running_sql, taken_by_partition, without, Partitions, MAX_READS, SPEND,
};
use crate::store::rows::{claimed_from_row, CLAIMED_COLUMNS};
use crate::store::sql::Dialect;
use crate::store::{ClaimDue, DueKind, QueueRow};

/// The transaction a claim runs in: READ COMMITTED, whatever the server's default.
const BEGIN_READ_COMMITTED: &str = "BEGIN ISOLATION LEVEL READ COMMITTED";

/// Whether the server's sessions begin at READ COMMITTED (`default_transaction_isolation`
/// of the database, the role or the server).
pub(super) async fn sessions_read_committed(pool: &PgPool) -> Result<bool> {
    let (level,): (String,) =
        sqlx::query_as("SELECT current_setting('default_transaction_isolation')")
            .fetch_one(pool)
            .await?;
    if level != "read committed" {
        crate::log::info!(
            isolation = %crate::log::escaped(&level),
            "the database's sessions begin at {level}: each claim states READ COMMITTED \
             in a transaction of its own"
        );
    }
    Ok(level == "read committed")
}

/// Claims due records: of any executor listed, or, with a queue's cap, within its limits.
/// `read_committed`: whether a statement alone runs at READ COMMITTED (the server's
/// default); if not, the claim states it in a transaction.
pub(super) async fn claim_due(
    pool: &PgPool,
    p: &ClaimDue<'_>,
    read_committed: bool,
) -> Result<Vec<Claimed>> {
    if p.executors.is_empty() || p.limit <= 0 {
        return Ok(Vec::new());
    }
    let rows = match (p.cap, p.global) {
        (None, None) if read_committed => {
            let sql = claim_sql(p);
            bind_claim(&sql, p, p.limit).fetch_all(pool).await?
        }
        (None, None) => {
            let mut tx = crate::store::begin::begin_whole(pool, Some(BEGIN_READ_COMMITTED)).await?;
            let sql = claim_sql(p);
            let rows = bind_claim(&sql, p, p.limit).fetch_all(&mut *tx).await?;
            tx.commit().await?;
            rows
        }
        (cap, global) => {
            let mut tx = crate::store::begin::begin_whole(pool, Some(BEGIN_READ_COMMITTED)).await?;
            // The limit over every queue first (every claim takes this lock first: no
            // deadlock), counting every running record of the application.
            let mut limit = p.limit;
            if let Some(global) = global {
                let row = lock_queue(&mut tx, p.application, global.name).await?;
                let (all,): (i64,) = sqlx::query_as(
                    "SELECT COUNT(*) FROM async_req \
                     WHERE application_name = $1 AND status = 'running'",
                )
                .bind(p.application)
                .fetch_one(&mut *tx)
                .await?;
                limit = global
                    .with_policy(&row)
                    .plan(limit, (all, 0), &row, p.now)
                    .slots;
            }
            let Some(cap) = cap else {
                let rows = if limit > 0 {
                    let sql = claim_sql(p);
                    bind_claim(&sql, p, limit).fetch_all(&mut *tx).await?
                } else {
                    Vec::new()
                };
                tx.commit().await?;
                return rows.iter().map(claimed_from_row).collect();
            };
            let row = lock_queue(&mut tx, p.application, cap.name).await?;
            let cap = cap.with_policy(&row);
            // Counted by the records' queue, not by executor: a paused executor's running
            // requests still hold their places.
            let running = if cap.counts_running() {
                sqlx::query_as(
                    "SELECT COUNT(*), COUNT(*) FILTER (WHERE lease_owner = $3) FROM async_req \
                     WHERE application_name = $1 AND queue_name = $2 AND status = 'running'",
                )
                .bind(p.application)
                .bind(p.queue)
                .bind(p.owner)
                .fetch_one(&mut *tx)
                .await?
            } else {
                (0, 0)
            };
            let plan = cap.plan(limit, running, &row, p.now);
            let turns = Turns {
                queue: cap.name,
                per_partition: cap.per_partition,
                after: row.turn_after.as_deref(),
                sequence: cap.sequence,
            };
            let rows = claim_taking_turns(&mut tx, p, turns, plan.slots).await?;
            if let Some(tokens) = plan.tokens_after(rows.len()) {
                sqlx::query(
                    "UPDATE async_queue SET tokens = $1, refilled_at = $2 \
                     WHERE application_name = $3 AND name = $4",
                )
                .bind(tokens)
                .bind(p.now)
                .bind(p.application)
                .bind(cap.name)
                .execute(&mut *tx)
                .await?;
            }
            tx.commit().await?;
            rows
        }
    };
    rows.iter().map(claimed_from_row).collect()
}

/// Locks the queue's row (made on first use) until the transaction ends: claims of one
/// queue wait for each other; nothing else takes the lock. Returns the row: its limits
/// set while running (`None` keeps the builder's) and its rate's bucket.
async fn lock_queue(conn: &mut PgConnection, application: &str, queue: &str) -> Result<QueueRow> {
    // The INTEGER columns read as 64-bit integers, as the others.
    const LOCK: &str =
        "SELECT CAST(concurrency AS BIGINT), CAST(per_instance AS BIGINT), CAST(rate AS BIGINT), \
         tokens, refilled_at, CAST(per_partition AS BIGINT), turn_after FROM async_queue \
         WHERE application_name = $1 AND name = $2 FOR UPDATE";
    let locked: Option<QueueRowColumns> = sqlx::query_as(LOCK)
        .bind(application)
        .bind(queue)
        .fetch_optional(&mut *conn)
        .await?;
    if let Some(locked) = locked {
        return Ok(locked.into());
    }
    sqlx::query(
        "INSERT INTO async_queue (application_name, name) VALUES ($1, $2) \
         ON CONFLICT DO NOTHING",
    )
    .bind(application)
    .bind(queue)
    .execute(&mut *conn)
    .await?;
    let locked: QueueRowColumns = sqlx::query_as(LOCK)
        .bind(application)
        .bind(queue)
        .fetch_one(&mut *conn)
        .await?;
    Ok(locked.into())
}

/// The claim's statement: `$1` owner, `$2` lease, `$3` now, `$4` application, `$5` how
/// long past due, `$6` executors, `$7` the limit, `$8` the skip list (if any).
fn claim_sql(p: &ClaimDue<'_>) -> String {
    // Only during a rolling deploy is there a signature to leave to others: the usual
    // claim computes no `sign:executor` per row.
    let skip = if p.skip.is_empty() {
        ""
    } else {
        " AND NOT ((sign || ':' || executor) = ANY($8))"
    };
    let queue = if p.skip.is_empty() { "$8" } else { "$9" };
    let open = crate::store::claim::before_deadline(DB_NOW);
    let candidates = |columns: &str, condition: &str| {
        format!(
            "SELECT {columns} FROM async_req WHERE application_name = $4 \
             AND queue_name = {queue} AND {condition} \
             AND executor = ANY($6){skip} AND {open} \
             ORDER BY priority DESC, run_at, id LIMIT $7 FOR UPDATE SKIP LOCKED"
        )
    };
    // Due by the database's clock: `$5` is how long past due (0, or the staleness).
    let chosen = match p.kind {
        DueKind::Scheduled => candidates(
            "id",
            &format!(
            "status IN ('init', 'failed') AND ((status = 'failed' AND run_at <= {DB_NOW} - $5) \
             OR (status = 'init' AND run_at <= {DB_NOW} - $5 AND run_at > create_time))"
        ),
        ),
        // One status only: with `status IN (...)` in the index condition the scan is not
        // in index order, and without statistics (no autovacuum) PostgreSQL sorted the
        // whole backlog for each claim: 486 ms instead of 6 ms at 850,000 records.
        DueKind::Stale { .. } => candidates(
            "id",
            &format!("status = 'init' AND run_at <= {DB_NOW} - $5"),
        ),
        // A queue's claim: the first rows of each status, each read in index order, then
        // the first of both. A locking clause is not allowed in a branch of a UNION, so
        // each branch reads from a sub-select that locks.
        DueKind::Ready => {
            let branch = |status: &str| {
                format!(
                    "SELECT * FROM ({}) AS {status}",
                    candidates(
                        "id, priority, run_at",
                        &format!("status = '{status}' AND run_at <= {DB_NOW} - $5")
                    )
                )
            };
            format!(
                "SELECT id FROM ({} UNION ALL {}) AS due \
                 ORDER BY priority DESC, run_at, id LIMIT $7",
                branch("init"),
                branch("failed")
            )
        }
    };
    format!(
        "UPDATE async_req SET status = 'running', lease_owner = $1, lease_until = {DB_NOW} + $2, \
         exec_count = exec_count + 1, update_time = $3 \
         WHERE id IN ({chosen}) AND status IN ('init', 'failed') \
         RETURNING {CLAIMED_COLUMNS}"
    )
}

/// The claim's statement with its values, taking at most `limit` records.
fn bind_claim<'q>(
    sql: &'q str,
    p: &'q ClaimDue<'_>,
    limit: i64,
) -> sqlx::query::Query<'q, sqlx::Postgres, sqlx::postgres::PgArguments> {
    let past_due = match p.kind {
        DueKind::Stale { older_than } => older_than,
        DueKind::Scheduled | DueKind::Ready => 0,
    };
    let query = sqlx::query(sql)
        .bind(p.owner)
        .bind(p.lease_ms)
        .bind(p.now)
        .bind(p.application)
        .bind(past_due)
        .bind(p.executors)
        .bind(limit);
    if p.skip.is_empty() {
        query.bind(p.queue)
    } else {
        query.bind(p.skip).bind(p.queue)
    }
}

/// Claims, of the queue's due records, at most `slots`, taking turns between partitions
/// by their weights within their limits (`crate::store::claim::take_turns`): the running
/// count of each partition, then the first waiting records of the partitions with room
/// (a plain read), the rows of their partitions (`async_partition`), the starts taken
/// from their buckets, then those chosen, by id, locked (`SKIP LOCKED`) and checked again.
/// Under the queue's row lock: no other claim of the queue runs meanwhile.
async fn claim_taking_turns(
    conn: &mut PgConnection,
    p: &ClaimDue<'_>,
    turns: Turns<'_>,
    slots: i64,
) -> Result<Vec<sqlx::postgres::PgRow>> {
    if slots <= 0 {
        return Ok(Vec::new());
    }
    let mut parts = Partitions::new(turns.per_partition, p.now);
    // Only a per-partition limit needs each partition's running count; those at it may
    // have a higher one of their own.
    if parts.counts_all() {
        let running = sqlx::query_as(
            "SELECT partition_key, COUNT(*) FROM async_req WHERE application_name = $1 \
             AND queue_name = $2 AND status = 'running' GROUP BY partition_key",
        )
        .bind(p.application)
        .bind(p.queue)
        .fetch_all(&mut *conn)
        .await?
        .into_iter()
        .collect();
        parts = parts.with_running(running);
        let at = parts.at_queue_limit();
        read_partitions(conn, p, &mut parts, at).await?;
    }
    let mut full = parts.full();
    let open = crate::store::claim::before_deadline(DB_NOW);
    let skip = if p.skip.is_empty() {
        ""
    } else {
        " AND NOT ((sign || ':' || executor) = ANY($6))"
    };
    let sequence = crate::store::claim::in_sequence(turns.sequence);
    // Each status read in index order (as the claim without partitions), then merged.
    let branch = |status: &str| {
        format!(
            "SELECT * FROM (SELECT id, partition_key, priority, run_at FROM async_req \
             WHERE application_name = $1 AND queue_name = $2 AND status = '{status}' \
             AND run_at <= {DB_NOW} AND executor = ANY($3) \
             AND NOT (partition_key = ANY($4)){skip}{sequence} AND {open} \
             ORDER BY priority DESC, run_at, id LIMIT $5) AS {status}"
        )
    };
    let sql = format!(
        "SELECT id, partition_key FROM ({} UNION ALL {}) AS due \
         ORDER BY priority DESC, run_at, id LIMIT $5",
        branch("init"),
        branch("failed")
    );
    // Read again, at most MAX_READS times, without the partitions found with no room.
    let mut reads = 0;
    let candidates = loop {
        let mut query = sqlx::query_as(&sql)
            .bind(p.application)
            .bind(p.queue)
            .bind(p.executors)
            .bind(&full)
            .bind(crate::store::claim::candidate_window(slots));
        if !p.skip.is_empty() {
            query = query.bind(p.skip);
        }
        let candidates: Vec<Candidate> = query.fetch_all(&mut *conn).await?;
        // The settings of the candidates' partitions (and, of those with a concurrency of
        // their own, the running count).
        let unread = parts.unread(candidates.iter().map(|(_, k)| k.as_str()));
        read_partitions(conn, p, &mut parts, unread).await?;
        let uncounted = parts.uncounted();
        if !uncounted.is_empty() {
            let counts = sqlx::query_as(&running_sql(Dialect::Postgres, "= ANY($3)"))
                .bind(p.application)
                .bind(p.queue)
                .bind(&uncounted)
                .fetch_all(&mut *conn)
                .await?;
            parts.add_running(&uncounted, counts);
        }
        reads += 1;
        let blocked = parts.blocked(&candidates, &full);
        if blocked.is_empty() || reads == MAX_READS {
            break candidates;
        }
        full.extend(blocked);
    };
    let after = Cursor::decode(turns.after);
    let (chosen, cursor) = take_turns(&candidates, &parts, slots, after.as_ref());
    let last = cursor.map(|c| c.encode());
    let chosen = spend_buckets(conn, p, &parts, &candidates, chosen).await?;
    if chosen.is_empty() {
        return Ok(Vec::new());
    }
    let sql = format!(
        "UPDATE async_req SET status = 'running', lease_owner = $1, lease_until = {DB_NOW} + $2, \
         exec_count = exec_count + 1, update_time = $3 \
         WHERE id IN (SELECT id FROM async_req WHERE id = ANY($4) \
           AND status IN ('init', 'failed') FOR UPDATE SKIP LOCKED) \
         AND status IN ('init', 'failed') RETURNING {CLAIMED_COLUMNS}"
    );
    let rows = sqlx::query(&sql)
        .bind(p.owner)
        .bind(p.lease_ms)
        .bind(p.now)
        .bind(&chosen)
        .fetch_all(&mut *conn)
        .await?;
    // Kept until a claim moves it.
    if last.is_some() && last.as_deref() != turns.after {
        sqlx::query(
            "UPDATE async_queue SET turn_after = $1 WHERE application_name = $2 AND name = $3",
        )
        .bind(&last)
        .bind(p.application)
        .bind(turns.queue)
        .execute(&mut *conn)
        .await?;
    }
    Ok(rows)
}

/// Reads the rows of `keys` (partitions of the claim's queue) into `parts`.
async fn read_partitions(
    conn: &mut PgConnection,
    p: &ClaimDue<'_>,
    parts: &mut Partitions,
    keys: Vec<String>,
) -> Result<()> {
    if keys.is_empty() {
        return Ok(());
    }
    let rows = sqlx::query_as(&rows_sql(Dialect::Postgres, "= ANY($3)"))
        .bind(p.application)
        .bind(p.queue)
        .bind(&keys)
        .fetch_all(&mut *conn)
        .await?;
    parts.add_rows(&keys, rows);
    Ok(())
}

/// Takes the starts of `chosen` from their partitions' buckets, each by one conditional
/// `UPDATE`; returns `chosen` without the records of a partition whose bucket another
/// claim took from meanwhile.
async fn spend_buckets(
    conn: &mut PgConnection,
    p: &ClaimDue<'_>,
    parts: &Partitions,
    candidates: &[Candidate],
    chosen: Vec<RequestId>,
) -> Result<Vec<RequestId>> {
    let mut refused = Vec::new();
    for (key, spend) in parts.spends(&taken_by_partition(candidates, &chosen)) {
        let done = sqlx::query(SPEND.text(Dialect::Postgres))
            .bind(spend.now.0)
            .bind(spend.now.1)
            .bind(p.application)
            .bind(p.queue)
            .bind(&key)
            .bind(spend.was.0)
            .bind(spend.was.1)
            .execute(&mut *conn)
            .await?;
        if done.rows_affected() == 0 {
            refused.push(key);
        }
    }
    Ok(without(candidates, chosen, &refused))
}

/// How a queue's claim takes turns between its partitions.
#[derive(Debug, Clone, Copy)]
struct Turns<'a> {
    /// The queue's row (where the turn is kept).
    queue: &'a str,
    per_partition: Option<i64>,
    /// The partition the last claim served last.
    after: Option<&'a str>,
    /// The queue is a sequence: its candidates are the first of their partitions.
    sequence: Option<crate::base::queue::SequenceFailure>,
}

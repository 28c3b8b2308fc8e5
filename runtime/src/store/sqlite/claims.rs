//! The SQL of the runtime's own claims and leases on SQLite, all on the writer connection
//! (`SqliteStore::writer`): claims by id and of due records, lease renewals, hand-backs
//! and the rescue of records whose lease ran out.

use async_trait::async_trait;
use sqlx::sqlite::SqliteRow;
use sqlx::SqliteConnection;

use super::{json_list, SqliteStore, DB_NOW};
use crate::base::error::Result;
use crate::base::record::{AttemptLog, ClaimedId, RequestId};
use crate::store::claim::QueueRowColumns;
use crate::store::rows::CLAIMED_COLUMNS;
use crate::store::{
    ClaimDue, ClaimIds, DueKind, ExpiredLease, Held, LeaseKeeper, QueueCap, QueueRow, Renewal,
    RescueBatch, Rescued,
};

/// Claims the given `init` records, fresh ones only (`exec_count = 0`: a record another
/// claim ran and that snoozed is `init` again, due later, and not this dispatch's).
pub(super) async fn claim_ids(
    conn: &mut SqliteConnection,
    p: ClaimIds<'_>,
) -> Result<Vec<ClaimedId>> {
    if p.ids.is_empty() {
        return Ok(Vec::new());
    }
    let sql = format!(
        "UPDATE async_req SET status = 'running', lease_owner = ?, lease_until = {DB_NOW} + ?, \
         exec_count = exec_count + 1, update_time = ? \
         WHERE id IN (SELECT value FROM json_each(?)) AND status = 'init' AND exec_count = 0 \
         AND {open} RETURNING id, exec_count",
        open = crate::store::claim::before_deadline(DB_NOW)
    );
    let rows: Vec<(i64, i32)> = sqlx::query_as(&sql)
        .bind(p.owner)
        .bind(p.lease_ms)
        .bind(p.now)
        .bind(json_list(p.ids))
        .fetch_all(&mut *conn)
        .await?;
    Ok(rows
        .into_iter()
        .map(|(id, attempt)| ClaimedId { id, attempt })
        .collect())
}

/// Claims due records; their rows, in no particular order: each one JSON array of its
/// [`CLAIMED_COLUMNS`] (decoded by `claimed_from_json`). One value rather than eleven: sqlx
/// copies every value of every row on the connection's thread (a copy and two
/// allocations each) while the claim holds the writer and SQLite's write lock, and a
/// claim returns hundreds of rows. In alternating runs (20,000 jobs, `synchronous =
/// NORMAL`) a drain ran at 1.19x-1.22x the hand-written queue with it, 0.91x-0.96x with
/// ten columns, 1.04x with the seven that `a7d368d` returned.
pub(super) async fn claim_due(
    conn: &mut SqliteConnection,
    p: ClaimDue<'_>,
) -> Result<Vec<SqliteRow>> {
    if p.executors.is_empty() || p.limit <= 0 {
        return Ok(Vec::new());
    }
    match (p.cap, p.global) {
        (None, None) => claim_up_to(conn, &p, p.limit).await,
        (cap, global) => claim_queue(conn, &p, cap, global).await,
    }
}

/// A queue's row (limits set while running, the rate's bucket); the builder's when it has
/// none yet.
async fn queue_row(conn: &mut SqliteConnection, application: &str, name: &str) -> Result<QueueRow> {
    let row: Option<QueueRowColumns> = sqlx::query_as(
        "SELECT concurrency, per_instance, rate, tokens, refilled_at, per_partition, turn_after \
         FROM async_queue \
         WHERE application_name = ?1 AND name = ?2",
    )
    .bind(application)
    .bind(name)
    .fetch_optional(&mut *conn)
    .await?;
    Ok(row.map_or_else(QueueRow::default, QueueRow::from))
}

/// The most of `limit` that the application's limit over every queue (`global`) lets a
/// claim take, in the claim's transaction: its row for the limit set while running, and
/// the count of every running record of the application.
async fn global_slots(
    conn: &mut SqliteConnection,
    p: &ClaimDue<'_>,
    global: QueueCap<'_>,
    limit: i64,
) -> Result<i64> {
    let row = queue_row(conn, p.application, global.name).await?;
    let (all,): (i64,) = sqlx::query_as(
        "SELECT COUNT(*) FROM async_req WHERE application_name = ?1 AND status = 'running'",
    )
    .bind(p.application)
    .fetch_one(&mut *conn)
    .await?;
    Ok(global
        .with_policy(&row)
        .plan(limit, (all, 0), &row, p.now)
        .slots)
}

/// A queue's claim, in one IMMEDIATE transaction (SQLite's write lock, which every other
/// claim of the queue, in this process or another, waits for): the queue's row for the
/// limits set while running and its rate's bucket, the count of its running records, the
/// claim of no more than the slots left, the bucket written back.
async fn claim_queue(
    conn: &mut SqliteConnection,
    p: &ClaimDue<'_>,
    cap: Option<QueueCap<'_>>,
    global: Option<QueueCap<'_>>,
) -> Result<Vec<SqliteRow>> {
    let mut tx = sqlx::Connection::begin_with(&mut *conn, "BEGIN IMMEDIATE").await?;
    let limit = match global {
        Some(global) => global_slots(&mut tx, p, global, p.limit).await?,
        None => p.limit,
    };
    let Some(cap) = cap else {
        let rows = claim_up_to(&mut tx, p, limit).await?;
        tx.commit().await?;
        return Ok(rows);
    };
    let row = queue_row(&mut tx, p.application, cap.name).await?;
    let cap = cap.with_policy(&row);
    let running = if cap.counts_running() {
        // Counted by the records' queue, not by executor: a paused executor's running
        // requests still hold their places.
        sqlx::query_as(
            "SELECT COUNT(*), COALESCE(SUM(lease_owner = ?1), 0) FROM async_req \
             WHERE application_name = ?2 AND queue_name = ?3 AND status = 'running'",
        )
        .bind(p.owner)
        .bind(p.application)
        .bind(p.queue)
        .fetch_one(&mut *tx)
        .await?
    } else {
        (0, 0)
    };
    let plan = cap.plan(limit, running, &row, p.now);
    let (rows, last) = claim_taking_turns(
        &mut tx,
        p,
        (cap.per_partition, cap.sequence),
        row.turn_after.as_deref(),
        plan.slots,
    )
    .await?;
    // Kept until a claim moves it (a claim that takes none keeps it).
    if last.is_some() && last.as_deref() != row.turn_after.as_deref() {
        sqlx::query(
            "INSERT INTO async_queue (application_name, name, turn_after) VALUES (?1, ?2, ?3) \
             ON CONFLICT (application_name, name) DO UPDATE SET turn_after = excluded.turn_after",
        )
        .bind(p.application)
        .bind(cap.name)
        .bind(&last)
        .execute(&mut *tx)
        .await?;
    }
    if let Some(tokens) = plan.tokens_after(rows.len()) {
        sqlx::query(
            "INSERT INTO async_queue (application_name, name, tokens, refilled_at) \
             VALUES (?1, ?2, ?3, ?4) ON CONFLICT (application_name, name) \
             DO UPDATE SET tokens = excluded.tokens, refilled_at = excluded.refilled_at",
        )
        .bind(p.application)
        .bind(cap.name)
        .bind(tokens)
        .bind(p.now)
        .execute(&mut *tx)
        .await?;
    }
    tx.commit().await?;
    Ok(rows)
}

/// Claims at most `limit` due records of `p`.
async fn claim_up_to(
    conn: &mut SqliteConnection,
    p: &ClaimDue<'_>,
    limit: i64,
) -> Result<Vec<SqliteRow>> {
    if limit <= 0 {
        return Ok(Vec::new());
    }
    // Due by the database's clock: `?5` is how long past due (0, or the staleness).
    let (condition, past_due) = match p.kind {
        DueKind::Scheduled => (
            format!(
                "((status = 'failed' AND run_at <= {DB_NOW} - ?5) \
                 OR (status = 'init' AND run_at <= {DB_NOW} - ?5 AND run_at > create_time))"
            ),
            0,
        ),
        DueKind::Stale { older_than } => (
            format!("(status = 'init' AND run_at <= {DB_NOW} - ?5)"),
            older_than,
        ),
        DueKind::Ready => (format!("(run_at <= {DB_NOW} - ?5)"), 0),
    };
    let sql = format!(
        "UPDATE async_req SET status = 'running', lease_owner = ?1, lease_until = {DB_NOW} + ?2, \
         exec_count = exec_count + 1, update_time = ?3 \
         WHERE id IN (SELECT id FROM async_req WHERE application_name = ?4 \
           AND queue_name = ?{queue} AND status IN ('init', 'failed') AND {condition} \
           AND executor IN ({executors}){skip} AND {open} \
           ORDER BY priority DESC, run_at, id LIMIT ?6) \
         RETURNING json_array({CLAIMED_COLUMNS})",
        queue = 7 + executor_count(p.executors.len()) + usize::from(!p.skip.is_empty()),
        open = crate::store::claim::before_deadline(DB_NOW),
        executors = executor_marks(p.executors.len()),
        skip = if p.skip.is_empty() {
            String::new()
        } else {
            format!(
                " AND (sign || ':' || executor) NOT IN (SELECT value FROM json_each(?{}))",
                7 + executor_count(p.executors.len())
            )
        },
    );
    let mut query = sqlx::query(&sql)
        .bind(p.owner)
        .bind(p.lease_ms)
        .bind(p.now)
        .bind(p.application)
        .bind(past_due)
        .bind(limit);
    // Padded to a power of two, repeating the last name: a few statements, each
    // prepared once, serve every number of executors.
    let n = executor_count(p.executors.len());
    for i in 0..n {
        query = query.bind(p.executors[i.min(p.executors.len() - 1)]);
    }
    if !p.skip.is_empty() {
        query = query.bind(json_list(p.skip));
    }
    query = query.bind(p.queue);
    Ok(query.fetch_all(&mut *conn).await?)
}

/// Claims, of the queue's due records, at most `slots`, taking turns between partitions
/// by their weights within their limits (`crate::store::claim::take_turns`): the running
/// count of each partition, then the first waiting records of the partitions with room,
/// the rows of their partitions (`async_partition`), the starts taken from their
/// buckets, then those chosen, by id. In the claim's IMMEDIATE transaction (nothing changes
/// between the reads and the claim).
/// Returns the rows claimed and the turns' cursor after it (encoded).
async fn claim_taking_turns(
    conn: &mut SqliteConnection,
    p: &ClaimDue<'_>,
    (per_partition, sequence): (Option<i64>, Option<crate::base::queue::SequenceFailure>),
    after: Option<&str>,
    slots: i64,
) -> Result<(Vec<SqliteRow>, Option<String>)> {
    use crate::store::claim::{take_turns, Candidate};
    use crate::store::partitions::{running_sql, Partitions};
    use crate::store::sql::Dialect;
    if slots <= 0 {
        return Ok((Vec::new(), None));
    }
    let mut parts = Partitions::new(per_partition, p.now);
    // Only a per-partition limit needs each partition's running count; those at it may
    // have a higher one of their own.
    if parts.counts_all() {
        let running = sqlx::query_as(
            "SELECT partition_key, COUNT(*) FROM async_req WHERE application_name = ?1 \
             AND queue_name = ?2 AND status = 'running' GROUP BY partition_key",
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
    let sql = format!(
        "SELECT id, partition_key FROM async_req WHERE application_name = ?1 \
         AND queue_name = ?2 AND status IN ('init', 'failed') AND run_at <= {DB_NOW} \
         AND executor IN (SELECT value FROM json_each(?3)) \
         AND partition_key NOT IN (SELECT value FROM json_each(?4)){skip}{sequence} AND {open} \
         ORDER BY priority DESC, run_at, id LIMIT ?5",
        open = crate::store::claim::before_deadline(DB_NOW),
        sequence = crate::store::claim::in_sequence(sequence),
        skip = if p.skip.is_empty() {
            ""
        } else {
            " AND (sign || ':' || executor) NOT IN (SELECT value FROM json_each(?6))"
        },
    );
    // Read again, at most MAX_READS times, without the partitions found with no room.
    let mut reads = 0;
    let candidates = loop {
        let mut query = sqlx::query_as(&sql)
            .bind(p.application)
            .bind(p.queue)
            .bind(json_list(p.executors))
            .bind(json_list(&full))
            .bind(crate::store::claim::candidate_window(slots));
        if !p.skip.is_empty() {
            query = query.bind(json_list(p.skip));
        }
        let candidates: Vec<Candidate> = query.fetch_all(&mut *conn).await?;
        // The settings of the candidates' partitions (and, of those with a concurrency of
        // their own, the running count).
        let unread = parts.unread(candidates.iter().map(|(_, k)| k.as_str()));
        read_partitions(conn, p, &mut parts, unread).await?;
        let uncounted = parts.uncounted();
        if !uncounted.is_empty() {
            let counts = sqlx::query_as(&running_sql(
                Dialect::Sqlite,
                "IN (SELECT value FROM json_each(?))",
            ))
            .bind(p.application)
            .bind(p.queue)
            .bind(json_list(&uncounted))
            .fetch_all(&mut *conn)
            .await?;
            parts.add_running(&uncounted, counts);
        }
        reads += 1;
        let blocked = parts.blocked(&candidates, &full);
        if blocked.is_empty() || reads == crate::store::partitions::MAX_READS {
            break candidates;
        }
        full.extend(blocked);
    };
    let after = crate::store::claim::Cursor::decode(after);
    let (chosen, cursor) = take_turns(&candidates, &parts, slots, after.as_ref());
    let last = cursor.map(|c| c.encode());
    let chosen = spend_buckets(conn, p, &parts, &candidates, chosen).await?;
    if chosen.is_empty() {
        return Ok((Vec::new(), None));
    }
    let sql = format!(
        "UPDATE async_req SET status = 'running', lease_owner = ?1, lease_until = {DB_NOW} + ?2, \
         exec_count = exec_count + 1, update_time = ?3 \
         WHERE id IN (SELECT value FROM json_each(?4)) AND status IN ('init', 'failed') \
         RETURNING json_array({CLAIMED_COLUMNS})"
    );
    let rows = sqlx::query(&sql)
        .bind(p.owner)
        .bind(p.lease_ms)
        .bind(p.now)
        .bind(json_list(&chosen))
        .fetch_all(&mut *conn)
        .await?;
    Ok((rows, last))
}

/// Reads the rows of `keys` (partitions of the claim's queue) into `parts`.
async fn read_partitions(
    conn: &mut SqliteConnection,
    p: &ClaimDue<'_>,
    parts: &mut crate::store::partitions::Partitions,
    keys: Vec<String>,
) -> Result<()> {
    if keys.is_empty() {
        return Ok(());
    }
    let sql = crate::store::partitions::rows_sql(
        crate::store::sql::Dialect::Sqlite,
        "IN (SELECT value FROM json_each(?))",
    );
    let rows = sqlx::query_as(&sql)
        .bind(p.application)
        .bind(p.queue)
        .bind(json_list(&keys))
        .fetch_all(&mut *conn)
        .await?;
    parts.add_rows(&keys, rows);
    Ok(())
}

/// Takes the starts of `chosen` from their partitions' buckets, each by one conditional
/// `UPDATE`; returns `chosen` without the records of a partition whose bucket another
/// claim took from meanwhile (none here: the claim holds SQLite's write lock).
async fn spend_buckets(
    conn: &mut SqliteConnection,
    p: &ClaimDue<'_>,
    parts: &crate::store::partitions::Partitions,
    candidates: &[crate::store::claim::Candidate],
    chosen: Vec<RequestId>,
) -> Result<Vec<RequestId>> {
    use crate::store::partitions::{taken_by_partition, without, SPEND};
    let mut refused = Vec::new();
    for (key, spend) in parts.spends(&taken_by_partition(candidates, &chosen)) {
        let done = sqlx::query(SPEND.text(crate::store::sql::Dialect::Sqlite))
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

/// Which records of `held` (as JSON pairs `[id, attempt]`, bound at `?N`) a statement
/// touches: by id (the primary key), then at the attempt claimed.
fn held_at(n: usize) -> String {
    format!(
        "id IN (SELECT json_extract(value, '$[0]') FROM json_each(?{n})) \
         AND exec_count = (SELECT json_extract(value, '$[1]') FROM json_each(?{n}) \
           WHERE json_extract(value, '$[0]') = async_req.id)"
    )
}

/// Extends the leases of these records while `owner` holds them at their attempt.
pub(super) async fn renew(
    conn: &mut SqliteConnection,
    owner: &str,
    held: &[Held],
    lease_ms: i64,
) -> Result<Vec<RequestId>> {
    if held.is_empty() {
        return Ok(Vec::new());
    }
    let renewed = sqlx::query_scalar(&format!(
        "UPDATE async_req SET lease_until = {DB_NOW} + ?1 \
         WHERE status = 'running' AND lease_owner = ?2 AND {} RETURNING id",
        held_at(3)
    ))
    .bind(lease_ms)
    .bind(owner)
    .bind(json_list(held))
    .fetch_all(&mut *conn)
    .await?;
    Ok(renewed)
}

/// Lease renewals on SQLite: on the runtime's writer connection, which is the runtime's
/// own already (the application's transactions use the pool).
#[derive(Debug)]
pub(super) struct SqliteLeases {
    pub(super) store: SqliteStore,
}

#[async_trait]
impl LeaseKeeper for SqliteLeases {
    async fn renew(
        &self,
        owner: &str,
        held: &[Held],
        lease_ms: i64,
        patience: std::time::Duration,
    ) -> Result<Renewal> {
        let work = async {
            let mut writer = self.store.writer().await?;
            let result = renew(writer.conn(), owner, held, lease_ms).await;
            writer.check(result).map(Renewal::all)
        };
        tokio::time::timeout(patience, work)
            .await
            .unwrap_or(Err(crate::Error::NoAnswer(patience)))
    }
}

/// Hands records back to the queue without counting the attempt, while `owner` holds
/// them at their attempt.
pub(super) async fn release(
    conn: &mut SqliteConnection,
    owner: &str,
    held: &[Held],
    now: i64,
) -> Result<u64> {
    if held.is_empty() {
        return Ok(0);
    }
    // Asked to stop while it waited to start (a cancel of a running request): ended
    // `cancelled`, not put back to wait.
    let done = sqlx::query(&format!(
        "UPDATE async_req SET status = CASE WHEN cancel_requested IS NOT NULL \
             THEN 'cancelled' ELSE 'init' END, exec_count = exec_count - 1, run_at = ?1, \
         lease_owner = NULL, lease_until = NULL, update_time = ?2 \
         WHERE status = 'running' AND lease_owner = ?3 AND {}",
        held_at(4)
    ))
    .bind(now.max(1))
    .bind(now)
    .bind(owner)
    .bind(json_list(held))
    .execute(&mut *conn)
    .await?;
    Ok(done.rows_affected())
}

/// The records of `application` that `owner` holds as running and that a claim made at
/// one of `claimed_at` took (their `update_time`), in id order (see
/// `Store::lease_claimed_at`).
pub(super) async fn claimed_at(
    pool: &sqlx::SqlitePool,
    application: &str,
    owner: &str,
    claimed_at: &[i64],
) -> Result<Vec<Held>> {
    if claimed_at.is_empty() {
        return Ok(Vec::new());
    }
    let rows: Vec<(RequestId, i32)> = sqlx::query_as(
        "SELECT id, exec_count FROM async_req WHERE application_name = ? \
         AND status = 'running' AND lease_owner = ? \
         AND update_time IN (SELECT value FROM json_each(?)) ORDER BY id",
    )
    .bind(application)
    .bind(owner)
    .bind(json_list(claimed_at))
    .fetch_all(pool)
    .await?;
    Ok(rows)
}

/// Running records whose lease ended more than `grace_ms` ago: back to `failed`, or `dead`.
pub(super) async fn rescue(conn: &mut SqliteConnection, batch: RescueBatch<'_>) -> Result<Rescued> {
    let RescueBatch {
        application,
        executors,
        queues: _, // the lease index holds every running record
        now,
        grace_ms,
        limit,
    } = batch;
    // It reads, then writes: a deferred transaction would fail with SQLITE_BUSY_SNAPSHOT
    // (517, "database is locked", no busy wait) when another connection commits between
    // the two. IMMEDIATE takes the write lock first, waiting as long as busy_timeout.
    let mut tx = sqlx::Connection::begin_with(&mut *conn, "BEGIN IMMEDIATE").await?;
    let sql = format!(
        "SELECT id, exec_count, max_attempts, lease_owner, lease_until FROM async_req \
         WHERE application_name = ? AND status = 'running' AND lease_until < {DB_NOW} - ? \
         AND executor IN (SELECT value FROM json_each(?)) ORDER BY lease_until LIMIT ?"
    );
    let expired: Vec<ExpiredLease> = sqlx::query_as(&sql)
        .bind(application)
        .bind(grace_ms)
        .bind(json_list(executors))
        .bind(limit)
        .fetch_all(&mut *tx)
        .await?;
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
        crate::store::shared::log_insert::<sqlx::Sqlite>(&mut tx, &log).await?;
        if dead {
            rescued.dead.push(id);
        } else {
            rescued.retried.push(id);
        }
    }
    tx.commit().await?;
    Ok(rescued)
}

/// Placeholders `?7, ?8, ...` for the executors of a claim, padded to a power of two.
pub(super) fn executor_marks(n: usize) -> String {
    (0..executor_count(n))
        .map(|i| format!("?{}", i + 7))
        .collect::<Vec<_>>()
        .join(", ")
}

pub(super) fn executor_count(n: usize) -> usize {
    n.max(1).next_power_of_two()
}

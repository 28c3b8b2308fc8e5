//! Claims on MySQL/MariaDB: a transaction that locks the rows (`SELECT ... FOR UPDATE SKIP
//! LOCKED`), marks them `running` under this instance's lease (from the database's
//! clock) and commits; fresh records claimed by id in one autocommit `UPDATE`.

use sqlx::mysql::MySqlRow;
use sqlx::{MySqlConnection, Row};

use super::{bind_list, claimed_from_row, marks, MySqlStore, CLAIMED_COLUMNS, DB_NOW, MAX_IN};
use crate::base::error::Result;
use crate::base::record::{Claimed, ClaimedId, RequestId};
use crate::store::claim::{take_turns, Candidate, ClaimPlan, Cursor, QueueRowColumns};
use crate::store::partitions::{
    rows_sql, running_sql, taken_by_partition, without, Partitions, MAX_READS, SPEND,
};
use crate::store::sql::Dialect;
use crate::store::{ClaimDue, ClaimIds, DueKind, QueueRow};

/// `SET ...` of a claim: `running`, leased (from the database's clock), its attempt
/// counted.
const CLAIM_SET: &str = "UPDATE async_req SET status = 'running', lease_owner = ?, \
     lease_until = CAST(UNIX_TIMESTAMP(NOW(3)) * 1000 AS SIGNED) + ?, \
     exec_count = exec_count + 1, update_time = ?";

/// Marks locked rows as claimed.
async fn mark_claimed(
    conn: &mut MySqlConnection,
    ids: &[RequestId],
    owner: &str,
    now: i64,
    lease_ms: i64,
) -> Result<()> {
    for chunk in ids.chunks(MAX_IN) {
        let sql = format!("{CLAIM_SET} WHERE id IN ({})", marks(chunk.len()));
        let query = sqlx::query(&sql).bind(owner).bind(lease_ms).bind(now);
        bind_list(query, chunk).execute(&mut *conn).await?;
    }
    Ok(())
}

/// Locks the queue's row (made on first use) until the transaction ends: claims of one
/// queue wait for each other; nothing else takes the lock. Returns the row: its limits
/// set while running (`None` keeps the builder's) and its rate's bucket.
async fn lock_queue(
    conn: &mut MySqlConnection,
    application: &str,
    queue: &str,
) -> Result<QueueRow> {
    // The INTEGER columns read as 64-bit integers, as the others.
    const LOCK: &str =
        "SELECT CAST(concurrency AS SIGNED), CAST(per_instance AS SIGNED), CAST(rate AS SIGNED), \
         tokens, refilled_at, CAST(per_partition AS SIGNED), turn_after FROM async_queue \
         WHERE application_name = ? AND name = ? FOR UPDATE";
    let read = |row: MySqlRow| -> std::result::Result<QueueRow, sqlx::Error> {
        let turn_after = match row.try_get::<Option<String>, _>(6) {
            Ok(text) => text,
            Err(_) => row
                .try_get::<Option<Vec<u8>>, _>(6)?
                .map(|bytes| String::from_utf8_lossy(&bytes).into_owned()),
        };
        let columns: QueueRowColumns = (
            row.try_get(0)?,
            row.try_get(1)?,
            row.try_get(2)?,
            row.try_get(3)?,
            row.try_get(4)?,
            row.try_get(5)?,
            turn_after,
        );
        Ok(columns.into())
    };
    let locked = sqlx::query(LOCK)
        .bind(application)
        .bind(queue)
        .fetch_optional(&mut *conn)
        .await?;
    if let Some(locked) = locked {
        return Ok(read(locked)?);
    }
    sqlx::query("INSERT IGNORE INTO async_queue (application_name, name) VALUES (?, ?)")
        .bind(application)
        .bind(queue)
        .execute(&mut *conn)
        .await?;
    let locked = sqlx::query(LOCK)
        .bind(application)
        .bind(queue)
        .fetch_one(&mut *conn)
        .await?;
    Ok(read(locked)?)
}

/// Writes back the bucket of a queue with a rate after `claimed` starts.
async fn write_bucket(
    conn: &mut MySqlConnection,
    p: &ClaimDue<'_>,
    bucket: Option<(ClaimPlan, &str)>,
    claimed: usize,
) -> Result<()> {
    let Some((plan, queue)) = bucket else {
        return Ok(());
    };
    let Some(tokens) = plan.tokens_after(claimed) else {
        return Ok(());
    };
    sqlx::query(
        "UPDATE async_queue SET tokens = ?, refilled_at = ? WHERE application_name = ? AND name = ?",
    )
    .bind(tokens)
    .bind(p.now)
    .bind(p.application)
    .bind(queue)
    .execute(&mut *conn)
    .await?;
    Ok(())
}

/// What a claim taking turns between a queue's partitions knows before it reads the
/// candidates: each partition's running count and settings (`Partitions`), and those
/// with no room (left out of the read).
struct PartitionRoom {
    parts: Partitions,
    full: Vec<String>,
    /// The queue's row, and the partition its last claim served last.
    queue: String,
    after: Option<String>,
    /// The candidate read's condition of a sequence (`claim::in_sequence`), or `""`.
    sequence: String,
}

/// The running requests of each partition of the claim's queue (with a per-partition
/// limit), and the rows of those at it (their own limit may be higher).
async fn partition_room(
    conn: &mut MySqlConnection,
    p: &ClaimDue<'_>,
    per_partition: Option<i64>,
) -> Result<PartitionRoom> {
    let mut parts = Partitions::new(per_partition, p.now);
    // Only a per-partition limit needs each partition's running count.
    if parts.counts_all() {
        let running = sqlx::query_as(
            "SELECT partition_key, COUNT(*) FROM async_req WHERE application_name = ? \
             AND queue_name = ? AND status = 'running' GROUP BY partition_key",
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
    Ok(PartitionRoom {
        full: parts.full(),
        parts,
        queue: String::new(),
        after: None,
        sequence: String::new(),
    })
}

/// Reads the rows of `keys` (partitions of the claim's queue) into `parts`.
async fn read_partitions(
    conn: &mut MySqlConnection,
    p: &ClaimDue<'_>,
    parts: &mut Partitions,
    keys: Vec<String>,
) -> Result<()> {
    for chunk in keys.chunks(MAX_IN) {
        let sql = rows_sql(Dialect::MySql, &format!("IN ({})", marks(chunk.len())));
        let query = sqlx::query(&sql).bind(p.application).bind(p.queue);
        let chunk: Vec<&str> = chunk.iter().map(String::as_str).collect();
        let rows = bind_list(query, &chunk)
            .try_map(|row: MySqlRow| {
                Ok((
                    text_of(&row, 0)?,
                    row.try_get(1)?,
                    row.try_get(2)?,
                    row.try_get(3)?,
                    row.try_get(4)?,
                    row.try_get(5)?,
                    row.try_get(6)?,
                ))
            })
            .fetch_all(&mut *conn)
            .await?;
        let asked: Vec<String> = chunk.iter().map(|k| k.to_string()).collect();
        parts.add_rows(&asked, rows);
    }
    Ok(())
}

/// Counts the running requests of `keys` (partitions of the claim's queue) into `parts`.
async fn count_partitions(
    conn: &mut MySqlConnection,
    p: &ClaimDue<'_>,
    parts: &mut Partitions,
    keys: Vec<String>,
) -> Result<()> {
    for chunk in keys.chunks(MAX_IN) {
        let sql = running_sql(Dialect::MySql, &format!("IN ({})", marks(chunk.len())));
        let query = sqlx::query(&sql).bind(p.application).bind(p.queue);
        let chunk: Vec<&str> = chunk.iter().map(String::as_str).collect();
        let counts = bind_list(query, &chunk)
            .try_map(|row: MySqlRow| Ok((text_of(&row, 0)?, row.try_get(1)?)))
            .fetch_all(&mut *conn)
            .await?;
        let asked: Vec<String> = chunk.iter().map(|k| k.to_string()).collect();
        parts.add_running(&asked, counts);
    }
    Ok(())
}

/// A column of this binary-collated text, which a `UNION` or a `GROUP BY` may read as
/// VARBINARY.
fn text_of(row: &MySqlRow, i: usize) -> std::result::Result<String, sqlx::Error> {
    match row.try_get::<String, _>(i) {
        Ok(text) => Ok(text),
        Err(_) => Ok(String::from_utf8_lossy(&row.try_get::<Vec<u8>, _>(i)?).into_owned()),
    }
}

/// Takes the starts of `chosen` from their partitions' buckets, each by one conditional
/// `UPDATE`; returns `chosen` without the records of a partition whose bucket another
/// claim took from meanwhile.
async fn spend_buckets(
    conn: &mut MySqlConnection,
    p: &ClaimDue<'_>,
    parts: &Partitions,
    candidates: &[Candidate],
    chosen: Vec<RequestId>,
) -> Result<Vec<RequestId>> {
    let mut refused = Vec::new();
    for (key, spend) in parts.spends(&taken_by_partition(candidates, &chosen)) {
        let done = sqlx::query(SPEND.text(Dialect::MySql))
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

impl MySqlStore {
    pub(super) async fn claim_ids_once(&self, p: &ClaimIds<'_>) -> Result<Vec<ClaimedId>> {
        // Fresh records, just written by this instance: one autocommit UPDATE through the
        // primary key claims them (`exec_count = 0`, so the attempt is 1). A row locked by
        // another claimer is waited for and then re-checked, so it is never claimed twice.
        let mut claimed = Vec::with_capacity(p.ids.len());
        for chunk in p.ids.chunks(MAX_IN) {
            let sql = format!(
                "{CLAIM_SET} WHERE id IN ({}) AND status = 'init' AND exec_count = 0 AND {}",
                marks(chunk.len()),
                crate::store::claim::before_deadline(DB_NOW)
            );
            let query = sqlx::query(&sql).bind(p.owner).bind(p.lease_ms).bind(p.now);
            let matched = bind_list(query, chunk)
                .execute(&self.pool)
                .await?
                .rows_affected();
            if matched == chunk.len() as u64 {
                claimed.extend(chunk.iter().map(|&id| ClaimedId { id, attempt: 1 }));
                continue;
            }
            // Some were taken elsewhere: which ones carry this claim's stamp?
            let sql = format!(
                "SELECT id FROM async_req WHERE id IN ({}) AND status = 'running' \
                 AND lease_owner = ? AND update_time = ? AND exec_count = 1",
                marks(chunk.len())
            );
            let ours: Vec<i64> = bind_list(sqlx::query(&sql), chunk)
                .bind(p.owner)
                .bind(p.now)
                .try_map(|row: MySqlRow| row.try_get(0))
                .fetch_all(&self.pool)
                .await?;
            claimed.extend(ours.into_iter().map(|id| ClaimedId { id, attempt: 1 }));
        }
        Ok(claimed)
    }

    pub(super) async fn claim_due_once(&self, p: &ClaimDue<'_>) -> Result<Vec<Claimed>> {
        // Due by the database's clock; the two binds say how long past due (0, or the
        // staleness).
        let (condition, past_due) = match p.kind {
            DueKind::Scheduled => (
                format!(
                    "((status = 'failed' AND run_at <= {DB_NOW} - ?) \
                     OR (status = 'init' AND run_at <= {DB_NOW} - ? AND run_at > create_time))"
                ),
                0,
            ),
            DueKind::Stale { older_than } => (
                format!("(status = 'init' AND run_at <= {DB_NOW} - ? AND run_at <= {DB_NOW} - ?)"),
                older_than,
            ),
            DueKind::Ready => (
                format!(
                    "((status = 'init' AND run_at <= {DB_NOW} - ?) \
                     OR (status = 'failed' AND run_at <= {DB_NOW} - ?))"
                ),
                0,
            ),
        };
        let mut tx = self.begin().await?;
        let mut limit = p.limit;
        let mut bucket = None;
        // A queue's claim takes turns between its partitions, within their limit.
        let mut turns: Option<PartitionRoom> = None;
        // The limit over every queue first (every claim takes this lock first: no
        // deadlock), counting every running record of the application.
        if let Some(global) = p.global {
            let row = lock_queue(&mut tx, p.application, global.name).await?;
            let all: i64 = sqlx::query_scalar(
                "SELECT COUNT(*) FROM async_req WHERE application_name = ? AND status = 'running'",
            )
            .bind(p.application)
            .fetch_one(&mut *tx)
            .await?;
            limit = global
                .with_policy(&row)
                .plan(limit, (all, 0), &row, p.now)
                .slots;
            if limit <= 0 {
                tx.commit().await?;
                return Ok(Vec::new());
            }
        }
        if let Some(cap) = p.cap {
            // Claims of one queue take turns on its row; the count that follows (READ
            // COMMITTED) sees every claim committed before this one got the lock.
            let row = lock_queue(&mut tx, p.application, cap.name).await?;
            let cap = cap.with_policy(&row);
            // Counted by the records' queue, not by executor: a paused executor's running
            // requests still hold their places.
            let running = if cap.counts_running() {
                let row = sqlx::query(
                    "SELECT COUNT(*), CAST(COALESCE(SUM(lease_owner = ?), 0) AS SIGNED) \
                     FROM async_req WHERE application_name = ? AND queue_name = ? \
                     AND status = 'running'",
                )
                .bind(p.owner)
                .bind(p.application)
                .bind(p.queue)
                .fetch_one(&mut *tx)
                .await?;
                (row.try_get(0)?, row.try_get(1)?)
            } else {
                (0, 0)
            };
            let plan = cap.plan(limit, running, &row, p.now);
            limit = plan.slots;
            bucket = Some((plan, cap.name));
            let mut room = partition_room(&mut tx, p, cap.per_partition).await?;
            room.after = row.turn_after.clone();
            room.queue = cap.name.to_string();
            room.sequence = crate::store::claim::in_sequence(cap.sequence);
            turns = Some(room);
            if limit <= 0 {
                write_bucket(&mut tx, p, bucket, 0).await?;
                tx.commit().await?;
                return Ok(Vec::new());
            }
        }
        // First the candidates, by a plain read that locks nothing: a locking read of the
        // range would lock, if only for a moment, records that it then filters out, and the
        // dispatcher's claim of a fresh record would skip it.
        let skip = if p.skip.is_empty() {
            String::new()
        } else {
            format!(
                " AND CONCAT(sign, ':', executor) NOT IN ({})",
                marks(p.skip.len())
            )
        };
        let executors = marks(p.executors.len());
        let open = crate::store::claim::before_deadline(DB_NOW);
        // Read again, at most MAX_READS times, without the partitions found with no room.
        let mut reads = 0;
        let found = loop {
            let not_full = match &turns {
                Some(room) if !room.full.is_empty() => {
                    format!(" AND partition_key NOT IN ({})", marks(room.full.len()))
                }
                _ => String::new(),
            };
            let sequence = turns.as_ref().map_or("", |room| room.sequence.as_str());
            let select = |condition: &str| {
                format!(
                    "SELECT id, partition_key, priority, run_at FROM async_req \
                     WHERE application_name = ? AND queue_name = ? \
                     AND {condition} AND executor IN ({executors}){skip}{not_full}{sequence} AND {open} \
                     ORDER BY priority DESC, run_at, id LIMIT ?"
                )
            };
            // With turns between partitions, a window of candidates to choose from.
            let read = if turns.is_some() {
                crate::store::claim::candidate_window(limit)
            } else {
                limit
            };
            // A queue's claim reads each status in index order, then takes the first of both.
            let (sql, branches) = match p.kind {
                DueKind::Ready => (
                    format!(
                        "({}) UNION ALL ({}) ORDER BY priority DESC, run_at, id LIMIT ?",
                        select(&format!(
                            "status = 'init' AND run_at <= {DB_NOW} - ? AND run_at <= {DB_NOW} - ?"
                        )),
                        select(&format!(
                            "status = 'failed' AND run_at <= {DB_NOW} - ? AND run_at <= {DB_NOW} - ?"
                        )),
                    ),
                    2,
                ),
                _ => (select(&condition), 1),
            };
            let skip: Vec<&str> = p.skip.iter().map(String::as_str).collect();
            let full: Vec<&str> = turns
                .as_ref()
                .map(|room| room.full.iter().map(String::as_str).collect())
                .unwrap_or_default();
            let mut query = sqlx::query(&sql);
            for _ in 0..branches {
                query = query
                    .bind(p.application)
                    .bind(p.queue)
                    .bind(past_due)
                    .bind(past_due);
                query = bind_list(query, p.executors);
                if !skip.is_empty() {
                    query = bind_list(query, &skip);
                }
                if !full.is_empty() {
                    query = bind_list(query, &full);
                }
                query = query.bind(read);
            }
            if branches == 2 {
                query = query.bind(read);
            }
            let found: Vec<Candidate> = query
                // A `UNION` of this binary-collated column reads as VARBINARY.
                .try_map(|row: MySqlRow| Ok((row.try_get(0)?, text_of(&row, 1)?)))
                .fetch_all(&mut *tx)
                .await?;
            let Some(room) = turns.as_mut() else {
                break found;
            };
            // The settings of the candidates' partitions (and, of those with a
            // concurrency of their own, the running count).
            let unread = room.parts.unread(found.iter().map(|(_, k)| k.as_str()));
            read_partitions(&mut tx, p, &mut room.parts, unread).await?;
            let uncounted = room.parts.uncounted();
            count_partitions(&mut tx, p, &mut room.parts, uncounted).await?;
            reads += 1;
            let blocked = room.parts.blocked(&found, &room.full);
            if blocked.is_empty() || reads == MAX_READS {
                break found;
            }
            room.full.extend(blocked);
        };
        let (candidates, served_last): (Vec<RequestId>, Option<String>) = match &mut turns {
            Some(room) => {
                let after = Cursor::decode(room.after.as_deref());
                let (chosen, cursor) = take_turns(&found, &room.parts, limit, after.as_ref());
                let chosen = spend_buckets(&mut tx, p, &room.parts, &found, chosen).await?;
                (chosen, cursor.map(|c| c.encode()))
            }
            None => (found.into_iter().map(|(id, _)| id).collect(), None),
        };
        if let (Some(room), Some(last)) = (&turns, &served_last) {
            if room.after.as_ref() != Some(last) {
                sqlx::query(
                    "UPDATE async_queue SET turn_after = ? WHERE application_name = ? AND name = ?",
                )
                .bind(last)
                .bind(p.application)
                .bind(&room.queue)
                .execute(&mut *tx)
                .await?;
            }
        }
        // Then those still due, locked; another instance's claims are skipped.
        let mut claimed = Vec::with_capacity(candidates.len());
        for chunk in candidates.chunks(MAX_IN) {
            let sql = format!(
                "SELECT {CLAIMED_COLUMNS} FROM async_req FORCE INDEX (PRIMARY) \
                 WHERE id IN ({}) AND {condition} \
                 ORDER BY priority DESC, run_at, id FOR UPDATE SKIP LOCKED",
                marks(chunk.len())
            );
            let rows = bind_list(sqlx::query(&sql), chunk)
                .bind(past_due)
                .bind(past_due)
                .fetch_all(&mut *tx)
                .await?;
            for row in &rows {
                claimed.push(claimed_from_row(row)?);
            }
        }
        if !claimed.is_empty() {
            let ids: Vec<RequestId> = claimed.iter().map(|c| c.id).collect();
            mark_claimed(&mut tx, &ids, p.owner, p.now, p.lease_ms).await?;
        }
        write_bucket(&mut tx, p, bucket, claimed.len()).await?;
        tx.commit().await?;
        Ok(claimed)
    }
}

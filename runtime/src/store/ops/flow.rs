//! The statements of the flow view: each queue's live records counted in one grouped read
//! (through the claim index and the running index), its starts and finishes per minute
//! (`async_queue_stat`), and the saturation history (`async_flow`, one period taken by
//! one instance through `async_flow_slot`).

use async_trait::async_trait;

use crate::base::error::Result;
use crate::base::flow::{FlowSample, Verdict};
use crate::store::sql::{Cells, Col, Dialect, Sql, SqlRunner, Txn};

/// A queue's live records now.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct QueueNow {
    pub(crate) queue: String,
    pub(crate) running: i64,
    pub(crate) waiting: i64,
    pub(crate) due: i64,
    /// The earliest due time of those due, if any.
    pub(crate) oldest_due: Option<i64>,
}

/// Starts and finishes of a queue in a minute, to add to `async_queue_stat`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct QueueStatDelta {
    pub(crate) queue: &'static str,
    pub(crate) minute: i64,
    pub(crate) started: i64,
    pub(crate) finished: i64,
}

/// A sample to write into `async_flow`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct SampleRow {
    pub(crate) queue: String,
    pub(crate) sample: FlowSample,
}

/// Queues one statement counts (one bind each).
const QUEUE_CHUNK: usize = 500;

/// Sample rows written per statement (ten binds each: far below every backend's bound).
const SAMPLE_CHUNK: usize = 200;

/// The flow view's statements. Every backend has them through its [`SqlRunner`].
#[async_trait]
pub(crate) trait FlowOps: SqlRunner {
    /// The live records (`init`, `failed`, `running`) of `queues`, by queue (those with
    /// any): running, waiting, due by `now` and the earliest due time of those due. One
    /// statement per 500 queues ([`queue_live`]).
    async fn queue_now(
        &self,
        application: &str,
        queues: &[&str],
        now: i64,
    ) -> Result<Vec<QueueNow>> {
        let mut rows = Vec::new();
        for chunk in queues.chunks(QUEUE_CHUNK) {
            let s = queue_live(self.dialect(), application, chunk, now);
            rows.extend(
                self.fetch_rows(&s, &[Col::Text, Col::Int, Col::Int, Col::Int, Col::Int])
                    .await?,
            );
        }
        let mut queues: Vec<QueueNow> = Vec::new();
        let mut at: rustc_hash::FxHashMap<String, usize> = rustc_hash::FxHashMap::default();
        for mut row in rows {
            let queue = row.text()?;
            let i = *at.entry(queue.clone()).or_insert_with(|| {
                queues.push(QueueNow {
                    queue,
                    ..QueueNow::default()
                });
                queues.len() - 1
            });
            let q = &mut queues[i];
            q.running += row.int()?;
            q.waiting += row.int()?;
            q.due += row.int()?;
            if let Some(due) = row.opt_int()? {
                q.oldest_due = Some(q.oldest_due.map_or(due, |o| o.min(due)));
            }
        }
        Ok(queues)
    }

    /// The partitions of `queue` with requests running or waiting, the most waiting
    /// first, at most `limit`: (partition, running, waiting, the earliest due time of
    /// those waiting). Two statements, each on one partial index, as
    /// [`FlowOps::queue_now`]; never the finished history. With `limit` partitions
    /// waiting, a partition that only runs is left out (it would rank after them).
    async fn queue_partitions(
        &self,
        application: &str,
        queue: &str,
        limit: i64,
    ) -> Result<Vec<(String, i64, i64, Option<i64>)>> {
        let s = partitions_waiting(self.dialect(), application, queue, limit);
        let waiting = self
            .fetch_rows(&s, &[Col::Text, Col::Int, Col::Int])
            .await?;
        let s = partitions_running(self.dialect(), application, queue);
        let running = self.fetch_rows(&s, &[Col::Text, Col::Int]).await?;
        let full = waiting.len() as i64 >= limit;
        let mut rows: Vec<(String, i64, i64, Option<i64>)> = Vec::with_capacity(waiting.len());
        for mut row in waiting {
            rows.push((row.text()?, 0, row.int()?, row.opt_int()?));
        }
        let at: rustc_hash::FxHashMap<String, usize> = rows
            .iter()
            .enumerate()
            .map(|(i, r)| (r.0.clone(), i))
            .collect();
        for mut row in running {
            let (partition, n) = (row.text()?, row.int()?);
            match at.get(&partition) {
                Some(&i) => rows[i].1 = n,
                None if !full => rows.push((partition, n, 0, None)),
                None => {}
            }
        }
        rows.sort_by(|a, b| b.2.cmp(&a.2).then(b.1.cmp(&a.1)).then(a.0.cmp(&b.0)));
        rows.truncate(limit.max(0) as usize);
        Ok(rows)
    }

    /// Adds starts and finishes to `async_queue_stat`.
    async fn queue_stat_add(&self, application: &str, deltas: &[QueueStatDelta]) -> Result<()> {
        let dialect = self.dialect();
        let upsert = dialect.upsert(
            "async_queue_stat",
            "application_name, minute, queue_name",
            &["started", "finished"],
            &[],
        );
        let statements = |_: &[Cells]| {
            deltas
                .iter()
                .map(|d| {
                    let mut s = Sql::new(
                        dialect,
                        "INSERT INTO async_queue_stat (application_name, queue_name, minute, \
                         started, finished) VALUES (",
                    );
                    s.bind_text(application).push(", ").bind_text(d.queue);
                    for n in [d.minute, d.started, d.finished] {
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

    /// Starts and finishes by queue from `since_minute` on (a primary-key range).
    async fn queue_stat_since(
        &self,
        application: &str,
        since_minute: i64,
    ) -> Result<Vec<(String, i64, i64)>> {
        let d = self.dialect();
        let mut s = self.sql(&format!(
            "SELECT queue_name, {}, {} FROM async_queue_stat WHERE application_name = ",
            d.int64("SUM(started)"),
            d.int64("SUM(finished)"),
        ));
        s.bind_text(application)
            .push(" AND minute >= ")
            .bind_int(since_minute)
            .push(" GROUP BY queue_name");
        let rows = self
            .fetch_rows(&s, &[Col::Text, Col::Int, Col::Int])
            .await?;
        rows.into_iter()
            .map(|mut row| Ok((row.text()?, row.int()?, row.int()?)))
            .collect()
    }

    /// Takes the sampling period starting at `at` for this instance: true when no
    /// instance took it (or a later one) before. One row per application, moved forward
    /// by an `UPDATE` that only one instance's changes.
    async fn flow_slot_take(&self, application: &str, at: i64) -> Result<bool> {
        let (insert, tail) = self.dialect().insert_or_ignore();
        let mut s = self.sql(&format!(
            "{insert} async_flow_slot (application_name, at) VALUES ("
        ));
        s.bind_text(application).push(", 0)").push(tail);
        self.execute(&s).await?;
        let mut s = self.sql("UPDATE async_flow_slot SET at = ");
        s.bind_int(at)
            .push(" WHERE application_name = ")
            .bind_text(application)
            .push(" AND at < ")
            .bind_int(at);
        Ok(self.execute(&s).await? == 1)
    }

    /// Writes samples into `async_flow`.
    async fn flow_write(&self, application: &str, rows: &[SampleRow]) -> Result<()> {
        if rows.is_empty() {
            return Ok(());
        }
        let dialect = self.dialect();
        let statements = |_: &[Cells]| {
            rows.chunks(SAMPLE_CHUNK)
                .map(|chunk| {
                    let mut s = Sql::new(
                        dialect,
                        "INSERT INTO async_flow (application_name, queue_name, at, running, \
                         waiting, due, lag_ms, started, concurrency, verdict) VALUES ",
                    );
                    for (i, row) in chunk.iter().enumerate() {
                        let x = &row.sample;
                        s.push(if i == 0 { "(" } else { ", (" })
                            .bind_text(application)
                            .push(", ")
                            .bind_text(&row.queue);
                        for n in [x.at, x.running, x.waiting, x.due] {
                            s.push(", ").bind_int(n);
                        }
                        s.push(", ");
                        opt(&mut s, x.lag_ms);
                        s.push(", ").bind_int(x.started).push(", ");
                        opt(&mut s, x.concurrency);
                        s.push(", ").bind_text(x.verdict.as_str()).push(")");
                    }
                    s
                })
                .collect()
        };
        self.read_then_write(Txn::Batch, None, &statements).await?;
        Ok(())
    }

    /// The samples of `queue` from `since` on, oldest first.
    async fn flow_series(
        &self,
        application: &str,
        queue: &str,
        since: i64,
    ) -> Result<Vec<FlowSample>> {
        let mut s = self.sql(
            "SELECT at, running, waiting, due, lag_ms, started, concurrency, verdict \
             FROM async_flow WHERE application_name = ",
        );
        s.bind_text(application)
            .push(" AND queue_name = ")
            .bind_text(queue)
            .push(" AND at >= ")
            .bind_int(since)
            .push(" ORDER BY at");
        let columns = [
            Col::Int,
            Col::Int,
            Col::Int,
            Col::Int,
            Col::Int,
            Col::Int,
            Col::Int,
            Col::Text,
        ];
        let rows = self.fetch_rows(&s, &columns).await?;
        rows.into_iter()
            .map(|mut row| {
                Ok(FlowSample {
                    at: row.int()?,
                    running: row.int()?,
                    waiting: row.int()?,
                    due: row.int()?,
                    lag_ms: row.opt_int()?,
                    started: row.int()?,
                    concurrency: row.opt_int()?,
                    verdict: Verdict::parse(&row.text()?).unwrap_or(Verdict::Idle),
                })
            })
            .collect()
    }

    /// Deletes the samples of `application` taken before `before` (through
    /// `async_flow_at`).
    async fn flow_prune(&self, application: &str, before: i64) -> Result<u64> {
        let mut s = self.sql("DELETE FROM async_flow WHERE application_name = ");
        s.bind_text(application).push(" AND at < ").bind_int(before);
        self.execute(&s).await
    }
}

/// `WHERE` the records of `application` in `queues`.
fn of_queues(s: &mut Sql, application: &str, queues: &[&str]) {
    s.push(" WHERE application_name = ")
        .bind_text(application)
        .push(" AND queue_name IN (");
    for (i, queue) in queues.iter().enumerate() {
        if i > 0 {
            s.push(", ");
        }
        s.bind_text(queue);
    }
    s.push(")");
}

/// The live records of `queues` in one statement (one snapshot: two statements counted
/// a record claimed between them as waiting and running), a row per queue and kind:
/// `queue_name, running, waiting, due, oldest due`. Its waiting half reads the claim
/// index (`async_req_due`; `status IN ('init', 'failed')` is its predicate on PostgreSQL
/// and SQLite, and on MySQL/MariaDB, whose index holds every record, the queues' ranges:
/// a `queue_name <> ''` there read every record of the application), its running half
/// `async_req_running` (the claim index's ranges on MySQL/MariaDB). One `status IN
/// ('init', 'failed', 'running')` matched neither partial index and read the whole table
/// on PostgreSQL.
pub(crate) fn queue_live(d: Dialect, application: &str, queues: &[&str], now: i64) -> Sql {
    let mut s = Sql::new(
        d,
        &format!(
            "SELECT queue_name, {}, COUNT(*), COUNT(CASE WHEN run_at <= ",
            d.int64("0")
        ),
    );
    s.bind_int(now)
        .push(" THEN 1 END), MIN(CASE WHEN run_at <= ")
        .bind_int(now)
        .push(" THEN run_at END) FROM async_req");
    of_queues(&mut s, application, queues);
    s.push(&format!(
        " AND status IN ('init', 'failed') GROUP BY queue_name UNION ALL \
         SELECT queue_name, COUNT(*), {zero}, {zero}, {null} FROM async_req",
        zero = d.int64("0"),
        null = d.int64("NULL"),
    ));
    of_queues(&mut s, application, queues);
    s.push(" AND status = 'running' GROUP BY queue_name");
    s
}

/// The waiting records of `queue` by partition, the most first, at most `limit`: waiting
/// and the earliest due time. Through the claim index.
pub(crate) fn partitions_waiting(d: Dialect, application: &str, queue: &str, limit: i64) -> Sql {
    let mut s = Sql::new(
        d,
        "SELECT partition_key, COUNT(*) AS waiting, MIN(run_at) FROM async_req",
    );
    of_queues(&mut s, application, &[queue]);
    s.push(
        " AND status IN ('init', 'failed') GROUP BY partition_key \
         ORDER BY waiting DESC, partition_key LIMIT ",
    )
    .bind_int(limit);
    s
}

/// The running records of `queue` by partition, through `async_req_running`.
pub(crate) fn partitions_running(d: Dialect, application: &str, queue: &str) -> Sql {
    let mut s = Sql::new(d, "SELECT partition_key, COUNT(*) FROM async_req");
    of_queues(&mut s, application, &[queue]);
    s.push(" AND status = 'running' GROUP BY partition_key");
    s
}

/// Binds `n`, or writes `NULL`.
fn opt(s: &mut Sql, n: Option<i64>) {
    match n {
        Some(n) => s.bind_int(n),
        None => s.push("NULL"),
    };
}

impl<S: SqlRunner> FlowOps for S {}

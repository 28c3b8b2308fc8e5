//! The baseline: a hand-written SQL queue (a table, INSERTs, batched claims and batched
//! DELETEs) and its workers.

use super::*;

/// A pool of the backend in use.
#[derive(Clone)]
pub(crate) enum Pool {
    Sqlite(SqlitePool),
    Postgres(PgPool),
    Mysql(MySqlPool),
}

/// Runs the same code on whichever pool it is.
macro_rules! on_pool {
    ($pool:expr, |$p:ident| $body:expr) => {
        match $pool {
            Pool::Sqlite($p) => $body,
            Pool::Postgres($p) => $body,
            Pool::Mysql($p) => $body,
        }
    };
}

impl Pool {
    /// Connects as the library does (SQLite: WAL, `synchronous` as `--sqlite-synchronous`
    /// says, the same for both; 8 connections).
    pub(crate) async fn connect(kind: Kind, url: &str) -> Result<Pool> {
        Ok(match kind {
            Kind::Sqlite => {
                let options = SqliteConnectOptions::from_str(url)?
                    .create_if_missing(true)
                    .journal_mode(SqliteJournalMode::Wal)
                    .synchronous(sqlite_synchronous().0)
                    .busy_timeout(Duration::from_secs(10));
                Pool::Sqlite(
                    SqlitePoolOptions::new()
                        .max_connections(8)
                        .connect_with(options)
                        .await?,
                )
            }
            Kind::Postgres => {
                Pool::Postgres(PgPoolOptions::new().max_connections(8).connect(url).await?)
            }
            Kind::Mysql => Pool::Mysql(
                MySqlPoolOptions::new()
                    .max_connections(8)
                    .connect(url)
                    .await?,
            ),
        })
    }

    pub(crate) async fn execute(&self, sql: &str) -> Result<u64> {
        Ok(on_pool!(self, |p| sqlx::query(sql)
            .execute(p)
            .await?
            .rows_affected()))
    }

    pub(crate) async fn count(&self, table: &str) -> Result<i64> {
        let sql = format!("SELECT COUNT(*) FROM {table}");
        Ok(on_pool!(self, |p| sqlx::query_as::<_, (i64,)>(&sql)
            .fetch_one(p)
            .await?
            .0))
    }

    /// Empties a table between phases.
    pub(crate) async fn clear(&self, table: &str) -> Result<()> {
        match self {
            Pool::Sqlite(_) => self.execute(&format!("DELETE FROM {table}")).await?,
            _ => self.execute(&format!("TRUNCATE TABLE {table}")).await?,
        };
        Ok(())
    }

    /// Waits until a table is empty (completions are written after the bodies ran).
    pub(crate) async fn wait_empty(&self, table: &str, what: &str) -> Result<()> {
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            let left = self.count(table).await?;
            if left == 0 {
                return Ok(());
            }
            ensure!(
                Instant::now() < deadline,
                "{what}: {left} rows left in {table} after every body ran"
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    pub(crate) async fn close(&self) {
        on_pool!(self, |p| p.close().await)
    }
}

/// The hand-written queue: a table, INSERTs, batched claims and batched DELETEs.
#[derive(Clone)]
pub(crate) struct Queue {
    pub(crate) kind: Kind,
    pub(crate) pool: Pool,
}

impl Queue {
    pub(crate) async fn setup(&self) -> Result<()> {
        let statements: &[&str] = match self.kind {
            Kind::Sqlite => &[
                "CREATE TABLE IF NOT EXISTS bench_queue (id INTEGER PRIMARY KEY, \
                 status TEXT NOT NULL, payload TEXT NOT NULL, locked_until INTEGER)",
                "CREATE INDEX IF NOT EXISTS bench_queue_status ON bench_queue (status, id)",
                "CREATE TABLE IF NOT EXISTS bench_business (id INTEGER PRIMARY KEY, \
                 n INTEGER NOT NULL, note TEXT NOT NULL)",
            ],
            Kind::Postgres => &[
                "CREATE TABLE IF NOT EXISTS bench_queue (id BIGSERIAL PRIMARY KEY, \
                 status TEXT NOT NULL, payload TEXT NOT NULL, locked_until BIGINT)",
                "CREATE INDEX IF NOT EXISTS bench_queue_status ON bench_queue (status, id)",
                "CREATE TABLE IF NOT EXISTS bench_business (id BIGSERIAL PRIMARY KEY, \
                 n BIGINT NOT NULL, note TEXT NOT NULL)",
            ],
            Kind::Mysql => &[
                "CREATE TABLE IF NOT EXISTS bench_queue (id BIGINT NOT NULL AUTO_INCREMENT \
                 PRIMARY KEY, status VARCHAR(16) NOT NULL, payload TEXT NOT NULL, \
                 locked_until BIGINT, KEY bench_queue_status (status, id)) ENGINE = InnoDB",
                "CREATE TABLE IF NOT EXISTS bench_business (id BIGINT NOT NULL AUTO_INCREMENT \
                 PRIMARY KEY, n BIGINT NOT NULL, note TEXT NOT NULL) ENGINE = InnoDB",
            ],
        };
        for sql in statements {
            self.pool.execute(sql).await?;
        }
        Ok(())
    }

    pub(crate) fn insert_sql(&self) -> String {
        format!(
            "INSERT INTO bench_queue (status, payload) VALUES ('init', {})",
            self.kind.placeholder(1)
        )
    }

    /// One INSERT in its own transaction.
    pub(crate) async fn insert_one(&self, n: i64) -> Result<()> {
        let sql = self.insert_sql();
        on_pool!(&self.pool, |p| {
            let mut tx = p.begin().await?;
            sqlx::query(&sql).bind(payload(n)).execute(&mut *tx).await?;
            tx.commit().await?;
        });
        Ok(())
    }

    /// One INSERT per call, all in one transaction.
    pub(crate) async fn insert_each(&self, ns: Range<i64>) -> Result<()> {
        let sql = self.insert_sql();
        on_pool!(&self.pool, |p| {
            let mut tx = p.begin().await?;
            for n in ns {
                sqlx::query(&sql).bind(payload(n)).execute(&mut *tx).await?;
            }
            tx.commit().await?;
        });
        Ok(())
    }

    /// Multi-row INSERTs of [`CHUNK`] rows, all in one transaction.
    pub(crate) async fn insert_all_at_once(&self, ns: Range<i64>) -> Result<()> {
        let rows: Vec<String> = (1..=CHUNK)
            .map(|i| format!("('init', {})", self.kind.placeholder(i)))
            .collect();
        on_pool!(&self.pool, |p| {
            let mut tx = p.begin().await?;
            let mut start = ns.start;
            while start < ns.end {
                let chunk = start..(start + CHUNK as i64).min(ns.end);
                start = chunk.end;
                let sql = format!(
                    "INSERT INTO bench_queue (status, payload) VALUES {}",
                    rows[..chunk.clone().count()].join(", ")
                );
                let mut query = sqlx::query(&sql);
                for n in chunk {
                    query = query.bind(payload(n));
                }
                query.execute(&mut *tx).await?;
            }
            tx.commit().await?;
        });
        Ok(())
    }

    /// One multi-row INSERT, in one transaction.
    pub(crate) async fn insert_multi(&self, ns: Range<i64>) -> Result<()> {
        let rows: Vec<String> = (1..=ns.clone().count())
            .map(|i| format!("('init', {})", self.kind.placeholder(i)))
            .collect();
        let sql = format!(
            "INSERT INTO bench_queue (status, payload) VALUES {}",
            rows.join(", ")
        );
        on_pool!(&self.pool, |p| {
            let mut tx = p.begin().await?;
            let mut query = sqlx::query(&sql);
            for n in ns {
                query = query.bind(payload(n));
            }
            query.execute(&mut *tx).await?;
            tx.commit().await?;
        });
        Ok(())
    }

    /// Claims up to `limit` rows in one statement (MySQL: a locking read and an UPDATE
    /// in one transaction).
    pub(crate) async fn claim(&self, limit: i64) -> Result<Vec<(i64, String)>> {
        retry_conflicts(|| self.claim_once(limit)).await
    }

    pub(crate) async fn claim_once(&self, limit: i64) -> Result<Vec<(i64, String)>> {
        let lease_until = now_ms() + 30_000;
        Ok(match &self.pool {
            Pool::Sqlite(p) => {
                sqlx::query_as(
                    "UPDATE bench_queue SET status = 'running', locked_until = ? WHERE id IN \
                     (SELECT id FROM bench_queue WHERE status = 'init' ORDER BY id LIMIT ?) \
                     RETURNING id, payload",
                )
                .bind(lease_until)
                .bind(limit)
                .fetch_all(p)
                .await?
            }
            Pool::Postgres(p) => {
                sqlx::query_as(
                    "UPDATE bench_queue SET status = 'running', locked_until = $1 WHERE id IN \
                     (SELECT id FROM bench_queue WHERE status = 'init' ORDER BY id LIMIT $2 \
                     FOR UPDATE SKIP LOCKED) RETURNING id, payload",
                )
                .bind(lease_until)
                .bind(limit)
                .fetch_all(p)
                .await?
            }
            Pool::Mysql(p) => {
                let mut tx = p.begin().await?;
                let rows: Vec<(i64, String)> = sqlx::query_as(
                    "SELECT id, payload FROM bench_queue WHERE status = 'init' ORDER BY id \
                     LIMIT ? FOR UPDATE SKIP LOCKED",
                )
                .bind(limit)
                .fetch_all(&mut *tx)
                .await?;
                if !rows.is_empty() {
                    let sql = format!(
                        "UPDATE bench_queue SET status = 'running', locked_until = ? \
                         WHERE id IN {}",
                        self.kind.tuple(2, rows.len())
                    );
                    let mut query = sqlx::query(&sql).bind(lease_until);
                    for (id, _) in &rows {
                        query = query.bind(id);
                    }
                    query.execute(&mut *tx).await?;
                }
                tx.commit().await?;
                rows
            }
        })
    }

    pub(crate) async fn delete(&self, ids: &[i64]) -> Result<()> {
        retry_conflicts(|| self.delete_once(ids)).await
    }

    pub(crate) async fn delete_once(&self, ids: &[i64]) -> Result<()> {
        let sql = format!(
            "DELETE FROM bench_queue WHERE id IN {}",
            self.kind.tuple(1, ids.len())
        );
        on_pool!(&self.pool, |p| {
            let mut query = sqlx::query(&sql);
            for id in ids {
                query = query.bind(id);
            }
            query.execute(p).await?;
        });
        Ok(())
    }
}

/// Runs `op` again when the database reports a deadlock or a serialization failure
/// (SQLSTATE 40001): MariaDB's claims and deletes of neighbouring rows deadlock now and then.
pub(crate) async fn retry_conflicts<T, Fut>(mut op: impl FnMut() -> Fut) -> Result<T>
where
    Fut: Future<Output = Result<T>>,
{
    let mut conflicts = 0;
    loop {
        match op().await {
            Err(error) if conflicts < 20 && is_conflict(&error) => conflicts += 1,
            outcome => return outcome,
        }
    }
}

pub(crate) fn is_conflict(error: &anyhow::Error) -> bool {
    matches!(error.downcast_ref::<sqlx::Error>(),
        Some(sqlx::Error::Database(e)) if e.code().as_deref() == Some("40001"))
}

/// The baseline's workers: one claimer that claims in batches and runs `concurrency`
/// bodies at once, and one task that deletes completed ids in batches.
pub(crate) struct QueueWorker {
    pub(crate) wake: Arc<Notify>,
    pub(crate) stop: watch::Sender<bool>,
    pub(crate) task: tokio::task::JoinHandle<Result<()>>,
}

impl QueueWorker {
    pub(crate) fn start(queue: Queue, hits: Arc<Hits>, concurrency: usize) -> QueueWorker {
        Self::start_polling(queue, hits, concurrency, Duration::from_secs(1))
    }

    /// Workers that look for rows every `idle` while they find none (and at once when
    /// [`notify`](Self::notify)-ed).
    pub(crate) fn start_polling(
        queue: Queue,
        hits: Arc<Hits>,
        concurrency: usize,
        idle: Duration,
    ) -> QueueWorker {
        let wake = Arc::new(Notify::new());
        let (stop, stopped) = watch::channel(false);
        let task = tokio::spawn(Self::run(
            queue,
            hits,
            concurrency,
            idle,
            wake.clone(),
            stopped,
        ));
        QueueWorker { wake, stop, task }
    }

    pub(crate) async fn run(
        queue: Queue,
        hits: Arc<Hits>,
        concurrency: usize,
        idle: Duration,
        wake: Arc<Notify>,
        mut stopped: watch::Receiver<bool>,
    ) -> Result<()> {
        let permits = Arc::new(Semaphore::new(concurrency));
        let (done_tx, mut done_rx) = mpsc::unbounded_channel::<i64>();
        let deleter = tokio::spawn({
            let queue = queue.clone();
            async move {
                let mut ids = Vec::with_capacity(DELETE_BATCH);
                while done_rx.recv_many(&mut ids, DELETE_BATCH).await > 0 {
                    queue.delete(&ids).await?;
                    ids.clear();
                }
                anyhow::Ok(())
            }
        });
        loop {
            if *stopped.borrow() {
                break;
            }
            let rows = queue.claim(CLAIM_BATCH).await?;
            if rows.is_empty() {
                tokio::select! {
                    _ = wake.notified() => {}
                    _ = tokio::time::sleep(idle) => {}
                    _ = stopped.changed() => {}
                }
                continue;
            }
            for (id, json) in rows {
                let permit = permits.clone().acquire_owned().await?;
                let hits = hits.clone();
                let done = done_tx.clone();
                tokio::spawn(async move {
                    let Payload { n } = serde_json::from_str(&json).expect("a baseline payload");
                    hits.hit(n);
                    let _ = done.send(id);
                    drop(permit);
                });
            }
        }
        let _ = permits.acquire_many(concurrency as u32).await?;
        drop(done_tx);
        deleter.await??;
        Ok(())
    }

    /// Tells the claimer that a row was committed (the in-process wake-up).
    pub(crate) fn notify(&self) {
        self.wake.notify_one();
    }

    /// Finishes the bodies started, deletes their rows, and stops.
    pub(crate) async fn stop(self) -> Result<()> {
        let _ = self.stop.send(true);
        self.task.await?
    }
}

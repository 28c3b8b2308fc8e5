//! The SQLite store: the embedded default, for one process.

use std::any::Any;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use sqlx::{Sqlite, SqliteConnection, SqlitePool};

use super::rows::claimed_from_json;
use super::sealed::BackendOps;
use super::{
    Backend, ClaimDue, ClaimIds, Completion, PurgeBatch, Purged, Rescued, Store, StoredKey, Wrote,
};
use crate::base::error::{Error, Result};
use crate::base::record::{
    AttemptLog, Claimed, ClaimedId, Inserted, NewRequest, Request, RequestId, Status,
};
use crate::base::registry::BoxFuture;

mod claims;
mod complete;
mod insert;
mod instances;
mod keys;
mod open;
mod ops;
mod purge;

use claims::{claim_due, claim_ids, release, rescue, SqliteLeases};
use insert::{insert_many, insert_request};

/// Records in a SQLite database file (WAL mode).
#[derive(Debug, Clone)]
pub struct SqliteStore {
    pool: SqlitePool,
    /// The connection of the runtime's own writes (claims, outcomes, leases), one at a
    /// time: SQLite has one writer at a time, and a write that finds the database locked
    /// sleeps in SQLite's busy handler (milliseconds). Queued here, the next write starts
    /// as the last one ends (drain 90k to 104k jobs/s). The application's transactions
    /// use the pool.
    writer: Arc<tokio::sync::Mutex<Option<SqliteConnection>>>,
    /// How long opening the writer may find the file busy (the busy timeout).
    open_patience: Duration,
}

/// How long opening the writer beside a handed-in pool may find the file busy (sqlx's
/// default busy timeout).
const HANDED_IN_OPEN_PATIENCE: Duration = Duration::from_secs(5);

/// The runtime's writer connection, held: a connection of its own rather than one from
/// the pool, because sqlx pings every connection it takes back (a thread hop per write).
struct Writer<'a>(tokio::sync::MutexGuard<'a, Option<SqliteConnection>>);

impl Writer<'_> {
    fn conn(&mut self) -> &mut SqliteConnection {
        self.0.as_mut().expect("connected when taken")
    }

    /// Passes `result` on; after an error that may have broken the connection, drops it
    /// (the next write opens another).
    fn check<T>(mut self, result: Result<T>) -> Result<T> {
        if let Err(Error::Database(
            sqlx::Error::Io(_) | sqlx::Error::WorkerCrashed | sqlx::Error::Protocol(_),
        )) = &result
        {
            *self.0 = None;
        }
        result
    }
}

/// Whether a migration failed because another runtime recorded the same version first.
fn applied_by_another(e: &sqlx::migrate::MigrateError) -> bool {
    use sqlx::migrate::MigrateError::{Execute, ExecuteMigration};
    match e {
        Execute(sqlx::Error::Database(d)) => {
            (d.is_unique_violation() && d.message().contains("_sqlx_migrations")) || is_busy(&**d)
        }
        // A migration's transaction reads, then writes (`CREATE TABLE IF NOT EXISTS` of a
        // table another runtime just made, then an `INSERT ... SELECT`): when another
        // runtime commits in between, SQLite refuses the write at once (SQLITE_BUSY, 5,
        // or SQLITE_BUSY_SNAPSHOT, 517: no busy wait can help a stale snapshot). Seen with
        // four runtimes starting on one new file. The transaction was rolled back: run
        // again, and the migrator finds what the other one applied.
        ExecuteMigration(sqlx::Error::Database(d), _) => {
            // SQLite's `ALTER TABLE ... ADD COLUMN` has no `IF NOT EXISTS`: a runtime whose
            // migrator read the applied list before another runtime's transaction added
            // the column (and recorded the migration) finds the column there once that
            // commits. Seen with four runtimes starting on one new file (CI, migration
            // 20261206000003). Rolled back: run again, and the migrator finds it applied.
            is_busy(&**d) || d.message().starts_with("duplicate column name")
        }
        _ => false,
    }
}

/// SQLITE_BUSY (5) or one of its extended codes (517: BUSY_SNAPSHOT, 261: BUSY_RECOVERY).
fn is_busy(d: &dyn sqlx::error::DatabaseError) -> bool {
    d.code()
        .and_then(|code| code.parse::<i32>().ok())
        .is_some_and(|code| code & 0xff == 5)
}

impl SqliteStore {
    /// Opens (creating if missing) the database at `url` (`sqlite:path.db`, `sqlite::memory:`)
    /// in WAL mode, committing as durably as `synchronous` says.
    /// A write waits up to `busy_timeout` for another transaction's write lock.
    pub async fn connect(
        url: &str,
        max_connections: u32,
        synchronous: crate::SqliteSynchronous,
        busy_timeout: Duration,
    ) -> Result<Self> {
        let options = open::options(url, synchronous, busy_timeout)?;
        let file = options.get_filename().display().to_string();
        let pool = open::pool(options, max_connections, busy_timeout)
            .await
            .map_err(|cause| super::reach::unreachable("SQLite", &file, cause))?;
        Ok(SqliteStore {
            pool,
            writer: Default::default(),
            open_patience: busy_timeout,
        })
    }

    /// Uses an existing pool (the application's own). The runtime's own writes use one
    /// more connection, opened on first use with the pool's connect options.
    pub fn from_pool(pool: SqlitePool) -> Self {
        SqliteStore {
            pool,
            writer: Default::default(),
            open_patience: HANDED_IN_OPEN_PATIENCE,
        }
    }

    /// The pool behind this store.
    pub fn pool(&self) -> &SqlitePool {
        &self.pool
    }

    /// Takes the writer connection, opening it (with the pool's options) if needed.
    async fn writer(&self) -> Result<Writer<'_>> {
        let mut guard = self.writer.lock().await;
        if guard.is_none() {
            let options = self.pool.connect_options();
            *guard = Some(open::connection(&options, self.open_patience).await?);
        }
        Ok(Writer(guard))
    }
}

fn json_list<T: serde::Serialize>(items: &[T]) -> String {
    serde_json::to_string(items).expect("a list of ids or names serializes")
}

#[allow(private_interfaces)]
impl BackendOps for Sqlite {
    fn begin_on(
        store: &dyn Any,
    ) -> Option<BoxFuture<'_, Result<sqlx::Transaction<'static, Self>>>> {
        let store = store.downcast_ref::<SqliteStore>()?;
        // IMMEDIATE: the write lock at the BEGIN. A deferred transaction reads from the
        // snapshot of its first read and, when another write committed since, fails its
        // first write at once with SQLITE_BUSY_SNAPSHOT (the busy timeout does not apply);
        // its lookup of a `SyncSave` key would also miss a key committed since.
        Some(Box::pin(async move {
            Ok(store.pool.begin_with("BEGIN IMMEDIATE").await?)
        }))
    }

    fn rows_affected(result: &sqlx::sqlite::SqliteQueryResult) -> u64 {
        result.rows_affected()
    }

    fn quota_lock_in<'c>(
        conn: &'c mut SqliteConnection,
        application: &'c str,
        scope: &'c str,
    ) -> BoxFuture<'c, Result<()>> {
        Box::pin(crate::store::shared::quota_lock::<sqlx::Sqlite>(
            conn,
            application,
            scope,
        ))
    }

    fn cancel_in<'c>(
        conn: &'c mut SqliteConnection,
        application: &'c str,
        id: RequestId,
        now: i64,
    ) -> BoxFuture<'c, Result<std::result::Result<(), Option<Status>>>> {
        Box::pin(crate::store::actions_in::cancel_one::<sqlx::Sqlite>(
            conn,
            application,
            id,
            now,
        ))
    }

    fn act_matching_in<'c>(
        conn: &'c mut SqliteConnection,
        application: &'c str,
        query: &'c crate::base::query::RequestQuery,
        action: crate::base::query::Action,
        now: i64,
    ) -> BoxFuture<'c, Result<u64>> {
        Box::pin(crate::store::actions_in::act_matching::<sqlx::Sqlite>(
            conn,
            application,
            query,
            action,
            now,
        ))
    }

    fn cancel_matching_in<'c>(
        conn: &'c mut SqliteConnection,
        application: &'c str,
        query: &'c crate::base::query::RequestQuery,
        now: i64,
    ) -> BoxFuture<'c, Result<crate::store::CancelCounts>> {
        Box::pin(crate::store::actions_in::cancel_matching::<sqlx::Sqlite>(
            conn,
            application,
            query,
            now,
        ))
    }

    fn key_find_in<'c>(
        conn: &'c mut SqliteConnection,
        application: &'c str,
        key: &'c str,
        now: i64,
    ) -> BoxFuture<'c, Result<Option<StoredKey>>> {
        Box::pin(crate::store::shared::key_find::<sqlx::Sqlite>(
            conn,
            crate::store::shared::Lock::No,
            application,
            key,
            now,
        ))
    }

    fn key_record_in<'c>(
        conn: &'c mut SqliteConnection,
        request: &'c NewRequest,
    ) -> BoxFuture<'c, Result<()>> {
        Box::pin(keys::record(conn, request))
    }

    fn insert_in<'c>(
        conn: &'c mut SqliteConnection,
        request: &'c NewRequest,
    ) -> BoxFuture<'c, Result<Inserted>> {
        Box::pin(insert_request(conn, request))
    }

    fn insert_many_in<'c>(
        conn: &'c mut SqliteConnection,
        requests: &'c [NewRequest],
    ) -> BoxFuture<'c, Result<Vec<Inserted>>> {
        Box::pin(insert_many(conn, requests))
    }
}

impl Backend for Sqlite {
    type Conn<'c> = &'c mut sqlx::SqliteConnection;

    fn executor(conn: &mut sqlx::SqliteConnection) -> &mut sqlx::SqliteConnection {
        conn
    }
}

#[async_trait]
impl Store for SqliteStore {
    fn backend_name(&self) -> &'static str {
        "Sqlite"
    }

    /// Claims of 512 (not 128): drains 0.98x to 1.07x of the hand-written queue, not
    /// 0.82x to 0.87x; every claim and outcome waits for the one writer, so fewer and
    /// larger writes win. One instance usually has the file to itself.
    fn claim_batch(&self) -> i64 {
        512
    }

    fn as_any(&self) -> &dyn Any {
        self
    }

    fn ops(&self) -> &dyn super::ops::OpsStore {
        self
    }

    async fn migrate(&self) -> Result<()> {
        let mut migrator = sqlx::migrate!("../migrations/sqlite");
        // The application may keep its own sqlx migrations in the same database.
        migrator.set_ignore_missing(true);
        // Up to date already (every start but the first after an upgrade): no lock taken.
        let applied: std::result::Result<Vec<super::migrations::AppliedRow>, _> =
            sqlx::query_as(super::migrations::APPLIED)
                .fetch_all(&self.pool)
                .await;
        if applied.is_ok_and(|applied| super::migrations::up_to_date(&migrator, &applied)) {
            return Ok(());
        }
        // sqlx takes no lock on SQLite: runtimes starting together on one file may each
        // apply a migration, and the second one's record of it fails (the schema itself is
        // written with `IF NOT EXISTS`, in the migration's transaction). It was applied:
        // run again, and the migrator finds it done.
        let mut raced = 0;
        loop {
            match migrator.run(&self.pool).await {
                Ok(()) => return Ok(()),
                Err(e) if raced < 50 && applied_by_another(&e) => {
                    raced += 1;
                    tokio::time::sleep(std::time::Duration::from_millis(20)).await;
                }
                Err(e) => return Err(Error::Migrate(e)),
            }
        }
    }

    async fn request_insert(&self, request: &NewRequest) -> Result<Inserted> {
        let mut tx = self.pool.begin().await?;
        let inserted = insert_request(&mut tx, request).await?;
        tx.commit().await?;
        Ok(inserted)
    }

    async fn request_insert_many(&self, requests: &[NewRequest]) -> Result<Vec<Inserted>> {
        let mut tx = self.pool.begin().await?;
        let inserted = insert_many(&mut tx, requests).await?;
        tx.commit().await?;
        Ok(inserted)
    }

    async fn request_claim_ids(&self, p: ClaimIds<'_>) -> Result<Vec<ClaimedId>> {
        let mut writer = self.writer().await?;
        let result = claim_ids(writer.conn(), p).await;
        writer.check(result)
    }

    async fn request_claim_due(&self, p: ClaimDue<'_>) -> Result<Vec<Claimed>> {
        // The rows are decoded after the writer is handed on: claims and outcome writes
        // queue for it, and decoding a batch of hundreds is no work of the database's.
        let rows = {
            let mut writer = self.writer().await?;
            let result = claim_due(writer.conn(), p).await;
            writer.check(result)?
        };
        rows.iter()
            .map(|row| claimed_from_json(sqlx::Row::try_get(row, 0)?))
            .collect()
    }

    async fn request_complete_many(&self, completions: &[Completion]) -> Result<Wrote> {
        let mut writer = self.writer().await?;
        let result = complete::complete_many(writer.conn(), completions).await;
        writer.check(result)
    }

    fn lease_keeper(&self) -> Arc<dyn super::LeaseKeeper> {
        Arc::new(SqliteLeases {
            store: self.clone(),
        })
    }

    async fn lease_release(&self, owner: &str, held: &[super::Held], now: i64) -> Result<u64> {
        let mut writer = self.writer().await?;
        let result = release(writer.conn(), owner, held, now).await;
        writer.check(result)
    }

    async fn lease_claimed_at(
        &self,
        application: &str,
        owner: &str,
        claimed_at: &[i64],
    ) -> Result<Vec<super::Held>> {
        claims::claimed_at(&self.pool, application, owner, claimed_at).await
    }

    async fn request_rescue(&self, batch: super::RescueBatch<'_>) -> Result<Rescued> {
        let mut writer = self.writer().await?;
        let result = rescue(writer.conn(), batch).await;
        writer.check(result)
    }

    async fn instance_announce(
        &self,
        a: &super::Announce<'_>,
    ) -> Result<Vec<crate::base::record::InstanceInfo>> {
        {
            let mut writer = self.writer().await?;
            let result = instances::announce(writer.conn(), a).await;
            writer.check(result)?;
        }
        instances::list(&self.pool, a.application, a.list_within_ms).await
    }

    async fn instance_leave(&self, owner: &str) -> Result<()> {
        let mut writer = self.writer().await?;
        let result = instances::leave(writer.conn(), owner).await;
        writer.check(result)
    }

    async fn instance_list(
        &self,
        application: &str,
        seen_within_ms: i64,
    ) -> Result<Vec<crate::base::record::InstanceInfo>> {
        instances::list(&self.pool, application, seen_within_ms).await
    }

    async fn request_get(&self, application: &str, id: RequestId) -> Result<Option<Request>> {
        super::records::get(self, application, id).await
    }

    async fn request_count_by_status(&self, application: &str) -> Result<Vec<(Status, i64)>> {
        super::records::count_by_status(self, application).await
    }

    async fn request_retry_now(
        &self,
        application: &str,
        id: RequestId,
        now: i64,
        rerun: super::Rerun,
    ) -> Result<Option<Status>> {
        super::records::retry_now(self, application, id, now, rerun).await
    }

    async fn request_cancel(
        &self,
        application: &str,
        id: RequestId,
        now: i64,
    ) -> Result<Option<Status>> {
        super::records::cancel(self, application, id, now).await
    }

    async fn request_purge(&self, batch: &PurgeBatch<'_>) -> Result<Purged> {
        purge::requests(&self.pool, batch).await
    }

    async fn log_purge_orphans(&self, application: &str, before: i64, limit: i64) -> Result<u64> {
        purge::orphan_logs(&self.pool, application, before, limit).await
    }

    async fn request_delete(&self, application: &str, id: RequestId) -> Result<Option<Status>> {
        super::records::delete(self, application, id).await
    }

    async fn log_list(&self, application: &str, id: RequestId) -> Result<Vec<AttemptLog>> {
        super::records::logs(self, application, id).await
    }

    async fn key_find(&self, application: &str, key: &str, now: i64) -> Result<Option<StoredKey>> {
        let mut conn = self.pool.acquire().await?;
        crate::store::shared::key_find::<sqlx::Sqlite>(
            &mut conn,
            crate::store::shared::Lock::No,
            application,
            key,
            now,
        )
        .await
    }

    async fn key_record(&self, request: &NewRequest) -> Result<()> {
        let mut tx = self.pool.begin().await?;
        keys::record(&mut tx, request).await?;
        tx.commit().await?;
        Ok(())
    }

    async fn key_expire(&self, application: &str, now: i64, limit: i64) -> Result<u64> {
        let mut writer = self.writer().await?;
        let result = keys::expire(writer.conn(), application, now, limit).await;
        writer.check(result)
    }

    async fn request_postpone(&self, moves: &[(RequestId, i64)]) -> Result<u64> {
        let mut writer = self.writer().await?;
        let result = postpone(writer.conn(), moves).await;
        writer.check(result)
    }

    async fn request_make_due(&self, application: &str) -> Result<u64> {
        let mut writer = self.writer().await?;
        let result = sqlx::query(&format!(
            "UPDATE async_req SET run_at = {DB_NOW} \
             WHERE application_name = ? AND status IN ('init', 'failed') AND run_at > {DB_NOW}"
        ))
        .bind(application)
        .execute(writer.conn())
        .await
        .map(|done| done.rows_affected())
        .map_err(Into::into);
        writer.check(result)
    }

    async fn db_now_ms(&self) -> Result<i64> {
        let now: i64 = sqlx::query_scalar(&format!("SELECT {DB_NOW}"))
            .fetch_one(&self.pool)
            .await?;
        Ok(now)
    }

    async fn request_count_elsewhere(
        &self,
        application: &str,
        executors: &[&'static str],
    ) -> Result<Vec<(String, i64)>> {
        Ok(sqlx::query_as(
            "SELECT application_name, COUNT(*) FROM async_req \
             WHERE application_name <> ? AND status IN ('init', 'failed') \
               AND executor IN (SELECT value FROM json_each(?)) \
             GROUP BY application_name ORDER BY application_name",
        )
        .bind(application)
        .bind(json_list(executors))
        .fetch_all(&self.pool)
        .await?)
    }
}

/// Moves due times of records that waited for their transaction's commit.
async fn postpone(conn: &mut SqliteConnection, moves: &[(RequestId, i64)]) -> Result<u64> {
    let mut moved = 0;
    let sql = format!(
        "UPDATE async_req SET run_at = MAX(run_at, {DB_NOW} + ?) \
         WHERE id = ? AND status = 'init' AND exec_count = 0"
    );
    for &(id, after_ms) in moves {
        moved += sqlx::query(&sql)
            .bind(after_ms)
            .bind(id)
            .execute(&mut *conn)
            .await?
            .rows_affected();
    }
    Ok(moved)
}

// The runtime's own writes, on the writer connection (`SqliteStore::writer`): the claims
// and leases in `claims.rs`, the outcomes in `complete.rs`.

/// The database's clock in unix ms, as SQL (the same in every statement of one file's
/// users on one machine; kept like the other backends so that the SQL reads the same).
/// SQLite keeps the time in whole milliseconds and gives it out as a Julian day in a
/// double, whose conversion back lands a hair either side of the millisecond: rounded, it
/// is exact (truncated, half the readings were a millisecond short).
pub(super) const DB_NOW: &str =
    "CAST(ROUND((julianday('now') - 2440587.5) * 86400000.0) AS INTEGER)";

//! The MySQL/MariaDB store: for several processes sharing one MySQL 8 or MariaDB 10.6+
//! database.
//!
//! Neither has `UPDATE ... RETURNING`, so a claim is a transaction: lock the rows with
//! `SELECT ... FOR UPDATE SKIP LOCKED`, mark them `running`, commit. The store's own
//! transactions run in `READ COMMITTED`, so that their locking reads take no gap locks
//! (fewer waits for the callers' inserts, fewer deadlocks); a transaction that still
//! deadlocks (error 1213) is run again a few times. There is no `NOTIFY`: other
//! instances find new records by polling.

use std::any::Any;
use std::future::Future;
use std::str::FromStr;
use std::time::Duration;

use async_trait::async_trait;
use sqlx::mysql::{MySqlArguments, MySqlConnectOptions, MySqlDatabaseError, MySqlPoolOptions};
use sqlx::query::Query;
use sqlx::{MySql, MySqlConnection, MySqlPool, Row, Transaction};

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
mod leases;
mod ops;
#[cfg(test)]
mod plan_fixture;
mod purge;
mod rescue;
mod rows;

use insert::{insert_many, insert_request};
use rows::{claimed_from_row, text};

/// Records in a MySQL or MariaDB database (InnoDB).
#[derive(Debug, Clone)]
pub struct MySqlStore {
    pool: MySqlPool,
    /// Announcements of this instance, on a connection of their own.
    presence: std::sync::Arc<super::dedicated::DedicatedConnection<sqlx::MySql>>,
}

/// How long an instance waits for another one's migrations (seconds).
const MIGRATE_LOCK_WAIT_S: i64 = 120;

impl MySqlStore {
    /// Connects to the database at `url` (`mysql://user:password@host:3306/database`).
    pub async fn connect(url: &str, max_connections: u32) -> Result<Self> {
        Self::open(url, max_connections, None).await
    }

    /// [`Self::connect`]; with `abandoned`, the pool's pings are bounded (see
    /// `store::bounded::guard_pool`).
    pub(crate) async fn open(
        url: &str,
        max_connections: u32,
        abandoned: Option<std::sync::Arc<super::bounded::Abandoned>>,
    ) -> Result<Self> {
        let options = MySqlConnectOptions::from_str(url)?;
        let target = super::reach::server_target(
            options.get_username(),
            options.get_host(),
            options.get_port(),
            options.get_socket().map(|p| p.as_path()),
            options.get_database(),
        );
        let mut pool_options = MySqlPoolOptions::new().max_connections(max_connections.max(1));
        if let Some(abandoned) = abandoned {
            pool_options = super::bounded::guard_pool(pool_options, abandoned);
        }
        let open = pool_options.connect_with(options.clone());
        let pool = super::reach::open_pool::<sqlx::MySqlConnection, _>(
            open,
            &options,
            "MySQL/MariaDB",
            &target,
        )
        .await?;
        Ok(MySqlStore::from_pool(pool))
    }

    /// Uses an existing pool (the application's own).
    pub fn from_pool(pool: MySqlPool) -> Self {
        let presence = std::sync::Arc::new(super::dedicated::DedicatedConnection::new(
            (*pool.connect_options()).clone(),
        ));
        MySqlStore { pool, presence }
    }

    /// The pool behind this store.
    pub fn pool(&self) -> &MySqlPool {
        &self.pool
    }

    /// Begins one of the store's own transactions, in `READ COMMITTED` (one round trip).
    async fn begin(&self) -> Result<Transaction<'static, MySql>> {
        crate::store::begin::begin_whole(
            &self.pool,
            Some("SET TRANSACTION ISOLATION LEVEL READ COMMITTED; START TRANSACTION"),
        )
        .await
    }
}

const CLAIMED_COLUMNS: &str =
    "id, executor, sign, param_json, exec_count, max_attempts, trace_json, priority, run_at, \
    idempotency_key, deadline_at";

/// The most binds in one `IN (...)` list; longer lists are split.
const MAX_IN: usize = 1024;

/// How many times a transaction that deadlocked is run again.
const DEADLOCK_RETRIES: u32 = 5;

/// `?, ?, ...` for a list of `n` items, padded (see [`padded`]).
fn marks(n: usize) -> String {
    let n = padded(n);
    let mut s = String::with_capacity(n * 3);
    for i in 0..n {
        if i > 0 {
            s.push_str(", ");
        }
        s.push('?');
    }
    s
}

/// Lists are padded to a power of two (repeating their last item), so that a few
/// statements, each prepared once per connection, serve every length.
fn padded(n: usize) -> usize {
    n.max(1).next_power_of_two()
}

/// Binds the items of an `IN` list made by [`marks`].
fn bind_list<'q, T>(
    mut query: Query<'q, MySql, MySqlArguments>,
    items: &'q [T],
) -> Query<'q, MySql, MySqlArguments>
where
    T: sqlx::Encode<'q, MySql> + sqlx::Type<MySql> + Copy + Send + 'q,
{
    for i in 0..padded(items.len()) {
        query = query.bind(items[i.min(items.len() - 1)]);
    }
    query
}

/// `(?, ?), (?, ?), ...` for a list of `n` pairs, padded as [`marks`] pads.
pub(super) fn pair_marks(n: usize) -> String {
    vec!["(?, ?)"; padded(n)].join(", ")
}

/// Binds the (id, attempt) pairs of a list made by [`pair_marks`].
pub(super) fn bind_pairs<'q>(
    mut query: Query<'q, MySql, MySqlArguments>,
    pairs: &'q [super::Held],
) -> Query<'q, MySql, MySqlArguments> {
    for i in 0..padded(pairs.len()) {
        let (id, attempt) = pairs[i.min(pairs.len() - 1)];
        query = query.bind(id).bind(attempt);
    }
    query
}

/// The server's error number, when the error is the server's.
fn error_number(error: &sqlx::Error) -> Option<u16> {
    match error {
        sqlx::Error::Database(db) => db
            .try_downcast_ref::<MySqlDatabaseError>()
            .map(MySqlDatabaseError::number),
        _ => None,
    }
}

/// A deadlock (1213) rolled the transaction back; so does a snapshot conflict of MariaDB's
/// `innodb_snapshot_isolation` (1020). Running it again is safe.
fn is_retryable(error: &Error) -> bool {
    matches!(error, Error::Database(e) if matches!(error_number(e), Some(1213 | 1020)))
}

/// Runs `op` (one whole transaction) again when it deadlocked.
async fn with_retry<T, F, Fut>(mut op: F) -> Result<T>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<T>>,
{
    let mut retries = 0;
    loop {
        match op().await {
            Err(error) if retries < DEADLOCK_RETRIES && is_retryable(&error) => {
                retries += 1;
                crate::log::debug!(error = %crate::log::escaped(&error), retries, "MySQL transaction deadlocked; running it again");
                let jitter = rand::random::<u64>() % 10;
                tokio::time::sleep(Duration::from_millis(u64::from(retries) * 5 + jitter)).await;
            }
            result => return result,
        }
    }
}

#[allow(private_interfaces)]
impl BackendOps for MySql {
    fn begin_on(
        store: &dyn Any,
    ) -> Option<BoxFuture<'_, Result<sqlx::Transaction<'static, Self>>>> {
        let store = store.downcast_ref::<MySqlStore>()?;
        Some(Box::pin(async move {
            crate::store::begin::begin_whole(&store.pool, None).await
        }))
    }

    fn check_open_in(conn: &mut MySqlConnection) -> BoxFuture<'_, Result<()>> {
        Box::pin(super::alive::mysql::check(conn))
    }

    const A_STATEMENT_PROVES_OPEN: bool = false;

    fn check_before_write(conn: &mut MySqlConnection) -> BoxFuture<'_, Result<()>> {
        Box::pin(super::alive::mysql::check(conn))
    }

    fn rows_affected(result: &sqlx::mysql::MySqlQueryResult) -> u64 {
        result.rows_affected()
    }

    fn quota_lock_in<'c>(
        conn: &'c mut MySqlConnection,
        application: &'c str,
        scope: &'c str,
    ) -> BoxFuture<'c, Result<()>> {
        Box::pin(crate::store::shared::quota_lock::<sqlx::MySql>(
            conn,
            application,
            scope,
        ))
    }

    fn cancel_in<'c>(
        conn: &'c mut MySqlConnection,
        application: &'c str,
        id: RequestId,
        now: i64,
    ) -> BoxFuture<'c, Result<std::result::Result<(), Option<Status>>>> {
        Box::pin(crate::store::actions_in::cancel_one::<sqlx::MySql>(
            conn,
            application,
            id,
            now,
        ))
    }

    fn act_matching_in<'c>(
        conn: &'c mut MySqlConnection,
        application: &'c str,
        query: &'c crate::base::query::RequestQuery,
        action: crate::base::query::Action,
        now: i64,
    ) -> BoxFuture<'c, Result<u64>> {
        Box::pin(crate::store::actions_in::act_matching::<sqlx::MySql>(
            conn,
            application,
            query,
            action,
            now,
        ))
    }

    fn cancel_matching_in<'c>(
        conn: &'c mut MySqlConnection,
        application: &'c str,
        query: &'c crate::base::query::RequestQuery,
        now: i64,
    ) -> BoxFuture<'c, Result<crate::store::CancelCounts>> {
        Box::pin(crate::store::actions_in::cancel_matching::<sqlx::MySql>(
            conn,
            application,
            query,
            now,
        ))
    }

    fn key_find_in<'c>(
        conn: &'c mut MySqlConnection,
        application: &'c str,
        key: &'c str,
        now: i64,
    ) -> BoxFuture<'c, Result<Option<StoredKey>>> {
        Box::pin(crate::store::shared::key_find::<sqlx::MySql>(
            conn,
            crate::store::shared::Lock::ForUpdate,
            application,
            key,
            now,
        ))
    }

    fn key_record_in<'c>(
        conn: &'c mut MySqlConnection,
        request: &'c NewRequest,
    ) -> BoxFuture<'c, Result<()>> {
        Box::pin(keys::record(conn, request))
    }

    fn insert_in<'c>(
        conn: &'c mut MySqlConnection,
        request: &'c NewRequest,
    ) -> BoxFuture<'c, Result<Inserted>> {
        Box::pin(insert_request(conn, request))
    }

    fn insert_many_in<'c>(
        conn: &'c mut MySqlConnection,
        requests: &'c [NewRequest],
    ) -> BoxFuture<'c, Result<Vec<Inserted>>> {
        Box::pin(insert_many(conn, requests))
    }
}

impl Backend for MySql {
    type Conn<'c> = &'c mut sqlx::MySqlConnection;

    fn executor(conn: &mut sqlx::MySqlConnection) -> &mut sqlx::MySqlConnection {
        conn
    }
}

/// The database's clock in unix ms, as SQL: leases are set and compared with it in the
/// statement itself, so that instances whose clocks differ agree on them.
pub(super) const DB_NOW: &str = "CAST(UNIX_TIMESTAMP(NOW(3)) * 1000 AS SIGNED)";

impl MySqlStore {
    /// Running records whose lease expired: back to `failed`, or `dead`.
    async fn rescue_once(&self, batch: super::RescueBatch<'_>) -> Result<Rescued> {
        rescue::rescue_once(self, batch).await
    }
}

#[async_trait]
impl Store for MySqlStore {
    fn backend_name(&self) -> &'static str {
        "MySql"
    }

    fn concurrent_writes(&self) -> usize {
        (self.pool.options().get_max_connections() as usize / 4).max(1)
    }

    /// No `NOTIFY`: other instances' requests are found by polling, so poll often.
    fn default_poll_interval(&self) -> std::time::Duration {
        std::time::Duration::from_millis(250)
    }

    fn as_any(&self) -> &dyn Any {
        self
    }

    fn ops(&self) -> &dyn super::ops::OpsStore {
        self
    }

    async fn migrate(&self) -> Result<()> {
        let mut migrator = sqlx::migrate!("../migrations/mysql");
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
        // sqlx's own lock (`GET_LOCK(name, -1)`) takes none on MariaDB, which answers NULL
        // to a negative timeout: instances starting together ran one migration twice. This
        // lock, on the connection that migrates, holds on MariaDB and MySQL alike.
        let mut conn = self.pool.acquire().await?;
        let name: String = sqlx::query_scalar("SELECT CONCAT('async_exec_migrate.', DATABASE())")
            .fetch_one(&mut *conn)
            .await?;
        let locked: Option<i64> = sqlx::query_scalar("SELECT GET_LOCK(?, ?)")
            .bind(&name)
            .bind(MIGRATE_LOCK_WAIT_S)
            .fetch_one(&mut *conn)
            .await?;
        if locked != Some(1) {
            return Err(Error::MigrateLock(format!(
                "another instance has held the migration lock `{name}` for \
                 {MIGRATE_LOCK_WAIT_S} s: see what it is doing, or apply the migrations \
                 with `async-exec migrate`"
            )));
        }
        let migrated = migrator
            .run_direct(&mut *conn)
            .await
            .map_err(Error::Migrate);
        let _ = sqlx::query("SELECT RELEASE_LOCK(?)")
            .bind(&name)
            .execute(&mut *conn)
            .await;
        migrated
    }

    async fn request_insert(&self, request: &NewRequest) -> Result<Inserted> {
        with_retry(|| async {
            if request.log.is_some() || request.idempotency_key.is_some() {
                let mut tx = self.begin().await?;
                let inserted = insert_request(&mut tx, request).await?;
                tx.commit().await?;
                Ok(inserted)
            } else {
                // One statement: autocommit is its transaction.
                let mut conn = self.pool.acquire().await?;
                insert_request(&mut conn, request).await
            }
        })
        .await
    }

    async fn request_insert_many(&self, requests: &[NewRequest]) -> Result<Vec<Inserted>> {
        let mut tx = crate::store::begin::begin_whole(&self.pool, None).await?;
        let inserted = <MySql as BackendOps>::insert_many_in(&mut tx, requests).await?;
        tx.commit().await?;
        Ok(inserted)
    }

    async fn request_claim_ids(&self, p: ClaimIds<'_>) -> Result<Vec<ClaimedId>> {
        if p.ids.is_empty() {
            return Ok(Vec::new());
        }
        with_retry(|| self.claim_ids_once(&p)).await
    }

    async fn request_claim_due(&self, p: ClaimDue<'_>) -> Result<Vec<Claimed>> {
        if p.executors.is_empty() || p.limit <= 0 {
            return Ok(Vec::new());
        }
        with_retry(|| self.claim_due_once(&p)).await
    }

    async fn request_complete_many(&self, completions: &[Completion]) -> Result<Wrote> {
        complete::complete_many(self, completions).await
    }

    fn lease_keeper(&self) -> std::sync::Arc<dyn super::LeaseKeeper> {
        std::sync::Arc::new(leases::MySqlLeases::new(&self.pool))
    }

    async fn lease_release(&self, owner: &str, held: &[super::Held], now: i64) -> Result<u64> {
        leases::release(&self.pool, owner, held, now).await
    }

    async fn lease_claimed_at(
        &self,
        application: &str,
        owner: &str,
        claimed_at: &[i64],
    ) -> Result<Vec<super::Held>> {
        leases::claimed_at(&self.pool, application, owner, claimed_at).await
    }

    async fn request_rescue(&self, batch: super::RescueBatch<'_>) -> Result<Rescued> {
        if batch.limit <= 0 || batch.executors.is_empty() {
            return Ok(Rescued::default());
        }
        with_retry(|| self.rescue_once(batch)).await
    }

    async fn instance_announce(
        &self,
        a: &super::Announce<'_>,
    ) -> Result<Vec<crate::base::record::InstanceInfo>> {
        let announce = a.to_owned_announce();
        self.presence
            .run(a.patience, move |conn: &mut sqlx::MySqlConnection| {
                Box::pin(async move {
                    instances::announce(&mut *conn, &announce).await?;
                    instances::list(&mut *conn, &announce.application, announce.list_within_ms)
                        .await
                })
            })
            .await
    }

    async fn instance_leave(&self, owner: &str) -> Result<()> {
        instances::leave(&self.pool, owner).await
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
        purge::requests(self, batch).await
    }

    async fn log_purge_orphans(&self, application: &str, before: i64, limit: i64) -> Result<u64> {
        purge::orphan_logs(self, application, before, limit).await
    }

    async fn request_delete(&self, application: &str, id: RequestId) -> Result<Option<Status>> {
        super::records::delete(self, application, id).await
    }

    async fn log_list(&self, application: &str, id: RequestId) -> Result<Vec<AttemptLog>> {
        super::records::logs(self, application, id).await
    }

    async fn key_find(&self, application: &str, key: &str, now: i64) -> Result<Option<StoredKey>> {
        crate::store::shared::key_find::<sqlx::MySql>(
            &mut *self.pool.acquire().await?,
            crate::store::shared::Lock::No,
            application,
            key,
            now,
        )
        .await
    }

    async fn key_record(&self, request: &NewRequest) -> Result<()> {
        with_retry(|| self.key_record_once(request)).await
    }

    async fn key_expire(&self, application: &str, now: i64, limit: i64) -> Result<u64> {
        with_retry(|| self.key_expire_once(application, now, limit)).await
    }

    async fn request_postpone(&self, moves: &[(RequestId, i64)]) -> Result<u64> {
        let mut moved = 0;
        let sql = format!(
            "UPDATE async_req SET run_at = GREATEST(run_at, {DB_NOW} + ?) \
             WHERE id = ? AND status = 'init' AND exec_count = 0"
        );
        for &(id, after_ms) in moves {
            let done = with_retry(|| async {
                Ok(sqlx::query(&sql)
                    .bind(after_ms)
                    .bind(id)
                    .execute(&self.pool)
                    .await?)
            })
            .await?;
            moved += done.rows_affected();
        }
        Ok(moved)
    }

    async fn request_make_due(&self, application: &str) -> Result<u64> {
        let sql = format!(
            "UPDATE async_req SET run_at = {DB_NOW} \
             WHERE application_name = ? AND status IN ('init', 'failed') AND run_at > {DB_NOW}"
        );
        let done = with_retry(|| async {
            Ok(sqlx::query(&sql)
                .bind(application)
                .execute(&self.pool)
                .await?)
        })
        .await?;
        Ok(done.rows_affected())
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
        if executors.is_empty() {
            return Ok(Vec::new());
        }
        let sql = format!(
            "SELECT application_name, COUNT(*) AS n FROM async_req \
             WHERE application_name <> ? AND status IN ('init', 'failed') \
               AND executor IN ({}) \
             GROUP BY application_name ORDER BY application_name",
            marks(executors.len())
        );
        let query = sqlx::query(&sql).bind(application);
        let rows = bind_list(query, executors).fetch_all(&self.pool).await?;
        rows.iter()
            .map(|row| Ok((text(row, "application_name")?, row.try_get("n")?)))
            .collect()
    }
}

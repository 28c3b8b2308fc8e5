//! The PostgreSQL store: several instances may share one database. Claims lock with
//! `FOR UPDATE SKIP LOCKED`, and `LISTEN/NOTIFY` wakes the other instances after a commit.

use std::any::Any;
use std::str::FromStr;
use std::time::Duration;

use async_trait::async_trait;
use sqlx::postgres::PgPoolOptions;
use sqlx::{PgConnection, PgPool, Postgres};
use tokio::sync::mpsc;

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
mod listen;
mod ops;
mod purge;

use insert::{insert_many, insert_request};
use listen::{forward_wakes, Listening};

/// The database's clock in unix ms, as SQL: leases are set and compared with it in the
/// statement itself, so that instances whose clocks differ agree on them.
pub(super) const DB_NOW: &str = "(EXTRACT(EPOCH FROM statement_timestamp()) * 1000)::BIGINT";

/// The channel of the wake-ups sent when requests to run now are committed.
const CHANNEL: &str = "async_exec";

/// How the store's own transaction that writes `request` begins: a singleton's or a
/// debounce's at READ COMMITTED whatever the server's default, so that an insert that
/// met a request committed meanwhile reads or merges it (at REPEATABLE READ it fails
/// with 40001 instead).
fn singleton_begin(request: &NewRequest) -> Option<&'static str> {
    (request.singleton.is_some() || request.debounce.is_some())
        .then_some("BEGIN ISOLATION LEVEL READ COMMITTED")
}

/// The first delay before re-connecting a lost listener; it doubles up to [`BACKOFF_MAX`].
const BACKOFF_MIN: Duration = Duration::from_millis(100);

/// The longest delay between two attempts to re-connect a lost listener.
const BACKOFF_MAX: Duration = Duration::from_secs(5);

/// Records in a PostgreSQL database, which several instances may share.
#[derive(Debug, Clone)]
pub struct PostgresStore {
    pool: PgPool,
    /// Announcements of this instance, on a connection of their own.
    presence: std::sync::Arc<super::dedicated::DedicatedConnection<sqlx::Postgres>>,
    /// Whether the server's sessions begin at READ COMMITTED, the isolation the claims
    /// need (read at the first claim): if not, each claim states it in a transaction.
    read_committed: std::sync::Arc<tokio::sync::OnceCell<bool>>,
}

impl PostgresStore {
    /// Connects to the database at `url` (`postgres://user:password@host:port/database`).
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
        let mut options = sqlx::postgres::PgConnectOptions::from_str(url)?;
        if let Some(abandoned) = &abandoned {
            options = super::bounded::pg_server_timeouts(options, abandoned);
        }
        let target = super::reach::server_target(
            options.get_username(),
            options.get_host(),
            options.get_port(),
            options.get_socket().map(|p| p.as_path()),
            options.get_database(),
        );
        let mut pool_options = PgPoolOptions::new().max_connections(max_connections.max(1));
        if let Some(abandoned) = abandoned {
            pool_options = super::bounded::guard_pool(pool_options, abandoned);
        }
        let open = pool_options.connect_with(options.clone());
        let pool =
            super::reach::open_pool::<sqlx::PgConnection, _>(open, &options, "PostgreSQL", &target)
                .await?;
        Ok(PostgresStore::from_pool(pool))
    }

    /// Uses an existing pool (the application's own).
    pub fn from_pool(pool: PgPool) -> Self {
        let presence = std::sync::Arc::new(super::dedicated::DedicatedConnection::new(
            (*pool.connect_options()).clone(),
        ));
        PostgresStore {
            pool,
            presence,
            read_committed: Default::default(),
        }
    }

    /// The pool behind this store.
    pub fn pool(&self) -> &PgPool {
        &self.pool
    }
}

/// The payload of a wake-up: which application has new work, and which instance sent it
/// (it ignores its own).
#[derive(serde::Serialize)]
struct Wake<'a> {
    app: &'a str,
    owner: &'a str,
}

#[allow(private_interfaces)]
impl BackendOps for Postgres {
    fn begin_on(
        store: &dyn Any,
    ) -> Option<BoxFuture<'_, Result<sqlx::Transaction<'static, Self>>>> {
        let store = store.downcast_ref::<PostgresStore>()?;
        Some(Box::pin(async move {
            crate::store::begin::begin_whole(&store.pool, None).await
        }))
    }

    fn check_open_in(conn: &mut PgConnection) -> BoxFuture<'_, Result<()>> {
        Box::pin(super::alive::postgres::check(conn))
    }

    fn explain(error: crate::Error) -> crate::Error {
        super::alive::postgres::explain(error)
    }

    fn rows_affected(result: &sqlx::postgres::PgQueryResult) -> u64 {
        result.rows_affected()
    }

    fn quota_lock_in<'c>(
        conn: &'c mut PgConnection,
        application: &'c str,
        scope: &'c str,
    ) -> BoxFuture<'c, Result<()>> {
        Box::pin(crate::store::shared::quota_lock::<sqlx::Postgres>(
            conn,
            application,
            scope,
        ))
    }

    fn cancel_in<'c>(
        conn: &'c mut PgConnection,
        application: &'c str,
        id: RequestId,
        now: i64,
    ) -> BoxFuture<'c, Result<std::result::Result<(), Option<Status>>>> {
        Box::pin(crate::store::actions_in::cancel_one::<sqlx::Postgres>(
            conn,
            application,
            id,
            now,
        ))
    }

    fn act_matching_in<'c>(
        conn: &'c mut PgConnection,
        application: &'c str,
        query: &'c crate::base::query::RequestQuery,
        action: crate::base::query::Action,
        now: i64,
    ) -> BoxFuture<'c, Result<u64>> {
        Box::pin(crate::store::actions_in::act_matching::<sqlx::Postgres>(
            conn,
            application,
            query,
            action,
            now,
        ))
    }

    fn cancel_matching_in<'c>(
        conn: &'c mut PgConnection,
        application: &'c str,
        query: &'c crate::base::query::RequestQuery,
        now: i64,
    ) -> BoxFuture<'c, Result<crate::store::CancelCounts>> {
        Box::pin(crate::store::actions_in::cancel_matching::<sqlx::Postgres>(
            conn,
            application,
            query,
            now,
        ))
    }

    fn key_find_in<'c>(
        conn: &'c mut PgConnection,
        application: &'c str,
        key: &'c str,
        now: i64,
    ) -> BoxFuture<'c, Result<Option<StoredKey>>> {
        Box::pin(crate::store::shared::key_find::<sqlx::Postgres>(
            conn,
            crate::store::shared::Lock::ForUpdate,
            application,
            key,
            now,
        ))
    }

    fn key_record_in<'c>(
        conn: &'c mut PgConnection,
        request: &'c NewRequest,
    ) -> BoxFuture<'c, Result<()>> {
        Box::pin(keys::record(conn, request))
    }

    fn insert_in<'c>(
        conn: &'c mut PgConnection,
        request: &'c NewRequest,
    ) -> BoxFuture<'c, Result<Inserted>> {
        Box::pin(insert_request(conn, request))
    }

    fn insert_many_in<'c>(
        conn: &'c mut PgConnection,
        requests: &'c [NewRequest],
    ) -> BoxFuture<'c, Result<Vec<Inserted>>> {
        Box::pin(insert_many(conn, requests))
    }
}

impl Backend for Postgres {
    type Conn<'c> = &'c mut sqlx::PgConnection;

    fn executor(conn: &mut sqlx::PgConnection) -> &mut sqlx::PgConnection {
        conn
    }
}

#[async_trait]
impl Store for PostgresStore {
    fn backend_name(&self) -> &'static str {
        "Postgres"
    }

    /// One: with two writers per instance, outcome writes of several instances came in
    /// smaller batches, each a commit and a WAL flush, and waited on each other (the
    /// throughput benchmark's `scale` phase, 100,000 calls: 2 instances 0.85x/0.78x of the
    /// hand-written queue with two writers, 0.96x/1.02x with one; 3 instances 0.70x/0.66x,
    /// 0.72x/0.83x; one instance alike, 1.08x-1.16x).
    fn concurrent_writes(&self) -> usize {
        1
    }

    fn as_any(&self) -> &dyn Any {
        self
    }

    fn ops(&self) -> &dyn super::ops::OpsStore {
        self
    }

    async fn migrate(&self) -> Result<()> {
        let mut migrator = sqlx::migrate!("../migrations/postgres");
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
        migrator.run(&self.pool).await.map_err(Error::Migrate)
    }

    async fn request_insert(&self, request: &NewRequest) -> Result<Inserted> {
        let mut tx = crate::store::begin::begin_whole(&self.pool, singleton_begin(request)).await?;
        let inserted = insert_request(&mut tx, request).await?;
        tx.commit().await?;
        Ok(inserted)
    }

    async fn request_insert_many(&self, requests: &[NewRequest]) -> Result<Vec<Inserted>> {
        let begin = requests.iter().find_map(singleton_begin);
        let mut tx = crate::store::begin::begin_whole(&self.pool, begin).await?;
        let inserted = <Postgres as BackendOps>::insert_many_in(&mut tx, requests).await?;
        tx.commit().await?;
        Ok(inserted)
    }

    async fn request_claim_ids(&self, p: ClaimIds<'_>) -> Result<Vec<ClaimedId>> {
        if p.ids.is_empty() {
            return Ok(Vec::new());
        }
        // A row updated concurrently is re-checked against `status = 'init'` once the other
        // transaction commits, so a record is claimed by one worker only. Fresh records
        // only (`exec_count = 0`): one that another claim took and that snoozed (back to
        // `init`, due later) is not this dispatch's to run.
        let sql = format!(
            "UPDATE async_req SET status = 'running', lease_owner = $1, lease_until = {DB_NOW} + $2, \
             exec_count = exec_count + 1, update_time = $3 \
             WHERE id = ANY($4) AND status = 'init' AND exec_count = 0 AND {open} \
             RETURNING id, exec_count",
            open = crate::store::claim::before_deadline(DB_NOW)
        );
        let rows: Vec<(i64, i32)> = sqlx::query_as(&sql)
            .bind(p.owner)
            .bind(p.lease_ms)
            .bind(p.now)
            .bind(p.ids)
            .fetch_all(&self.pool)
            .await?;
        Ok(rows
            .into_iter()
            .map(|(id, attempt)| ClaimedId { id, attempt })
            .collect())
    }

    async fn request_claim_due(&self, p: ClaimDue<'_>) -> Result<Vec<Claimed>> {
        let read_committed = *self
            .read_committed
            .get_or_try_init(|| claims::sessions_read_committed(&self.pool))
            .await?;
        claims::claim_due(&self.pool, &p, read_committed).await
    }

    async fn request_complete_many(&self, completions: &[Completion]) -> Result<Wrote> {
        complete::complete_many(&self.pool, completions).await
    }

    fn lease_keeper(&self) -> std::sync::Arc<dyn super::LeaseKeeper> {
        std::sync::Arc::new(leases::PostgresLeases::new(&self.pool))
    }

    async fn lease_release(&self, owner: &str, held: &[super::Held], now: i64) -> Result<u64> {
        if held.is_empty() {
            return Ok(0);
        }
        let (ids, attempts): (Vec<RequestId>, Vec<i32>) = held.iter().copied().unzip();
        // Locked in id order, as every statement locks records; only those `owner` holds
        // at the attempt it claimed.
        // Asked to stop while it waited to start (a cancel of a running request): ended
        // `cancelled`, not put back to wait.
        let done = sqlx::query(
            "UPDATE async_req SET status = CASE WHEN cancel_requested IS NOT NULL \
             THEN 'cancelled' ELSE 'init' END, exec_count = exec_count - 1, run_at = $1, \
             lease_owner = NULL, lease_until = NULL, update_time = $2 \
             WHERE status = 'running' AND lease_owner = $3 \
             AND (id, exec_count) IN (SELECT * FROM UNNEST($4::BIGINT[], $5::INTEGER[])) \
             AND id IN (SELECT r.id FROM async_req r \
               JOIN UNNEST($4::BIGINT[], $5::INTEGER[]) AS h(id, attempt) \
                 ON r.id = h.id AND r.exec_count = h.attempt \
               WHERE r.status = 'running' AND r.lease_owner = $3 ORDER BY r.id FOR UPDATE OF r)",
        )
        .bind(now.max(1))
        .bind(now)
        .bind(owner)
        .bind(&ids)
        .bind(&attempts)
        .execute(&self.pool)
        .await?;
        Ok(done.rows_affected())
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
        let super::RescueBatch {
            application,
            executors,
            queues: _, // the lease index holds every running record
            now,
            grace_ms,
            limit,
        } = batch;
        if limit <= 0 {
            return Ok(Rescued::default());
        }
        let mut tx = crate::store::begin::begin_whole(&self.pool, None).await?;
        // Locked, so that the rescuers of several instances share the work.
        let sql = format!(
            "SELECT id, exec_count, max_attempts, lease_owner, lease_until FROM async_req \
             WHERE application_name = $1 AND status = 'running' AND lease_until < {DB_NOW} - $4 \
             AND executor = ANY($3) \
             ORDER BY lease_until LIMIT $2 FOR UPDATE SKIP LOCKED"
        );
        let expired: Vec<(i64, i32, i32, Option<String>, Option<i64>)> = sqlx::query_as(&sql)
            .bind(application)
            .bind(limit)
            .bind(executors)
            .bind(grace_ms)
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
                 THEN 'cancelled' ELSE $1 END, last_error = $2, run_at = $3, lease_owner = NULL, \
                 lease_until = NULL, update_time = $3 WHERE id = $4 AND status = 'running' \
                 AND exec_count = $5 AND lease_until < {DB_NOW} - $6"
            ))
            .bind(if dead { "dead" } else { "failed" })
            .bind(&error)
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
            crate::store::shared::log_insert::<sqlx::Postgres>(&mut tx, &log).await?;
            if dead {
                rescued.dead.push(id);
            } else {
                rescued.retried.push(id);
            }
        }
        tx.commit().await?;
        Ok(rescued)
    }

    async fn listen(&self, application: &str, owner: &str) -> Result<Option<mpsc::Receiver<()>>> {
        // Subscribed before returning when the server answers: a request committed after
        // this call wakes the caller. Otherwise the task keeps trying in the background.
        let listening = match Listening::connect(&self.pool).await {
            Ok(listening) => Some(listening),
            Err(error) => {
                crate::log::warn!(
                    error = %crate::log::escaped(&error),
                    "async-exec: could not LISTEN for other instances' requests yet; \
                     polling until the connection is made"
                );
                None
            }
        };
        let (tx, rx) = mpsc::channel(1);
        tokio::spawn(forward_wakes(
            self.pool.clone(),
            listening,
            application.to_owned(),
            owner.to_owned(),
            tx,
        ));
        Ok(Some(rx))
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

    async fn request_postpone(&self, moves: &[(RequestId, i64)]) -> Result<u64> {
        if moves.is_empty() {
            return Ok(0);
        }
        let (ids, by): (Vec<RequestId>, Vec<i64>) = moves.iter().copied().unzip();
        let done = sqlx::query(&format!(
            "UPDATE async_req r SET run_at = GREATEST(r.run_at, {DB_NOW} + m.after_ms) \
             FROM UNNEST($1::BIGINT[], $2::BIGINT[]) AS m(id, after_ms) \
             WHERE r.id = m.id AND r.status = 'init' AND r.exec_count = 0"
        ))
        .bind(&ids)
        .bind(&by)
        .execute(&self.pool)
        .await?;
        Ok(done.rows_affected())
    }

    async fn request_make_due(&self, application: &str) -> Result<u64> {
        let done = sqlx::query(&format!(
            "UPDATE async_req SET run_at = {DB_NOW} \
             WHERE application_name = $1 AND status IN ('init', 'failed') AND run_at > {DB_NOW}"
        ))
        .bind(application)
        .execute(&self.pool)
        .await?;
        Ok(done.rows_affected())
    }

    async fn key_find(&self, application: &str, key: &str, now: i64) -> Result<Option<StoredKey>> {
        let mut conn = self.pool.acquire().await?;
        crate::store::shared::key_find::<sqlx::Postgres>(
            &mut conn,
            crate::store::shared::Lock::No,
            application,
            key,
            now,
        )
        .await
    }

    async fn key_record(&self, request: &NewRequest) -> Result<()> {
        let mut tx = crate::store::begin::begin_whole(&self.pool, None).await?;
        keys::record(&mut tx, request).await?;
        tx.commit().await?;
        Ok(())
    }

    async fn key_expire(&self, application: &str, now: i64, limit: i64) -> Result<u64> {
        let mut conn = self.pool.acquire().await?;
        keys::expire(&mut conn, application, now, limit).await
    }

    async fn instance_announce(
        &self,
        a: &super::Announce<'_>,
    ) -> Result<Vec<crate::base::record::InstanceInfo>> {
        let announce = a.to_owned_announce();
        self.presence
            .run(a.patience, move |conn: &mut sqlx::PgConnection| {
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
        let executors: Vec<&str> = executors.to_vec();
        Ok(sqlx::query_as(
            "SELECT application_name, COUNT(*) FROM async_req \
             WHERE application_name <> $1 AND status IN ('init', 'failed') \
               AND executor = ANY($2) \
             GROUP BY application_name ORDER BY application_name",
        )
        .bind(application)
        .bind(&executors)
        .fetch_all(&self.pool)
        .await?)
    }
}

//! A bound on every statement the runtime issues over the network (PostgreSQL, MySQL/
//! MariaDB), so that a connection that goes silent (a failover that moved an address, a
//! firewall or conntrack flush: the connection stays open, nothing comes back) holds
//! nothing up for longer than the bound, where TCP alone would wait for the kernel
//! (~15 minutes).
//!
//! - [`Bounded`] wraps the store: each statement (each `Store` method) gets
//!   [`statement_bound`], a quarter of the lease; one that does not answer in time is
//!   abandoned with [`Error::NoAnswer`], which the completer retries (on a new
//!   connection) and the sweeps retry at their next round.
//! - A statement abandoned mid-way leaves its connection with an answer pending; sqlx
//!   0.8 returns such a connection to its pool after a ping that has no time limit, which
//!   on a silent connection never ends and holds the pool's slot for ever. The pools the
//!   runtime opens ([`guard_pool`]) bound that ping ([`ping_bound`]) while a statement
//!   was abandoned lately, and the ping sqlx makes before handing out an idle connection
//!   always: a connection that does not answer is closed, never reused, and the pool
//!   opens a new one. No round trip is added while nothing was abandoned.
//! - sqlx 0.8 sets no TCP keepalive or user timeout on PostgreSQL or MySQL connections
//!   and has no option for them (its sockets are made inside sqlx-core's `net` module,
//!   which sets only `TCP_NODELAY`): the bounds here are the runtime's own. The server's
//!   side can be told, though: on the PostgreSQL connections the runtime opens, the
//!   session's `tcp_keepalives_*` and `tcp_user_timeout` ([`pg_server_timeouts`]) make
//!   the server drop a connection whose client went silent within about a lease, and
//!   with it the locks of a transaction left open there (which would otherwise hold up
//!   the retried statement). MySQL/MariaDB has no such session settings.
//!
//! A pool the application hands over (`postgres_pool`, `mysql_pool`) keeps its own
//! options: its statements are bounded, but a connection abandoned on a silent network
//! holds a slot of that pool until TCP gives up.

use std::any::Any;
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use async_trait::async_trait;

use super::{
    Announce, ClaimDue, ClaimIds, Completion, Held, LeaseKeeper, PurgeBatch, Purged, Rescued,
    Store, StoredKey, Wrote,
};
use crate::base::error::{Error, Result};
use crate::base::record::{
    AttemptLog, Claimed, ClaimedId, Inserted, NewRequest, Request, RequestId, Status,
};

/// The shortest bound on a statement, whatever the lease.
const BOUND_MIN: Duration = Duration::from_millis(250);

/// The longest bound on a statement, whatever the lease.
const BOUND_MAX: Duration = Duration::from_secs(30);

/// How long one statement may take: a quarter of the lease (so that an outcome whose
/// write was abandoned is written again well before the lease ends), between 250 ms and
/// 30 s. 7.5 s with the default lease of 30 s.
pub fn statement_bound(lease: Duration) -> Duration {
    (lease / 4).clamp(BOUND_MIN, BOUND_MAX)
}

/// How long a ping may take before its connection is closed: a quarter of the statement
/// bound, at most 1 s (a ping is one round trip that the server answers without work).
pub(crate) fn ping_bound(statement: Duration) -> Duration {
    (statement / 4).min(Duration::from_secs(1))
}

/// When a statement was last abandoned: for a while after, connections released to the
/// pool are pinged with a bound first.
#[derive(Debug)]
pub(crate) struct Abandoned {
    base: Instant,
    /// Until when (ms since `base`) released connections are pinged with a bound.
    alert_until_ms: AtomicU64,
    /// How long that is after each abandoned statement: the statement bound.
    statement: Duration,
    /// The bound on those pings.
    #[cfg_attr(not(any(feature = "postgres", feature = "mysql")), allow(dead_code))]
    pub(crate) ping: Duration,
}

impl Abandoned {
    /// For statements bounded by `statement`.
    pub(crate) fn new(statement: Duration) -> Self {
        Abandoned {
            base: Instant::now(),
            alert_until_ms: AtomicU64::new(0),
            statement,
            ping: ping_bound(statement),
        }
    }

    fn now_ms(&self) -> u64 {
        u64::try_from(self.base.elapsed().as_millis()).unwrap_or(u64::MAX)
    }

    /// Notes a statement abandoned now. Called before its future (and so its connection)
    /// is dropped.
    fn note(&self) {
        let until = self
            .now_ms()
            .saturating_add(u64::try_from(self.statement.as_millis()).unwrap_or(u64::MAX));
        self.alert_until_ms.fetch_max(until, Ordering::AcqRel);
    }

    /// Whether a statement was abandoned lately.
    // Used by PostgreSQL and MySQL only.
    #[cfg_attr(not(any(feature = "postgres", feature = "mysql")), allow(dead_code))]
    fn alerted(&self) -> bool {
        self.now_ms() < self.alert_until_ms.load(Ordering::Acquire)
    }
}

/// Pings `conn`, failing when no answer comes within `bound`.
#[cfg(any(feature = "postgres", feature = "mysql"))]
async fn bounded_ping<C: sqlx::Connection>(
    conn: &mut C,
    bound: Duration,
) -> std::result::Result<bool, sqlx::Error> {
    match tokio::time::timeout(bound, conn.ping()).await {
        Ok(pinged) => pinged.map(|()| true),
        Err(_) => Err(sqlx::Error::Io(std::io::Error::new(
            std::io::ErrorKind::TimedOut,
            format!("the connection did not answer a ping within {bound:?}; closing it"),
        ))),
    }
}

/// PostgreSQL connect options with the server's side of each connection bounded, for
/// statements bounded by `abandoned`'s bound: TCP keepalives after that many seconds
/// idle (at least 1), every as many, three unanswered ending the connection; and a TCP
/// user timeout of four bounds (the lease) on data the server sent that the client does
/// not acknowledge. A client that answers is never affected.
#[cfg(feature = "postgres")]
pub(crate) fn pg_server_timeouts(
    options: sqlx::postgres::PgConnectOptions,
    abandoned: &Abandoned,
) -> sqlx::postgres::PgConnectOptions {
    let keepalive = abandoned.statement.as_secs().max(1).to_string();
    let user_timeout = (abandoned.statement * 4).as_millis().to_string();
    options.options([
        ("tcp_keepalives_idle", keepalive.clone()),
        ("tcp_keepalives_interval", keepalive),
        ("tcp_keepalives_count", "3".to_string()),
        ("tcp_user_timeout", user_timeout),
    ])
}

/// `options` with the pings that sqlx makes around handing out and taking back a
/// connection bounded by `abandoned.ping`: the one before an idle connection is handed
/// out always (it replaces sqlx's own, which has no limit), the one before a connection
/// goes back to the pool while a statement was abandoned lately (sqlx pings it again
/// after; that is the one round trip added, and only then). A connection that does not
/// answer is closed without a goodbye (its socket dropped).
#[cfg(any(feature = "postgres", feature = "mysql"))]
pub(crate) fn guard_pool<DB: sqlx::Database>(
    options: sqlx::pool::PoolOptions<DB>,
    abandoned: Arc<Abandoned>,
) -> sqlx::pool::PoolOptions<DB> {
    let ping = abandoned.ping;
    options
        .test_before_acquire(false)
        .before_acquire(move |conn, _| Box::pin(bounded_ping(conn, ping)))
        .after_release(move |conn, _| {
            let alerted = abandoned.alerted();
            Box::pin(async move {
                if !alerted {
                    return Ok(true);
                }
                bounded_ping(conn, ping).await
            })
        })
}

/// The store, each statement bounded.
#[derive(Debug)]
pub(crate) struct Bounded {
    inner: Arc<dyn Store>,
    bound: Duration,
    abandoned: Arc<Abandoned>,
}

/// A statement's future, as `async_trait` boxes it.
type Statement<'a, T> = Pin<Box<dyn Future<Output = Result<T>> + Send + 'a>>;

impl Bounded {
    /// `inner`, each statement bounded by `abandoned`'s statement bound, `bound`.
    pub(crate) fn new(inner: Arc<dyn Store>, bound: Duration, abandoned: Arc<Abandoned>) -> Self {
        Bounded {
            inner,
            bound,
            abandoned,
        }
    }

    /// Runs `statement` within the bound; see [`within`].
    async fn within<T>(&self, what: &'static str, statement: Statement<'_, T>) -> Result<T> {
        within(self.bound, &self.abandoned, what, statement).await
    }
}

/// Runs `statement`, one of the operators' statements (`store.ops()`), within `store`'s
/// bound when it bounds its statements: for the sweeps that run them (the stops sweep,
/// the pauses and policies read every second), so that a statement caught by a silent
/// connection does not stop the sweep until TCP gives up.
pub(crate) async fn bounded_op<T>(
    store: &dyn Store,
    what: &'static str,
    statement: Statement<'_, T>,
) -> Result<T> {
    match store.statements_bound() {
        Some((bound, abandoned)) => within(bound, &abandoned, what, statement).await,
        None => statement.await,
    }
}

/// Runs `statement` within `bound`; abandons it (drops it, with its connection) when no
/// answer came in time, noting it in `abandoned` first.
async fn within<T>(
    bound: Duration,
    abandoned: &Abandoned,
    what: &'static str,
    statement: Statement<'_, T>,
) -> Result<T> {
    let mut statement = statement;
    match tokio::time::timeout(bound, &mut statement).await {
        Ok(done) => done,
        Err(_) => {
            // Noted before the statement's connection is dropped (and released).
            abandoned.note();
            drop(statement);
            crate::log::warn!(
                statement = what,
                ?bound,
                "a statement got no answer within its bound; abandoned, its connection closed"
            );
            Err(Error::NoAnswer(bound))
        }
    }
}

#[async_trait]
impl Store for Bounded {
    fn backend_name(&self) -> &'static str {
        self.inner.backend_name()
    }

    fn as_any(&self) -> &dyn Any {
        self.inner.as_any()
    }

    fn ops(&self) -> &dyn super::ops::OpsStore {
        self.inner.ops()
    }

    fn statements_bound(&self) -> Option<(Duration, Arc<Abandoned>)> {
        Some((self.bound, self.abandoned.clone()))
    }

    /// Not bounded: migrations may take long.
    async fn migrate(&self) -> Result<()> {
        self.inner.migrate().await
    }

    async fn execution_steps(&self, id: i64) -> Result<Vec<super::steps::StoredStep>> {
        self.within("steps_of", self.inner.execution_steps(id))
            .await
    }

    async fn execution_step_keep(&self, step: super::steps::NewStep<'_>) -> Result<bool> {
        self.within("step_keep", self.inner.execution_step_keep(step))
            .await
    }

    async fn execution_progress(
        &self,
        id: i64,
        owner: &str,
        attempt: i32,
        progress: (i64, i64),
    ) -> Result<bool> {
        self.within(
            "request_progress",
            self.inner.execution_progress(id, owner, attempt, progress),
        )
        .await
    }

    async fn request_insert(&self, request: &NewRequest) -> Result<Inserted> {
        self.within("request_insert", self.inner.request_insert(request))
            .await
    }

    async fn request_insert_many(&self, requests: &[NewRequest]) -> Result<Vec<Inserted>> {
        self.within(
            "request_insert_many",
            self.inner.request_insert_many(requests),
        )
        .await
    }

    async fn request_claim_ids(&self, params: ClaimIds<'_>) -> Result<Vec<ClaimedId>> {
        self.within("request_claim_ids", self.inner.request_claim_ids(params))
            .await
    }

    async fn request_claim_due(&self, params: ClaimDue<'_>) -> Result<Vec<Claimed>> {
        self.within("request_claim_due", self.inner.request_claim_due(params))
            .await
    }

    async fn request_complete_many(&self, completions: &[Completion]) -> Result<Wrote> {
        self.within(
            "request_complete_many",
            self.inner.request_complete_many(completions),
        )
        .await
    }

    fn claim_batch(&self) -> i64 {
        self.inner.claim_batch()
    }

    fn concurrent_writes(&self) -> usize {
        self.inner.concurrent_writes()
    }

    /// Already bounded: renewals wait no longer than the earliest lease they keep.
    fn lease_keeper(&self) -> Arc<dyn LeaseKeeper> {
        self.inner.lease_keeper()
    }

    async fn lease_release(&self, owner: &str, held: &[Held], now: i64) -> Result<u64> {
        self.within("lease_release", self.inner.lease_release(owner, held, now))
            .await
    }

    async fn lease_claimed_at(
        &self,
        application: &str,
        owner: &str,
        claimed_at: &[i64],
    ) -> Result<Vec<Held>> {
        self.within(
            "lease_claimed_at",
            self.inner.lease_claimed_at(application, owner, claimed_at),
        )
        .await
    }

    async fn request_rescue(&self, batch: super::RescueBatch<'_>) -> Result<Rescued> {
        self.within("request_rescue", self.inner.request_rescue(batch))
            .await
    }

    /// Not bounded: the listener lives as long as the runtime and re-connects itself.
    async fn listen(
        &self,
        application: &str,
        owner: &str,
    ) -> Result<Option<tokio::sync::mpsc::Receiver<()>>> {
        self.inner.listen(application, owner).await
    }

    fn default_poll_interval(&self) -> Duration {
        self.inner.default_poll_interval()
    }

    async fn request_get(&self, application: &str, id: RequestId) -> Result<Option<Request>> {
        self.within("request_get", self.inner.request_get(application, id))
            .await
    }

    async fn request_count_by_status(&self, application: &str) -> Result<Vec<(Status, i64)>> {
        self.within(
            "request_count_by_status",
            self.inner.request_count_by_status(application),
        )
        .await
    }

    async fn request_retry_now(
        &self,
        application: &str,
        id: RequestId,
        now: i64,
        rerun: super::Rerun,
    ) -> Result<Option<Status>> {
        self.within(
            "request_retry_now",
            self.inner.request_retry_now(application, id, now, rerun),
        )
        .await
    }

    async fn request_cancel(
        &self,
        application: &str,
        id: RequestId,
        now: i64,
    ) -> Result<Option<Status>> {
        self.within(
            "request_cancel",
            self.inner.request_cancel(application, id, now),
        )
        .await
    }

    async fn request_purge(&self, batch: &PurgeBatch<'_>) -> Result<Purged> {
        self.within("request_purge", self.inner.request_purge(batch))
            .await
    }

    async fn log_purge_orphans(&self, application: &str, before: i64, limit: i64) -> Result<u64> {
        self.within(
            "log_purge_orphans",
            self.inner.log_purge_orphans(application, before, limit),
        )
        .await
    }

    async fn request_delete(&self, application: &str, id: RequestId) -> Result<Option<Status>> {
        self.within("request_delete", self.inner.request_delete(application, id))
            .await
    }

    async fn log_list(&self, application: &str, id: RequestId) -> Result<Vec<AttemptLog>> {
        self.within("log_list", self.inner.log_list(application, id))
            .await
    }

    async fn request_postpone(&self, moves: &[(RequestId, i64)]) -> Result<u64> {
        self.within("request_postpone", self.inner.request_postpone(moves))
            .await
    }

    async fn request_make_due(&self, application: &str) -> Result<u64> {
        self.within("request_make_due", self.inner.request_make_due(application))
            .await
    }

    async fn key_find(&self, application: &str, key: &str, now: i64) -> Result<Option<StoredKey>> {
        self.within("key_find", self.inner.key_find(application, key, now))
            .await
    }

    async fn key_record(&self, request: &NewRequest) -> Result<()> {
        self.within("key_record", self.inner.key_record(request))
            .await
    }

    async fn key_expire(&self, application: &str, now: i64, limit: i64) -> Result<u64> {
        self.within("key_expire", self.inner.key_expire(application, now, limit))
            .await
    }

    async fn db_now_ms(&self) -> Result<i64> {
        self.within("db_now_ms", self.inner.db_now_ms()).await
    }

    async fn instance_announce(
        &self,
        a: &Announce<'_>,
    ) -> Result<Vec<crate::base::record::InstanceInfo>> {
        self.within("instance_announce", self.inner.instance_announce(a))
            .await
    }

    async fn instance_leave(&self, owner: &str) -> Result<()> {
        self.within("instance_leave", self.inner.instance_leave(owner))
            .await
    }

    async fn instance_list(
        &self,
        application: &str,
        seen_within_ms: i64,
    ) -> Result<Vec<crate::base::record::InstanceInfo>> {
        self.within(
            "instance_list",
            self.inner.instance_list(application, seen_within_ms),
        )
        .await
    }

    async fn request_count_elsewhere(
        &self,
        application: &str,
        executors: &[&'static str],
    ) -> Result<Vec<(String, i64)>> {
        self.within(
            "request_count_elsewhere",
            self.inner.request_count_elsewhere(application, executors),
        )
        .await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_bound_is_a_quarter_of_the_lease_within_limits() {
        assert_eq!(
            statement_bound(Duration::from_secs(30)),
            Duration::from_millis(7_500)
        );
        assert_eq!(
            statement_bound(Duration::from_secs(4)),
            Duration::from_secs(1)
        );
        assert_eq!(statement_bound(Duration::from_millis(100)), BOUND_MIN);
        assert_eq!(statement_bound(Duration::MAX), BOUND_MAX);
        assert_eq!(
            ping_bound(Duration::from_secs(1)),
            Duration::from_millis(250)
        );
        assert_eq!(ping_bound(Duration::from_secs(30)), Duration::from_secs(1));
    }

    /// Dropped with the statement's future: whether the abandonment was noted by then
    /// (so that the connection released by the drop is pinged with a bound).
    struct Connection<'a>(&'a Abandoned, &'a std::sync::atomic::AtomicBool);

    impl Drop for Connection<'_> {
        fn drop(&mut self) {
            self.1.store(self.0.alerted(), Ordering::SeqCst);
        }
    }

    #[tokio::test(start_paused = true)]
    async fn a_statement_without_an_answer_is_abandoned_at_its_bound_after_the_alert() {
        let abandoned = Abandoned::new(Duration::from_secs(60));
        let alerted_at_drop = std::sync::atomic::AtomicBool::new(false);
        let statement: Statement<'_, ()> = Box::pin(async {
            let _conn = Connection(&abandoned, &alerted_at_drop);
            std::future::pending::<Result<()>>().await
        });
        let started = tokio::time::Instant::now();
        let bound = Duration::from_secs(1);
        let result = within(bound, &abandoned, "test", statement).await;
        assert!(
            matches!(result, Err(Error::NoAnswer(b)) if b == bound),
            "{result:?}"
        );
        assert_eq!(started.elapsed(), bound);
        assert!(alerted_at_drop.load(Ordering::SeqCst));
        // An answer in time is returned as it is, and alerts nothing.
        let quiet = Abandoned::new(Duration::from_secs(60));
        let answered = within(bound, &quiet, "test", Box::pin(async { Ok(7) })).await;
        assert_eq!(answered.unwrap(), 7);
        assert!(!quiet.alerted());
    }

    #[test]
    fn an_abandoned_statement_alerts_for_a_while() {
        let abandoned = Abandoned::new(Duration::from_millis(50));
        assert!(!abandoned.alerted());
        abandoned.note();
        assert!(abandoned.alerted());
        std::thread::sleep(Duration::from_millis(60));
        assert!(!abandoned.alerted());
    }
}

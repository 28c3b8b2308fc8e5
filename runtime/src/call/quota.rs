//! Quotas of waiting requests at submission: the application's (`Builder::max_waiting`),
//! a queue's (`QueueLimits::max_waiting`) and an owner's (`Builder::max_waiting_per_owner`,
//! for calls made with `.owner(..)`).
//!
//! On PostgreSQL and MySQL/MariaDB a `SaveAsync` call under a quota first reserves its
//! place in the quota's row (`async_quota`), in one statement of its own on the store's
//! pool ([`reserve`]): admitted while what the row holds stays within the limit, refused
//! with [`Error::QuotaExceeded`] otherwise, nothing of the call written. No lock outlives
//! that statement: submissions under one quota never wait for each other's commits, and
//! two transactions calling for two owners in either order cannot deadlock. The caller's
//! commit settles the reservation ([`Held::settle`]); a rollback, or a transaction
//! dropped, gives it back. What the row holds: the waiting requests as last counted (the
//! [`Inner::reconcile_quotas`] sweep, about every second), plus the reservations of calls
//! whose transaction is open, plus those committed since that count. A call outside any
//! transaction reserves, writes its record as any call alone does (its statement bound,
//! `Error::Unconfirmed` when its write is unknown) and settles.
//!
//! SQLite has one writer: a transaction that writes holds the database's write lock
//! until it ends whatever the quota does, so there the call counts the waiting requests
//! in its transaction ([`check`]) as before.

use std::sync::Arc;

use crate::base::error::{Error, Result};
use crate::base::queue::GLOBAL_QUEUE;
use crate::base::strategy::Strategy;
use crate::call::receipt::{Receipt, Submission};
use crate::call::tx::Tx;
use crate::runtime::{Inner, Runtime};
use crate::store::bounded::bounded_op;
use crate::store::ops::QuotaReserve;
use crate::store::sealed::BackendOps;
use crate::store::sql::Dialect;
use crate::store::Backend;

/// The prefix of the tag an owner is kept as (`.owner("tenant-7")` tags the request
/// `owner:tenant-7`, findable as any tag).
pub(crate) const OWNER_TAG: &str = "owner:";

/// One quota a call is under.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Quota {
    /// The quota's row in `async_quota`.
    pub(crate) key: String,
    /// The most requests that may wait under it.
    pub(crate) limit: u64,
    /// Whose waiting requests count: the executors of a queue, or an owner's tag; neither
    /// for the application's.
    pub(crate) executors: Option<Vec<&'static str>>,
    pub(crate) tag: Option<String>,
    /// For the refusal: whose quota, and where it is set.
    pub(crate) scope: String,
    pub(crate) how: &'static str,
}

pub(crate) use crate::call::reserved::Held;
use crate::call::reserved::STALE_RESERVATION_MS;

/// A quota row that holds nothing and saw no call for this long is deleted (made again on
/// the quota's next call): one row per owner ever seen does not stay.
const EMPTY_ROW_MS: i64 = 60_000;

/// A call that finds its quota full counts it again first when its last count is older
/// than this: a refusal never comes from a count older than this.
const RECOUNT_MS: i64 = 100;

/// How many times a reservation that failed on a concurrent one (PostgreSQL above READ
/// COMMITTED) is tried again.
const SERIALIZATION_RETRIES: u32 = 20;

/// The most quota rows counted by one round of [`Inner::reconcile_quotas`] (those counted
/// longest ago first).
const RECONCILE_BATCH: i64 = 200;

impl Inner {
    /// The quotas a call is under (none for a call that writes no record at the call).
    pub(crate) fn quotas_of(&self, call: &Submission) -> Vec<Quota> {
        if call.def.strategy != Strategy::SaveAsync {
            return Vec::new();
        }
        let mut quotas = Vec::new();
        quotas.extend(self.quota_of_key(GLOBAL_QUEUE));
        if let Some(queue) = call.def.queue {
            quotas.extend(self.quota_of_key(&format!("queue:{queue}")));
        }
        if let Some(owner) = &call.owner {
            quotas.extend(self.quota_of_key(&format!("{OWNER_TAG}{owner}")));
        }
        quotas
    }

    /// The quota whose row is `key`, if it is set: the application's ([`GLOBAL_QUEUE`]),
    /// a queue's (`queue:<name>`) or an owner's (`owner:<owner>`).
    pub(crate) fn quota_of_key(&self, key: &str) -> Option<Quota> {
        let settings = &self.settings;
        if key == GLOBAL_QUEUE {
            return settings.max_waiting.map(|limit| Quota {
                key: key.to_string(),
                limit,
                executors: None,
                tag: None,
                scope: "the application".into(),
                how: "Builder::max_waiting",
            });
        }
        if let Some(queue) = key.strip_prefix("queue:") {
            let limit = settings
                .queues
                .get(queue)
                .and_then(|l| l.max_waiting_limit())?;
            let executors = self
                .registry
                .defs()
                .filter(|d| d.queue == Some(queue))
                .map(|d| d.name)
                .collect();
            return Some(Quota {
                key: key.to_string(),
                limit: u64::from(limit),
                executors: Some(executors),
                tag: None,
                scope: format!("queue {queue:?}"),
                how: "QueueLimits::max_waiting",
            });
        }
        let owner = key.strip_prefix(OWNER_TAG)?;
        settings.max_waiting_per_owner.map(|limit| Quota {
            key: key.to_string(),
            limit,
            executors: None,
            tag: Some(key.to_string()),
            scope: format!("owner {owner:?}"),
            how: "Builder::max_waiting_per_owner",
        })
    }

    /// Whether calls under a quota reserve their place ([`reserve`]): every backend but
    /// SQLite (see the [module docs](self)).
    pub(crate) fn quotas_reserve(&self) -> bool {
        self.store.ops().dialect() != Dialect::Sqlite
    }

    /// Runs `f` (a submission) in a transaction of the runtime's own, begun on its store's
    /// backend, and commits it: SQLite's autocommit calls under a quota.
    pub(crate) async fn submit_under_quota(
        self: &Arc<Self>,
        calls: Vec<Submission>,
        batch: bool,
    ) -> Result<Vec<Receipt>> {
        let rt = Runtime {
            inner: self.clone(),
        };
        let store = self.store.as_any();
        macro_rules! on {
            ($db:ty) => {
                if <$db as BackendOps>::begin_on(store).is_some() {
                    let mut tx: Tx<$db> = rt.begin_any().await?;
                    let receipts = if batch {
                        self.submit_batch_in(calls, &mut tx).await?
                    } else {
                        let call = calls.into_iter().next().expect("one call");
                        vec![self.submit_in(call, &mut tx).await?]
                    };
                    tx.commit().await?;
                    return Ok(receipts);
                }
            };
        }
        #[cfg(feature = "sqlite")]
        on!(sqlx::Sqlite);
        #[cfg(feature = "postgres")]
        on!(sqlx::Postgres);
        #[cfg(feature = "mysql")]
        on!(sqlx::MySql);
        unreachable!("the store is of a compiled backend")
    }

    /// One round of the quotas' count: for up to [`RECONCILE_BATCH`] quota rows of this
    /// application (counted longest ago first), counts the waiting requests under it (up
    /// to its limit) and writes the count, taking from the committed reservations those it
    /// read before counting; deletes rows that hold nothing and saw no call for
    /// [`EMPTY_ROW_MS`]. How many rows it counted. Each statement on its own (autocommit):
    /// no lock outlives one. Nothing on SQLite.
    pub(crate) async fn reconcile_quotas(&self) -> Result<u64> {
        if !self.quotas_reserve() {
            return Ok(0);
        }
        let ops = self.store.ops();
        let store = &*self.store;
        let rows = bounded_op(
            store,
            "quota_rows",
            ops.quota_rows(&self.app, RECONCILE_BATCH),
        )
        .await?;
        let mut counted = 0;
        for (key, settled, reconciled) in rows {
            // A quota no longer set here (or set by another version): its row is left to
            // be swept once empty.
            let Some(quota) = self.quota_of_key(&key) else {
                continue;
            };
            let now = self.clock.now_ms();
            let count = ops.quota_count(
                &self.app,
                quota.executors.as_deref(),
                quota.tag.as_deref(),
                i64::try_from(quota.limit).unwrap_or(i64::MAX),
            );
            let count = bounded_op(store, "quota_count", count).await?;
            let write = ops.quota_reconcile(
                &self.app,
                &key,
                count,
                (settled, reconciled),
                now - STALE_RESERVATION_MS,
                now,
            );
            if bounded_op(store, "quota_reconcile", write).await? {
                counted += 1;
            }
        }
        let before = self.clock.now_ms() - EMPTY_ROW_MS;
        let sweep = ops.quota_sweep_empty(&self.app, before);
        bounded_op(store, "quota_sweep_empty", sweep).await?;
        Ok(counted)
    }
}

/// Reserves places under each of `quotas` (how many each), in key order, each in one
/// statement of its own: all of them, or an error and none (those taken are given back).
/// A quota without a row gets one, holding the waiting requests counted now.
pub(crate) async fn reserve(inner: &Arc<Inner>, quotas: &[(Quota, u64)]) -> Result<Held> {
    let mut sorted: Vec<&(Quota, u64)> = quotas.iter().collect();
    sorted.sort_by(|a, b| a.0.key.cmp(&b.0.key));
    let ops = inner.store.ops();
    let store = &*inner.store;
    let mut held = Held::new(inner);
    for (quota, n) in sorted {
        let unavailable = |cause: Error| Error::QuotaUnavailable {
            scope: quota.scope.clone(),
            cause: Box::new(cause),
        };
        let limit = i64::try_from(quota.limit).unwrap_or(i64::MAX);
        let n_i = i64::try_from(*n).unwrap_or(i64::MAX);
        let mut made = false;
        let mut recounted = false;
        let mut conflicts = 0;
        loop {
            let now = inner.clock.now_ms();
            let taken = ops.quota_reserve(&inner.app, &quota.key, n_i, limit, now);
            let taken = match bounded_op(store, "quota_reserve", taken).await {
                // PostgreSQL whose sessions default to REPEATABLE READ or SERIALIZABLE: a
                // reservation committed meanwhile fails this one (READ COMMITTED, the
                // default, waits and reads it); tried again on the latest row.
                Err(e) if e.is_serialization_failure() && conflicts < SERIALIZATION_RETRIES => {
                    conflicts += 1;
                    continue;
                }
                taken => taken.map_err(unavailable)?,
            };
            match taken {
                QuotaReserve::Taken => {
                    held.push(quota.key.clone(), *n);
                    break;
                }
                QuotaReserve::Full { seen, .. } if !recounted && now - seen.1 >= RECOUNT_MS => {
                    // Requests may have left waiting since the last count: counted again
                    // now (a refusal is never from a count older than this), then tried
                    // once more.
                    recounted = true;
                    let count = ops.quota_count(
                        &inner.app,
                        quota.executors.as_deref(),
                        quota.tag.as_deref(),
                        limit,
                    );
                    let count = bounded_op(store, "quota_count", count)
                        .await
                        .map_err(unavailable)?;
                    let write = ops.quota_reconcile(
                        &inner.app,
                        &quota.key,
                        count,
                        seen,
                        now - STALE_RESERVATION_MS,
                        now,
                    );
                    match bounded_op(store, "quota_reconcile", write).await {
                        // Another's change of the row (above READ COMMITTED): tried again.
                        Err(e) if e.is_serialization_failure() => {}
                        done => {
                            done.map_err(unavailable)?;
                        }
                    }
                }
                QuotaReserve::Full { held: waiting, .. } => {
                    // `held` is dropped: the places taken under the other quotas go back.
                    return Err(Error::QuotaExceeded {
                        scope: quota.scope.clone(),
                        limit: quota.limit,
                        waiting: waiting.max(0) as u64,
                        how: quota.how,
                    });
                }
                QuotaReserve::NoRow if !made => {
                    made = true;
                    let count = ops.quota_count(
                        &inner.app,
                        quota.executors.as_deref(),
                        quota.tag.as_deref(),
                        limit,
                    );
                    let count = bounded_op(store, "quota_count", count)
                        .await
                        .map_err(unavailable)?;
                    let make = ops.quota_make(&inner.app, &quota.key, count, now);
                    match bounded_op(store, "quota_make", make).await {
                        // Made by another call meanwhile (above READ COMMITTED).
                        Err(e) if e.is_serialization_failure() => {}
                        done => {
                            done.map_err(unavailable)?;
                        }
                    }
                }
                QuotaReserve::NoRow => {
                    return Err(unavailable(Error::Config {
                        setting: quota.how,
                        reason: "the quota's row in `async_quota` was gone as soon as it was \
                                 made; check that nothing else deletes those rows"
                            .into(),
                    }));
                }
            }
        }
    }
    Ok(held)
}

/// SQLite: checks that `adding` more requests under each of `quotas` keep them, inside
/// `tx`: makes their rows in it (which takes the database's write lock, as the call's
/// write would), counts what waits (committed, on a connection of its own, and this
/// transaction's), refuses what would go over. The caller notes what it wrote
/// ([`Tx::quota_added`]).
pub(crate) async fn check<DB: Backend>(
    inner: &Inner,
    tx: &mut Tx<DB>,
    quotas: &[(Quota, u64)],
) -> Result<()> {
    let mut keys: Vec<&str> = quotas.iter().map(|(q, _)| q.key.as_str()).collect();
    keys.sort_unstable();
    keys.dedup();
    let ops = inner.store.ops();
    for key in keys {
        let locked = DB::quota_lock_in(tx.raw_conn(), &inner.app, key).await;
        tx.noting(locked)?;
    }
    for (quota, adding) in quotas {
        let limit = i64::try_from(quota.limit).unwrap_or(i64::MAX);
        let count = ops.quota_count(
            &inner.app,
            quota.executors.as_deref(),
            quota.tag.as_deref(),
            limit,
        );
        let committed = bounded_op(&*inner.store, "quota_count", count).await?;
        let waiting = committed.max(0) as u64 + tx.quota_used(&quota.key);
        if waiting + adding > quota.limit {
            return Err(Error::QuotaExceeded {
                scope: quota.scope.clone(),
                limit: quota.limit,
                waiting,
                how: quota.how,
            });
        }
    }
    Ok(())
}

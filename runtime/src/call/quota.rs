//! Quotas of waiting requests at submission: the application's (`Builder::max_waiting`),
//! a queue's (`QueueLimits::max_waiting`) and an owner's (`Builder::max_waiting_per_owner`,
//! for calls made with `.owner(..)`). A `SaveAsync` call under a quota is written in a
//! transaction that first locks the quota's row (`async_quota`), so that submissions
//! under one quota take turns; it counts the waiting requests (`init`, `failed`) that are
//! committed, on a connection of its own (a snapshot of the caller's transaction could be
//! older), adds those this transaction wrote under the quota, and refuses the call with
//! [`Error::QuotaExceeded`] when it would go over: nothing of the call is written. A call
//! under no quota takes none of this.

use std::sync::Arc;

use crate::base::error::{Error, Result};
use crate::base::queue::GLOBAL_QUEUE;
use crate::base::strategy::Strategy;
use crate::call::receipt::{Receipt, Submission};
use crate::call::tx::Tx;
use crate::runtime::{Inner, Runtime};
use crate::store::bounded::bounded_op;
use crate::store::sealed::BackendOps;
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

impl Inner {
    /// The quotas a call is under (none for a call that writes no record at the call).
    pub(crate) fn quotas_of(&self, call: &Submission) -> Vec<Quota> {
        let mut quotas = Vec::new();
        if call.def.strategy != Strategy::SaveAsync {
            return quotas;
        }
        let settings = &self.settings;
        if let Some(limit) = settings.max_waiting {
            quotas.push(Quota {
                key: GLOBAL_QUEUE.to_string(),
                limit,
                executors: None,
                tag: None,
                scope: "the application".into(),
                how: "Builder::max_waiting",
            });
        }
        if let Some(queue) = call.def.queue {
            let limit = settings
                .queues
                .get(queue)
                .and_then(|l| l.max_waiting_limit());
            if let Some(limit) = limit {
                let executors = self
                    .registry
                    .defs()
                    .filter(|d| d.queue == Some(queue))
                    .map(|d| d.name)
                    .collect();
                quotas.push(Quota {
                    key: format!("queue:{queue}"),
                    limit: u64::from(limit),
                    executors: Some(executors),
                    tag: None,
                    scope: format!("queue {queue:?}"),
                    how: "QueueLimits::max_waiting",
                });
            }
        }
        if let (Some(owner), Some(limit)) = (&call.owner, settings.max_waiting_per_owner) {
            quotas.push(Quota {
                key: format!("{OWNER_TAG}{owner}"),
                limit,
                executors: None,
                tag: Some(format!("{OWNER_TAG}{owner}")),
                scope: format!("owner {owner:?}"),
                how: "Builder::max_waiting_per_owner",
            });
        }
        quotas
    }

    /// Runs `f` (a submission) in a transaction of the runtime's own, begun on its store's
    /// backend, and commits it: the autocommit calls under a quota.
    pub(crate) async fn submit_under_quota(
        self: &Arc<Self>,
        calls: Vec<Submission>,
        batch: bool,
    ) -> Result<Vec<Receipt>> {
        // The quotas' rows first, on a connection of their own, before this transaction
        // holds one of the pool's (an owner's first call makes its row).
        for call in &calls {
            for quota in self.quotas_of(call) {
                register(self, &quota.key).await?;
            }
        }
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
}

/// Checks that `adding` more requests under each of `quotas` keep them, inside `tx`:
/// locks their rows (in one order: no deadlock), counts what waits (committed, and this
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
    // Made once per process, on a connection of its own (never in a transaction that may
    // hold its lock already); SQLite makes it in the transaction (its one writer).
    for key in &keys {
        register(inner, key).await?;
    }
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

/// Makes sure the row of quota `key` exists, once per process, on a connection of its own
/// (never in a transaction that may hold its lock already). SQLite makes it in the
/// submitting transaction instead (its one writer would wait for that transaction).
async fn register(inner: &Inner, key: &str) -> Result<()> {
    let ops = inner.store.ops();
    if ops.dialect() == crate::store::sql::Dialect::Sqlite {
        return Ok(());
    }
    if inner.quota_rows.lock().expect("quota rows").contains(key) {
        return Ok(());
    }
    bounded_op(
        &*inner.store,
        "quota_register",
        ops.quota_register(&inner.app, key),
    )
    .await?;
    inner
        .quota_rows
        .lock()
        .expect("quota rows")
        .insert(key.to_string());
    Ok(())
}

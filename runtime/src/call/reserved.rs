//! Places reserved under quotas of waiting requests (see `call::quota`), held by a call
//! or a transaction until it ends: settled at its commit, given back otherwise. Apart from
//! `call::quota` so that the transaction (`call::tx`) holds them without importing it.

use std::sync::Arc;

use crate::runtime::Inner;
use crate::store::bounded::bounded_op;

/// A reservation older than this whose transaction never said how it ended (its process
/// died) is dropped by the next count.
pub(crate) const STALE_RESERVATION_MS: i64 = 60_000;

/// Places reserved under quotas by a call or a transaction: settled when it ends
/// ([`Held::settle`]); dropped unsettled (a rollback, a transaction dropped, an error),
/// given back in a task of their own.
#[derive(Debug, Default)]
pub(crate) struct Held {
    inner: Option<Arc<Inner>>,
    /// (quota key, places).
    items: Vec<(String, u64)>,
}

impl Held {
    pub(crate) fn new(inner: &Arc<Inner>) -> Held {
        Held {
            inner: Some(inner.clone()),
            items: Vec::new(),
        }
    }

    /// Notes `n` places reserved under quota `key`.
    pub(crate) fn push(&mut self, key: String, n: u64) {
        self.items.push((key, n));
    }

    /// Adds `other`'s places to these (one transaction's calls).
    pub(crate) fn absorb(&mut self, mut other: Held) {
        if self.inner.is_none() {
            self.inner = other.inner.clone();
        }
        for (key, n) in std::mem::take(&mut other.items) {
            match self.items.iter_mut().find(|(k, _)| *k == key) {
                Some((_, held)) => *held += n,
                None => self.items.push((key, n)),
            }
        }
    }

    /// Ends the reservations: `committed` (their records were committed, or may have
    /// been: counted until the next count), or given back. Each quota in one statement of
    /// its own; a failure is logged (a reservation left is dropped after
    /// [`STALE_RESERVATION_MS`] without calls, and a committed one is counted by the
    /// next count anyway).
    pub(crate) async fn settle(mut self, committed: bool) {
        let items = std::mem::take(&mut self.items);
        if let Some(inner) = self.inner.take() {
            settle(&inner, items, committed).await;
        }
    }
}

async fn settle(inner: &Inner, items: Vec<(String, u64)>, committed: bool) {
    for (key, n) in items {
        let n = i64::try_from(n).unwrap_or(i64::MAX);
        let mut tries = 0;
        loop {
            let done = inner
                .store
                .ops()
                .quota_settle(&inner.app, &key, n, committed);
            match bounded_op(&*inner.store, "quota_settle", done).await {
                Ok(()) => break,
                // A concurrent change of the row, above READ COMMITTED: tried again.
                Err(error) if error.is_serialization_failure() && tries < 20 => tries += 1,
                Err(error) => {
                    crate::log::warn!(quota = %crate::log::escaped(&key), places = n, committed,
                        error = %crate::log::escaped(&error),
                        "a quota's reservation could not be settled; it is dropped after a \
                         minute without calls under the quota, and the next count counts \
                         its request");
                    break;
                }
            }
        }
    }
}

impl Drop for Held {
    fn drop(&mut self) {
        let items = std::mem::take(&mut self.items);
        let Some(inner) = self.inner.take() else {
            return;
        };
        if items.is_empty() {
            return;
        }
        if let Ok(handle) = tokio::runtime::Handle::try_current() {
            handle.spawn(async move { settle(&inner, items, false).await });
        }
    }
}

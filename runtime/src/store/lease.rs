//! What the heartbeat and the hand-back of claims speak of: a held claim, the renewal
//! of leases on a connection of their own, and what a renewal found.

use async_trait::async_trait;

use crate::base::error::Result;
use crate::base::record::RequestId;

/// A record this instance claimed: its id and the attempt the claim counted. Renewals and
/// hand-backs touch a record only while `owner` holds it at that attempt, as outcome
/// writes do: an instance whose name a twin shares (or a stale renewal or hand-back of an
/// earlier attempt) never renews or hands back a later claim of it.
pub(crate) type Held = (RequestId, i32);

/// Renews leases: the heartbeat's one statement, on a connection of its own.
#[async_trait]
pub(crate) trait LeaseKeeper: Send + Sync + std::fmt::Debug {
    /// Extends by `lease_ms` from the database's clock the leases of those of `held` that
    /// `owner` still holds as running at their attempt; returns the ids renewed, and those
    /// still held but not renewed this time (locked by another statement at that moment).
    /// Gives up after `patience` (connecting included).
    async fn renew(
        &self,
        owner: &str,
        held: &[Held],
        lease_ms: i64,
        patience: std::time::Duration,
    ) -> Result<Renewal>;
}

/// What a lease renewal found.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct Renewal {
    /// Leases extended.
    pub(crate) renewed: Vec<RequestId>,
    /// Still held by the owner, but not extended: the row was locked by another statement
    /// (PostgreSQL's renewal skips locked rows). Neither renewed nor lost.
    pub(crate) held: Vec<RequestId>,
}

impl Renewal {
    /// Every id renewed; none merely held.
    pub(crate) fn all(renewed: Vec<RequestId>) -> Self {
        Renewal {
            renewed,
            held: Vec::new(),
        }
    }
}

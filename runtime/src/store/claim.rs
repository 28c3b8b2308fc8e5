//! What a claim of records asks for: due records of a sweep, or the ids just committed.

use crate::base::record::RequestId;

/// Which records a sweep claims.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum DueKind {
    /// `failed` records whose `run_at` has come, and `init` records that were delayed
    /// (or released) and whose `run_at` has come.
    Scheduled,
    /// `init` records that should have been dispatched at least `older_than` ms ago:
    /// committed but never dispatched (a crash between commit and dispatch, a full channel).
    Stale {
        /// Only records with `run_at <= now - older_than`.
        older_than: i64,
    },
}

/// Parameters of [`Store::request_claim_due`].
#[derive(Debug, Clone)]
pub(crate) struct ClaimDue<'a> {
    pub(crate) application: &'a str,
    pub(crate) executors: &'a [&'static str],
    pub(crate) kind: DueKind,
    pub(crate) owner: &'a str,
    /// For `update_time`.
    pub(crate) now: i64,
    /// The lease, from the database's clock in the claiming statement.
    pub(crate) lease_ms: i64,
    pub(crate) limit: i64,
    /// Records to leave for other instances, as `sign:executor` (a rolling deploy: they
    /// have the record's signature and this binary does not).
    pub(crate) skip: &'a [String],
}

/// Parameters of [`Store::request_claim_ids`].
#[derive(Debug, Clone)]
pub(crate) struct ClaimIds<'a> {
    pub(crate) ids: &'a [RequestId],
    pub(crate) owner: &'a str,
    /// For `update_time`.
    pub(crate) now: i64,
    /// The lease, from the database's clock in the claiming statement.
    pub(crate) lease_ms: i64,
}

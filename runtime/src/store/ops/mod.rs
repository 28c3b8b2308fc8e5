//! The statements about many requests: filtered pages, counts and actions on every
//! request matching a [`RequestQuery`](crate::base::query::RequestQuery), statistics,
//! controls and the audit trail. Written once, for every backend, over the backend's
//! [`SqlRunner`] (`sqlite/ops.rs`, `postgres/ops.rs`, `mysql/ops.rs` run the SQL): the
//! filter of a query and a page mean the same on every backend
//! ([`Sql::filter`](super::sql::Sql::filter)); what the dialects write differently
//! (placeholders, upserts, integer casts) the [`Dialect`](super::sql::Dialect) renders.
//!
//! One trait per kind of statement, each in its module, all gathered in [`OpsStore`]:
//! [`requests`] (pages, counts and actions on what a query matches), [`stats`] (counts
//! and per-minute series), [`controls`] (pauses, queue policies, quotas), [`lifecycle`]
//! (progress, results, stops, deadlines, orphans), [`partitions`] (partitions' own
//! settings), [`flow`] (the flow view and its saturation history), [`audit`] and
//! [`due`] (which queues have due records).

mod audit;
mod controls;
mod due;
mod flow;
mod lifecycle;
mod partitions;
mod requests;
mod stats;

pub(crate) use audit::AuditOps;
pub(crate) use controls::{ControlOps, QuotaReserve};
pub(crate) use due::DueOps;
#[cfg(test)]
pub(crate) use flow::{partitions_running, partitions_waiting, queue_live};
pub(crate) use flow::{FlowOps, QueueNow, QueueStatDelta, SampleRow};
#[cfg(test)]
pub(crate) use lifecycle::{deadline_expire_ids, deadline_expired};
pub(crate) use lifecycle::{orphan_purge, LifecycleOps};
pub(crate) use partitions::PartitionOps;
pub(crate) use requests::{act_batch, RequestOps};
pub(crate) use stats::StatOps;

use super::sql::SqlRunner;

/// The operators' statements, written once over a backend's [`SqlRunner`]: every
/// backend implements `OpsStore` with nothing but its runner.
pub(crate) trait OpsStore:
    RequestOps + StatOps + ControlOps + LifecycleOps + AuditOps + DueOps + PartitionOps + FlowOps
{
}

impl<S: SqlRunner> OpsStore for S {}

/// The minute (its start, unix ms) that `ms` falls in.
pub(crate) fn minute_of(ms: i64) -> i64 {
    ms.div_euclid(60_000) * 60_000
}

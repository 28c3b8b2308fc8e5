//! Purges: finished records and old attempt logs, deleted in batches by an operator
//! ([`Runtime::purge`](crate::Runtime::purge), in `operate/requests.rs`) and by the
//! retention sweep.

use std::time::Duration;

use crate::base::error::{Error, Result};
use crate::base::record::Status;
use crate::store::{PurgeBatch, Store};

/// The most records or log rows one batch of a purge deletes.
pub const MAX_PURGE_BATCH: i64 = 1000;

/// What [`Runtime::purge`](crate::Runtime::purge) deletes: records of this application that finished (`success`,
/// `cancelled`; `dead` only when asked) and were last changed longer ago than
/// `older_than`, with their attempt logs; and attempt logs older than that whose request
/// is gone (deleted on success, or by an operator). Records that may still run (`init`,
/// `running`, `failed`) and their logs are never purged.
///
/// ```no_run
/// # async fn demo(rt: async_exec::Runtime) -> async_exec::Result<()> {
/// use std::time::Duration;
/// use async_exec::Purge;
/// let report = rt.purge(Purge::older_than(Duration::from_secs(7 * 86_400)).dead(true)).await?;
/// println!("{} requests and {} attempt logs deleted", report.requests, report.attempt_logs);
/// # Ok(()) }
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Purge {
    older_than: Duration,
    dead: bool,
    batch: i64,
}

impl Purge {
    /// Records last changed, and logs finished, longer ago than `age`.
    pub fn older_than(age: Duration) -> Self {
        Purge {
            older_than: age,
            dead: false,
            batch: MAX_PURGE_BATCH,
        }
    }

    /// Whether `dead` records are purged too (default `false`: they are kept to be looked
    /// at and replayed).
    pub fn dead(mut self, dead: bool) -> Self {
        self.dead = dead;
        self
    }

    /// Records (or log rows) deleted per transaction (default and most
    /// [`MAX_PURGE_BATCH`]): smaller batches hold locks for less time.
    pub fn batch(mut self, batch: i64) -> Self {
        self.batch = batch;
        self
    }

    /// The statuses this purge deletes.
    pub fn statuses(&self) -> &'static [Status] {
        if self.dead {
            &[Status::Success, Status::Cancelled, Status::Dead]
        } else {
            &[Status::Success, Status::Cancelled]
        }
    }
}

/// What a purge deleted.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize)]
#[non_exhaustive]
pub struct PurgeReport {
    /// Records (`async_req` rows).
    pub requests: u64,
    /// Attempt logs (`async_log` rows): those of the records deleted, and old ones whose
    /// request was gone already.
    pub attempt_logs: u64,
    /// Transactions it took.
    pub batches: u64,
}

/// The one delete path of purges (an operator's [`Runtime::purge`](crate::Runtime::purge) and the retention
/// sweep): batches of records of `application` that `purge` names, with their logs, then
/// batches of old logs whose request is gone, until a batch comes back short. `now` is the
/// database's time. Each batch skips rows another transaction holds (PostgreSQL,
/// MySQL/MariaDB `SKIP LOCKED`; SQLite has one writer), so instances may run it at once.
pub(crate) async fn purge_all(
    store: &dyn Store,
    application: &str,
    now: i64,
    purge: Purge,
) -> Result<PurgeReport> {
    if !(1..=MAX_PURGE_BATCH).contains(&purge.batch) {
        return Err(Error::InvalidFilter(format!(
            "purge `batch({})`: delete 1 to {MAX_PURGE_BATCH} rows per transaction",
            purge.batch
        )));
    }
    let age = i64::try_from(purge.older_than.as_millis()).unwrap_or(i64::MAX);
    let before = now.saturating_sub(age);
    let mut report = PurgeReport::default();
    loop {
        let batch = PurgeBatch {
            application,
            before,
            statuses: purge.statuses(),
            limit: purge.batch,
        };
        let purged = store.request_purge(&batch).await?;
        report.batches += 1;
        report.requests += purged.requests;
        report.attempt_logs += purged.logs;
        if purged.requests < purge.batch as u64 {
            break;
        }
    }
    loop {
        let logs = store
            .log_purge_orphans(application, before, purge.batch)
            .await?;
        report.batches += 1;
        report.attempt_logs += logs;
        if logs < purge.batch as u64 {
            break;
        }
    }
    // The tags of requests that are gone (counted with nothing: they are an index).
    loop {
        let tags = store
            .ops()
            .tag_purge_orphans(application, before, purge.batch);
        let tags = crate::store::bounded::bounded_op(store, "tag_purge_orphans", tags).await?;
        if tags < purge.batch as u64 {
            break;
        }
    }
    // The kept steps of requests that are gone.
    loop {
        use crate::store::steps::StepStore as _;
        let steps = store
            .ops()
            .step_purge_orphans(application, before, purge.batch);
        let steps = crate::store::bounded::bounded_op(store, "step_purge_orphans", steps).await?;
        if steps < purge.batch as u64 {
            break;
        }
    }
    Ok(report)
}

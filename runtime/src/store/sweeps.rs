//! What the rescue of expired leases and the purges of finished records ask for and
//! report.

use crate::base::record::{RequestId, Status};

/// What a rescue of expired leases did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct Rescued {
    /// Put back to `failed`, to run again.
    pub(crate) retried: Vec<RequestId>,
    /// Out of attempts: `dead`.
    pub(crate) dead: Vec<RequestId>,
}

/// The prefix of the `worker` of `application`'s log rows, and its length in characters:
/// instance names are `<application>@<host>:<pid>:<hex>` (before 2026-12-04,
/// `<application>@<pid>:<hex>`), and nothing after the application's `@` has one, so a
/// worker is the application's when it starts with the prefix and has no `@` after it
/// (an application may have `@` in its name: `a` and `a@b` are told apart).
pub(crate) fn orphan_worker_prefix(application: &str) -> (String, i64) {
    let prefix = format!("{application}@");
    let chars = prefix.chars().count() as i64;
    (prefix, chars)
}

/// What one round of [`Store::request_rescue`] looks for.
#[derive(Debug, Clone, Copy)]
pub(crate) struct RescueBatch<'a> {
    /// The application whose records are rescued.
    pub(crate) application: &'a str,
    /// The executors this binary knows: records of others are left to an instance that
    /// knows them.
    pub(crate) executors: &'a [&'static str],
    /// The queues their records are in (`""` for none): MySQL/MariaDB reads the running
    /// records of each through the claim index, which leads with the queue.
    #[cfg_attr(not(feature = "mysql"), allow(dead_code))]
    pub(crate) queues: &'a [&'static str],
    /// Now (unix ms), written as the rescued records' `run_at` and `update_time`.
    pub(crate) now: i64,
    /// How long past its end, by the database's clock, a lease must be to be rescued (a
    /// heartbeat interval: a lease is taken from a holder only after it missed more than
    /// one renewal, so that a renewal late by less than that wins).
    pub(crate) grace_ms: i64,
    /// The most records rescued.
    pub(crate) limit: i64,
}

/// Which finished records [`Store::request_purge`] deletes.
#[derive(Debug, Clone)]
pub(crate) struct PurgeBatch<'a> {
    pub(crate) application: &'a str,
    /// Only records last changed before this time (unix ms).
    pub(crate) before: i64,
    /// The statuses to delete (terminal ones).
    pub(crate) statuses: &'a [Status],
    /// At most this many records.
    pub(crate) limit: i64,
}

/// What one batch of a purge deleted.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct Purged {
    /// `async_req` rows.
    pub(crate) requests: u64,
    /// `async_log` rows.
    pub(crate) logs: u64,
}

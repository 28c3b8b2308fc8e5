//! What operators ask of the store: filtered pages of requests, actions on every request
//! that matches a filter, counts, per-minute statistics, pauses and the audit trail.
//! The console and command-line tools are built on these types and on the `Runtime`
//! methods that take them (`Runtime::query`, `Runtime::act`, ...).

use serde::{Deserialize, Serialize};

use crate::record::{RequestId, Status};

/// Which requests: every field that is set must match. Text fields match exactly
/// (`executor`, `application`, `key`) or as a substring (`remark`, `error`); `%`, `_`
/// and every other character stand for themselves.
///
/// ```
/// use async_exec::{RequestQuery, Status};
/// let dead_mails = RequestQuery::default()
///     .status(Status::Dead)
///     .executor("mail::send_welcome")
///     .error_contains("timeout");
/// assert_eq!(dead_mails.status, Some(Status::Dead));
/// ```
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "console", derive(utoipa::ToSchema))]
#[non_exhaustive]
pub struct RequestQuery {
    /// In this status.
    pub status: Option<Status>,
    /// Of this executor (its stable name).
    pub executor: Option<String>,
    /// Of this application; the runtime's own when `None`.
    pub application: Option<String>,
    /// With this idempotency key.
    pub key: Option<String>,
    /// This one request.
    pub id: Option<RequestId>,
    /// Whose remark contains this text.
    pub remark: Option<String>,
    /// Whose last error contains this text.
    pub error: Option<String>,
    /// Created at or after this time (unix ms).
    pub created_from: Option<i64>,
    /// Created before this time (unix ms).
    pub created_to: Option<i64>,
}

impl RequestQuery {
    /// Requests in this status.
    pub fn status(mut self, status: Status) -> Self {
        self.status = Some(status);
        self
    }

    /// Requests of this executor.
    pub fn executor(mut self, executor: impl Into<String>) -> Self {
        self.executor = Some(executor.into());
        self
    }

    /// Requests of this application (instead of the runtime's own).
    pub fn application(mut self, application: impl Into<String>) -> Self {
        self.application = Some(application.into());
        self
    }

    /// The request with this idempotency key.
    pub fn key(mut self, key: impl Into<String>) -> Self {
        self.key = Some(key.into());
        self
    }

    /// The request with this id.
    pub fn id(mut self, id: RequestId) -> Self {
        self.id = Some(id);
        self
    }

    /// Requests whose remark contains `text`.
    pub fn remark_contains(mut self, text: impl Into<String>) -> Self {
        self.remark = Some(text.into());
        self
    }

    /// Requests whose last error contains `text`.
    pub fn error_contains(mut self, text: impl Into<String>) -> Self {
        self.error = Some(text.into());
        self
    }

    /// Requests created in `[from, to)` (unix ms; either end open when `None`).
    pub fn created_between(mut self, from: Option<i64>, to: Option<i64>) -> Self {
        self.created_from = from;
        self.created_to = to;
        self
    }
}

/// The order of a page: by id, which is the order requests were written in.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Order {
    /// Newest first (the default).
    #[default]
    Newest,
    /// Oldest first.
    Oldest,
}

/// Where a page starts: after the request with this id (the last one of the page
/// before). Keyset paging: as fast on the ten-thousandth page as on the first.
///
/// Pages are in id order, the order in which requests were written: the creation time
/// shown with each follows it, up to how far apart the clocks of the writing instances
/// were (milliseconds), and a call in a transaction scope is written at its commit.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Cursor {
    /// The id of the last request of the page before.
    pub id: RequestId,
}

impl Cursor {
    /// The cursor as text, for a link: the id.
    pub fn to_text(self) -> String {
        self.id.to_string()
    }

    /// Reads [`Cursor::to_text`]'s text; `None` when it is not one.
    pub fn parse(text: &str) -> Option<Cursor> {
        Some(Cursor {
            id: text.parse().ok()?,
        })
    }
}

/// One page of a listing: where it starts, its order and size.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct PageSpec {
    /// Newest or oldest first.
    pub order: Order,
    /// After this request; from the start when `None`.
    pub after: Option<Cursor>,
    /// At most this many (1 to 1,000).
    pub limit: i64,
}

impl Default for PageSpec {
    fn default() -> Self {
        PageSpec {
            order: Order::Newest,
            after: None,
            limit: 50,
        }
    }
}

/// What an operator does to requests.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[cfg_attr(feature = "console", derive(utoipa::ToSchema))]
#[serde(rename_all = "snake_case")]
pub enum Action {
    /// Run again now: `failed` keeps its attempts; `dead` and `cancelled` start over.
    Retry,
    /// Cancel `init` and `failed` requests.
    Cancel,
    /// Delete requests that are not `running`, with their attempt logs.
    Delete,
    /// Run `dead` requests again, with fresh attempts.
    ReplayDead,
}

impl Action {
    /// Every action.
    pub const ALL: [Action; 4] = [
        Action::Retry,
        Action::Cancel,
        Action::Delete,
        Action::ReplayDead,
    ];

    /// Its name, as in the audit trail and the API.
    pub const fn as_str(self) -> &'static str {
        match self {
            Action::Retry => "retry",
            Action::Cancel => "cancel",
            Action::Delete => "delete",
            Action::ReplayDead => "replay_dead",
        }
    }

    /// Reads [`Action::as_str`]'s name.
    pub fn parse(name: &str) -> Option<Action> {
        Action::ALL.into_iter().find(|a| a.as_str() == name)
    }

    /// The statuses it applies to; requests in others are left alone.
    pub const fn applies_to(self) -> &'static [Status] {
        match self {
            Action::Retry => &[Status::Failed, Status::Dead, Status::Cancelled],
            Action::Cancel => &[Status::Init, Status::Failed],
            Action::Delete => &[
                Status::Init,
                Status::Success,
                Status::Failed,
                Status::Dead,
                Status::Cancelled,
            ],
            Action::ReplayDead => &[Status::Dead],
        }
    }
}

/// Attempts finished in one minute.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "console", derive(utoipa::ToSchema))]
pub struct MinuteStat {
    /// The minute's start (unix ms).
    pub minute: i64,
    /// Requests that succeeded.
    pub succeeded: i64,
    /// Requests that failed for good (`dead`).
    pub failed: i64,
    /// Attempts that failed and were scheduled again.
    pub retried: i64,
}

/// The queue depth sampled in one minute.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "console", derive(utoipa::ToSchema))]
pub struct DepthSample {
    /// The minute's start (unix ms).
    pub minute: i64,
    /// Records `init` or `failed`.
    pub waiting: i64,
    /// Records `running`.
    pub running: i64,
}

/// Records of one executor in one status, sampled for the queue gauges.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct QueueCount {
    pub(crate) executor: String,
    /// `init`, `running` or `failed`.
    pub(crate) status: Status,
    pub(crate) count: i64,
    /// The earliest due time (unix ms) among those due by the sample's `now` (`init`,
    /// `failed`); `None` when none is due.
    pub(crate) oldest_due: Option<i64>,
}

/// An executor whose claims are paused.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "console", derive(utoipa::ToSchema))]
pub struct Pause {
    /// The executor.
    pub executor: String,
    /// Who paused it.
    pub paused_by: String,
    /// When (unix ms).
    pub paused_at: i64,
}

/// One operator action, as the audit trail keeps it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "console", derive(utoipa::ToSchema))]
pub struct AuditEntry {
    /// Its id (0 before it is written).
    pub id: i64,
    /// The application acted on.
    pub application: String,
    /// Who acted: a console user or token name.
    pub actor: String,
    /// `retry`, `cancel`, `delete`, `replay_dead`, `pause`, `resume`.
    pub action: String,
    /// On what: the request filter or executor, as JSON.
    pub target: String,
    /// How many requests it changed.
    pub affected: i64,
    /// When (unix ms).
    pub create_time: i64,
}

/// How many requests of one executor are in one status.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "console", derive(utoipa::ToSchema))]
pub struct ExecutorCount {
    /// The executor.
    pub executor: String,
    /// The status.
    pub status: Status,
    /// How many.
    pub count: i64,
}

/// Counts per minute to add to `async_stat`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct StatDelta {
    pub(crate) executor: &'static str,
    pub(crate) minute: i64,
    pub(crate) succeeded: i64,
    pub(crate) failed: i64,
    pub(crate) retried: i64,
}

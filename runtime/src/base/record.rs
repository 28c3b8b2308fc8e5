//! The records: `async_req` (one row per request), `async_log` (one row per attempt
//! that failed, and per success when `log_success` is on) and `async_instance` (one row
//! per instance, as it announced itself).

use std::fmt;
use std::str::FromStr;
use std::sync::Arc;

use serde::{Deserialize, Serialize};

/// The id of a request record.
pub type RequestId = i64;

/// Where a request is in its life.
///
/// `init -> running -> success | failed -> (retry) running ... -> dead`; `cancelled`.
/// `success`, `dead` and `cancelled` are terminal: only an explicit replay
/// ([`Runtime::retry_now`](crate::Runtime::retry_now)) moves a request out of them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[cfg_attr(feature = "console", derive(utoipa::ToSchema))]
#[serde(rename_all = "lowercase")]
#[non_exhaustive]
pub enum Status {
    /// Committed, waiting for its first execution.
    Init,
    /// Claimed by a worker that holds a lease on it.
    Running,
    /// Executed successfully (kept only when `delete_on_success` is off).
    Success,
    /// Failed; the retry sweep runs it again at `run_at`.
    Failed,
    /// Failed for good: out of attempts, a final error, or arguments that no longer decode.
    Dead,
    /// Cancelled by an operator before it ran.
    Cancelled,
}

impl Status {
    /// Every status, in the order of the life cycle.
    pub const ALL: [Status; 6] = [
        Status::Init,
        Status::Running,
        Status::Success,
        Status::Failed,
        Status::Dead,
        Status::Cancelled,
    ];

    /// The word stored in the `status` column.
    pub const fn as_str(self) -> &'static str {
        match self {
            Status::Init => "init",
            Status::Running => "running",
            Status::Success => "success",
            Status::Failed => "failed",
            Status::Dead => "dead",
            Status::Cancelled => "cancelled",
        }
    }

    /// Whether [`Runtime::retry_now`](crate::Runtime::retry_now) may run a request in
    /// this status again: `failed`, `dead`, `cancelled`; `success` only when asked for.
    pub(crate) fn may_retry(self, replay_success: bool) -> bool {
        match self {
            Status::Failed | Status::Dead | Status::Cancelled => true,
            Status::Success => replay_success,
            Status::Init | Status::Running => false,
        }
    }

    /// Whether the status only changes by an explicit replay.
    pub const fn is_terminal(self) -> bool {
        matches!(self, Status::Success | Status::Dead | Status::Cancelled)
    }
}

impl fmt::Display for Status {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Parses the word stored in the `status` column (`"dead"`); anything else is an
/// [`Error::UnknownStatus`](crate::Error::UnknownStatus) that lists the valid words.
///
/// ```
/// use async_exec::Status;
/// assert_eq!("dead".parse::<Status>().unwrap(), Status::Dead);
/// let error = "Dead".parse::<Status>().unwrap_err().to_string();
/// assert!(error.contains("init, running, success, failed, dead, cancelled"), "{error}");
/// ```
impl FromStr for Status {
    type Err = crate::Error;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Status::ALL
            .into_iter()
            .find(|status| status.as_str() == s)
            .ok_or_else(|| crate::Error::UnknownStatus(s.to_string()))
    }
}

/// The valid status words, for messages: `init, running, ..., cancelled`.
pub(crate) fn status_words() -> String {
    Status::ALL.map(Status::as_str).join(", ")
}

/// One request record, as stored.
///
/// It serializes with serde as the row does, except that `param_json` and `trace_json`
/// are JSON values rather than strings holding JSON (a stored text that is not JSON is
/// kept as a string):
///
/// ```
/// # fn demo(request: async_exec::Request) -> serde_json::Result<()> {
/// let json = serde_json::to_value(&request)?;
/// println!("{}", json["param_json"]["user_id"]); // 42, not "{\"user_id\":42}"
/// # Ok(()) }
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "console", derive(utoipa::ToSchema))]
pub struct Request {
    /// Its id.
    pub id: RequestId,
    /// The application that submitted it (only its instances run it).
    pub application_name: String,
    /// The executor's stable name.
    pub executor: String,
    /// The signature hash of the arguments when they were written.
    pub sign: String,
    /// The strategy of the call.
    pub strategy: String,
    /// Where it is in its life.
    pub status: Status,
    /// How many attempts have started.
    pub exec_count: i32,
    /// How many attempts it may have.
    pub max_attempts: i32,
    /// The arguments, as JSON (serialized as a JSON value); `#[secret]` ones as stored:
    /// sealed, `{"$sealed": "<key id>.<base64>"}` (see [`mask_sealed`](crate::mask_sealed)).
    #[serde(with = "json_text")]
    pub param_json: String,
    /// The executor's remark.
    pub remark: String,
    /// The caller's idempotency key, if any.
    pub idempotency_key: Option<String>,
    /// Higher runs first.
    pub priority: i32,
    /// Not before this time (unix milliseconds).
    pub run_at: i64,
    /// The instance holding the lease while `running`.
    pub lease_owner: Option<String>,
    /// When the lease ends (unix milliseconds).
    pub lease_until: Option<i64>,
    /// The last failure's message.
    pub last_error: Option<String>,
    /// The caller's tracing context, as JSON (serialized as a JSON value).
    #[serde(with = "json_text::optional")]
    pub trace_json: Option<String>,
    /// Created (unix milliseconds).
    pub create_time: i64,
    /// Last changed (unix milliseconds).
    pub update_time: i64,
    /// What a running body last reported with [`Context::progress`](crate::Context::progress)
    /// (kept after it finished, when the record is kept).
    pub progress: Option<Progress>,
    /// Not started by this time (unix milliseconds, the database's clock), it goes `dead`
    /// ("deadline passed"); running at it, its body is told to stop and it ends
    /// `cancelled`. Set by [`Call::deadline`](crate::Call::deadline).
    #[serde(default)]
    pub deadline_at: Option<i64>,
    /// When a cancel of it was asked for while it ran (unix milliseconds): its body is told
    /// (see [`Runtime::cancel`](crate::Runtime::cancel)).
    #[serde(default)]
    pub cancel_requested: Option<i64>,
    /// Its tags ([`Call::tag`](crate::Call::tag)), in order.
    #[serde(default)]
    pub tags: Vec<String>,
}

/// How far a body got: `done` of `total` (the body's own units: rows, files, pages).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "console", derive(utoipa::ToSchema))]
pub struct Progress {
    /// Done so far.
    pub done: u64,
    /// In all.
    pub total: u64,
}

impl Progress {
    /// From the two columns: both set, or no progress.
    pub(crate) fn from_columns(done: Option<i64>, total: Option<i64>) -> Option<Progress> {
        Some(Progress {
            done: u64::try_from(done?).unwrap_or(0),
            total: u64::try_from(total?).unwrap_or(0),
        })
    }
}

/// Text columns that hold JSON, serialized as the JSON value they hold (a text that is
/// not JSON as a string), and read back from either.
mod json_text {
    use serde::{Deserialize, Deserializer, Serialize, Serializer};
    use serde_json::Value;

    fn value_of(text: &str) -> Value {
        serde_json::from_str(text).unwrap_or_else(|_| Value::String(text.to_owned()))
    }

    fn text_of(value: Value) -> String {
        match value {
            Value::String(text) => text,
            other => other.to_string(),
        }
    }

    pub(super) fn serialize<S: Serializer>(text: &str, serializer: S) -> Result<S::Ok, S::Error> {
        value_of(text).serialize(serializer)
    }

    pub(super) fn deserialize<'de, D: Deserializer<'de>>(
        deserializer: D,
    ) -> Result<String, D::Error> {
        Value::deserialize(deserializer).map(text_of)
    }

    pub(super) mod optional {
        use super::*;

        pub(in crate::base::record) fn serialize<S: Serializer>(
            text: &Option<String>,
            serializer: S,
        ) -> Result<S::Ok, S::Error> {
            text.as_deref().map(value_of).serialize(serializer)
        }

        pub(in crate::base::record) fn deserialize<'de, D: Deserializer<'de>>(
            deserializer: D,
        ) -> Result<Option<String>, D::Error> {
            Option::<Value>::deserialize(deserializer).map(|value| value.map(text_of))
        }
    }
}

/// One attempt, as logged in `async_log`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "console", derive(utoipa::ToSchema))]
pub struct AttemptLog {
    /// The request.
    pub request_id: RequestId,
    /// Attempt number, from 1.
    pub attempt: i32,
    /// The instance that ran it.
    pub worker: String,
    /// Started (unix milliseconds).
    pub started: i64,
    /// Finished (unix milliseconds).
    pub finished: i64,
    /// `success`, `error`, `panic`, `timeout`, `final`, `decode`, `missing_data`, `lease_expired`.
    pub outcome: String,
    /// The failure's message.
    pub error: Option<String>,
}

/// A request to insert.
#[derive(Debug, Clone)]
pub(crate) struct NewRequest {
    pub(crate) application_name: Arc<str>,
    pub(crate) executor: &'static str,
    pub(crate) sign: &'static str,
    pub(crate) strategy: &'static str,
    pub(crate) status: Status,
    pub(crate) exec_count: i32,
    pub(crate) max_attempts: i32,
    pub(crate) param_json: Arc<str>,
    pub(crate) remark: &'static str,
    pub(crate) idempotency_key: Option<String>,
    /// How long the idempotency key protects from `now` (ms): the `key_retention` setting.
    pub(crate) key_retention: i64,
    pub(crate) priority: i32,
    pub(crate) run_at: i64,
    /// Not started by then (unix ms), it goes `dead`; `None`: no deadline.
    pub(crate) deadline_at: Option<i64>,
    /// The queue whose limits it runs under (the executor's `queue`); `""`: in none.
    pub(crate) queue: &'static str,
    /// Its partition of the queue (`Call::partition`); `None`: the queue's shared one.
    pub(crate) partition: Option<String>,
    /// The singleton it belongs to (`QueueLimits::singleton`: its queue and partition),
    /// of which at most one request is live; `None`: none.
    pub(crate) singleton: Option<String>,
    /// The trailing debounce it belongs to (its executor and partition): a call while a
    /// request of it waits replaces that one's arguments and start; `None`: none.
    pub(crate) debounce: Option<String>,
    /// Its tags (`Call::tag`), written beside it; mostly none.
    pub(crate) tags: Vec<String>,
    pub(crate) last_error: Option<String>,
    pub(crate) trace_json: Option<String>,
    pub(crate) now: i64,
    /// For a record to run now: the submitting instance, so that a backend with
    /// notifications (PostgreSQL `NOTIFY`, sent inside the same transaction) can wake the
    /// other instances. `None` for records that must not run yet.
    pub(crate) notify: Option<Arc<str>>,
    /// An attempt already made (a failed inline or in-memory run), logged with the insert;
    /// its `request_id` is filled in by the store.
    pub(crate) log: Option<AttemptLog>,
}

/// What an insert did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Inserted {
    /// A new record.
    New(RequestId),
    /// The idempotency key was taken and has not expired: this is the request it names
    /// (which may have been deleted since); `None` for the key of a `SyncSave` call whose
    /// body ran at once, without a record.
    Existing(Option<RequestId>),
    /// A live (waiting or running) request of the same singleton exists
    /// (`QueueLimits::singleton`): nothing was written; this is that request.
    Live(RequestId),
    /// A request of the same trailing debounce was waiting: it took this call's
    /// arguments and start; nothing was written besides.
    Merged(RequestId),
}

impl Inserted {
    /// The request the insert names: the new one, or the existing one (`None`: a key's
    /// `SyncSave` call that ran without a record).
    pub(crate) fn id(self) -> Option<RequestId> {
        match self {
            Inserted::New(id) | Inserted::Live(id) | Inserted::Merged(id) => Some(id),
            Inserted::Existing(id) => id,
        }
    }
}

impl NewRequest {
    /// When the key of this request, written now, expires (unix ms).
    pub(crate) fn key_expire_time(&self) -> i64 {
        self.now.saturating_add(self.key_retention)
    }
}

/// A record claimed by this instance: `running`, leased, its attempt counted.
#[derive(Debug, Clone)]
pub(crate) struct Claimed {
    pub(crate) id: RequestId,
    pub(crate) executor: String,
    pub(crate) sign: String,
    pub(crate) param_json: Arc<str>,
    pub(crate) attempt: i32,
    pub(crate) max_attempts: i32,
    pub(crate) trace_json: Option<String>,
    pub(crate) priority: i32,
    pub(crate) run_at: i64,
    /// For the outcome listeners (`None`, unallocated, for most records).
    pub(crate) idempotency_key: Option<String>,
    /// Not started by then (unix ms), it must not start (checked again at the body's
    /// start: a claim can be answered, or a worker freed, after it).
    pub(crate) deadline_at: Option<i64>,
}

impl Claimed {
    /// Puts claimed records in the order they must start: higher priority first, then
    /// due time, then id. (`UPDATE … RETURNING` returns rows in no particular order.)
    pub(crate) fn sort_for_start(claimed: &mut [Claimed]) {
        claimed.sort_unstable_by_key(|c| (std::cmp::Reverse(c.priority), c.run_at, c.id));
    }
}

/// A record claimed by id: what the dispatcher did not already know (it wrote the rest).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct ClaimedId {
    pub(crate) id: RequestId,
    pub(crate) attempt: i32,
}

/// The time now, in unix milliseconds.
pub(crate) fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis() as i64)
        .unwrap_or(0)
}

/// An instance that shares this database, as it announced itself.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct InstanceInfo {
    /// Its name, as in `lease_owner` and `async_log.worker`.
    pub name: String,
    /// Its application name.
    pub application: String,
    /// Whether it runs workers (a submit-only instance does not).
    pub workers: bool,
    /// When it started (unix ms, the database's clock).
    pub started: i64,
    /// When it last announced itself (unix ms, the database's clock).
    pub last_seen: i64,
    /// The executors it links, with their signatures.
    pub executors: Vec<ExecutorSign>,
}

/// An executor's name and the sign of its persisted parameters' signature.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ExecutorSign {
    /// The executor's stable name.
    pub name: String,
    /// The sign (hash) of its persisted parameters' types.
    pub sign: String,
    /// Its schedule (`every = ...`, `cron = ...`), if it has one. Absent from what
    /// versions before schedules were announced wrote.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub schedule: Option<AnnouncedSchedule>,
}

/// A schedule as an instance announces it with its executors (in `async_instance`), so
/// that what links no executors (the CLI) can list the schedules of the instances that
/// run and their next ticks: [`Runtime::announced_schedules`](crate::Runtime::announced_schedules).
///
/// ```
/// use async_exec::AnnouncedSchedule;
/// let nightly: AnnouncedSchedule =
///     serde_json::from_str(r#"{"cron":"0 0 2 * * *","time_zone":"Europe/Paris"}"#).unwrap();
/// assert_eq!(nightly.describe(), "cron 0 0 2 * * * (Europe/Paris)");
/// // 2026-12-06 00:00 UTC: the next 02:00 in Paris is 01:00 UTC.
/// assert_eq!(nightly.next_ticks(1_796_515_200_000, 1).unwrap(), vec![1_796_518_800_000]);
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[non_exhaustive]
pub struct AnnouncedSchedule {
    /// `every = ...`, in milliseconds.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub every_ms: Option<u64>,
    /// `cron = ...`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cron: Option<String>,
    /// `time_zone = ...` beside `cron`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub time_zone: Option<String>,
    /// `catch_up = true`.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub catch_up: bool,
}

impl AnnouncedSchedule {
    /// The schedule as [`Schedule::describe`](crate::Schedule::describe) gives it.
    pub fn describe(&self) -> String {
        let when = match (&self.every_ms, &self.cron) {
            (Some(ms), _) => format!("every {ms} ms"),
            (None, Some(cron)) => {
                format!(
                    "cron {cron} ({})",
                    self.time_zone.as_deref().unwrap_or("UTC")
                )
            }
            (None, None) => "no schedule".to_string(),
        };
        match self.catch_up {
            true => format!("{when}, a missed tick caught up"),
            false => when,
        }
    }
}

/// Reads the executors column.
pub(crate) fn parse_executors(json: &str) -> Vec<ExecutorSign> {
    serde_json::from_str(json).unwrap_or_default()
}

/// Why a running body was told to stop by its record (not by a lost lease).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum StopAsked {
    /// A cancel was asked for (`rt.cancel`, the console, the CLI).
    Cancel,
    /// Its deadline passed while it ran.
    Deadline,
}

impl StopAsked {
    /// Why, for people: the start of the cancelled record's `last_error`.
    pub(crate) fn reason(self) -> &'static str {
        match self {
            StopAsked::Cancel => "cancelled while running",
            StopAsked::Deadline => "deadline passed while running",
        }
    }
}

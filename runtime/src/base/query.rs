//! What is asked of the store about requests: which requests ([`RequestQuery`]), which
//! page of them ([`PageSpec`], [`Cursor`], [`Page`]), actions on every request that
//! matches a query, counts, per-minute statistics, pauses and the audit trail. Code, the
//! console and the command-line tool are built on these types and on the `Runtime`
//! methods that take them (`Runtime::list`, `Runtime::act`, ...).

use serde::{Deserialize, Serialize};

use crate::base::error::{Error, Result};
use crate::base::record::{Request, RequestId, Status};

/// Which requests: every field that is set must match (none set: every request of the
/// application). The same on every backend: text fields match exactly, case and trailing
/// spaces included (`executor`, `application`, `key`), or as a substring, case included
/// (`remark`, `error`); `%`, `_`, `\`, quotes and every other character stand for
/// themselves, and text is compared as stored, character by character (`é` written as
/// `e` and a combining accent is not `é`). Stored text has NUL replaced by U+FFFD
/// (PostgreSQL refuses NUL), and so has a filter's text: a filter with a NUL finds the
/// text that was stored for it. Text is at most 1,024 bytes.
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
    /// With this tag ([`Call::tag`](crate::Call::tag)), exactly.
    #[serde(default)]
    pub tag: Option<String>,
    /// Whose arguments hold this value at this path: `("user.id", "42")`, as Oban Web's
    /// `args.user.id:42` (see [`RequestQuery::arg`]).
    #[serde(default)]
    pub arg: Option<(String, String)>,
    /// Whether the remark and last error are searched in any case (`false`: exact case).
    #[serde(default)]
    pub any_case: bool,
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

    /// Requests tagged `tag` ([`Call::tag`](crate::Call::tag)), exactly.
    ///
    /// ```no_run
    /// # use async_exec::{Action, RequestQuery};
    /// # async fn demo(rt: async_exec::Runtime) -> async_exec::Result<()> {
    /// let query = RequestQuery::default().tag("subscription:42");
    /// let page = rt.list(&query, &async_exec::PageSpec::default()).await?;
    /// println!("{} requests of subscription 42", page.requests.len());
    /// // The subscription ends: cancel every waiting request of it.
    /// let cancelled = rt.act(Action::Cancel, &query, "billing").await?;
    /// # Ok(()) }
    /// ```
    pub fn tag(mut self, tag: impl Into<String>) -> Self {
        self.tag = Some(tag.into());
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

    /// Requests whose arguments hold `value` at `path`: the names of nested fields joined
    /// by dots (`user.id`; letters, digits and `_` in each), the value as JSON writes it
    /// without quotes (`42`, `alice@example.com`; a boolean is `true` on PostgreSQL and
    /// MySQL/MariaDB, `1` on SQLite). Arguments marked `#[secret]`
    /// are sealed and not searched. Each record's arguments are read: a page looks at
    /// [`PageSpec::search_window`] requests at most, as for text.
    ///
    /// ```
    /// # use async_exec::RequestQuery;
    /// let query = RequestQuery::default().arg("order.customer", "4711");
    /// assert_eq!(query.arg, Some(("order.customer".into(), "4711".into())));
    /// ```
    pub fn arg(mut self, path: impl Into<String>, value: impl Into<String>) -> Self {
        self.arg = Some((path.into(), value.into()));
        self
    }

    /// Searches the remark and the last error in any case (SQLite: ASCII letters only).
    pub fn any_case(mut self) -> Self {
        self.any_case = true;
        self
    }

    /// Whether it searches text (remark, last error, arguments): rows read one by one,
    /// within a search window.
    pub(crate) fn searches_text(&self) -> bool {
        self.remark.is_some() || self.error.is_some() || self.arg.is_some()
    }

    /// The path of [`RequestQuery::arg`] as its parts, or what is wrong with it.
    pub(crate) fn arg_path(&self) -> Option<std::result::Result<Vec<&str>, String>> {
        let (path, _) = self.arg.as_ref()?;
        let parts: Vec<&str> = path.split('.').collect();
        let fine = parts
            .iter()
            .all(|p| !p.is_empty() && p.chars().all(|c| c.is_ascii_alphanumeric() || c == '_'));
        Some(if fine && parts.len() <= 16 {
            Ok(parts)
        } else {
            Err(format!(
                "argument path `{path}`: write the names of nested fields joined by dots \
                 (`user.id`), each of letters, digits and `_`, at most 16"
            ))
        })
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
/// before, or [`Page::next`]). Keyset paging: as fast on the ten-thousandth page as on
/// the first, and no request is skipped or shown twice while others are added.
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
    /// The cursor just after `request`, for a page that continues from it.
    pub fn of(request: &Request) -> Cursor {
        Cursor { id: request.id }
    }

    /// The cursor as text, for a link or a command line: the id.
    ///
    /// ```
    /// use async_exec::Cursor;
    /// let cursor = Cursor { id: 4711 };
    /// assert_eq!(cursor.to_text(), "4711");
    /// assert_eq!(Cursor::parse(" 4711 "), Some(cursor));
    /// assert_eq!(Cursor::parse("1764547200000.4711"), None);
    /// ```
    pub fn to_text(self) -> String {
        self.id.to_string()
    }

    /// Reads [`Cursor::to_text`]'s text; `None` when it is not one.
    pub fn parse(text: &str) -> Option<Cursor> {
        Some(Cursor {
            id: text.trim().parse().ok()?,
        })
    }
}

impl std::fmt::Display for Cursor {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}", self.id)
    }
}

impl std::str::FromStr for Cursor {
    type Err = Error;

    fn from_str(text: &str) -> Result<Cursor> {
        Cursor::parse(text).ok_or_else(|| {
            Error::InvalidFilter(format!(
                "cursor `{text}`: use the `next` cursor of the page before (a request id)"
            ))
        })
    }
}

/// One page of a listing: its order, where it starts, its size, and how far a text filter
/// searches for it.
///
/// ```
/// use async_exec::{Cursor, Order, PageSpec};
/// let first = PageSpec::default(); // newest first, 50 requests
/// assert_eq!((first.order, first.limit), (Order::Newest, 50));
/// let next = PageSpec::oldest_first()
///     .limit(200)
///     .after(Cursor { id: 4711 });
/// assert_eq!(next.after.map(|c| c.id), Some(4711));
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
#[non_exhaustive]
pub struct PageSpec {
    /// Newest or oldest first.
    pub order: Order,
    /// After this request; from the start when `None`.
    pub after: Option<Cursor>,
    /// At most this many (1 to [`PageSpec::MAX_LIMIT`]).
    pub limit: i64,
    /// With a text filter (`remark`, `error`), how many requests in page order (of those
    /// matching the other fields) the page looks at, at most (1 to
    /// [`PageSpec::MAX_SEARCH_WINDOW`]): a substring search reads every row it looks at,
    /// so a page of a rare text would otherwise read the whole table. A page that ends at
    /// its window before it fills says so ([`Page::searched`]) and continues, with
    /// [`Page::next`], from the last request looked at.
    pub search_window: i64,
}

impl Default for PageSpec {
    fn default() -> Self {
        PageSpec {
            order: Order::Newest,
            after: None,
            limit: PageSpec::DEFAULT_LIMIT,
            search_window: PageSpec::DEFAULT_SEARCH_WINDOW,
        }
    }
}

impl PageSpec {
    /// The most requests of one page.
    pub const MAX_LIMIT: i64 = 1000;

    /// The requests of a page unless [`PageSpec::limit`] says otherwise.
    pub const DEFAULT_LIMIT: i64 = 50;

    /// The rows a text filter looks at for one page unless
    /// [`PageSpec::search_window`] says otherwise (what a page costs with it at 1,000,000
    /// rows: README, "Console").
    pub const DEFAULT_SEARCH_WINDOW: i64 = 20_000;

    /// The most rows a text filter may look at for one page.
    pub const MAX_SEARCH_WINDOW: i64 = 100_000;

    /// The first page, newest first (the default).
    pub fn newest_first() -> Self {
        PageSpec::default()
    }

    /// The first page, oldest first.
    pub fn oldest_first() -> Self {
        PageSpec::default().order(Order::Oldest)
    }

    /// In this order.
    pub fn order(mut self, order: Order) -> Self {
        self.order = order;
        self
    }

    /// Starting after `cursor` (the [`Page::next`] of the page before).
    pub fn after(mut self, cursor: Cursor) -> Self {
        self.after = Some(cursor);
        self
    }

    /// At most `limit` requests (1 to [`PageSpec::MAX_LIMIT`]).
    pub fn limit(mut self, limit: i64) -> Self {
        self.limit = limit;
        self
    }

    /// With a text filter, looking at at most `rows` requests (1 to
    /// [`PageSpec::MAX_SEARCH_WINDOW`]).
    pub fn search_window(mut self, rows: i64) -> Self {
        self.search_window = rows;
        self
    }

    /// Refuses a page out of range, saying what to ask for instead.
    pub(crate) fn check(&self) -> Result<()> {
        if !(1..=PageSpec::MAX_SEARCH_WINDOW).contains(&self.search_window) {
            return Err(Error::InvalidFilter(format!(
                "search window {}: look at 1 to {} requests a page, and continue with the `next` cursor",
                self.search_window,
                PageSpec::MAX_SEARCH_WINDOW
            )));
        }
        if !(1..=PageSpec::MAX_LIMIT).contains(&self.limit) {
            return Err(Error::InvalidFilter(format!(
                "page limit {}: ask for 1 to {} requests a page, and page on with the `next` cursor",
                self.limit,
                PageSpec::MAX_LIMIT
            )));
        }
        Ok(())
    }
}

/// A page of requests and where the next one starts. With a text filter, a page may end
/// at its [search window](PageSpec::search_window) before it fills ([`Page::searched`]
/// says how many requests it looked at): fewer requests, or none, and `next` to continue
/// the search from where it stopped.
///
/// ```no_run
/// # async fn demo(rt: async_exec::Runtime) -> async_exec::Result<()> {
/// use async_exec::{PageSpec, RequestQuery, Status};
/// let dead = RequestQuery::default().status(Status::Dead);
/// let mut spec = PageSpec::default().limit(100);
/// loop {
///     let page = rt.list(&dead, &spec).await?;
///     for request in &page.requests {
///         println!("{} {}: {:?}", request.id, request.executor, request.last_error);
///     }
///     match page.next {
///         Some(next) => spec = spec.after(next),
///         None => break,
///     }
/// }
/// # Ok(()) }
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[non_exhaustive]
pub struct Page {
    /// The requests, in the page's order.
    pub requests: Vec<Request>,
    /// Where the next page starts (its [`PageSpec::after`]); `None` when nothing
    /// follows.
    pub next: Option<Cursor>,
    /// `Some(rows)` when a text filter ended the page at its search window before it
    /// filled: the requests it looked at; `next` is the last of them. `None` otherwise.
    pub searched: Option<i64>,
}

impl IntoIterator for Page {
    type Item = Request;
    type IntoIter = std::vec::IntoIter<Request>;

    fn into_iter(self) -> Self::IntoIter {
        self.requests.into_iter()
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

/// The policy of a queue (or of an executor in no queue, under its name) set while the
/// service runs ([`Runtime::policy`](crate::Runtime::policy),
/// [`Runtime::set_queue_limits`](crate::Runtime::set_queue_limits)), which overrides the
/// attribute's and the builder's on every instance within about a second; `None`: theirs.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "console", derive(utoipa::ToSchema))]
pub struct QueuePolicy {
    /// The queue.
    pub queue: String,
    /// Requests of the queue running at once over every instance.
    pub concurrency: Option<i64>,
    /// Requests of the queue running at once on each instance.
    pub per_instance: Option<i64>,
    /// Requests of the queue started per second over every instance.
    pub rate: Option<i64>,
    /// Whether its requests are left waiting (no instance claims them).
    #[serde(default)]
    pub paused: bool,
    /// The attempts a request gets.
    #[serde(default)]
    pub max_attempts: Option<i64>,
    /// The first retry's delay (ms), doubled for each later one.
    #[serde(default)]
    pub backoff_base_ms: Option<i64>,
    /// The longest delay between retries (ms).
    #[serde(default)]
    pub backoff_cap_ms: Option<i64>,
    /// A body's timeout (ms).
    #[serde(default)]
    pub timeout_ms: Option<i64>,
    /// Added to the priority of new requests.
    #[serde(default)]
    pub priority_boost: Option<i64>,
    /// Who set them last, if anyone did.
    pub changed_by: Option<String>,
    /// When (unix ms).
    pub changed_at: Option<i64>,
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

//! The one error type of the runtime.

/// What went wrong, with a message that says what to do about it.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The database refused or failed a statement.
    #[error("database error: {0}")]
    Database(#[from] sqlx::Error),

    /// The schema migrations could not be applied.
    #[error(
        "could not migrate the async-exec tables: {0} (the database user needs to create \
         tables and indexes; `async-exec migrate --url ...` applies them ahead of a deploy)"
    )]
    Migrate(#[source] sqlx::migrate::MigrateError),

    /// Another instance held the lock under which the migrations run for too long.
    #[error("could not migrate the async-exec tables: {0}")]
    MigrateLock(String),

    /// The call's arguments could not be serialized to JSON.
    #[error("executor `{executor}`: the arguments could not be serialized to JSON")]
    Serialize {
        /// The executor called.
        executor: &'static str,
        /// Serde's reason.
        #[source]
        source: serde_json::Error,
    },

    /// Two `#[async_exec]` functions in this binary have the same executor name.
    #[error(
        "two executors are named `{name}`: {first} and {second}; \
         give one of them another `name = \"...\"`"
    )]
    DuplicateExecutor {
        /// The name both use.
        name: String,
        /// The first one: its path and persisted parameters.
        first: String,
        /// The second one: its path and persisted parameters.
        second: String,
    },

    /// A call was awaited without `.on(&rt)` or `.within(&mut tx)` and no runtime is running.
    #[error(
        "no async-exec runtime is running: start one with `Runtime::builder().start().await`, \
         or pass one with `.on(&rt)`"
    )]
    NoRuntime,

    /// The runtime has been shut down.
    #[error("the async-exec runtime has been shut down")]
    ShutDown,

    /// The runtime is disabled by its `enabled(false)` setting.
    #[error("the async-exec runtime is disabled (`enabled(false)`): calls are refused")]
    Disabled,

    /// A transaction of one database kind was asked from a runtime on another.
    #[error(
        "this runtime stores its records in {actual}, not {requested}: begin a `Tx<{actual}>`"
    )]
    WrongBackend {
        /// The backend the runtime uses.
        actual: &'static str,
        /// The backend that was asked for.
        requested: &'static str,
    },

    /// The database URL names no backend compiled into this build.
    #[error("unsupported database URL `{0}`: expected {1}")]
    UnsupportedUrl(String, String),

    /// `http::metrics_router()` could not install its Prometheus recorder; the message
    /// says why and what to do.
    #[error("could not install the Prometheus recorder for /metrics: {0}")]
    MetricsRecorder(String),

    /// A setting is out of range.
    #[error("invalid setting `{setting}`: {reason}")]
    Config {
        /// The setting's builder method.
        setting: &'static str,
        /// Why it is refused.
        reason: String,
    },

    /// A call's option is out of range; nothing was written.
    #[error("executor `{executor}`: invalid `.{option}(...)`: {reason}")]
    InvalidCall {
        /// The executor called.
        executor: &'static str,
        /// The call option (`key`, `delay`, ...).
        option: &'static str,
        /// Why it is refused, and what is allowed.
        reason: String,
    },

    /// A SQLite write waited `sqlite_busy_timeout` for the write lock and gave up.
    #[error(
        "the SQLite database stayed locked by another write transaction for {waited:?}: \
         if this call is made while you hold a transaction, pass it with `.within(&mut tx)` \
         (SQLite has one writer, so the call waits for your own transaction); otherwise \
         commit long write transactions sooner or raise `sqlite_busy_timeout`"
    )]
    SqliteLocked {
        /// How long the write waited.
        waited: std::time::Duration,
    },

    /// Executors that this runtime runs take `Data<T>` values that were not registered:
    /// their requests would go `dead` when they run.
    #[error(
        "executors this runtime runs take `Data<T>` values that are not registered: {missing}; \
         register each with `.data(value)` on the builder (a service's instance with \
         `.service(Arc::new(value))`), or, if this runtime is not meant to \
         run those executors (their requests would go `dead` here), say so with \
         `.without_data::<T>()`"
    )]
    MissingData {
        /// Each executor and the type it lacks: ``"`app::mail` takes `Data<app::Mailer>`"``.
        missing: String,
    },

    /// A call was awaited without `.within(&mut tx)` from a task that holds an open
    /// [`Tx`](crate::Tx) of the same runtime: it would not be part of that transaction.
    #[error(
        "executor `{executor}` was called without `.within(&mut tx)` while this task holds an \
         open transaction of the runtime: the call would not be part of it (it would run even \
         if the transaction rolls back, and on SQLite it would wait for that transaction's \
         write lock). Pass the transaction with `.within(&mut tx)`, or make the calls inside \
         `rt.transaction(|tx| Box::pin(async move {{ ... }}))`, where calls without `.within` \
         join it; if the call is meant to run whatever the transaction does, say so with \
         `.independent()`"
    )]
    BareCallInTransaction {
        /// The executor called.
        executor: &'static str,
    },

    /// The database server ended the caller's transaction with a rollback on its own:
    /// PostgreSQL after a statement in it failed (its COMMIT then rolls back and answers
    /// without an error), MySQL/MariaDB after a deadlock or a lock wait timeout with
    /// `innodb_rollback_on_timeout` (the session then goes on in autocommit). Nothing in it
    /// was committed, no call made in it was dispatched, and no call is written after it.
    #[error(
        "the database server rolled this transaction back ({reason}): nothing in it was \
         committed and no call made in it was written or dispatched; begin a new \
         transaction and do the whole unit of work again"
    )]
    TransactionRolledBack {
        /// Why the server rolled it back, as far as the backend tells.
        reason: &'static str,
    },

    /// `rt.transaction(..)` or `rt.begin()` was called inside
    /// [`Runtime::transaction`](crate::Runtime::transaction) of the same runtime, in the
    /// scope's task: it would open a second transaction beside the scope's. The scope is
    /// marked rollback-only ([`Error::RollbackOnly`]).
    #[error(
        "`{asked}` was called inside `rt.transaction(..)` of the same runtime, where it would \
         open a second transaction beside the scope's (on PostgreSQL and MySQL/MariaDB it \
         would commit or roll back on its own, on SQLite it would wait for the scope's write \
         lock). To do the work in the scope's transaction, pass the scope's `tx` down (a \
         function taking `&mut Tx<DB>`; calls without `.within` join the scope); for a \
         transaction that commits on its own whatever the scope does (Spring's \
         REQUIRES_NEW), use `rt.transaction_requires_new(..)`. The scope is now \
         rollback-only: it rolls back and none of its calls runs"
    )]
    NestedTransaction {
        /// What was called: `rt.transaction(..)` or `rt.begin()`.
        asked: &'static str,
    },

    /// `rt.transaction_requires_new(..)` was called on SQLite while the task holds a
    /// transaction of the runtime: SQLite has one writer, so it would wait for that one.
    #[error(
        "`rt.transaction_requires_new(..)` was called on SQLite while this task holds a \
         transaction of the runtime: SQLite has one writer at a time, so the new \
         transaction would wait for the one held here until the busy timeout. On SQLite, \
         do the work in the transaction held here, or after it commits. The enclosing \
         `rt.transaction(..)`, if any, is now rollback-only: it rolls back and none of its \
         calls runs"
    )]
    IndependentOnSqlite,

    /// The body of [`Runtime::transaction`](crate::Runtime::transaction) returned `Ok`,
    /// but the scope had been marked rollback-only (a nested transaction in it was
    /// refused, and the body went on): it was rolled back.
    #[error(
        "this `rt.transaction(..)` was rolled back although its body returned Ok: it was \
         marked rollback-only because {reason}; nothing in it was committed and none of its \
         calls ran"
    )]
    RollbackOnly {
        /// What marked it.
        reason: &'static str,
    },

    /// A background part of the runtime panicked (it is restarted; the panic is logged).
    #[error("the runtime's {0} panicked; it was restarted (see the ERROR log for the panic)")]
    Panicked(&'static str),

    /// The operations console cannot start with this configuration (the message says
    /// what to change).
    #[error("the async-exec console cannot start: {0}")]
    Console(String),

    /// A [`RequestQuery`](crate::RequestQuery) or [`PageSpec`](crate::PageSpec) (or a purge)
    /// asks for something out of range; the message says what to ask for instead.
    #[error("invalid request filter: {0}")]
    InvalidFilter(String),

    /// A status name that is none of the statuses.
    #[error(
        "unknown status `{0}`: expected one of {words} (lowercase)",
        words = crate::base::record::status_words()
    )]
    UnknownStatus(String),

    /// The database could not be reached at start: nothing was connected.
    #[error(
        "could not connect to {backend} at {target}: {cause}; {hint}",
        hint = reach_hint(backend)
    )]
    Unreachable {
        /// `PostgreSQL`, `MySQL`, `SQLite`.
        backend: &'static str,
        /// Where: `host:port/database` as user, or the SQLite file (no password).
        target: String,
        /// Why, as the driver said.
        cause: Box<sqlx::Error>,
    },

    /// An action confirmed for at most `up_to` requests found more matching; nothing
    /// changed ([`Runtime::act_up_to`](crate::Runtime::act_up_to)).
    #[error(
        "{} the filter now, more than the {up_to} confirmed: nothing changed; count again \
         and confirm that number",
        match_phrase(*matching)
    )]
    MoreMatch {
        /// How many match now.
        matching: u64,
        /// How many the action was confirmed for.
        up_to: u64,
    },

    /// No request has this id.
    #[error("no request with id {0}")]
    NotFound(i64),

    /// A call would make more requests wait than a quota allows; nothing was written.
    #[error(
        "quota exceeded: {scope} lets at most {limit} requests wait, and {waiting} do; \
         nothing was written: try again once some have run, or raise the quota ({how})"
    )]
    QuotaExceeded {
        /// Whose quota: `the application`, `queue "payments"`, `owner "tenant-7"`.
        scope: String,
        /// The most requests that may wait.
        limit: u64,
        /// How many wait now (this transaction's calls included), as the quota counts them:
        /// see the guide's *Quotas of waiting requests*.
        waiting: u64,
        /// Where the quota is set.
        how: &'static str,
    },

    /// A call under a quota whose place could not be reserved: nothing of the call was
    /// written (and it may be made again). The reservation is a statement of its own, on a
    /// connection of the runtime's pool besides the caller's transaction.
    #[error(
        "the quota of {scope} could not be checked ({cause}); nothing of the call was \
         written. A call under a quota takes a connection of the runtime's pool for a \
         moment besides its transaction's: if open transactions hold them all, raise the \
         pool's size (`max_connections`) or keep fewer transactions open at once"
    )]
    QuotaUnavailable {
        /// Whose quota: `the application`, `queue "payments"`, `owner "tenant-7"`.
        scope: String,
        /// What went wrong.
        cause: Box<Error>,
    },

    /// A request's kept result does not decode into the type asked for.
    #[error(
        "the result of request {id} does not decode into the type asked for: {source}; \
         ask for the type its executor's body returns (or `serde_json::Value`)"
    )]
    ResultType {
        /// The request.
        id: i64,
        /// serde's reason.
        #[source]
        source: serde_json::Error,
    },

    /// No request holds this idempotency key (it was never used, or its retention ended).
    #[error("no request holds key {0:?}: it was never used, or its retention ended")]
    KeyNotFound(String),

    /// The operation does not apply to the request in its current status.
    #[error("request {id} is `{status}`: {reason}")]
    InvalidState {
        /// The request.
        id: i64,
        /// Its status.
        status: String,
        /// Why the operation is refused.
        reason: &'static str,
    },

    /// The database did not answer in time (the network may be down or stalled). What the
    /// statement did is not known: it may have taken effect. The runtime's own statements
    /// (claims, outcomes, sweeps) are tried again; see [`Error::Unconfirmed`] for a call's.
    #[error(
        "the database did not answer within {0:?}; check that it is reachable \
         (whether the statement took effect is not known)"
    )]
    NoAnswer(std::time::Duration),

    /// A call made outside any transaction (`.on(&rt)`, `.independent()`, a batch's) whose
    /// write got no answer, or whose connection broke while it was sent: the record may
    /// have been written, and then it runs, or not. Repeating an unkeyed call may so run it
    /// twice; a call made with `.key(..)` can be repeated safely (it answers with the
    /// request written first). Inside the caller's transaction a failed write fails the
    /// transaction instead, and nothing is written.
    #[error(
        "executor `{executor}`: the call's record may have been written, or not ({cause}); \
         if it was, it runs. Repeat it only if it has a `.key(..)` (a keyed call answers with \
         the request written first); an unkeyed call repeated may run twice"
    )]
    Unconfirmed {
        /// The executor called (the first of a batch).
        executor: &'static str,
        /// What went wrong: [`Error::NoAnswer`], or the driver's error.
        cause: Box<Error>,
    },

    /// A call in a [`singleton`](crate::QueueLimits::singleton) queue met a live request
    /// of its partition that finished before it could be read, again and again: requests
    /// of the partition start and finish very fast. Nothing was written; call again.
    #[error(
        "executor `{executor}`: the call's singleton was held by a request that finished \
         before it could be read, {tries} times in a row; nothing was written: call again"
    )]
    SingletonContended {
        /// The executor called.
        executor: &'static str,
        /// How many inserts were tried.
        tries: usize,
    },

    /// The executor named by a record is not linked into this binary.
    #[error("executor `{0}` is not linked into this binary")]
    UnknownExecutor(String),

    /// An operation for tests was asked of a runtime that is not in a test mode.
    #[error(
        "`{0}` is for tests: it runs waiting requests before their delay or retry backoff \
         ends; start the runtime with `.test_mode(TestMode::Hold)` (or `TestMode::Inline`)"
    )]
    NotInTestMode(&'static str),
}

fn match_phrase(matching: u64) -> String {
    if matching == 1 {
        "1 request matches".to_string()
    } else {
        format!("{matching} requests match")
    }
}

/// What to check when a backend cannot be reached.
fn reach_hint(backend: &str) -> &'static str {
    if backend == "SQLite" {
        "check that the file's directory exists and that this process may write there"
    } else {
        "check that the server runs and that the URL's host, port, user, password and \
         database are right"
    }
}

/// Whether SQLite answered "database is locked": SQLITE_BUSY or one of its extended codes
/// (recovery, snapshot, timeout).
pub(crate) fn is_sqlite_busy(cause: &sqlx::Error) -> bool {
    let sqlx::Error::Database(db) = cause else {
        return false;
    };
    // Exact codes: another backend's numeric SQLSTATE (42501 on PostgreSQL) can end in 5.
    matches!(db.code().as_deref(), Some("5" | "261" | "517" | "773"))
        || db.message().contains("database is locked")
}

impl Error {
    /// Whether SQLite refused a write because another transaction holds the write lock.
    pub(crate) fn is_sqlite_busy(&self) -> bool {
        matches!(self, Error::Database(cause) if is_sqlite_busy(cause))
    }

    /// Whether the database refused a statement for a concurrent change at its isolation
    /// (SQLSTATE 40001: PostgreSQL's "could not serialize access", MySQL's deadlock).
    pub(crate) fn is_serialization_failure(&self) -> bool {
        matches!(self, Error::Database(sqlx::Error::Database(db)) if db.code().as_deref() == Some("40001"))
    }

    /// Whether a write that failed so may have taken effect all the same: it got no answer,
    /// or its connection broke (after the statement, or its COMMIT, may have been sent).
    pub(crate) fn leaves_write_unknown(&self) -> bool {
        matches!(
            self,
            Error::NoAnswer(_) | Error::Database(sqlx::Error::Io(_) | sqlx::Error::WorkerCrashed)
        )
    }

    /// Whether the error proves that nothing reached the database: no connection could be
    /// had at all. Any other failure of a write may have happened after the statement (or
    /// its COMMIT) was sent, and the write may have taken effect.
    pub(crate) fn proves_nothing_written(&self) -> bool {
        matches!(
            self,
            Error::Database(sqlx::Error::PoolTimedOut | sqlx::Error::PoolClosed)
        )
    }
}

/// The runtime's result type.
pub type Result<T, E = Error> = std::result::Result<T, E>;

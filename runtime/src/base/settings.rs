//! Every setting of the runtime, with its default, and their validation.

use std::time::Duration;

use crate::base::error::{Error, Result};

/// How calls run in an application's own test suite.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum TestMode {
    /// Every call runs to completion before its `.await` (or its transaction's `commit()`)
    /// returns. Retries are not waited for: a failure stays `failed` in the store.
    Inline,
    /// Calls are recorded but nothing runs until [`Runtime::drain`](crate::Runtime::drain).
    Hold,
}

/// How durably SQLite commits (its `synchronous` pragma, in WAL mode).
///
/// | level | a power cut or OS crash may lose | cost |
/// |---|---|---|
/// | `Full` (default) | nothing reported committed | one `fsync` of the WAL per commit |
/// | `Normal` | the last transactions reported committed (the database stays consistent) | none per commit |
/// | `Off` | recent transactions, and the file may be corrupted | none |
///
/// A crash of the process alone (not the machine) loses nothing at any level.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub enum SqliteSynchronous {
    /// `synchronous = FULL`: every commit reported is on disk.
    #[default]
    Full,
    /// `synchronous = NORMAL`: faster; a power cut may lose the last commits.
    Normal,
    /// `synchronous = OFF`: for throwaway data only.
    Off,
}

/// The runtime's settings. Built with [`Builder`](crate::Builder); every field has a default
/// that works with no configuration.
#[derive(Clone)]
#[non_exhaustive]
pub struct Settings {
    /// Accept calls and run workers (default `true`). When `false`, calls fail with
    /// [`Error::Disabled`] and nothing starts.
    pub enabled: bool,
    /// The application whose records this runtime runs (default `"default"`). Instances of
    /// other applications may share the tables. It does not follow the executable's name:
    /// renaming a binary must not orphan its records.
    pub application_name: String,
    /// Where records live (default `sqlite:async_exec.db`, a file in the current directory).
    pub database_url: String,
    /// Connections in the runtime's pool (default 8). On PostgreSQL the runtime holds one
    /// more, for `LISTEN`; on SQLite one more, for its own writes.
    pub max_connections: u32,
    /// Run workers and sweeps in this instance (default `true`). When `false` the instance
    /// only submits: its stored requests are left to the instances that run workers (woken
    /// by PostgreSQL `NOTIFY`, or polling); in-memory strategies still run here.
    pub run_workers: bool,
    /// Bodies running at once in this instance (default 8).
    pub concurrency: usize,
    /// Capacity of the in-process channel from commit to the workers (default 2048). When it is
    /// full the caller is not blocked: the record stays `init` and is claimed from the store.
    pub channel_capacity: usize,
    /// Delete a record when it succeeds (default `true`), else mark it `success`.
    pub delete_on_success: bool,
    /// Write an `async_log` row for successful attempts too (default `false`).
    pub log_success: bool,
    /// Attempts for executors that do not set `max_attempts` (default 5).
    pub default_max_attempts: u32,
    /// Timeout for executors that do not set `timeout` (default 5 minutes).
    pub default_timeout: Duration,
    /// How often each instance looks in the store for `init` records it was not told
    /// about: other instances' submissions (the backstop for PostgreSQL's `NOTIFY`, the way
    /// MySQL instances find each other's work) and records a full channel left there.
    /// Default: the backend's (1 s; MySQL 250 ms).
    pub poll_interval: Option<Duration>,
    /// Listen for other instances' new requests where the backend can (PostgreSQL
    /// `LISTEN`; default `true`). Turn it off behind a pooler that cannot hold a session
    /// (PgBouncer in transaction mode): polling then finds the work.
    pub listen: bool,
    /// How often the retry sweep looks for due `failed` records (default 1 s).
    pub retry_interval: Duration,
    /// Records claimed per retry sweep (default 100).
    pub retry_batch: i64,
    /// Whether due retries (and delayed calls whose time has come) take turns with a
    /// backlog for the workers (default `true`): a retry sweep that finds no worker free
    /// still claims one record and waits in line for the next free worker beside the
    /// backlog's next start. `false`: a retry sweep claims only for the workers free at
    /// its round, so that due retries wait until a backlog of new requests has drained.
    pub retries_take_turns: bool,
    /// Delay before the first retry; it doubles each attempt, with ±25% jitter (default 1 s).
    pub retry_base_delay: Duration,
    /// The longest delay between two attempts (default 10 minutes).
    pub retry_max_delay: Duration,
    /// How often the compensation sweep runs (default 30 s).
    pub compensate_interval: Duration,
    /// An `init` record this much past its due time was never dispatched (default 60 s).
    pub stale_after: Duration,
    /// Records claimed per compensation sweep (default 100).
    pub compensate_batch: i64,
    /// How long an idempotency key protects after its first use (default 24 hours), whatever
    /// happens to the request it names; then the compensation sweep forgets it, and a call
    /// with the key is a new request. At least 1 ms, at most a year.
    pub key_retention: Duration,
    /// How long a claim holds a record without a heartbeat (default 30 s).
    pub lease: Duration,
    /// How often leases of running records are renewed (default 10 s).
    pub heartbeat_interval: Duration,
    /// How long shutdown waits for running bodies before handing them back (default 10 s).
    pub shutdown_grace: Duration,
    /// How often an instance that runs workers samples the queue into the gauges
    /// `async_exec_queue_depth` and `async_exec_oldest_waiting_seconds` (default 15 s; at
    /// least 100 ms: each sample is one query).
    pub queue_sample_interval: Duration,
    /// Outside a transaction, when a `SaveAsync` record cannot be written because no
    /// database connection could be had (so nothing was written), run the call in memory
    /// and log loudly, as the seed SDK does (default `false`: the caller gets the error).
    /// Never for calls with an idempotency key, and never for any other error: a statement
    /// that failed after it was sent may have been committed, and running it in memory too
    /// would run it twice.
    pub degrade_to_memory: bool,
    /// How durably SQLite commits (default [`SqliteSynchronous::Full`]); ignored by the
    /// other backends, which commit durably by their own settings.
    pub sqlite_synchronous: SqliteSynchronous,
    /// How long a SQLite write waits for another transaction's write lock before it fails
    /// with [`Error::SqliteLocked`] (default 10 s). SQLite has one writer at a time: a call
    /// made without `.within(&mut tx)` while the caller holds a write transaction waits for
    /// that very transaction, and fails after this long.
    pub sqlite_busy_timeout: Duration,
    /// Run the embedded migrations at start (default `true`).
    pub migrate: bool,
    /// Install the runtime as the global one that a bare `.await` uses (default `true`).
    pub install_global: bool,
    /// Test mode for applications' own tests (default `None`: normal operation).
    pub test_mode: Option<TestMode>,
    /// How long finished records (`success`, `cancelled` and `dead`) and attempt logs are
    /// kept (default 7 days): an instance that runs workers deletes older ones every 5
    /// minutes ([`Retention`](crate::Retention)). Records that may still run are kept
    /// whatever their age. `None` keeps everything. At least 1 ms, at most a year.
    pub retention: Option<Duration>,
    /// How long audit rows (`async_audit`: the console's, the CLI's and `rt.act`'s
    /// actions, logins) are kept (default 90 days): the retention sweep deletes older ones
    /// of the application with the finished records. `None` keeps them. At least 1 ms,
    /// at most a year.
    pub audit_retention: Option<Duration>,
    /// How often each queue's flow (running, waiting, due, lag, starts, the limit in
    /// force, the verdict) is sampled into the saturation history (default 60 s): one
    /// instance that runs workers takes each period ([`Runtime::sample_flow`](crate::Runtime::sample_flow)).
    /// At least 1 ms, at most a year.
    pub flow_sample_interval: Duration,
    /// How long the saturation history is kept (default a day); older samples are
    /// deleted as new ones are written. At least 1 ms, at most a year.
    pub flow_history: Duration,
    /// How old the oldest due waiting request of the application may be before
    /// [`Runtime::health`](crate::Runtime::health) reports the runtime `degraded`
    /// (default 5 minutes). At least 1 ms, at most a year.
    pub health_backlog_threshold: Duration,
    /// Fault injection for tests: this process's wall clock is taken to be off by this
    /// many milliseconds (negative: behind; default 0). The runtime takes its times from
    /// the database's clock, so this changes nothing it promises; tests prove that.
    pub simulated_clock_offset_ms: i64,
    /// The limits of queues, by name ([`Builder::queue`](crate::Builder::queue)); every
    /// name must be an executor's `queue`. Empty by default: nothing is limited but by
    /// `concurrency`.
    pub queues: std::collections::BTreeMap<String, crate::base::queue::QueueLimits>,
    /// The most requests of the application that may wait (`init`, `failed`) when a
    /// `SaveAsync` call is made: past it the call is refused with
    /// [`Error::QuotaExceeded`](crate::Error::QuotaExceeded) and nothing is written
    /// (default `None`: no quota). 1 to 1,000,000,000.
    pub max_waiting: Option<u64>,
    /// The same, for the requests of each owner ([`Call::owner`](crate::Call::owner));
    /// calls without an owner are not counted (default `None`).
    pub max_waiting_per_owner: Option<u64>,
    /// How an execution's span relates to the OpenTelemetry span its call was made in
    /// (feature `opentelemetry`; default [`TracePropagation::Child`](crate::TracePropagation)).
    pub trace_propagation: crate::TracePropagation,
    /// The keys that seal and open `#[secret]` arguments (ids only in `Debug`).
    pub(crate) secrets: crate::base::secret::Keyring,
}

impl Default for Settings {
    fn default() -> Self {
        Settings {
            enabled: true,
            application_name: DEFAULT_APPLICATION.into(),
            database_url: "sqlite:async_exec.db".into(),
            max_connections: 8,
            run_workers: true,
            concurrency: 8,
            channel_capacity: 2048,
            delete_on_success: true,
            log_success: false,
            default_max_attempts: 5,
            default_timeout: Duration::from_secs(300),
            poll_interval: None,
            listen: true,
            retry_interval: Duration::from_secs(1),
            retry_batch: 100,
            retries_take_turns: true,
            retry_base_delay: Duration::from_secs(1),
            retry_max_delay: Duration::from_secs(600),
            compensate_interval: Duration::from_secs(30),
            stale_after: Duration::from_secs(60),
            compensate_batch: 100,
            key_retention: Duration::from_secs(24 * 3600),
            lease: Duration::from_secs(30),
            heartbeat_interval: Duration::from_secs(10),
            shutdown_grace: Duration::from_secs(10),
            queue_sample_interval: Duration::from_secs(15),
            degrade_to_memory: false,
            sqlite_synchronous: SqliteSynchronous::Full,
            sqlite_busy_timeout: Duration::from_secs(10),
            migrate: true,
            install_global: true,
            test_mode: None,
            retention: Some(Duration::from_secs(7 * 24 * 3600)),
            audit_retention: Some(Duration::from_secs(90 * 24 * 3600)),
            health_backlog_threshold: Duration::from_secs(300),
            flow_sample_interval: Duration::from_secs(60),
            flow_history: Duration::from_secs(24 * 3600),
            simulated_clock_offset_ms: 0,
            queues: Default::default(),
            max_waiting: None,
            max_waiting_per_owner: None,
            trace_propagation: crate::TracePropagation::Child,
            secrets: crate::base::secret::Keyring::default(),
        }
    }
}

/// The `application_name` of a runtime that does not set one.
pub(crate) const DEFAULT_APPLICATION: &str = "default";

impl std::fmt::Debug for Settings {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Settings")
            .field("enabled", &self.enabled)
            .field("application_name", &self.application_name)
            .field(
                "database_url",
                &crate::base::redact::url(&self.database_url),
            )
            .field("max_connections", &self.max_connections)
            .field("run_workers", &self.run_workers)
            .field("concurrency", &self.concurrency)
            .field("channel_capacity", &self.channel_capacity)
            .field("delete_on_success", &self.delete_on_success)
            .field("log_success", &self.log_success)
            .field("default_max_attempts", &self.default_max_attempts)
            .field("default_timeout", &self.default_timeout)
            .field("poll_interval", &self.poll_interval)
            .field("listen", &self.listen)
            .field("retry_interval", &self.retry_interval)
            .field("retry_batch", &self.retry_batch)
            .field("retries_take_turns", &self.retries_take_turns)
            .field("retry_base_delay", &self.retry_base_delay)
            .field("retry_max_delay", &self.retry_max_delay)
            .field("compensate_interval", &self.compensate_interval)
            .field("stale_after", &self.stale_after)
            .field("compensate_batch", &self.compensate_batch)
            .field("key_retention", &self.key_retention)
            .field("lease", &self.lease)
            .field("heartbeat_interval", &self.heartbeat_interval)
            .field("shutdown_grace", &self.shutdown_grace)
            .field("queue_sample_interval", &self.queue_sample_interval)
            .field("max_waiting", &self.max_waiting)
            .field("max_waiting_per_owner", &self.max_waiting_per_owner)
            .field("trace_propagation", &self.trace_propagation)
            .field("degrade_to_memory", &self.degrade_to_memory)
            .field("sqlite_synchronous", &self.sqlite_synchronous)
            .field("sqlite_busy_timeout", &self.sqlite_busy_timeout)
            .field("migrate", &self.migrate)
            .field("install_global", &self.install_global)
            .field("test_mode", &self.test_mode)
            .field("retention", &self.retention)
            .field("audit_retention", &self.audit_retention)
            .field("health_backlog_threshold", &self.health_backlog_threshold)
            .field("flow_sample_interval", &self.flow_sample_interval)
            .field("flow_history", &self.flow_history)
            .field("simulated_clock_offset_ms", &self.simulated_clock_offset_ms)
            .field("queues", &self.queues)
            .field("secrets", &self.secrets)
            .finish()
    }
}

/// The longest duration any setting accepts: a year. Longer ones are mistakes (and
/// `Duration::MAX` would overflow the millisecond times the records hold).
pub(crate) const MAX_DURATION: Duration = Duration::from_secs(366 * 24 * 3600);

/// The largest quota of waiting requests.
pub(crate) const MAX_QUOTA: u64 = 1_000_000_000;

/// The shortest `queue_sample_interval`.
pub(crate) const MIN_QUEUE_SAMPLE: Duration = Duration::from_millis(100);

/// The most rows a sweep claims at once.
pub(crate) const MAX_BATCH: i64 = 10_000;

/// The most bodies an instance runs at once, and the largest channel.
pub(crate) const MAX_CONCURRENCY: usize = 100_000;

/// The longest names the tables hold (`VARCHAR(255)` on MySQL/MariaDB), in characters.
pub(crate) const MAX_NAME_CHARS: usize = 255;

impl Settings {
    /// Checks every setting, alone and against the others. [`Builder::start`](crate::Builder::start)
    /// calls it: a setting out of range is an [`Error::Config`] naming it, never a panic or a
    /// silent wrap-around later.
    pub fn validate(&self) -> Result<()> {
        let fail = |setting: &'static str, reason: String| Err(Error::Config { setting, reason });
        self.secrets.validate()?;
        crate::base::queue::validate(&self.queues)?;
        for (setting, quota) in [
            ("max_waiting", self.max_waiting),
            ("max_waiting_per_owner", self.max_waiting_per_owner),
        ] {
            if quota.is_some_and(|n| !(1..=MAX_QUOTA).contains(&n)) {
                return fail(
                    setting,
                    format!("must be between 1 and {MAX_QUOTA} requests, not {quota:?}"),
                );
            }
        }
        let name = &self.application_name;
        if name.trim().is_empty() {
            return fail("application_name", "must not be empty".into());
        }
        if name.chars().count() > MAX_NAME_CHARS || name.contains('\0') {
            return fail(
                "application_name",
                format!("must be at most {MAX_NAME_CHARS} characters, without NUL"),
            );
        }
        if self.simulated_clock_offset_ms.unsigned_abs() > MAX_DURATION.as_millis() as u64 {
            return fail(
                "simulated_clock_offset",
                "must be within a year either way".into(),
            );
        }
        if self.max_connections == 0 {
            return fail("max_connections", "must be at least 1".into());
        }
        for (setting, value) in [
            ("concurrency", self.concurrency),
            ("channel_capacity", self.channel_capacity),
        ] {
            if value == 0 || value > MAX_CONCURRENCY {
                return fail(setting, format!("must be between 1 and {MAX_CONCURRENCY}"));
            }
        }
        if self.default_max_attempts == 0 || self.default_max_attempts > i32::MAX as u32 {
            return fail(
                "default_max_attempts",
                format!("must be between 1 and {}", i32::MAX),
            );
        }
        for (setting, value) in [
            ("retry_batch", self.retry_batch),
            ("compensate_batch", self.compensate_batch),
        ] {
            if !(1..=MAX_BATCH).contains(&value) {
                return fail(setting, format!("must be between 1 and {MAX_BATCH}"));
            }
        }
        let positive = [
            ("default_timeout", Some(self.default_timeout)),
            ("poll_interval", self.poll_interval),
            ("retry_interval", Some(self.retry_interval)),
            ("compensate_interval", Some(self.compensate_interval)),
            ("key_retention", Some(self.key_retention)),
            ("lease", Some(self.lease)),
            ("heartbeat_interval", Some(self.heartbeat_interval)),
            ("retention", self.retention),
            ("audit_retention", self.audit_retention),
            (
                "health_backlog_threshold",
                Some(self.health_backlog_threshold),
            ),
            ("queue_sample_interval", Some(self.queue_sample_interval)),
            ("flow_sample_interval", Some(self.flow_sample_interval)),
            ("flow_history", Some(self.flow_history)),
        ];
        for (setting, value) in positive {
            match value {
                Some(d) if d < Duration::from_millis(1) => {
                    return fail(setting, "must be at least 1 ms".into())
                }
                Some(d) if d > MAX_DURATION => {
                    return fail(
                        setting,
                        format!("must be at most {MAX_DURATION:?} (a year)"),
                    )
                }
                _ => {}
            }
        }
        let bounded = [
            ("retry_base_delay", self.retry_base_delay),
            ("retry_max_delay", self.retry_max_delay),
            ("stale_after", self.stale_after),
            ("shutdown_grace", self.shutdown_grace),
            ("sqlite_busy_timeout", self.sqlite_busy_timeout),
        ];
        for (setting, value) in bounded {
            if value > MAX_DURATION {
                return fail(
                    setting,
                    format!("must be at most {MAX_DURATION:?} (a year)"),
                );
            }
        }
        if self.queue_sample_interval < MIN_QUEUE_SAMPLE {
            return fail(
                "queue_sample_interval",
                format!("must be at least {MIN_QUEUE_SAMPLE:?}: each sample is a query"),
            );
        }
        if self.heartbeat_interval >= self.lease {
            return fail(
                "heartbeat_interval",
                "must be shorter than `lease`, or leases expire between heartbeats".into(),
            );
        }
        if self.retry_base_delay > self.retry_max_delay {
            return fail(
                "retry_base_delay",
                "must not exceed `retry_max_delay`".into(),
            );
        }
        Ok(())
    }
}

#[cfg(test)]
#[path = "settings_tests.rs"]
mod tests;

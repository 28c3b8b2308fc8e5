//! Every setting of the runtime, with the seed SDK's defaults.

use std::time::Duration;

use crate::error::{Error, Result};

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

/// The runtime's settings. Built with [`Builder`](crate::Builder); every field has a default
/// that works with no configuration.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct Settings {
    /// Accept calls and run workers (default `true`). When `false`, calls fail with
    /// [`Error::Disabled`] and nothing starts.
    pub enabled: bool,
    /// The application whose records this runtime runs (default: the executable's name).
    /// Instances of other applications may share the tables.
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
    /// How long a claim holds a record without a heartbeat (default 30 s).
    pub lease: Duration,
    /// How often leases of running records are renewed (default 10 s).
    pub heartbeat_interval: Duration,
    /// How long shutdown waits for running bodies before handing them back (default 10 s).
    pub shutdown_grace: Duration,
    /// Outside a transaction, when writing a `SaveAsync` record fails, run the call in memory
    /// and log loudly, as the seed SDK does (default `true`); when `false` the caller gets the error.
    pub degrade_to_memory: bool,
    /// Run the embedded migrations at start (default `true`).
    pub migrate: bool,
    /// Install the runtime as the global one that a bare `.await` uses (default `true`).
    pub install_global: bool,
    /// Test mode for applications' own tests (default `None`: normal operation).
    pub test_mode: Option<TestMode>,
}

impl Default for Settings {
    fn default() -> Self {
        Settings {
            enabled: true,
            application_name: default_application_name(),
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
            retry_base_delay: Duration::from_secs(1),
            retry_max_delay: Duration::from_secs(600),
            compensate_interval: Duration::from_secs(30),
            stale_after: Duration::from_secs(60),
            compensate_batch: 100,
            lease: Duration::from_secs(30),
            heartbeat_interval: Duration::from_secs(10),
            shutdown_grace: Duration::from_secs(10),
            degrade_to_memory: true,
            migrate: true,
            install_global: true,
            test_mode: None,
        }
    }
}

fn default_application_name() -> String {
    std::env::current_exe()
        .ok()
        .and_then(|path| path.file_stem().map(|s| s.to_string_lossy().into_owned()))
        .unwrap_or_else(|| "async-exec".into())
}

impl Settings {
    /// Checks that the settings make sense together.
    pub fn validate(&self) -> Result<()> {
        let fail = |setting: &'static str, reason: &str| {
            Err(Error::Config {
                setting,
                reason: reason.into(),
            })
        };
        if self.application_name.is_empty() {
            return fail("application_name", "must not be empty");
        }
        if self.concurrency == 0 {
            return fail("concurrency", "must be at least 1");
        }
        if self.channel_capacity == 0 {
            return fail("channel_capacity", "must be at least 1");
        }
        if self.default_max_attempts == 0 {
            return fail("default_max_attempts", "must be at least 1");
        }
        if self.retry_batch <= 0 || self.compensate_batch <= 0 {
            return fail("retry_batch/compensate_batch", "must be at least 1");
        }
        if self.heartbeat_interval >= self.lease {
            return fail(
                "heartbeat_interval",
                "must be shorter than `lease`, or leases expire between heartbeats",
            );
        }
        if self.retry_base_delay > self.retry_max_delay {
            return fail("retry_base_delay", "must not exceed `retry_max_delay`");
        }
        Ok(())
    }
}

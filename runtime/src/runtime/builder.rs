//! `Builder`: settings, `Data<T>` values and the store, then `start()`.

use std::sync::Arc;
use std::time::Duration;

use crate::base::data::DataMap;
use crate::base::error::Result;
use crate::base::settings::{Settings, TestMode};
use crate::operate::listeners::ListenerSet;
use crate::runtime::connect::bound;
use crate::runtime::Runtime;
use crate::store::bounded::{statement_bound, Abandoned};
use crate::store::Store;

#[path = "builder_listeners.rs"]
mod listeners;

impl Runtime {
    /// A builder with the defaults: a SQLite file `async_exec.db` in the current directory.
    pub fn builder() -> Builder {
        Builder::default()
    }
}

/// Configures and starts a [`Runtime`]. Every setting has a default that works.
///
/// ```no_run
/// # async fn demo() -> Result<(), async_exec::Error> {
/// use std::time::Duration;
/// use async_exec::Runtime;
/// struct Mailer;
/// let rt = Runtime::builder()
///     .database_url("sqlite:app.db")
///     .application_name("shop")
///     .concurrency(16)
///     .retry_base_delay(Duration::from_secs(2))
///     .data(Mailer)
///     .start()
///     .await?;
/// # Ok(()) }
/// ```
#[derive(Debug, Default)]
#[must_use = "a builder does nothing until `.start()`"]
pub struct Builder {
    settings: Settings,
    data: DataMap,
    store: Option<Arc<dyn Store>>,
    listeners: ListenerSet,
}

impl std::fmt::Debug for dyn Store {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}Store", self.backend_name())
    }
}

macro_rules! setters {
    ($($(#[$doc:meta])* $name:ident: $ty:ty;)*) => {$(
        $(#[$doc])*
        pub fn $name(mut self, value: $ty) -> Self {
            self.settings.$name = value;
            self
        }
    )*};
}

impl Builder {
    setters! {
        /// Accept calls and run workers (default `true`).
        enabled: bool;
        /// Run workers and sweeps here (default `true`); `false` for a submit-only instance.
        run_workers: bool;
        /// Bodies running at once in this instance (default 8).
        concurrency: usize;
        /// Capacity of the channel from commit to workers (default 2048).
        channel_capacity: usize;
        /// Connections in the runtime's pool (default 8).
        max_connections: u32;
        /// Delete records that succeed (default `true`), else mark them `success`.
        delete_on_success: bool;
        /// Log successful attempts in `async_log` too (default `false`).
        log_success: bool;
        /// Attempts for executors without `max_attempts` (default 5).
        default_max_attempts: u32;
        /// Timeout for executors without `timeout` (default 5 minutes).
        default_timeout: Duration;
        /// Listen for other instances' new requests (PostgreSQL `LISTEN`; default `true`).
        listen: bool;
        /// How often the retry sweep runs (default 1 s).
        retry_interval: Duration;
        /// Records per retry sweep (default 100).
        retry_batch: i64;
        /// Due retries take turns with a backlog for the workers (default `true`); `false`:
        /// they wait for workers free at the retry sweep's round (after a backlog).
        retries_take_turns: bool;
        /// First retry delay; doubles per attempt, ±25% jitter (default 1 s).
        retry_base_delay: Duration;
        /// Longest retry delay (default 10 minutes).
        retry_max_delay: Duration;
        /// How often the compensation sweep runs (default 30 s).
        compensate_interval: Duration;
        /// Age past due at which an `init` record counts as never dispatched (default 60 s).
        stale_after: Duration;
        /// Records per compensation sweep (default 100).
        compensate_batch: i64;
        /// How long an idempotency key protects after its first use (default 24 hours);
        /// see [`Settings::key_retention`].
        key_retention: Duration;
        /// Lease length of a claim (default 30 s).
        lease: Duration;
        /// Lease renewal interval (default 10 s); must be shorter than `lease`.
        heartbeat_interval: Duration;
        /// How long shutdown waits for running bodies (default 10 s).
        shutdown_grace: Duration;
        /// How often the queue gauges are sampled (default 15 s, at least 100 ms); see
        /// [`Settings::queue_sample_interval`].
        queue_sample_interval: Duration;
        /// Outside a transaction, run an unkeyed `SaveAsync` call in memory when no database
        /// connection could be had to write its record (default `false`; see
        /// [`Settings::degrade_to_memory`]).
        degrade_to_memory: bool;
        /// How durably SQLite commits (default [`SqliteSynchronous::Full`](crate::SqliteSynchronous)).
        sqlite_synchronous: crate::SqliteSynchronous;
        /// How long a SQLite write waits for another transaction's write lock (default 10 s).
        sqlite_busy_timeout: Duration;
        /// Run the embedded migrations at start (default `true`).
        migrate: bool;
        /// Become the global runtime used by a bare `.await` (default `true`).
        install_global: bool;
        /// How long finished records and attempt logs are kept (default 7 days; `None`
        /// keeps them); see [`Settings::retention`].
        ///
        /// ```no_run
        /// # async fn demo() -> async_exec::Result<()> {
        /// use std::time::Duration;
        /// let rt = async_exec::Runtime::builder()
        ///     .delete_on_success(false)
        ///     .retention(Some(Duration::from_secs(30 * 86_400)))
        ///     .start()
        ///     .await?;
        /// # Ok(()) }
        /// ```
        retention: Option<Duration>;
        /// How long audit rows are kept (default 90 days; `None` keeps them); see
        /// [`Settings::audit_retention`].
        audit_retention: Option<Duration>;
        /// The most requests of the application that may wait when a `SaveAsync` call is
        /// made (default `None`); see [`Settings::max_waiting`].
        max_waiting: Option<u64>;
        /// The most requests of each owner (`Call::owner`) that may wait (default `None`);
        /// see [`Settings::max_waiting_per_owner`].
        max_waiting_per_owner: Option<u64>;
        /// Age of the oldest due waiting request above which health reports `degraded`
        /// (default 5 minutes); see [`Settings::health_backlog_threshold`].
        health_backlog_threshold: Duration;
        /// How often queues are sampled into the saturation history (default 60 s); see
        /// [`Settings::flow_sample_interval`].
        flow_sample_interval: Duration;
        /// How long the saturation history is kept (default a day); see
        /// [`Settings::flow_history`].
        flow_history: Duration;
        /// How an execution's span relates to the OpenTelemetry span its call was made in
        /// (feature `opentelemetry`; default [`TracePropagation::Child`](crate::TracePropagation)).
        trace_propagation: crate::TracePropagation;
    }

    /// The application whose records this runtime runs (default `"default"`). Set it when
    /// several applications share the tables; keep it when a binary is renamed.
    pub fn application_name(mut self, name: impl Into<String>) -> Self {
        self.settings.application_name = name.into();
        self
    }

    /// Where records live (default `sqlite:async_exec.db`).
    pub fn database_url(mut self, url: impl Into<String>) -> Self {
        self.settings.database_url = url.into();
        self
    }

    /// How often to look in the store for `init` records this instance was not told about
    /// (default: the backend's; 1 s, MySQL 250 ms).
    pub fn poll_interval(mut self, interval: Duration) -> Self {
        self.settings.poll_interval = Some(interval);
        self
    }

    /// Runs calls inline or holds them, for an application's own tests.
    pub fn test_mode(mut self, mode: TestMode) -> Self {
        self.settings.test_mode = Some(mode);
        self
    }

    /// Fault injection for tests: pretends this process's wall clock is off by `ms`
    /// milliseconds (negative: behind). Leases, due times and key expiry come from the
    /// database's clock, so a runtime behaves the same whatever its process's clock says;
    /// this lets a test show it (`tests/clocks.rs`). Not for production use.
    ///
    /// ```no_run
    /// # async fn demo() -> async_exec::Result<()> {
    /// let behind = async_exec::Runtime::builder()
    ///     .database_url("postgres://postgres@127.0.0.1/test")
    ///     .simulated_clock_offset(-60_000)
    ///     .start()
    ///     .await?;
    /// # Ok(()) }
    /// ```
    pub fn simulated_clock_offset(mut self, ms: i64) -> Self {
        self.settings.simulated_clock_offset_ms = ms;
        self
    }

    /// Limits how many requests of a queue run at once: the executors whose attribute
    /// says `queue = "name"` share them. Across instances, the limit holds when every
    /// instance gives the same one (each claims by its own). See [`QueueLimits`](crate::QueueLimits).
    ///
    /// ```no_run
    /// # async fn demo() -> async_exec::Result<()> {
    /// use async_exec::QueueLimits;
    /// let rt = async_exec::Runtime::builder()
    ///     .queue("payments", QueueLimits::new().concurrency(4))
    ///     .queue("exports", QueueLimits::new().per_instance(1))
    ///     .start()
    ///     .await?;
    /// # Ok(()) }
    /// ```
    pub fn queue(mut self, name: impl Into<String>, limits: crate::QueueLimits) -> Self {
        self.settings.queues.insert(name.into(), limits);
        self
    }

    /// At most `n` requests of the application run at once over every instance, whatever
    /// their queue (1 to 100,000): a limit over the queues' own. Every claim then counts
    /// the application's running requests under one lock (the row `(all)` of
    /// `async_queue`), so claims of every queue take turns: a cost in throughput that
    /// only this setting brings. Changed while running with
    /// `rt.policy("(all)").concurrency(n)`.
    ///
    /// ```no_run
    /// # async fn demo() -> async_exec::Result<()> {
    /// // The database behind the bodies takes 20 connections: never more bodies than that.
    /// let rt = async_exec::Runtime::builder().global_concurrency(20).start().await?;
    /// # Ok(()) }
    /// ```
    pub fn global_concurrency(mut self, n: u32) -> Self {
        self.settings.queues.insert(
            crate::base::queue::GLOBAL_QUEUE.to_string(),
            crate::QueueLimits::new().concurrency(n),
        );
        self
    }

    /// Registers a value that bodies receive as a `Data<T>` parameter.
    pub fn data<T: Send + Sync + 'static>(mut self, value: T) -> Self {
        self.data.insert(Arc::new(value));
        self
    }

    /// Registers the instance of a service whose methods are executors
    /// (`#[async_exec]` on its `impl` block, `#[async_exec(type = ...)]` on each such
    /// method): a request of a method runs on this instance, whoever called it.
    /// [`start`](Builder::start) refuses a runtime that would run a method of a service
    /// not registered ([`Error::MissingData`](crate::Error::MissingData)). The instance is
    /// also what a `Data<T>` parameter of type `T` gets.
    ///
    /// ```no_run
    /// use std::sync::Arc;
    /// use async_exec::{async_exec, Runtime};
    ///
    /// struct Mailer {
    ///     from: String,
    /// }
    ///
    /// #[async_exec]
    /// impl Mailer {
    ///     #[async_exec(type = SaveAsync, remark = "send the welcome mail")]
    ///     async fn send_welcome(&self, user_id: i64, email: String) -> anyhow::Result<()> {
    ///         println!("{} -> {email} (user {user_id})", self.from);
    ///         Ok(())
    ///     }
    /// }
    ///
    /// # async fn demo() -> async_exec::Result<()> {
    /// let mailer = Arc::new(Mailer { from: "hello@shop.example".into() });
    /// let rt = Runtime::builder().service(mailer.clone()).start().await?;
    /// mailer.send_welcome(42, "a@b.c".into()).on(&rt).await?; // runs after the commit
    /// # Ok(()) }
    /// ```
    pub fn service<T: Send + Sync + 'static>(mut self, instance: Arc<T>) -> Self {
        self.data.insert(instance);
        self
    }

    /// Declares that this runtime provides no `T` on purpose: [`start`](Builder::start)
    /// then does not refuse executors that take a `Data<T>`, and a request of theirs that
    /// runs here goes `dead` naming the missing value. For a binary that links executors
    /// another runtime (or another process) runs, and for tests.
    ///
    /// ```no_run
    /// # async fn demo() -> async_exec::Result<()> {
    /// struct ReportStore;
    /// let rt = async_exec::Runtime::builder()
    ///     .without_data::<ReportStore>() // the report executors run in the batch service
    ///     .start()
    ///     .await?;
    /// # Ok(()) }
    /// ```
    pub fn without_data<T: 'static>(mut self) -> Self {
        self.data.decline::<T>();
        self
    }

    /// Adds a key that seals and opens `#[secret]` arguments: 32 random bytes, kept
    /// outside the database (a secret store, an environment variable). The first key added
    /// seals new arguments unless [`sealing_key`](Builder::sealing_key) names another; every
    /// key added opens what it sealed, so to rotate, add the new key, make it the sealing
    /// one, and keep the old one until no record sealed with it is left. A record sealed
    /// with a key this instance does not have goes `dead` naming the key (add the key and
    /// retry it). The id (1 to 64 ASCII letters, digits, `-`, `_`) is stored with each
    /// sealed value; a bad id is an [`Error::Config`](crate::Error::Config) at
    /// [`start`](Builder::start). Keys never appear in `Debug` output, only their ids.
    ///
    /// ```no_run
    /// # async fn demo(key_2026: [u8; 32], key_2025: [u8; 32]) -> async_exec::Result<()> {
    /// let rt = async_exec::Runtime::builder()
    ///     .secret_key("2026", key_2026) // seals (the first added)
    ///     .secret_key("2025", key_2025) // still opens older records
    ///     .start()
    ///     .await?;
    /// # Ok(()) }
    /// ```
    pub fn secret_key(
        mut self,
        id: &str,
        mut key: [u8; crate::base::secret::SECRET_KEY_BYTES],
    ) -> Self {
        self.settings.secrets.add(id, key);
        zeroize::Zeroize::zeroize(&mut key);
        self
    }

    /// [`secret_key`](Builder::secret_key) with the key given as base64 text (as
    /// `openssl rand -base64 32` prints it), e.g. from an environment variable. Text that
    /// is not the base64 of 32 bytes is an [`Error::Config`](crate::Error::Config) at
    /// [`start`](Builder::start) naming the key id (not the text).
    ///
    /// ```no_run
    /// # async fn demo() -> async_exec::Result<()> {
    /// let key = std::env::var("ASYNC_EXEC_KEY_K1").unwrap_or_default();
    /// let rt = async_exec::Runtime::builder()
    ///     .secret_key_base64("k1", &key)
    ///     .start()
    ///     .await?;
    /// # Ok(()) }
    /// ```
    pub fn secret_key_base64(mut self, id: &str, key: &str) -> Self {
        self.settings.secrets.add_base64(id, key);
        self
    }

    /// Names the key (added with [`secret_key`](Builder::secret_key)) that seals new
    /// `#[secret]` arguments; by default the first added. A name without a key is an
    /// [`Error::Config`](crate::Error::Config) at [`start`](Builder::start).
    ///
    /// ```no_run
    /// # async fn demo(old: [u8; 32], new: [u8; 32]) -> async_exec::Result<()> {
    /// let rt = async_exec::Runtime::builder()
    ///     .secret_key("k1", old)
    ///     .secret_key("k2", new)
    ///     .sealing_key("k2") // rotation: new arguments are sealed with k2; k1 still opens
    ///     .start()
    ///     .await?;
    /// # Ok(()) }
    /// ```
    pub fn sealing_key(mut self, id: &str) -> Self {
        self.settings.secrets.set_sealing(id);
        self
    }

    /// Registers a shared value that bodies receive as a `Data<T>` parameter.
    pub fn data_arc<T: Send + Sync + 'static>(mut self, value: Arc<T>) -> Self {
        self.data.insert(value);
        self
    }

    /// Uses the application's own SQLite pool instead of opening one. The runtime's own
    /// writes (claims, outcomes, leases) go through one more connection, opened with the
    /// pool's connect options (not its `after_connect` hooks).
    #[cfg(feature = "sqlite")]
    pub fn sqlite_pool(mut self, pool: sqlx::SqlitePool) -> Self {
        self.store = Some(Arc::new(crate::store::sqlite::SqliteStore::from_pool(pool)));
        self
    }

    /// Uses the application's own PostgreSQL pool instead of opening one (`database_url`
    /// and `max_connections` are then not used to connect). Lease renewals and `LISTEN`
    /// use connections of their own, opened with the pool's connect options.
    ///
    /// ```no_run
    /// # async fn demo(pool: sqlx::PgPool) -> async_exec::Result<()> {
    /// let rt = async_exec::Runtime::builder().postgres_pool(pool).start().await?;
    /// # Ok(()) }
    /// ```
    #[cfg(feature = "postgres")]
    pub fn postgres_pool(mut self, pool: sqlx::PgPool) -> Self {
        self.store = Some(Arc::new(crate::store::postgres::PostgresStore::from_pool(
            pool,
        )));
        self
    }

    /// Uses the application's own MySQL/MariaDB pool instead of opening one
    /// (`database_url` and `max_connections` are then not used to connect). Lease renewals
    /// use a connection of their own, opened with the pool's connect options.
    ///
    /// ```no_run
    /// # async fn demo(pool: sqlx::MySqlPool) -> async_exec::Result<()> {
    /// let rt = async_exec::Runtime::builder().mysql_pool(pool).start().await?;
    /// # Ok(()) }
    /// ```
    #[cfg(feature = "mysql")]
    pub fn mysql_pool(mut self, pool: sqlx::MySqlPool) -> Self {
        self.store = Some(Arc::new(crate::store::mysql::MySqlStore::from_pool(pool)));
        self
    }

    /// Replaces all settings at once.
    pub fn settings(mut self, settings: Settings) -> Self {
        self.settings = settings;
        self
    }

    /// Connects, migrates, checks the executors (two with one name are an error), starts the
    /// workers and sweeps, and installs the runtime as the global one.
    pub async fn start(self) -> Result<Runtime> {
        let store = self.store.map(|store| {
            bound(
                store,
                &self.settings,
                Arc::new(Abandoned::new(statement_bound(self.settings.lease))),
            )
        });
        Runtime::start_with(self.settings, self.data, store, self.listeners).await
    }
}

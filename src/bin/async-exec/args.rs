//! The command line: global options and one subcommand each.

use clap::{Args, Parser, Subcommand};

use async_exec::{Cursor, RequestId, Status};

/// Look at and act on the requests of an async-exec application, on SQLite, PostgreSQL
/// or MySQL/MariaDB. Exit status: 0 done, 1 failed (the reason on stderr), 2 usage.
#[derive(Debug, Parser)]
#[command(name = "async-exec", version, about, long_about = None)]
pub(crate) struct Cli {
    /// The database: `sqlite:app.db`, `postgres://user:pw@host/db`, `mysql://user:pw@host/db`.
    #[arg(
        long,
        env = "ASYNC_EXEC_DATABASE_URL",
        global = true,
        hide_env_values = true
    )]
    pub(crate) url: Option<String>,

    /// The application whose requests to look at (its `application_name`); empty, `stats`
    /// and `list` show the applications that have requests.
    #[arg(long, default_value = "default", global = true)]
    pub(crate) application: String,

    /// Print one JSON document instead of tables.
    #[arg(long, global = true)]
    pub(crate) json: bool,

    #[command(subcommand)]
    pub(crate) command: Command,
}

/// What to do.
#[derive(Debug, Subcommand)]
pub(crate) enum Command {
    /// Create or update the async-exec tables.
    Migrate,
    /// Count the requests in each status.
    Stats,
    /// List requests, newest first; every filter given must hold.
    List(ListArgs),
    /// Show one request: its arguments, times, last error and every attempt.
    Show {
        /// The request's id.
        id: RequestId,
    },
    /// Run requests again now: a failed one keeps its attempts, a dead or cancelled one
    /// starts over.
    Retry {
        /// The requests' ids.
        #[arg(required = true)]
        ids: Vec<RequestId>,
        /// Also run again requests that succeeded (kept with `delete_on_success(false)`).
        #[arg(long)]
        replay: bool,
        /// With --replay: forget the requests' durable steps, so that every step runs
        /// again (a replay keeps them).
        #[arg(long, requires = "replay")]
        reset_steps: bool,
    },
    /// Cancel requests that are waiting (`init` or `failed`); ask running ones to stop.
    Cancel {
        /// The requests' ids.
        #[arg(required_unless_present = "tag", conflicts_with = "tag")]
        ids: Vec<RequestId>,
        /// Instead of ids: cancel every waiting request with this tag, and ask every
        /// running one to stop (in one transaction).
        #[arg(long)]
        tag: Option<String>,
    },
    /// Delete requests (not running ones) and their attempt logs.
    Delete {
        /// The requests' ids.
        #[arg(required = true)]
        ids: Vec<RequestId>,
    },
    /// Pause the claims of an executor on every instance of the application (running
    /// bodies finish).
    Pause {
        /// The executor's full name, as `list` shows it.
        executor: String,
    },
    /// Resume the claims of a paused executor.
    Resume {
        /// The executor's full name, as `list` shows it.
        executor: String,
    },
    /// The queues the services' executors name, with the limits set while running.
    Queues,
    /// A queue now: its verdict (limit working, stuck, ...), what runs, waits and starts
    /// in it, its lag, per partition (a tenant), the most waiting first, with the limits
    /// set while running, and its saturation history of the last hour.
    Flow {
        /// The queue, as the executors' `queue = "..."` names it.
        queue: String,
        /// How many partitions to list (1 to 1,000).
        #[arg(long, default_value_t = 20)]
        partitions: usize,
    },
    /// Set the limits of a queue on every instance, overriding the service's builder
    /// (neither option: clear them, the builder's apply again).
    QueueLimits {
        /// The queue, as the executors' `queue = "..."` names it.
        queue: String,
        /// Requests of the queue running at once over every instance.
        #[arg(long)]
        concurrency: Option<u32>,
        /// Requests of the queue running at once on each instance.
        #[arg(long)]
        per_instance: Option<u32>,
        /// Requests of the queue started per second over every instance.
        #[arg(long)]
        rate: Option<u32>,
    },
    /// Give a partition (a tenant) of a queue settings of its own on every instance, from
    /// the queue's next claim: options not given are the queue's. --clear: the queue's
    /// apply to it again.
    Partition {
        /// The queue, as the executors' `queue = "..."` names it.
        queue: String,
        /// The partition, as calls give it (`.partition(..)`, the attribute's
        /// `partition = ..`, else the owner).
        partition: String,
        /// Its records per turn of the queue's claims (1 to 1,000; others have 1).
        #[arg(long)]
        weight: Option<u32>,
        /// Its requests running at once over every instance, in place of the queue's
        /// per_partition.
        #[arg(long)]
        concurrency: Option<u32>,
        /// Its starts over every instance: N/second, N/minute, N/hour or N/day.
        #[arg(long, value_parser = crate::commands::parse_rate)]
        rate: Option<async_exec::Rate>,
        /// Clear its settings instead.
        #[arg(long, conflicts_with_all = ["weight", "concurrency", "rate"])]
        clear: bool,
    },
    /// Change the policy of a queue (or of an executor in no queue, by its name) on every
    /// instance within about a second; options not given keep what is set.
    Policy(PolicyArgs),
    /// Delete finished requests (success, cancelled; dead with --dead) and the attempt
    /// logs of requests that are gone, older than --older-than, in batches.
    Purge(PurgeArgs),
    /// The periodic calls (`every`, `cron`) that the live instances running workers
    /// announce, with their next ticks.
    Schedules {
        /// How many next ticks to show of each (1 to 100).
        #[arg(long, default_value_t = 3, value_parser = clap::value_parser!(u16).range(1..=100))]
        next: u16,
    },
}

/// What `policy` changes.
#[derive(Debug, Args)]
pub(crate) struct PolicyArgs {
    /// The queue, as the executors' `queue = "..."` names it, or an executor in no queue.
    pub(crate) name: String,
    /// First put every field back to what the service's code says.
    #[arg(long)]
    pub(crate) reset: bool,
    /// `true`: no instance claims its requests (they wait); `false`: let them go.
    #[arg(long)]
    pub(crate) paused: Option<bool>,
    /// Requests of the queue running at once over every instance.
    #[arg(long)]
    pub(crate) concurrency: Option<u32>,
    /// Requests of the queue running at once on each instance.
    #[arg(long)]
    pub(crate) per_instance: Option<u32>,
    /// Requests of the queue started per second over every instance.
    #[arg(long)]
    pub(crate) rate: Option<u32>,
    /// The attempts a request gets.
    #[arg(long)]
    pub(crate) max_attempts: Option<u32>,
    /// The first retry's delay (`500ms`, `30s`, `5m`); with --backoff-cap.
    #[arg(long, value_parser = crate::time::parse_duration, requires = "backoff_cap")]
    pub(crate) backoff_base: Option<std::time::Duration>,
    /// The longest delay between retries; with --backoff-base.
    #[arg(long, value_parser = crate::time::parse_duration, requires = "backoff_base")]
    pub(crate) backoff_cap: Option<std::time::Duration>,
    /// A body's timeout (`30s`, `10m`).
    #[arg(long, value_parser = crate::time::parse_duration)]
    pub(crate) timeout: Option<std::time::Duration>,
    /// Added to the priority of new requests.
    #[arg(long, allow_hyphen_values = true)]
    pub(crate) priority_boost: Option<i32>,
}

/// Filters and paging of `list`.
#[derive(Debug, Args)]
pub(crate) struct ListArgs {
    /// Only this status: init, running, success, failed, dead, cancelled.
    #[arg(long)]
    pub(crate) status: Option<Status>,
    /// Only this executor (its full name, as `list` shows it).
    #[arg(long)]
    pub(crate) executor: Option<String>,
    /// Only the request with this idempotency key.
    #[arg(long)]
    pub(crate) key: Option<String>,
    /// Only the request with this id.
    #[arg(long)]
    pub(crate) id: Option<RequestId>,
    /// Only requests with this tag (exactly).
    #[arg(long)]
    pub(crate) tag: Option<String>,
    /// Only requests whose arguments hold this value: `path:value`, the path the names of
    /// nested fields joined by dots (`user.id:42`).
    #[arg(long)]
    pub(crate) arg: Option<String>,
    /// Search --remark and --error in any case (SQLite: ASCII letters only).
    #[arg(long)]
    pub(crate) any_case: bool,
    /// Only requests whose remark contains this text (exact case, no wildcards).
    #[arg(long)]
    pub(crate) remark: Option<String>,
    /// Only requests whose last error contains this text (exact case, no wildcards).
    #[arg(long)]
    pub(crate) error: Option<String>,
    /// Only requests created at or after: `2026-12-01`, `2026-12-01T09:30:00Z`, unix ms,
    /// or an age such as `2h` (ago).
    #[arg(long, value_parser = crate::time::parse_instant)]
    pub(crate) since: Option<i64>,
    /// Only requests created before (same forms as --since).
    #[arg(long, value_parser = crate::time::parse_instant)]
    pub(crate) until: Option<i64>,
    /// At most this many (1 to 1000); page on with --after.
    #[arg(long, default_value_t = 50, value_parser = clap::value_parser!(i64).range(1..=1000))]
    pub(crate) limit: i64,
    /// Oldest first (newest first by default).
    #[arg(long)]
    pub(crate) oldest: bool,
    /// The page after this cursor (a request id): what `list` prints as the next page.
    #[arg(long)]
    pub(crate) after: Option<Cursor>,
    /// With --remark or --error, look at this many requests at most (1 to 100000); a
    /// page that ends there before it fills says so and where to continue.
    #[arg(long, default_value_t = 20_000, value_parser = clap::value_parser!(i64).range(1..=100_000))]
    pub(crate) search_window: i64,
}

/// What `purge` deletes.
#[derive(Debug, Args)]
pub(crate) struct PurgeArgs {
    /// Age of what is deleted: `7d`, `12h`, `30m`, `90s`.
    #[arg(long, default_value = "7d", value_parser = crate::time::parse_duration)]
    pub(crate) older_than: std::time::Duration,
    /// Delete dead requests too (kept by default, to be looked at and replayed).
    #[arg(long)]
    pub(crate) dead: bool,
    /// Rows deleted per transaction (1 to 1000).
    #[arg(long, default_value_t = 1000, value_parser = clap::value_parser!(i64).range(1..=1000))]
    pub(crate) batch: i64,
}

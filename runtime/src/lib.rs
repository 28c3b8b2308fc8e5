//! The runtime of [async-exec](https://docs.rs/async-exec): records, stores, the
//! after-commit dispatcher, workers and sweeps. Use it through the `async-exec` crate,
//! whose `#[async_exec]` attribute generates the calls this crate runs.
//!
//! Parts, one module each, each holding only what it uses (the store or its lease keeper,
//! the clock, a channel, its settings) and none knowing the runtime, which assembles them
//! (`assemble.rs` has the table of what each part gets):
//! - [`store`]: all SQL, one implementation per backend.
//! - `dispatcher`: the after-commit channel, and the producer that starts what arrives
//!   (the claimer, the store, the completer, its settings).
//! - `claimer`: claims records and starts them under worker permits, for the producer and
//!   the sweeps (the store, the registry, the clock, the skip list, the executor).
//! - `executor`: runs bodies in spans, catches errors, panics and timeouts (the data map,
//!   the clock, the completer, its settings); `executor::pool` holds the worker permits
//!   and the records held.
//! - `completer`: writes outcomes in batches (its channel, the store, the pool it settles).
//! - [`Heartbeat`]: renews leases (its own connection, the clock, the pool).
//! - [`Rescuer`]: expired leases (the store, the registry, the clock).
//! - [`Retrier`]: due retries (the claimer).
//! - [`Compensator`]: committed but never dispatched, expired keys (the claimer, the store).
//! - [`Retention`]: finished records and old attempt logs past `retention` (the store).
//! - `instances`: presence of instances and the skip list of a rolling deploy.
//! - `pulse`: each part's last activity, for [`Runtime::health`].
//!
//! The rest is the API layer on the [`Runtime`] handle: calls and submission (`call`,
//! `submit`, [`Tx`], [`Backend`]), requests from code, the console and the command-line
//! tool (`requests`: [`Runtime::list`] with a [`RequestQuery`] and a [`PageSpec`],
//! actions on every match), what operators look at beyond requests (`operator`: pauses,
//! the audit trail, statistics), what an application's tests drive (`testing`:
//! [`Runtime::run_due`]), the [`Builder`] and [`Settings`]. Everything the runtime logs
//! has the target [`LOG_TARGET`] (`log`).
#![deny(missing_docs)]
#![warn(unreachable_pub, missing_debug_implementations)]

#[cfg(not(any(feature = "sqlite", feature = "postgres", feature = "mysql")))]
compile_error!(
    "async-exec needs a database backend: enable one of the features `sqlite`, `postgres`, `mysql`"
);

mod applications;
mod assemble;
mod backoff;
mod builder;
mod call;
mod claimer;
mod clock;
mod compensator;
mod completer;
#[cfg(feature = "console")]
pub mod console;
mod context;
mod control;
mod data;
mod dispatcher;
mod error;
mod executor;
mod fault;
mod gauges;
mod health;
mod heartbeat;
#[cfg(feature = "http")]
pub mod http;
mod identity;
mod instances;
mod keys;
mod listeners;
mod log;
mod metrics;
mod nested;
mod open_tx;
mod operator;
mod outcome;
mod pulse;
mod purge;
pub mod query;
mod record;
mod redact;
mod registry;
mod requests;
mod rescuer;
mod retention;
mod retrier;
mod runtime;
mod scope;
mod secret;
mod settings;
mod signal;
pub mod store;
mod strategy;
mod submit;
mod supervise;
mod sweep;
mod testing;
mod text;
mod trace;
mod tx;

pub use builder::Builder;
pub use call::{batch, Batch, BatchIn, Call, CallIn, Outcome, Receipt};
pub use compensator::{CompensateReport, Compensator};
pub use completer::CompleteReport;
pub use context::Context;
pub use data::Data;
#[doc(hidden)]
pub use data::DataNeed;
pub use error::{Error, Result};
pub use health::{
    BacklogHealth, Health, HealthStatus, OutcomesHealth, PartHealth, StoreHealth,
    HEALTH_PROBE_TIMEOUT,
};
pub use heartbeat::{Heartbeat, HeartbeatReport};
pub use instances::{ExecutorSign, InstanceInfo};
pub use keys::KeyInfo;
pub use listeners::{OutcomeEvent, OutcomeKind, LISTENER_QUEUE};
pub use log::LOG_TARGET;
pub use operator::ExecutorInfo;
pub use outcome::{Failure, FailureKind, Final, IntoOutcome};
pub use purge::{Purge, PurgeReport, MAX_PURGE_BATCH};
pub use query::{
    Action, AuditEntry, Cursor, DepthSample, ExecutorCount, MinuteStat, Order, Page, PageSpec,
    Pause, RequestQuery,
};
pub use record::{AttemptLog, Request, RequestId, Status};
/// What the macro generates and the registry holds; not for users.
#[doc(hidden)]
pub use registry::{BoxFuture, ExecutorDef, Invocation, Registration, RunFn};
pub use rescuer::{RescueReport, Rescuer};
pub use retention::{Retention, RetentionReport};
pub use retrier::{Retrier, RetryReport};
pub use runtime::{global, Runtime, ShutdownReport};
pub use secret::{mask_sealed, SECRET_KEY_BYTES};
pub use settings::{Settings, SqliteSynchronous, TestMode};
pub use signal::shutdown_signal;
pub use store::bounded::statement_bound;
pub use store::{Backend, Value};
pub use strategy::Strategy;
pub use submit::DrainReport;
pub use testing::RunDueReport;
pub use trace::{baggage, with_baggage};
pub use tx::Tx;

/// Backend types, re-exported from sqlx.
#[cfg(feature = "mysql")]
pub use sqlx::MySql;
#[cfg(feature = "postgres")]
pub use sqlx::Postgres;
#[cfg(feature = "sqlite")]
pub use sqlx::Sqlite;

#[doc(hidden)]
pub mod __private {
    pub use crate::data::DataNeed;
    pub use crate::outcome::{Failure, IntoOutcome};
    pub use crate::registry::{BoxFuture, ExecutorDef, Invocation, Registration};
    pub use inventory;
    pub use serde;
}

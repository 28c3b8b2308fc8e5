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

mod base;
mod call;
mod log;
mod operate;
mod runtime;
pub mod store;
mod sweeps;
mod work;

#[cfg(feature = "console")]
pub use operate::console;
pub use operate::query;

pub use base::context::Context;
pub use base::data::Data;
#[doc(hidden)]
pub use base::data::DataNeed;
pub use base::error::{Error, Result};
pub use base::outcome::{Failure, FailureKind, Final, IntoOutcome};
pub use base::record::{AttemptLog, Request, RequestId, Status};
pub use base::record::{ExecutorSign, InstanceInfo};
/// What the macro generates and the registry holds; not for users.
#[doc(hidden)]
pub use base::registry::{BoxFuture, ExecutorDef, Invocation, Registration, RunFn};
pub use base::secret::{mask_sealed, SECRET_KEY_BYTES};
pub use base::settings::{Settings, SqliteSynchronous, TestMode};
pub use base::strategy::Strategy;
pub use base::trace::{baggage, with_baggage};
pub use call::builder::{batch, Batch, BatchIn, Call, CallIn};
pub use call::keys::KeyInfo;
pub use call::receipt::{Outcome, Receipt};
pub use call::submit::DrainReport;
pub use call::tx::Tx;
pub use log::LOG_TARGET;
pub use operate::health::{
    BacklogHealth, Health, HealthStatus, OutcomesHealth, PartHealth, StoreHealth,
    HEALTH_PROBE_TIMEOUT,
};
pub use operate::listeners::{OutcomeEvent, OutcomeKind, LISTENER_QUEUE};
pub use operate::operator::ExecutorInfo;
pub use operate::query::{
    Action, AuditEntry, Cursor, DepthSample, ExecutorCount, MinuteStat, Order, Page, PageSpec,
    Pause, RequestQuery,
};
pub use runtime::builder::Builder;
pub use runtime::testing::RunDueReport;
pub use runtime::{global, Runtime, ShutdownReport};
pub use store::bounded::statement_bound;
pub use store::{Backend, Value};
pub use sweeps::compensator::{CompensateReport, Compensator};
pub use sweeps::heartbeat::{Heartbeat, HeartbeatReport};
pub use sweeps::purge::{Purge, PurgeReport, MAX_PURGE_BATCH};
pub use sweeps::rescuer::{RescueReport, Rescuer};
pub use sweeps::retention::{Retention, RetentionReport};
pub use sweeps::retrier::{Retrier, RetryReport};
pub use work::completer::CompleteReport;

/// Backend types, re-exported from sqlx.
#[cfg(feature = "mysql")]
pub use sqlx::MySql;
#[cfg(feature = "postgres")]
pub use sqlx::Postgres;
#[cfg(feature = "sqlite")]
pub use sqlx::Sqlite;

#[doc(hidden)]
pub mod __private {
    pub use crate::base::data::DataNeed;
    pub use crate::base::outcome::{Failure, IntoOutcome};
    pub use crate::base::registry::{BoxFuture, ExecutorDef, Invocation, Registration};
    pub use inventory;
    pub use serde;
}

//! The runtime of [async-exec](https://docs.rs/async-exec): records, stores, the
//! after-commit dispatcher, workers and sweeps. Use it through the `async-exec` crate,
//! whose `#[async_exec]` attribute generates the calls this crate runs.
//!
//! The source follows a request, one folder per stage; imports point down this list
//! (a part never reaches back into the runtime that assembles it):
//! - `call/`: what a call does in the caller's task: the call `builder` ([`Call`],
//!   [`CallIn`], [`Batch`]) and its `receipt` ([`Receipt`], [`Outcome`]), `submit`
//!   (write the record, then dispatch or run it), transactions (`tx`: [`Tx`] and
//!   [`Runtime::begin`]; `scope`: [`Runtime::transaction`]; `open_tx`, `nested`),
//!   idempotency `keys` and the `delayed` in-memory calls.
//! - `work/`: what happens once it is committed: the `dispatcher` (the after-commit
//!   channel and the producer), the `claimer` (claims and starts, for the producer and
//!   the sweeps), the worker permits (`pool`), the `executor` (runs bodies, catches
//!   errors, panics and timeouts), the `completer` (writes outcomes in batches) and
//!   `control` (pauses and finished counts).
//! - `sweeps/`: what runs on an interval: [`Retrier`], [`Compensator`], [`Rescuer`],
//!   [`Heartbeat`], [`Retention`] (through `purge`), presence (`instances`), the
//!   database's `clock`, and `sweep`, the loop they run in.
//! - `operate/`: what operators read and do: `requests` ([`Runtime::list`] with a
//!   [`RequestQuery`] and a [`PageSpec`], actions on every match, [`Runtime::purge`]),
//!   `operator` (pauses, the audit trail, statistics), the `console`,
//!   `health` ([`Runtime::health`], from each part's `pulse`), `metrics`, the queue
//!   `gauges` and the outcome `listeners`.
//! - [`store`]: all SQL, one implementation per backend.
//! - `base/`: the plain types every layer shares: the `record` (and the instances'
//!   rows), [`query`] (which requests and which page, as the store reads them),
//!   [`Error`], [`Settings`], [`Strategy`], a body's `outcome`, the `registry` of
//!   executors and their `data`, [`Context`], `trace`, `secret`, and small helpers.
//! - `runtime/`: the [`Runtime`] handle, the [`Builder`], `connect` (the store a URL
//!   names), `parts` (the handles the parts share, and those every runtime has),
//!   `assemble` (which part gets what, and starts them) and `testing`
//!   ([`Runtime::run_due`]).
//!
//! Everything the runtime logs has the target [`LOG_TARGET`] (`log.rs`).
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

pub use base::query;
#[cfg(feature = "console")]
pub use operate::console;
#[cfg(feature = "http")]
pub use operate::http;

pub use base::context::Context;
pub use base::data::Data;
#[doc(hidden)]
pub use base::data::DataNeed;
pub use base::error::{Error, Result};
pub use base::flow::{FlowSample, PartitionFlow, QueueFlow, QueueSummary, Verdict};
pub use base::outcome::{Failure, FailureKind, Final, IntoOutcome, Snooze};
pub use base::partition::{PartitionSettings, Period, Rate};
pub use base::query::{
    Action, AuditEntry, Cursor, DepthSample, ExecutorCount, MinuteStat, Order, Page, PageSpec,
    Pause, QueuePolicy, RequestQuery,
};
pub use base::queue::{QueueLimits, SequenceFailure};
pub use base::record::AnnouncedSchedule;
pub use base::record::{AttemptLog, Progress, Request, RequestId, Status};
pub use base::record::{ExecutorSign, InstanceInfo};
/// What the macro generates and the registry holds; not for users.
#[doc(hidden)]
pub use base::registry::{BoxFuture, ExecutorDef, Invocation, Registration, RunFn};
pub use base::results::Partial;
pub use base::schedule::Schedule;
pub use base::secret::{mask_sealed, SECRET_KEY_BYTES};
pub use base::settings::{Settings, SqliteSynchronous, TestMode};
pub use base::strategy::Strategy;
pub use base::trace::{baggage, with_baggage, TracePropagation};
pub use call::builder::{batch, Batch, BatchIn, Call, CallIn, MAX_TAGS};
pub use call::cancel::{CancelCount, CancelOutcome};
pub use call::hand_over::DrainReport;
pub use call::keys::KeyInfo;
pub use call::receipt::{Outcome, Receipt};
pub use call::tx::Tx;
pub use log::LOG_TARGET;
pub use operate::act_in::ActMatching;
pub use operate::cancel::{Cancel, CancelMatching};
pub use operate::health::{
    BacklogHealth, Health, HealthStatus, OutcomesHealth, PartHealth, StoreHealth,
    HEALTH_PROBE_TIMEOUT,
};
pub use operate::listeners::{
    OutcomeEvent, OutcomeKind, ASYNC_LISTENER_CALLS, ASYNC_LISTENER_TIMEOUT, LISTENER_QUEUE,
};
pub use operate::operator::ExecutorInfo;
pub use operate::partitions::PartitionEntry;
pub use operate::policy::PolicyChange;
pub use operate::requests::StepInfo;
pub use operate::signal::shutdown_signal;
pub use runtime::builder::Builder;
pub use runtime::testing::RunDueReport;
pub use runtime::ticker::{AnnouncedScheduleInfo, ScheduleInfo};
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
    pub use crate::base::registry::{BoxFuture, ExecutorDef, Invocation, Modes, Registration};
    pub use crate::base::results::{KeepJson, NoJson, ResultOf, ResultSlot};
    pub use crate::base::schedule::Schedule;
    pub use inventory;
    pub use serde;
}

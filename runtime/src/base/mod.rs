//! The plain types every layer shares, and nothing above them: the request record and
//! its status, and the instances' rows (`record`); which requests and which page
//! (`query`: `RequestQuery`, `PageSpec`, `Page`, as the store reads them); the one
//! `Error`, `Settings`, the `Strategy`, a body's outcome (`outcome`), the registry of
//! executors and their `Data<T>` (`registry`, `data`), the body's `Context`, the
//! caller's trace (`trace`, and its OpenTelemetry context in `otel`), text and URL helpers (`text`, `redact`), the instance's
//! name (`identity`), retry delays (`backoff`), the kinds of write failures (`fault`),
//! supervised tasks (`supervise`), `#[secret]` arguments (`secret`) queues' limits
//! (`queue`) and partitions' own settings (`partition`).

pub(crate) mod backoff;
pub(crate) mod context;
pub(crate) mod data;
pub(crate) mod error;
pub(crate) mod fault;
pub(crate) mod flow;
pub(crate) mod identity;
#[cfg(feature = "opentelemetry")]
pub(crate) mod otel;
pub(crate) mod outcome;
pub(crate) mod partition;
pub(crate) mod policy;
pub mod query;
pub(crate) mod queue;
pub(crate) mod record;
pub(crate) mod redact;
pub(crate) mod registry;
pub(crate) mod results;
pub(crate) mod schedule;
pub(crate) mod secret;
pub(crate) mod settings;
pub(crate) mod strategy;
pub(crate) mod supervise;
pub(crate) mod text;
pub(crate) mod trace;
pub(crate) mod verdict;

//! Operations: what an operator reads and does. Requests from code (`requests`: get,
//! list, counts, retry, delete, purge; `cancel`, now or in the caller's transaction; which ones: `base/query.rs`), pauses, the
//! audit trail and statistics (`operator`), partitions' own settings (`partitions`), the
//! `console`, `health` (from each part's `pulse`), `metrics` and the queue `gauges`, the
//! flow view and its saturation history (`flow_view`), the outcome `listeners`, the HTTP routes
//! for load balancers and Prometheus (`http`, feature `http`), the applications that have
//! records and tools' own audit entries (`applications`), and `shutdown_signal` (`signal`).

pub(crate) mod act_in;
pub(crate) mod applications;
pub(crate) mod cancel;
#[cfg(feature = "console")]
pub mod console;
pub(crate) mod flow_view;
pub(crate) mod gauges;
pub(crate) mod health;
#[cfg(feature = "http")]
pub mod http;
pub(crate) mod listeners;
pub(crate) mod metrics;
pub(crate) mod operator;
pub(crate) mod partitions;
pub(crate) mod policy;
pub(crate) mod pulse;
pub(crate) mod requests;
pub(crate) mod signal;

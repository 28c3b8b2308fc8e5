//! The one place that says where the runtime logs: every event and span it emits has the
//! `tracing` target [`LOG_TARGET`] (`async_exec`), whichever module it comes from, so that
//! `RUST_LOG=async_exec=debug` (an `EnvFilter` directive) selects all of it and nothing
//! else. The runtime logs through these macros, never `tracing::warn!` and the like
//! directly (a test in `tests/logging.rs` refuses those).

/// The `tracing` target of everything the runtime logs: events and the `async_exec` span
/// each execution runs in.
///
/// Filter on it with `RUST_LOG=async_exec=debug` (`tracing_subscriber::EnvFilter`), or
/// `Targets::new().with_target(async_exec::LOG_TARGET, LevelFilter::DEBUG)`.
///
/// ```
/// assert_eq!(async_exec::LOG_TARGET, "async_exec");
/// ```
pub const LOG_TARGET: &str = "async_exec";

macro_rules! error {
    ($($arg:tt)+) => { ::tracing::error!(target: $crate::log::LOG_TARGET, $($arg)+) };
}

macro_rules! warn_ {
    ($($arg:tt)+) => { ::tracing::warn!(target: $crate::log::LOG_TARGET, $($arg)+) };
}

macro_rules! info {
    ($($arg:tt)+) => { ::tracing::info!(target: $crate::log::LOG_TARGET, $($arg)+) };
}

macro_rules! debug {
    ($($arg:tt)+) => { ::tracing::debug!(target: $crate::log::LOG_TARGET, $($arg)+) };
}

macro_rules! info_span {
    ($($arg:tt)+) => { ::tracing::info_span!(target: $crate::log::LOG_TARGET, $($arg)+) };
}

// `warn` is also a built-in attribute: defined under another name, used by its path.
pub(crate) use {debug, error, info, info_span, warn_ as warn};

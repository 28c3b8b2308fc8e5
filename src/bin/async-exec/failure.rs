//! Why the tool stopped: every failure exits with status 1 (clap exits with 2 for a
//! command line it cannot parse).

use std::process::ExitCode;

/// What went wrong.
#[derive(Debug, thiserror::Error)]
pub(crate) enum Failure {
    /// The runtime refused or failed.
    #[error("{}", explain(.0))]
    Runtime(#[from] async_exec::Error),
    /// The command ran and could not do what was asked (a request not found, some of
    /// the requests named refused).
    #[error("{0}")]
    Failed(String),
}

impl Failure {
    /// The exit status.
    pub(crate) fn exit_code(&self) -> ExitCode {
        ExitCode::from(1)
    }
}

/// The runtime's message, its causes that the message does not repeat, and a hint where
/// the tables are missing.
pub(crate) fn explain(error: &async_exec::Error) -> String {
    let mut message = error.to_string();
    let mut source = std::error::Error::source(error);
    while let Some(cause) = source {
        let text = cause.to_string();
        if !message.contains(&text) {
            message.push_str(": ");
            message.push_str(&text);
        }
        source = cause.source();
    }
    let lower = message.to_lowercase();
    let missing_table = lower.contains("no such table")
        || (lower.contains("async_")
            && (lower.contains("does not exist") || lower.contains("doesn't exist")));
    if missing_table {
        message.push_str(
            "; the async-exec tables are missing here: create them with `async-exec migrate`, \
             or check --url",
        );
    }
    message
}

//! The five execution strategies of `#[async_exec(type = ...)]`.

use std::fmt;
use std::str::FromStr;

/// How a call is recorded and executed, safest first.
///
/// | strategy | at the call | executes | lost by a crash before execution? |
/// |---|---|---|---|
/// | `SaveAsync` | persist (in the caller's tx when given) | after commit, by a worker | no |
/// | `SyncSave` | run the body inline, in the caller | now; persisted for retry on failure | no |
/// | `AsyncSave` | nothing written | after commit, by a worker; persisted only on failure | yes |
/// | `Async` | nothing written | after commit, by a worker; failures logged only | yes |
/// | `Thread` | nothing written | after commit, spawned directly on the tokio runtime | yes |
///
/// Under every strategy, a rollback of the caller's transaction discards the call.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Strategy {
    /// Persist the request, execute it after commit; survives crashes.
    SaveAsync,
    /// Run the body in the caller right away; persist it for retry when it fails.
    SyncSave,
    /// Execute after commit without writing; persist it only when it fails.
    AsyncSave,
    /// Execute after commit without writing anything; failures are only logged.
    Async,
    /// Spawn the body on the tokio runtime after commit; failures are only logged.
    Thread,
}

impl Strategy {
    /// The name stored in the `strategy` column.
    pub const fn as_str(self) -> &'static str {
        match self {
            Strategy::SaveAsync => "SaveAsync",
            Strategy::SyncSave => "SyncSave",
            Strategy::AsyncSave => "AsyncSave",
            Strategy::Async => "Async",
            Strategy::Thread => "Thread",
        }
    }

    /// Whether the call itself writes a request record.
    pub const fn persists_at_call(self) -> bool {
        matches!(self, Strategy::SaveAsync)
    }
}

impl fmt::Display for Strategy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for Strategy {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Ok(match s {
            "SaveAsync" => Strategy::SaveAsync,
            "SyncSave" => Strategy::SyncSave,
            "AsyncSave" => Strategy::AsyncSave,
            "Async" => Strategy::Async,
            "Thread" => Strategy::Thread,
            other => return Err(format!("unknown strategy `{other}`")),
        })
    }
}

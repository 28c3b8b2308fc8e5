//! The subcommands: each returns what to print, as JSON and for people. By what they do:
//! [`reads`], [`actions`] on requests, [`controls`], [`partitions`] (a tenant's own
//! settings).

mod actions;
mod controls;
mod partitions;
mod reads;

pub(crate) use actions::{act, cancel_tagged, purge, Action};
pub(crate) use controls::{flow, pause, policy, queue_limits, queues};
pub(crate) use partitions::{parse_rate, partition};
pub(crate) use reads::{applications_only, list, show, stats};

use async_exec::{RequestId, Runtime};
use serde_json::{json, Value};

use crate::failure::Failure;
use crate::render::safe;

/// What a command printed: one JSON document, or text for people; and whether some of
/// the requests it was given failed (exit status 1 after printing).
#[derive(Debug)]
pub(crate) struct Printed {
    pub(crate) json: Value,
    pub(crate) human: String,
    pub(crate) failed: Option<String>,
}

impl Printed {
    pub(crate) fn ok(json: Value, human: String) -> Self {
        Printed {
            json,
            human,
            failed: None,
        }
    }
}

/// `migrate`: the runtime migrated when it started.
pub(crate) fn migrate(database: &str) -> Printed {
    Printed::ok(
        json!({ "migrated": true, "database": database }),
        format!("the async-exec tables are up to date in {database}\n"),
    )
}

fn not_found(rt: &Runtime, id: RequestId) -> Failure {
    Failure::Failed(format!(
        "no request with id {id} in application `{}` (another application's? pass --application)",
        safe(&rt.settings().application_name)
    ))
}

/// `1 request`, `2 requests`, `3 batches`.
fn counted(n: u64, noun: &str) -> String {
    match (n, noun.ends_with('h')) {
        (1, _) => format!("1 {noun}"),
        (_, true) => format!("{n} {noun}es"),
        _ => format!("{n} {noun}s"),
    }
}

//! # async-exec
//!
//! Run this after my transaction commits, and never lose it: `#[async_exec]` on an
//! `async fn` turns each call into a request record written in the caller's transaction
//! (a transactional outbox) and runs the body once the transaction commits. Failures are
//! retried with backoff, crashes are recovered from the store, and several instances
//! can share one database.
//!
//! ```no_run
//! use async_exec::{async_exec, Data, Runtime, Sqlite, Tx};
//!
//! struct Mailer;
//! impl Mailer { async fn send(&self, _to: &str) -> anyhow::Result<()> { Ok(()) } }
//!
//! #[async_exec(type = SaveAsync, remark = "send the welcome mail")]
//! async fn send_welcome(user_id: i64, email: String, mailer: Data<Mailer>) -> anyhow::Result<()> {
//!     mailer.send(&email).await
//! }
//!
//! # async fn demo() -> anyhow::Result<()> {
//! let rt = Runtime::builder().data(Mailer).start().await?;
//! let mut tx: Tx<Sqlite> = rt.begin().await?;
//! sqlx::query("create table if not exists users (id integer)").execute(tx.conn()).await?;
//! send_welcome(42, "a@b.c".into()).within(&mut tx).await?; // written in the same tx
//! tx.commit().await?;                                        // then run at once
//! send_welcome(7, "x@y.z".into()).await?;                    // no tx: written, then run
//! # Ok(()) }
//! ```
//!
//! The guide, chapter by chapter, is the module [`guide`]; the same chapters are the
//! Markdown files under `docs/` in the repository.
#![deny(missing_docs)]

pub use async_exec_macros::async_exec;
pub use async_exec_runtime::*;

/// What the macro's expansion uses. Not a public API.
#[doc(hidden)]
pub mod __private {
    pub use async_exec_runtime::__private::*;
}

/// The guide: how to use async-exec, chapter by chapter. Each chapter is a Markdown file
/// under `docs/`, and every Rust example in it is a doctest (`cargo test --doc
/// --all-features` compiles them all and runs those on SQLite).
///
/// | chapter | what is in it |
/// |---|---|
/// | [`getting_started`](guide::getting_started) | a first program on SQLite, then a PostgreSQL + axum service |
/// | [`attribute`](guide::attribute) | the attribute, its options, the strategies, what happens to a request, `#[secret]` |
/// | [`transactions`](guide::transactions) | calls in your transaction, transaction scopes, one handler for every backend |
/// | [`flow`](guide::flow) | queues, limits per tenant, turns between tenants, isolation |
/// | [`keys`](guide::keys) | what an idempotency key promises |
/// | [`settings`](guide::settings) | every setting, its default, migrations |
/// | [`guarantees`](guide::guarantees) | what is guaranteed, item by item, and the known gaps |
/// | [`instances`](guide::instances) | several instances on one database, rolling deploys, shutdown |
/// | [`operations`](guide::operations) | console, JSON API, CLI, metrics, health, retention, listeners, tracing |
/// | [`testing`](guide::testing) | test modes, `run_due`, sweeps by hand |
/// | [`performance`](guide::performance) | today's benchmark table and how to reproduce it |
/// | [`benchmarks`](guide::benchmarks) | the benchmark's history, commit by commit |
/// | [`internals`](guide::internals) | the chaos test, the indexes and what they cost, where the code lives |
// The examples use every backend, the console and Prometheus: they are compiled (and the SQLite
// ones run) when all of these are on, as `cargo test --workspace --all-features` does.
#[cfg(any(
    doc,
    all(
        feature = "sqlite",
        feature = "postgres",
        feature = "mysql",
        feature = "console",
        feature = "prometheus"
    )
))]
pub mod guide {
    /// Where each chapter's links point in rustdoc. Every chapter links to the others with
    /// reference links whose labels are the file names (`[Keys][keys.md]`), and defines them
    /// at its end as relative `.md` paths, for GitHub. This block comes first in each
    /// module's documentation, and the first definition of a label wins (CommonMark), so
    /// in rustdoc the same labels are intra-doc links to the chapters' modules.
    macro_rules! guide_links {
        () => {
            r"
[README.md]: crate
[getting-started.md]: crate::guide::getting_started
[attribute.md]: crate::guide::attribute
[transactions.md]: crate::guide::transactions
[keys.md]: crate::guide::keys
[flow.md]: crate::guide::flow
[settings.md]: crate::guide::settings
[guarantees.md]: crate::guide::guarantees
[instances.md]: crate::guide::instances
[operations.md]: crate::guide::operations
[testing.md]: crate::guide::testing
[performance.md]: crate::guide::performance
[benchmarks.md]: crate::guide::benchmarks
[internals.md]: crate::guide::internals
[attribute.md#partitions-of-a-queue]: crate::guide::attribute#partitions-of-a-queue
[operations.md#console]: crate::guide::operations#console
[operations.md#health]: crate::guide::operations#health
[operations.md#metrics]: crate::guide::operations#metrics
[operations.md#retention]: crate::guide::operations#retention
[internals.md#chaos-test]: crate::guide::internals#chaos-test
[internals.md#indexes-and-what-they-cost]: crate::guide::internals#indexes-and-what-they-cost
"
        };
    }

    macro_rules! chapter {
        ($name:ident, $file:literal) => {
            #[doc = guide_links!()]
            #[doc = include_str!(concat!("../docs/", $file))]
            pub mod $name {}
        };
    }

    chapter!(getting_started, "getting-started.md");
    chapter!(attribute, "attribute.md");
    chapter!(transactions, "transactions.md");
    chapter!(flow, "flow.md");
    chapter!(keys, "keys.md");
    chapter!(settings, "settings.md");
    chapter!(guarantees, "guarantees.md");
    chapter!(instances, "instances.md");
    chapter!(operations, "operations.md");
    chapter!(testing, "testing.md");
    chapter!(performance, "performance.md");
    chapter!(benchmarks, "benchmarks.md");
    chapter!(internals, "internals.md");
}

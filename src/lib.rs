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
#![deny(missing_docs)]

pub use async_exec_macros::async_exec;
pub use async_exec_runtime::*;

/// What the macro's expansion uses. Not a public API.
#[doc(hidden)]
pub mod __private {
    pub use async_exec_runtime::__private::*;
}

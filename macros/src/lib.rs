//! The `#[async_exec]` attribute of [async-exec].
//!
//! Use it through the `async-exec` crate (`use async_exec::async_exec;`), which
//! re-exports it together with the runtime the generated code calls into.
//!
//! [async-exec]: https://docs.rs/async-exec
#![deny(missing_docs)]

use proc_macro::TokenStream;

mod attr;
mod expand;
mod partition;
mod parts;
mod placement;
mod service;
mod validate;

/// Turns an `async fn` into a persisted, retried executor.
///
/// ```no_run
/// use async_exec::{async_exec, Data, Runtime, Sqlite, Tx};
/// # pub struct Mailer;
/// # impl Mailer { async fn send(&self, _to: &str, _template: &str) -> anyhow::Result<()> { Ok(()) } }
///
/// /// Sends the welcome mail once the user's row is committed.
/// #[async_exec(type = SaveAsync, remark = "send the welcome mail")]
/// pub async fn send_welcome(user_id: i64, email: String, mailer: Data<Mailer>) -> anyhow::Result<()> {
///     mailer.send(&email, "welcome").await
/// }
///
/// # async fn demo(rt: Runtime) -> async_exec::Result<()> {
/// let mut tx: Tx<Sqlite> = rt.begin().await?;
/// send_welcome(42, "a@b.c".into()).within(&mut tx).await?; // request row written in `tx`
/// tx.commit().await?;                                       // dispatched after the commit
/// # Ok(()) }
/// ```
///
/// # What it generates
///
/// The function is replaced by a plain `fn` with the same name, visibility,
/// attributes (docs included) and *persisted* parameters, which returns an
/// `async_exec::Call`: a builder (`.within(&mut tx)`, `.key(..)`, `.delay(..)`,
/// `.priority(..)`) that submits the request when awaited. The body moves,
/// unchanged, into a hidden executor that the runtime runs later, and that
/// executor is registered with `inventory`, so no registration call is needed.
///
/// Attributes after `#[async_exec]` that concern the body go on the hidden
/// executor: `#[tracing::instrument]` (its span is entered when the body runs,
/// named after the function unless it sets `name`), and the lint levels `warn`,
/// `deny`, `forbid`, `expect`; `allow` and `cfg` go on both; the others (docs,
/// `deprecated`, `must_use`, `cfg_attr`, ...) stay on the wrapper.
///
/// ```
/// # use async_exec::{async_exec, Data};
/// # struct Mailer;
/// #[async_exec(type = SaveAsync)]
/// #[tracing::instrument(skip(mailer), fields(user = user_id))] // entered when the body runs
/// async fn send_welcome(user_id: i64, mailer: Data<Mailer>) -> anyhow::Result<()> { Ok(()) }
/// ```
///
/// # Parameters
///
/// * `Data<T>` (the last path segment is `Data`, with one type argument) is
///   *injected*: at execution the runtime passes the value of type `T`
///   registered on its builder. It is not a parameter of the generated `fn`.
/// * `Context` (request id, attempt, executor) is injected as well.
/// * Every other parameter is *persisted*: it is stored with the request as
///   JSON, so its type must implement `serde::Serialize` and
///   `serde::de::DeserializeOwned`, and it must be owned (no `&T`, no
///   `impl Trait`). Patterns must be plain identifiers (`mut x` is fine).
///   Persisted parameters are stored in plaintext unless marked `#[secret]`: a
///   marked one is sealed (encrypted) with a key given to the runtime's builder
///   (`Builder::secret_key`), opened just before the body runs, and shown
///   masked by the console and the CLI.
///
/// ```
/// # use async_exec::async_exec;
/// #[async_exec(type = SaveAsync, name = "billing::charge")]
/// async fn charge(order_id: i64, #[secret] card: String) -> anyhow::Result<()> { Ok(()) }
/// ```
///
/// The body may return `()` or `Result<(), E>` with `E: Display`
/// (`anyhow::Result<()>` is the usual choice); an `Err` is retried according
/// to the strategy.
///
/// The executor records a `sign`: a hash of the persisted parameters' names
/// and types, so that a record written by an older build with a different
/// signature is recognised.
///
/// # Arguments
///
/// ## `type = <Strategy>` (required)
///
/// When the call is persisted and how the body runs. One of:
///
/// | strategy | at the call | executes | persisted |
/// |---|---|---|---|
/// | `SaveAsync` | persist (in the caller's tx when given) | after commit, through the dispatcher | always |
/// | `SyncSave` | run the body inline | now | on failure, for retry |
/// | `AsyncSave` | nothing written | after commit, through the dispatcher | on failure |
/// | `Async` | nothing written | after commit, through the dispatcher | never (failures logged) |
/// | `Thread` | nothing written | after commit, spawned on the runtime | never |
///
/// A payment is `SaveAsync` with an idempotency key: the card is charged only once the
/// order's transaction has committed (a `SyncSave` body would charge before the commit,
/// and a rollback would leave a charge for an order that does not exist), and the key
/// makes a repeated call (a retried HTTP request) return the first request instead of
/// charging twice. Pass the key on to the payment provider, so that a body that runs
/// again after a crash does not charge twice either.
///
/// ```no_run
/// use async_exec::{async_exec, Data, Runtime, Sqlite, Tx};
/// # struct Psp;
/// # impl Psp { async fn charge(&self, _key: &str, _order: i64, _cents: i64) -> anyhow::Result<()> { Ok(()) } }
///
/// #[async_exec(type = SaveAsync, max_attempts = 10)]
/// async fn charge(order_id: i64, amount_cents: i64, psp: Data<Psp>) -> anyhow::Result<()> {
///     psp.charge(&format!("order-{order_id}"), order_id, amount_cents).await
/// }
///
/// # async fn demo(rt: Runtime) -> async_exec::Result<()> {
/// let mut tx: Tx<Sqlite> = rt.begin().await?;
/// // ... insert the order in `tx` ...
/// charge(17, 4_999).key("charge-order-17").within(&mut tx).await?;
/// tx.commit().await?; // charged after this, once
/// # Ok(()) }
/// ```
///
/// Leaving it out is an error: ``missing `type = ...` ``.
///
/// ## `remark = "..."`
///
/// A free-text description stored with every request (default: empty).
///
/// ```
/// # use async_exec::async_exec;
/// #[async_exec(type = Async, remark = "refresh the search index")]
/// async fn reindex(product_id: i64) {}
/// ```
///
/// ## `name = "..."`
///
/// The executor's stable name, stored in each request record and used to find
/// the executor when the record runs. The default is
/// `concat!(module_path!(), "::", fn_name)`, which changes when the function
/// moves or is renamed; set a name so that records written before such a move
/// still run. Names must be unique in the program and must not be empty.
///
/// ```
/// # use async_exec::async_exec;
/// #[async_exec(type = SaveAsync, name = "mail.send_welcome")]
/// async fn send_welcome(user_id: i64) -> anyhow::Result<()> { Ok(()) }
/// ```
///
/// ## `max_attempts = N`
///
/// How many times the body runs at most before the request is `dead`
/// (N >= 1; default: the runtime's setting).
///
/// ```
/// # use async_exec::async_exec;
/// #[async_exec(type = SaveAsync, max_attempts = 5)]
/// async fn sync_crm(account_id: i64) -> anyhow::Result<()> { Ok(()) }
/// ```
///
/// ## `timeout = "30s"` or `timeout = 30`
///
/// How long one attempt may run before it is cancelled and counted as failed.
/// A number is seconds; a string is `"<n>ms"`, `"<n>s"`, `"<n>m"` or `"<n>h"`
/// with a whole number `n`. Zero is rejected. Default: the runtime's setting.
///
/// ```
/// # use async_exec::async_exec;
/// #[async_exec(type = SaveAsync, timeout = "500ms")]
/// async fn ping(url: String) -> anyhow::Result<()> { Ok(()) }
///
/// #[async_exec(type = SaveAsync, timeout = 120)] // two minutes
/// async fn export(report_id: i64) -> anyhow::Result<()> { Ok(()) }
/// ```
///
/// ## `queue = "payments"`
///
/// The queue whose limits the executor's requests share with every executor that names
/// it (`SaveAsync` only: the limits hold in the store's claims, which other strategies do
/// not go through). The limits are the runtime's:
/// `Builder::queue("payments", QueueLimits::new().concurrency(4))`. A queue without
/// limits is unlimited.
///
/// ```
/// # use async_exec::async_exec;
/// #[async_exec(type = SaveAsync, queue = "payments")]
/// async fn charge(order_id: i64) -> anyhow::Result<()> { Ok(()) }
/// ```
///
/// ## `partition = <expr>`
///
/// The partition of its queue each call's request belongs to (a tenant, an account):
/// the queue's `QueueLimits::per_partition(n)` limits each partition's running requests,
/// and the queue's claims take turns between partitions. An expression over the call's
/// stored parameters (a parameter, a field, `format!(..)`), evaluated when the function
/// is called, before the arguments are stored; its value is any `Display` type (its
/// text, 1 to 255 characters, is the partition; another is refused with
/// `Error::InvalidCall` when the call is awaited). `.partition(..)` on the call replaces
/// it. `SaveAsync` with a `queue` only; it may not name a `Data<T>` or `Context`
/// parameter (injected when the body runs), a service's `self`, nor a `#[secret]`
/// parameter (a partition is stored in plain text).
///
/// ```
/// # use async_exec::async_exec;
/// #[async_exec(type = SaveAsync, queue = "webhooks", partition = tenant_id)]
/// async fn deliver(tenant_id: i64, event: String) -> anyhow::Result<()> { Ok(()) }
///
/// #[async_exec(type = SaveAsync, queue = "exports", partition = format!("{region}/{account}"))]
/// async fn export(region: String, account: String) -> anyhow::Result<()> { Ok(()) }
/// ```
///
/// ```compile_fail
/// # use async_exec::async_exec;
/// #[async_exec(type = SaveAsync, partition = tenant_id)] // error: name the queue
/// async fn deliver(tenant_id: i64) {}
/// ```
///
/// ## `every = "30s"`, `cron = "0 0 6 1 * *"`, `time_zone = "Europe/Paris"`
///
/// The executor calls itself: every so long (one second to a year, at the multiples
/// of the period since the Unix epoch), or at the times of a cron expression (six
/// fields, seconds first, in UTC or in `time_zone = "Europe/Paris"`). Each tick is one
/// stored request, written by whichever instance gets there first (`SaveAsync` only, and
/// no stored parameters: `Data<T>` and `Context` only; `Context::tick` gives the tick). A
/// tick missed while no instance ran is skipped, or, with `catch_up = true`, the last
/// one is called at start. In a time zone each local time fires once across daylight
/// saving changes (the guide's attribute chapter says how).
///
/// ```
/// # use async_exec::{async_exec, Context};
/// #[async_exec(type = SaveAsync, cron = "0 0 6 1 * *")] // 06:00 UTC, each first of the month
/// async fn monthly_invoices(ctx: Context) -> anyhow::Result<()> { Ok(()) }
///
/// #[async_exec(type = SaveAsync, cron = "0 0 9 * * MON-FRI", time_zone = "America/New_York")]
/// async fn morning_digest() {}
/// ```
///
/// ## `crate = "path"`
///
/// The path of the `async-exec` crate in the generated code (default:
/// `::async_exec`). Set it when the dependency is renamed or re-exported.
///
/// ```
/// // Cargo.toml: outbox = { package = "async-exec", version = "0.1" }
/// # extern crate async_exec as outbox;
/// #[outbox::async_exec(type = SaveAsync, crate = "::outbox")]
/// async fn audit(event: String) {}
/// ```
///
/// # Methods of a service
///
/// On the `impl` block of a service type (no arguments, but `crate = "..."`), it
/// makes executors of the `async fn name(&self, ..)` methods marked
/// `#[async_exec(type = ...)]`. `service.name(..)` returns the `Call`; the body runs
/// on the instance registered with `Builder::service`, named
/// `module::Type::name` unless `name = ...` says otherwise.
///
/// ```no_run
/// use std::sync::Arc;
/// use async_exec::{async_exec, Runtime};
///
/// struct Mailer;
///
/// #[async_exec]
/// impl Mailer {
///     #[async_exec(type = SaveAsync, remark = "send the welcome mail")]
///     async fn send_welcome(&self, user_id: i64) -> anyhow::Result<()> {
///         Ok(())
///     }
/// }
///
/// # async fn demo() -> async_exec::Result<()> {
/// let mailer = Arc::new(Mailer);
/// let rt = Runtime::builder().service(mailer.clone()).start().await?;
/// mailer.send_welcome(42).on(&rt).await?;
/// # Ok(()) }
/// ```
///
/// # Errors
///
/// Misuse is a compile error at the offending token that says what to write
/// instead: unknown or duplicate arguments, an unknown strategy, a bad
/// `timeout` or `max_attempts`, a `partition` without a queue or naming what the call
/// does not have, a function that is not `async`, generic,
/// `const`, `unsafe` or `extern`, a method outside a service's `impl` (or one
/// taking `&mut self` or `self` by value), and parameters that are
/// references, `impl Trait` or patterns. Persisted parameter types without
/// serde support fail at the parameter's type.
///
/// ```compile_fail
/// # use async_exec::async_exec;
/// #[async_exec(type = SaveAsync)]
/// async fn bad(email: &str) {} // error: parameters are persisted, so they must be owned
/// ```
#[proc_macro_attribute]
pub fn async_exec(args: TokenStream, item: TokenStream) -> TokenStream {
    expand::async_exec(args.into(), item.into()).into()
}

//! The call builder that an `#[async_exec]` function returns.

use std::future::IntoFuture;
use std::sync::Arc;
use std::time::Duration;

use serde::Serialize;

use crate::base::error::{Error, Result};
use crate::base::registry::{BoxFuture, ExecutorDef};
use crate::base::settings::MAX_DURATION;
use crate::base::trace::TraceContext;
use crate::call::receipt::{ParamsForDebug, Receipt, Submission};
use crate::call::tx::Tx;
use crate::runtime::{global, Runtime};
use crate::store::Backend;

/// A call of an `#[async_exec]` function, not yet submitted. Set options, then `.await` it
/// to submit; the result says what happened ([`Receipt`]).
///
/// ```no_run
/// # use std::time::Duration;
/// # use async_exec::{async_exec, Runtime, Sqlite, Tx};
/// # #[async_exec(type = SaveAsync)]
/// # async fn send_welcome(user_id: i64, email: String) -> anyhow::Result<()> { Ok(()) }
/// # async fn demo(rt: Runtime) -> async_exec::Result<()> {
/// let mut tx: Tx<Sqlite> = rt.begin().await?;
/// send_welcome(42, "a@b.c".into())
///     .key("welcome-42")              // a second call with this key returns the first
///     .delay(Duration::from_secs(60))
///     .priority(10)
///     .within(&mut tx)                // in the caller's transaction
///     .await?;
/// tx.commit().await?;
/// # Ok(()) }
/// ```
#[must_use = "a call does nothing until it is `.await`ed"]
pub struct Call {
    def: &'static ExecutorDef,
    params: std::result::Result<Arc<str>, serde_json::Error>,
    key: Option<String>,
    delay: Option<Duration>,
    deadline: Option<Duration>,
    tags: Vec<String>,
    owner: Option<String>,
    partition: Option<String>,
    priority: i32,
    runtime: Option<Runtime>,
    independent: bool,
}

impl std::fmt::Debug for Call {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let params = self.params.as_deref().map_err(ToString::to_string);
        f.debug_struct("Call")
            .field("def", &self.def)
            .field("params", &ParamsForDebug(self.def, params))
            .field("key", &self.key)
            .field("delay", &self.delay)
            .field("deadline", &self.deadline)
            .field("tags", &self.tags)
            .field("owner", &self.owner)
            .field("partition", &self.partition)
            .field("priority", &self.priority)
            .field("runtime", &self.runtime)
            .field("independent", &self.independent)
            .finish()
    }
}

/// The most tags a call may have ([`Call::tag`]).
pub const MAX_TAGS: usize = 10;

/// The longest tag, in characters (the tables hold 255).
pub(crate) const MAX_TAG_CHARS: usize = 255;

/// The longest partition, in characters (the column holds 255).
pub(crate) use crate::base::partition::MAX_PARTITION_CHARS;

/// The longest idempotency key, in bytes (the column of MySQL/MariaDB holds 1,020).
pub(crate) const MAX_KEY_BYTES: usize = 1020;

impl Call {
    /// Used by the macro: a call of `def` with these arguments.
    #[doc(hidden)]
    pub fn __new<A: Serialize>(def: &'static ExecutorDef, args: &A) -> Call {
        let params = serde_json::to_string(args).map(Into::into);
        Call {
            def,
            params,
            key: None,
            delay: None,
            deadline: None,
            tags: Vec::new(),
            owner: None,
            partition: None,
            priority: 0,
            runtime: None,
            independent: false,
        }
    }

    /// Used by the macro for the attribute's `partition = <expr>`: the partition computed
    /// from the call's arguments, which [`partition`](Self::partition) may still replace.
    #[doc(hidden)]
    pub fn __partition(mut self, partition: impl std::fmt::Display) -> Self {
        if self.partition.is_none() {
            self.partition = Some(partition.to_string());
        }
        self
    }

    /// An idempotency key: for `key_retention` after its first use (default 24 hours), a
    /// call of this application with the same key returns the first request
    /// ([`Outcome::Existing`](crate::Outcome::Existing)) instead of adding another,
    /// whatever happened to that request (run and deleted, dead, cancelled), also when
    /// two calls race. `SyncSave` looks at the
    /// key before it runs the body. `AsyncSave`, `Async` and `Thread` write nothing at the
    /// call and ignore the key. A key is 1 to 1,020 bytes without NUL; another is refused
    /// with [`Error::InvalidCall`] when the call is awaited. See
    /// [`Runtime::find_by_key`](crate::Runtime::find_by_key).
    pub fn key(mut self, key: impl Into<String>) -> Self {
        self.key = Some(key.into());
        self
    }

    /// Run no sooner than `delay` after the commit (at most a year: a longer delay is
    /// refused with [`Error::InvalidCall`] when the call is awaited).
    pub fn delay(mut self, delay: Duration) -> Self {
        self.delay = Some(delay);
        self
    }

    /// Start within `deadline` of the call, or not at all (`SaveAsync` calls; replaces the
    /// attribute's `deadline = "..."`): a request
    /// not started by then goes `dead` with "deadline passed"; one still running at it is
    /// told to stop (its [`Context`](crate::Context) is cancelled, within about a second)
    /// and ends `cancelled` unless its body succeeds. Times are the database's. Between
    /// 1 ms and a year, and longer than the call's [`delay`](Call::delay); other values,
    /// and a deadline on a call of another strategy (its body runs at once, without a
    /// record to stop), are refused with [`Error::InvalidCall`] when the call is awaited.
    ///
    /// ```no_run
    /// # use std::time::Duration;
    /// # use async_exec::async_exec;
    /// #[async_exec(type = SaveAsync)]
    /// async fn send_code(phone: String) {}
    ///
    /// # async fn demo() -> async_exec::Result<()> {
    /// // A login code is useless after five minutes: never send it later.
    /// send_code("+15550100".into()).deadline(Duration::from_secs(300)).await?;
    /// # Ok(()) }
    /// ```
    pub fn deadline(mut self, deadline: Duration) -> Self {
        self.deadline = Some(deadline);
        self
    }

    /// Tags the request (`SaveAsync` calls), so that it can be found and acted on with
    /// the others of the same thing: [`RequestQuery::tag`](crate::RequestQuery::tag) in
    /// `rt.list`, the API, the CLI's `list --tag` and the console, and a cancel of all
    /// of them (`rt.act(Action::Cancel, &RequestQuery::default().tag(..), ..)`). Up to
    /// [`MAX_TAGS`](crate::MAX_TAGS) per call, each 1 to 255 characters without NUL (a
    /// repeated one counts once); others, and tags on a call of another strategy, are
    /// refused with [`Error::InvalidCall`] when the call is awaited. A tag beginning with
    /// `owner:` names an owner's quota: only [`owner`](Call::owner) writes one (a
    /// `.tag("owner:x")` on a call not made with `.owner("x")` is refused), so that no
    /// call spends another owner's quota. Written in the call's transaction; nothing is
    /// written for a call without tags.
    ///
    /// ```no_run
    /// # use async_exec::async_exec;
    /// #[async_exec(type = SaveAsync)]
    /// async fn renew(subscription: i64) {}
    ///
    /// # async fn demo() -> async_exec::Result<()> {
    /// renew(42).tag("subscription:42").tag("tenant:7").await?;
    /// # Ok(()) }
    /// ```
    pub fn tag(mut self, tag: impl Into<String>) -> Self {
        let tag = tag.into();
        if !self.tags.contains(&tag) {
            self.tags.push(tag);
        }
        self
    }

    /// Whose request this is (a tenant, a customer): kept as the tag `owner:<owner>`
    /// (findable as any tag), and counted against
    /// [`max_waiting_per_owner`](crate::Builder::max_waiting_per_owner) when the runtime
    /// sets one (`SaveAsync` calls; 1 to 249 characters without NUL). One owner per call:
    /// a second `.owner(..)` replaces the first. Only this writes an `owner:` tag (see
    /// [`tag`](Call::tag)).
    ///
    /// ```no_run
    /// # use async_exec::async_exec;
    /// #[async_exec(type = SaveAsync)]
    /// async fn export(report: i64) {}
    ///
    /// # async fn demo() -> async_exec::Result<()> {
    /// // One tenant cannot fill the queue: past its quota its calls are refused.
    /// export(7).owner("tenant-7").await?;
    /// # Ok(()) }
    /// ```
    pub fn owner(mut self, owner: impl Into<String>) -> Self {
        let owner = owner.into();
        // One owner per call: a second `.owner(..)` replaces the first, and its tag.
        if let Some(before) = self.owner.take() {
            let tag = format!("{}{before}", crate::call::quota::OWNER_TAG);
            self.tags.retain(|t| *t != tag);
        }
        self = self.tag(format!("{}{owner}", crate::call::quota::OWNER_TAG));
        self.owner = Some(owner);
        self
    }

    /// The partition of its queue this request belongs to (a tenant, an account): the
    /// queue's [`per_partition`](crate::QueueLimits::per_partition) limit counts the
    /// running requests of each partition apart, and the queue's claims take turns
    /// between partitions, so that one busy partition does not hold up the others.
    /// Replaces the attribute's `partition = ..`; without either, a call made with
    /// [`owner`](Self::owner) is in its owner's partition, and any other in none (all
    /// such requests of the queue share one partition). `SaveAsync` calls of an executor
    /// in a queue; 1 to 255 characters without NUL, else refused with
    /// [`Error::InvalidCall`] when the call is awaited.
    ///
    /// ```no_run
    /// # use async_exec::{async_exec, QueueLimits, Runtime};
    /// #[async_exec(type = SaveAsync, queue = "webhooks")]
    /// async fn deliver(tenant: i64, event: String) -> anyhow::Result<()> { Ok(()) }
    ///
    /// # async fn demo() -> async_exec::Result<()> {
    /// // At most 2 deliveries of each tenant run at once, 50 over all tenants.
    /// let rt = Runtime::builder()
    ///     .queue("webhooks", QueueLimits::new().concurrency(50).per_partition(2))
    ///     .start()
    ///     .await?;
    /// deliver(7, "paid".into()).partition("tenant-7").on(&rt).await?;
    /// # Ok(()) }
    /// ```
    pub fn partition(mut self, partition: impl Into<String>) -> Self {
        self.partition = Some(partition.into());
        self
    }

    /// Higher runs first among records claimed from the store (default 0).
    pub fn priority(mut self, priority: i32) -> Self {
        self.priority = priority;
        self
    }

    /// Submit through this runtime instead of the global one.
    pub fn on(mut self, runtime: &Runtime) -> Self {
        self.runtime = Some(runtime.clone());
        self
    }

    /// Submit inside the caller's transaction: the record is written with the caller's
    /// data, and nothing runs unless the transaction commits.
    pub fn within<DB: Backend>(self, tx: &mut Tx<DB>) -> CallIn<'_, DB> {
        CallIn { call: self, tx }
    }

    /// Submit on its own, outside any transaction, even when the calling task holds one:
    /// the call is written (or dispatched) now and **runs even if the caller's transaction
    /// rolls back**. Without it, a call awaited without `.within(&mut tx)` from a task that
    /// holds an open [`Tx`] of the runtime is refused with
    /// [`Error::BareCallInTransaction`], and one made inside
    /// [`Runtime::transaction`](crate::Runtime::transaction) joins that transaction.
    ///
    /// ```no_run
    /// # use async_exec::{async_exec, Runtime, Sqlite, Tx};
    /// #[async_exec(type = SaveAsync)]
    /// async fn audit(event: String) {}
    ///
    /// # async fn demo(rt: Runtime) -> async_exec::Result<()> {
    /// let tx: Tx<Sqlite> = rt.begin().await?;
    /// audit("login attempted".into()).independent().await?; // kept even if `tx` rolls back
    /// tx.rollback().await?;
    /// # Ok(()) }
    /// ```
    pub fn independent(mut self) -> Self {
        self.independent = true;
        self
    }

    /// The executor's stable name.
    pub fn executor(&self) -> &'static str {
        self.def.name
    }

    fn into_submission(self) -> Result<(Submission, Option<Runtime>)> {
        let executor = self.def.name;
        let params = self
            .params
            .map_err(|source| Error::Serialize { executor, source })?;
        let invalid = |option, reason: String| Error::InvalidCall {
            executor,
            option,
            reason,
        };
        if let Some(key) = &self.key {
            if key.is_empty() || key.len() > MAX_KEY_BYTES || key.contains('\0') {
                return Err(invalid(
                    "key",
                    format!("a key is 1 to {MAX_KEY_BYTES} bytes of UTF-8 without NUL"),
                ));
            }
        }
        if self.delay.is_some_and(|d| d > MAX_DURATION) {
            return Err(invalid(
                "delay",
                format!("at most {MAX_DURATION:?} (a year); schedule longer waits yourself"),
            ));
        }
        // The call's own deadline, else the attribute's.
        let deadline = self
            .deadline
            .or(self.def.deadline_ms.map(Duration::from_millis));
        if let Some(deadline) = deadline {
            let reason = if self.def.strategy != crate::base::strategy::Strategy::SaveAsync {
                Some(format!(
                    "only `SaveAsync` calls take a deadline; this executor's strategy is `{}`, \
                     whose body runs at once without a record to stop",
                    self.def.strategy.as_str()
                ))
            } else if deadline < Duration::from_millis(1) || deadline > MAX_DURATION {
                Some(format!("between 1ms and {MAX_DURATION:?} (a year)"))
            } else if self.delay.is_some_and(|delay| deadline <= delay) {
                Some(format!(
                    "longer than the call's delay ({:?}): the request could never start",
                    self.delay.unwrap_or_default()
                ))
            } else {
                None
            };
            if let Some(reason) = reason {
                return Err(invalid("deadline", reason));
            }
        }
        if let Some(owner) = &self.owner {
            let most = MAX_TAG_CHARS - crate::call::quota::OWNER_TAG.len();
            if owner.is_empty() || owner.chars().count() > most || owner.contains('\0') {
                return Err(invalid(
                    "owner",
                    format!("an owner is 1 to {most} characters without NUL"),
                ));
            }
        }
        if let Some(partition) = &self.partition {
            let reason = if self.def.strategy != crate::base::strategy::Strategy::SaveAsync {
                Some(format!(
                    "only `SaveAsync` calls have a partition; this executor's strategy is \
                     `{}`, which writes no record to claim",
                    self.def.strategy.as_str()
                ))
            } else if partition.is_empty()
                || partition.chars().count() > MAX_PARTITION_CHARS
                || partition.contains('\0')
            {
                Some(format!(
                    "a partition is 1 to {MAX_PARTITION_CHARS} characters without NUL"
                ))
            } else {
                None
            };
            if let Some(reason) = reason {
                return Err(invalid("partition", reason));
            }
        }
        if !self.tags.is_empty() {
            let reason = if self.def.strategy != crate::base::strategy::Strategy::SaveAsync {
                Some(format!(
                    "only `SaveAsync` calls take tags; this executor's strategy is `{}`, \
                     which writes no record at the call",
                    self.def.strategy.as_str()
                ))
            } else if self.tags.len() > MAX_TAGS {
                Some(format!("at most {MAX_TAGS} tags per call"))
            } else if let Some(tag) = self.tags.iter().find(|t| {
                t.starts_with(crate::call::quota::OWNER_TAG)
                    && self.owner.as_deref() != Some(&t[crate::call::quota::OWNER_TAG.len()..])
            }) {
                // An owner's tag is what its quota counts: only `.owner(..)` writes one, so
                // that a call cannot spend another owner's quota by naming it.
                let owner = &tag[crate::call::quota::OWNER_TAG.len()..];
                Some(format!(
                    "tags beginning with `{}` are kept for the call's owner: make the \
                     call with `.owner({owner:?})` instead of `.tag({tag:?})`",
                    crate::call::quota::OWNER_TAG
                ))
            } else if self
                .tags
                .iter()
                .any(|t| t.is_empty() || t.chars().count() > MAX_TAG_CHARS || t.contains('\0'))
            {
                Some(format!(
                    "a tag is 1 to {MAX_TAG_CHARS} characters without NUL"
                ))
            } else {
                None
            };
            if let Some(reason) = reason {
                return Err(invalid("tag", reason));
            }
        }
        let submission = Submission {
            def: self.def,
            params,
            key: self.key,
            delay: self.delay,
            deadline,
            tags: self.tags,
            partition: self.partition.or_else(|| self.owner.clone()),
            owner: self.owner,
            priority: self.priority,
            trace: TraceContext::capture(),
            sealed: false,
        };
        Ok((submission, self.runtime))
    }
}

impl IntoFuture for Call {
    type Output = Result<Receipt>;
    type IntoFuture = BoxFuture<'static, Result<Receipt>>;

    fn into_future(self) -> Self::IntoFuture {
        let independent = self.independent;
        let prepared = self.into_submission();
        Box::pin(async move {
            let (submission, runtime) = prepared?;
            let executor = submission.def.name;
            match Route::of(runtime, independent, executor)? {
                Route::Scope(scope) => scope.submit(submission).await,
                Route::Alone(runtime) => runtime.inner.submit(submission).await,
            }
        })
    }
}

/// Where a call awaited without `.within(&mut tx)` goes.
enum Route {
    /// Into the [`Runtime::transaction`](crate::Runtime::transaction) scope of this task.
    Scope(std::sync::Arc<crate::call::scope::Scope>),
    /// On its own (autocommit).
    Alone(Runtime),
}

impl Route {
    /// The call's runtime is the one it names with `.on(&rt)`, else that of the scope this
    /// task is in, else the global one. A call of the scope's runtime joins the scope
    /// unless it is independent; outside a scope, one made from a task that holds an open
    /// `Tx` of its runtime is refused unless it is independent.
    fn of(runtime: Option<Runtime>, independent: bool, executor: &'static str) -> Result<Route> {
        let scope = crate::call::scope::current();
        let runtime = runtime
            .or_else(|| scope.as_ref().map(|s| s.runtime()))
            .or_else(global)
            .ok_or(Error::NoRuntime)?;
        if independent {
            return Ok(Route::Alone(runtime));
        }
        if let Some(scope) = scope.filter(|s| s.is_of(&runtime)) {
            return Ok(Route::Scope(scope));
        }
        if runtime.inner.open_txs.held_here() {
            return Err(Error::BareCallInTransaction { executor });
        }
        Ok(Route::Alone(runtime))
    }
}

/// A call inside the caller's transaction; `.await` it to write its record there.
#[must_use = "a call does nothing until it is `.await`ed"]
#[derive(Debug)]
pub struct CallIn<'t, DB: Backend> {
    call: Call,
    tx: &'t mut Tx<DB>,
}

impl<'t, DB: Backend> IntoFuture for CallIn<'t, DB> {
    type Output = Result<Receipt>;
    type IntoFuture = BoxFuture<'t, Result<Receipt>>;

    fn into_future(self) -> Self::IntoFuture {
        let prepared = self.call.into_submission();
        let tx = self.tx;
        Box::pin(async move {
            let (submission, _) = prepared?;
            let inner = tx.inner.clone();
            inner.submit_in(submission, tx).await
        })
    }
}

/// Many calls submitted together: the records of `SaveAsync` calls are written with
/// multi-row statements, in one transaction (the caller's, with `.within(&mut tx)`).
/// `.await` returns one [`Receipt`] per call, in order.
///
/// ```no_run
/// # use async_exec::{async_exec, Runtime, Sqlite, Tx};
/// # #[async_exec(type = SaveAsync)]
/// # async fn index_page(n: i64) -> anyhow::Result<()> { Ok(()) }
/// # async fn demo(rt: Runtime) -> async_exec::Result<()> {
/// let mut tx: Tx<Sqlite> = rt.begin().await?;
/// let receipts = async_exec::batch((0..1000).map(index_page)).within(&mut tx).await?;
/// assert_eq!(receipts.len(), 1000);
/// tx.commit().await?;
/// # Ok(()) }
/// ```
pub fn batch(calls: impl IntoIterator<Item = Call>) -> Batch {
    Batch {
        calls: calls.into_iter().collect(),
        runtime: None,
        independent: false,
    }
}

/// Calls to submit together; see [`batch`].
#[must_use = "a batch does nothing until it is `.await`ed"]
#[derive(Debug)]
pub struct Batch {
    calls: Vec<Call>,
    runtime: Option<Runtime>,
    independent: bool,
}

impl Batch {
    /// Submit through this runtime instead of the global one.
    pub fn on(mut self, runtime: &Runtime) -> Self {
        self.runtime = Some(runtime.clone());
        self
    }

    /// Submit inside the caller's transaction.
    pub fn within<DB: Backend>(self, tx: &mut Tx<DB>) -> BatchIn<'_, DB> {
        BatchIn { batch: self, tx }
    }

    /// Submit on its own, outside any transaction, even when the calling task holds one;
    /// see [`Call::independent`].
    pub fn independent(mut self) -> Self {
        self.independent = true;
        self
    }

    fn into_submissions(self) -> Result<(Vec<Submission>, Option<Runtime>)> {
        let submissions = self
            .calls
            .into_iter()
            .map(|call| call.into_submission().map(|(submission, _)| submission))
            .collect::<Result<Vec<_>>>()?;
        Ok((submissions, self.runtime))
    }
}

impl IntoFuture for Batch {
    type Output = Result<Vec<Receipt>>;
    type IntoFuture = BoxFuture<'static, Result<Vec<Receipt>>>;

    fn into_future(self) -> Self::IntoFuture {
        let first_runtime = self.calls.iter().find_map(|c| c.runtime.clone());
        let independent = self.independent;
        let executor = self.calls.first().map_or("(empty batch)", |c| c.def.name);
        let prepared = self.into_submissions();
        Box::pin(async move {
            let (submissions, runtime) = prepared?;
            match Route::of(runtime.or(first_runtime), independent, executor)? {
                Route::Scope(scope) => scope.submit_batch(submissions).await,
                Route::Alone(runtime) => runtime.inner.submit_batch(submissions).await,
            }
        })
    }
}

/// A batch inside the caller's transaction; `.await` it to write its records there.
#[must_use = "a batch does nothing until it is `.await`ed"]
#[derive(Debug)]
pub struct BatchIn<'t, DB: Backend> {
    batch: Batch,
    tx: &'t mut Tx<DB>,
}

impl<'t, DB: Backend> IntoFuture for BatchIn<'t, DB> {
    type Output = Result<Vec<Receipt>>;
    type IntoFuture = BoxFuture<'t, Result<Vec<Receipt>>>;

    fn into_future(self) -> Self::IntoFuture {
        let prepared = self.batch.into_submissions();
        let tx = self.tx;
        Box::pin(async move {
            let (submissions, _) = prepared?;
            let inner = tx.inner.clone();
            inner.submit_batch_in(submissions, tx).await
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::base::registry::tests_support::def_with_secrets;

    static CHARGE: ExecutorDef = def_with_secrets("billing::charge", &["card"]);

    #[test]
    fn debug_output_hides_secret_arguments() {
        let call = Call::__new(&CHARGE, &serde_json::json!({"card": "4242", "amount": 5}));
        let debug = format!("{call:?}");
        assert!(!debug.contains("4242"), "{debug}");
        assert!(debug.contains("amount") && debug.contains("•••"), "{debug}");
        let (submission, _) = call.into_submission().unwrap();
        let debug = format!("{submission:?}");
        assert!(!debug.contains("4242"), "{debug}");
        let debug = format!(
            "{:?}",
            batch([Call::__new(&CHARGE, &serde_json::json!({"card": "4242"}))])
        );
        assert!(!debug.contains("4242"), "{debug}");
    }
}

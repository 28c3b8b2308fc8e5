//! `Context`: what an executor body may know about the execution it is part of.

use std::sync::Arc;

use crate::base::record::RequestId;

/// Where stored executions' progress goes: one per executor, shared by every context
/// (an `Arc` clone per job, no allocation).
pub(crate) trait ProgressSink: Send + Sync {
    /// Records `done` of `total` for attempt `attempt` of record `id`, unless one was
    /// written for it less than a second ago (`done >= total` is always written).
    fn report(
        &self,
        id: RequestId,
        attempt: u32,
        done: u64,
        total: u64,
    ) -> std::pin::Pin<Box<dyn std::future::Future<Output = ()> + Send + '_>>;
}

/// A [`ProgressSink`], shared by the clones of a [`Context`].
#[derive(Clone)]
pub(crate) struct ProgressTo(pub(crate) Arc<dyn ProgressSink>);

impl std::fmt::Debug for ProgressTo {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("ProgressTo(..)")
    }
}

/// Facts about the current execution, injected into a body that declares a `Context`
/// parameter. Use [`Context::request_id`] to make side effects idempotent: a request may
/// run more than once (at-least-once delivery), but always under the same id.
///
/// ```
/// use async_exec::{async_exec, Context};
/// # mod payments {
/// #     pub async fn charge(order: i64, key: Option<i64>) -> anyhow::Result<()> { Ok(()) }
/// # }
///
/// #[async_exec(type = SaveAsync)]
/// async fn charge(order: i64, ctx: Context) -> anyhow::Result<()> {
///     payments::charge(order, /* idempotency key */ ctx.request_id()).await
/// }
/// ```
#[derive(Debug, Clone)]
pub struct Context {
    pub(crate) request_id: Option<RequestId>,
    pub(crate) attempt: u32,
    pub(crate) executor: &'static str,
    pub(crate) baggage: Vec<(String, String)>,
    /// The request's idempotency key, if it has one.
    pub(crate) key: Option<String>,
    pub(crate) lease_lost: tokio_util::sync::CancellationToken,
    /// Where [`Context::progress`] writes; `None` for an execution without a record.
    pub(crate) progress: Option<ProgressTo>,
}

impl Context {
    /// The id of the request record, or `None` when nothing was persisted
    /// (the `Async`, `AsyncSave` and `Thread` strategies before a failure, and the
    /// inline first run of `SyncSave`).
    pub fn request_id(&self) -> Option<RequestId> {
        self.request_id
    }

    /// The attempt number, starting at 1.
    pub fn attempt(&self) -> u32 {
        self.attempt
    }

    /// The executor's stable name.
    pub fn executor(&self) -> &'static str {
        self.executor
    }

    /// The request's idempotency key (`.key(..)` on the call), if it has one.
    pub fn key(&self) -> Option<&str> {
        self.key.as_deref()
    }

    /// For a scheduled executor (`every = ...`, `cron = ...`), the tick this request is
    /// for (unix ms): the time it was scheduled at, the same whichever instance made it.
    /// `None` for a request not made by its schedule.
    ///
    /// ```
    /// # use async_exec::{async_exec, Context};
    /// #[async_exec(type = SaveAsync, cron = "0 0 6 1 * *")] // 06:00 UTC, each first of the month
    /// async fn monthly_invoices(ctx: Context) -> anyhow::Result<()> {
    ///     let month_of = ctx.tick().expect("called by its schedule");
    ///     // ... invoice the month before `month_of` ...
    ///     Ok(())
    /// }
    /// ```
    pub fn tick(&self) -> Option<i64> {
        crate::base::schedule::tick_of(self.executor, self.key.as_deref()?)
    }

    /// The caller's baggage (see [`with_baggage`](crate::with_baggage)) captured at the call.
    pub fn baggage(&self, key: &str) -> Option<&str> {
        self.baggage
            .iter()
            .find(|(k, _)| k == key)
            .map(|(_, v)| v.as_str())
    }

    /// Reports how far the body got: `done` of `total`, in its own units (rows, files,
    /// pages). Shown by `rt.get` (`Request::progress`), the API, the CLI's `show` and the
    /// console while the request runs. Written to the record at most once a second (the
    /// last report, `done == total`, always), so call it as often as is convenient; a
    /// write that fails is logged, never the body's error. Nothing is written for an
    /// execution without a record.
    ///
    /// ```
    /// # use async_exec::{async_exec, Context};
    /// #[async_exec(type = SaveAsync)]
    /// async fn export(rows: Vec<i64>, ctx: Context) -> anyhow::Result<()> {
    ///     let total = rows.len() as u64;
    ///     for (i, row) in rows.iter().enumerate() {
    ///         // ... export `row` ...
    ///         ctx.progress(i as u64 + 1, total).await;
    ///     }
    ///     Ok(())
    /// }
    /// ```
    pub async fn progress(&self, done: u64, total: u64) {
        if let (Some(sink), Some(id)) = (&self.progress, self.request_id) {
            sink.0.report(id, self.attempt, done, total).await;
        }
    }

    /// Whether this execution should stop: its record's lease could not be renewed (the
    /// database was unreachable for longer than the lease, or another instance took the
    /// record over), so the record may run elsewhere. If another instance took it over,
    /// whatever this body returns is not written (the outcome is fenced); stop side
    /// effects where you can.
    /// Never true for an execution without a record.
    pub fn is_cancelled(&self) -> bool {
        self.lease_lost.is_cancelled()
    }

    /// Completes when [`Context::is_cancelled`] becomes true; never for an execution
    /// without a record. Race it against long work:
    ///
    /// ```
    /// # async fn demo(ctx: async_exec::Context) {
    /// # let long_export = async {};
    /// tokio::select! {
    ///     _ = long_export => {}
    ///     _ = ctx.cancelled() => { /* the record may run elsewhere: stop here */ }
    /// }
    /// # }
    /// ```
    pub async fn cancelled(&self) {
        self.lease_lost.cancelled().await
    }
}

//! `Context`: what an executor body may know about the execution it is part of.

use std::sync::Arc;

use crate::base::record::RequestId;

/// The longest step name, in characters: the width of `async_step.name`.
const MAX_STEP_NAME_CHARS: usize = 255;

/// Where stored executions' progress and durable steps go: one per executor, shared by
/// every context (an `Arc` clone per job, no allocation).
pub(crate) trait ProgressSink: Send + Sync {
    /// The finished steps of record `id`, in their order.
    fn steps(
        &self,
        id: RequestId,
    ) -> std::pin::Pin<
        Box<
            dyn std::future::Future<Output = crate::Result<Vec<crate::store::steps::StoredStep>>>
                + Send
                + '_,
        >,
    >;

    /// Keeps a finished step of attempt `attempt` of record `id` (`false`: the record is
    /// no longer this attempt's).
    fn keep_step<'a>(
        &'a self,
        id: RequestId,
        attempt: u32,
        position: i64,
        name: &'a str,
        value_json: &'a str,
    ) -> std::pin::Pin<Box<dyn std::future::Future<Output = crate::Result<bool>> + Send + 'a>>;

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
    /// This execution's durable steps (see [`Context::step`]), shared by its clones.
    pub(crate) steps: Arc<tokio::sync::Mutex<Steps>>,
}

/// The durable steps of one execution: those kept by earlier attempts (read on the
/// first step), and how many this execution has passed.
#[derive(Debug, Default)]
pub(crate) struct Steps {
    stored: Option<Vec<crate::store::steps::StoredStep>>,
    passed: i64,
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

    /// Runs a durable step of the body: `work` runs and its value (serde) is kept with
    /// the request; when the request runs again (a retry after a failure, a crash or a
    /// lost lease), a step an earlier attempt finished is not run again: its kept value is
    /// returned. So a body of three steps that fails in the second runs the second and the
    /// third again, not the first.
    ///
    /// Steps are matched by their order in the body and checked by name: a body whose
    /// steps changed order or names since a step was kept fails for good
    /// ([`Final`](crate::Final)), saying which. A step's value is kept only if the record
    /// is still this attempt's (its lease held): otherwise the step returns an error and
    /// the body should stop. A step that fails keeps nothing (it runs again next time), nor
    /// does one whose value could not be written (an error: the body fails and retries).
    /// A step's name is 1 to 255 characters without NUL: another is refused for good
    /// before `work` runs (with a record; its value could not be kept).
    /// Without a record (`Async`, `Thread`, the first run of `SyncSave` and `AsyncSave`)
    /// `work` just runs. The steps of one execution run one after the other: a step
    /// started while another runs (two in a `join!`) waits for it.
    ///
    /// ```
    /// # use async_exec::{async_exec, Context};
    /// # async fn charge_card(order: i64) -> anyhow::Result<String> { Ok(format!("ch_{order}")) }
    /// # async fn mail_receipt(charge: &str) -> anyhow::Result<()> { Ok(()) }
    /// #[async_exec(type = SaveAsync)]
    /// async fn checkout(order: i64, ctx: Context) -> anyhow::Result<()> {
    ///     // Charged once: a retry after the mail failed reads the charge id back.
    ///     let charge: String = ctx.step("charge", || charge_card(order)).await?;
    ///     ctx.step("receipt", || mail_receipt(&charge)).await?;
    ///     Ok(())
    /// }
    /// ```
    pub async fn step<T, E, F, Fut>(&self, name: &str, work: F) -> anyhow::Result<T>
    where
        T: serde::Serialize + serde::de::DeserializeOwned,
        E: Into<anyhow::Error>,
        F: FnOnce() -> Fut,
        Fut: std::future::Future<Output = Result<T, E>>,
    {
        let (Some(sink), Some(id)) = (&self.progress, self.request_id) else {
            return work().await.map_err(Into::into);
        };
        // Refused before its work runs: a name the database cannot keep would leave the
        // step unkept, and its work run again by every attempt.
        let chars = name.chars().count();
        if chars == 0 || chars > MAX_STEP_NAME_CHARS || name.contains('\0') {
            return Err(crate::Final::new(format!(
                "step name `{}` is {chars} characters: a step's name is 1 to \
                 {MAX_STEP_NAME_CHARS} characters without NUL (the column that keeps it); \
                 its work did not run",
                name.chars()
                    .take(40)
                    .collect::<String>()
                    .replace('\0', "\\0")
            ))
            .into());
        }
        // Held for the whole step: steps of one execution run one after the other.
        let mut steps = self.steps.lock().await;
        if steps.stored.is_none() {
            steps.stored = Some(sink.0.steps(id).await?);
        }
        let position = steps.passed;
        let kept = steps
            .stored
            .as_ref()
            .and_then(|stored| stored.iter().find(|s| s.position == position));
        if let Some(kept) = kept {
            if kept.name != name {
                return Err(crate::Final::new(format!(
                    "the body's steps changed: step {} was `{}` when it was kept and is \
                     `{name}` now; a request that kept steps must run them in the same \
                     order (replay it from the start by deleting and calling it again)",
                    position + 1,
                    kept.name
                ))
                .into());
            }
            let value = serde_json::from_str(&kept.value_json).map_err(|e| {
                crate::Final::new(format!(
                    "step `{name}`'s kept value does not decode into the type asked for: {e}"
                ))
            })?;
            steps.passed += 1;
            return Ok(value);
        }
        let value = work().await.map_err(Into::into)?;
        let json = serde_json::to_string(&value)
            .map_err(|e| anyhow::anyhow!("step `{name}`'s value does not serialize: {e}"))?;
        if !sink
            .0
            .keep_step(id, self.attempt, position, name, &json)
            .await?
        {
            anyhow::bail!(
                "step `{name}` finished but was not kept: the request is no longer this \
                 attempt's (its lease was lost); stop"
            );
        }
        steps.passed += 1;
        Ok(value)
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

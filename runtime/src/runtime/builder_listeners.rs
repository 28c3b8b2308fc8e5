//! The builder's outcome listeners: `on_success`, `on_retry`, `on_dead` and their async
//! kin.

use std::sync::Arc;

use crate::operate::listeners::OutcomeEvent;

use super::Builder;

impl Builder {
    /// Calls `listener` after each successful attempt's outcome is written (the record
    /// deleted, or marked `success`); never for an attempt whose write was fenced off
    /// because its lease had expired.
    ///
    /// Listeners are plain functions: they run one after the other on a thread of their
    /// own, fed by a queue of [`LISTENER_QUEUE`](crate::LISTENER_QUEUE) events, so a slow
    /// one never holds up the runtime's writes; when the queue is full, events are dropped
    /// and counted ([`Runtime::listener_drops`](crate::Runtime::listener_drops), the
    /// `async_exec_listener_dropped_total` counter). A listener that panics is logged and
    /// called again for the next event. For async work, use
    /// [`on_success_async`](Builder::on_success_async) and its kin. Delivery is at most once:
    /// events still queued when the process ends are lost. The event carries the request's
    /// key, remark, application and the caller's baggage, so that a listener need not
    /// read the record back (a success deletes it by default). Only outcomes known to be
    /// written get an event: an attempt fenced off gets none, the others of its batch get
    /// theirs (on SQLite, one rare case stays unknown: see `async_exec_runtime::listeners`).
    ///
    /// ```no_run
    /// # async fn demo() -> async_exec::Result<()> {
    /// use async_exec::{OutcomeEvent, Runtime};
    /// let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel::<OutcomeEvent>();
    /// let rt = Runtime::builder()
    ///     .on_success(|event| {
    ///         tracing::info!(id = event.id, executor = event.executor, key = ?event.key, "done")
    ///     })
    ///     .on_dead(move |event| drop(tx.send(event.clone())))
    ///     .start()
    ///     .await?;
    /// tokio::spawn(async move {
    ///     while let Some(dead) = rx.recv().await {
    ///         eprintln!("request {} is dead: {:?}", dead.id, dead.error);
    ///     }
    /// });
    /// # Ok(()) }
    /// ```
    pub fn on_success(mut self, listener: impl Fn(&OutcomeEvent) + Send + Sync + 'static) -> Self {
        self.listeners.success.push(Arc::new(listener));
        self
    }

    /// Calls `listener` after a failed attempt is written `failed`, to run again after its
    /// backoff; the event carries the error. Runs as [`on_success`](Builder::on_success)
    /// listeners do.
    ///
    /// ```no_run
    /// # async fn demo() -> async_exec::Result<()> {
    /// let rt = async_exec::Runtime::builder()
    ///     .on_retry(|event| eprintln!("attempt {} of {} failed: {:?}", event.attempt, event.id, event.error))
    ///     .start()
    ///     .await?;
    /// # Ok(()) }
    /// ```
    pub fn on_retry(mut self, listener: impl Fn(&OutcomeEvent) + Send + Sync + 'static) -> Self {
        self.listeners.retry.push(Arc::new(listener));
        self
    }

    /// Calls `listener` after a request is written `dead`: a final error, a failure on its
    /// last attempt, or (from the rescuer) a lease that expired on its last attempt. Runs
    /// as [`on_success`](Builder::on_success) listeners do.
    ///
    /// ```no_run
    /// # async fn demo() -> async_exec::Result<()> {
    /// let rt = async_exec::Runtime::builder()
    ///     .on_dead(|event| eprintln!("{} gave up on {}: {:?}", event.executor, event.id, event.error))
    ///     .start()
    ///     .await?;
    /// # Ok(()) }
    /// ```
    pub fn on_dead(mut self, listener: impl Fn(&OutcomeEvent) + Send + Sync + 'static) -> Self {
        self.listeners.dead.push(Arc::new(listener));
        self
    }

    /// Calls the async function `listener` after each successful attempt's outcome is
    /// written, as [`on_success`](Builder::on_success) calls a plain one: with the event
    /// itself (owned), as a task on the tokio runtime the runtime was started on.
    ///
    /// Each async listener has a queue of its own of
    /// [`LISTENER_QUEUE`](crate::LISTENER_QUEUE) events; when it is full (the listener is
    /// slower than the outcomes, or hangs) events are dropped for it and counted
    /// ([`Runtime::listener_drops`](crate::Runtime::listener_drops)). Up to
    /// [`ASYNC_LISTENER_CALLS`](crate::ASYNC_LISTENER_CALLS) calls of one listener run at
    /// once, in no set order; a call not ended after
    /// [`ASYNC_LISTENER_TIMEOUT`](crate::ASYNC_LISTENER_TIMEOUT) is dropped and logged; a
    /// panic is caught and logged. No outcome write waits for a listener. Delivery is at
    /// most once: events queued or running when the process ends are lost.
    ///
    /// ```no_run
    /// # async fn demo(metrics: sqlx::PgPool) -> async_exec::Result<()> {
    /// let rt = async_exec::Runtime::builder()
    ///     .on_success_async(move |event| {
    ///         let metrics = metrics.clone();
    ///         async move {
    ///             let _ = sqlx::query("UPDATE totals SET done = done + 1 WHERE executor = $1")
    ///                 .bind(event.executor)
    ///                 .execute(&metrics)
    ///                 .await;
    ///         }
    ///     })
    ///     .start()
    ///     .await?;
    /// # Ok(()) }
    /// ```
    pub fn on_success_async<F, Fut>(mut self, listener: F) -> Self
    where
        F: Fn(OutcomeEvent) -> Fut + Send + Sync + 'static,
        Fut: std::future::Future<Output = ()> + Send + 'static,
    {
        self.listeners.tasks[0].push(crate::operate::listeners::boxed(listener));
        self
    }

    /// Calls the async function `listener` after a failed attempt is written `failed`
    /// (or a body snoozed), as [`on_retry`](Builder::on_retry) calls a plain one; runs as
    /// [`on_success_async`](Builder::on_success_async) listeners do.
    ///
    /// ```no_run
    /// # async fn demo() -> async_exec::Result<()> {
    /// let rt = async_exec::Runtime::builder()
    ///     .on_retry_async(|event| async move {
    ///         tracing::warn!(id = event.id, attempt = event.attempt, error = ?event.error, "retrying");
    ///     })
    ///     .start()
    ///     .await?;
    /// # Ok(()) }
    /// ```
    pub fn on_retry_async<F, Fut>(mut self, listener: F) -> Self
    where
        F: Fn(OutcomeEvent) -> Fut + Send + Sync + 'static,
        Fut: std::future::Future<Output = ()> + Send + 'static,
    {
        self.listeners.tasks[1].push(crate::operate::listeners::boxed(listener));
        self
    }

    /// Calls the async function `listener` after a request is written `dead` (or
    /// `cancelled` while it ran), as [`on_dead`](Builder::on_dead) calls a plain one; runs
    /// as [`on_success_async`](Builder::on_success_async) listeners do. Marking the order
    /// of a payment that gave up as failed, in the database:
    ///
    /// ```no_run
    /// # async fn demo(pool: sqlx::PgPool) -> async_exec::Result<()> {
    /// let rt = async_exec::Runtime::builder()
    ///     .on_dead_async(move |event| {
    ///         let pool = pool.clone();
    ///         async move {
    ///             if event.executor != "billing::charge" {
    ///                 return;
    ///             }
    ///             let Some(order) = event.key.as_deref() else { return };
    ///             let marked = sqlx::query("UPDATE orders SET state = 'payment_failed' WHERE key = $1")
    ///                 .bind(order)
    ///                 .execute(&pool)
    ///                 .await;
    ///             if let Err(error) = marked {
    ///                 tracing::error!(%error, order, "could not mark the order failed");
    ///             }
    ///         }
    ///     })
    ///     .start()
    ///     .await?;
    /// # Ok(()) }
    /// ```
    pub fn on_dead_async<F, Fut>(mut self, listener: F) -> Self
    where
        F: Fn(OutcomeEvent) -> Fut + Send + Sync + 'static,
        Fut: std::future::Future<Output = ()> + Send + 'static,
    {
        self.listeners.tasks[2].push(crate::operate::listeners::boxed(listener));
        self
    }
}

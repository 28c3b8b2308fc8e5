//! Async outcome listeners ([`Builder::on_success_async`](crate::Builder::on_success_async),
//! `on_retry_async`, `on_dead_async`): async functions of an owned [`OutcomeEvent`], run
//! as tasks on the tokio runtime the async-exec runtime was started on.
//!
//! Each listener has a queue of its own of [`LISTENER_QUEUE`] events, filled without
//! waiting by the completer and the rescuer (through the notifier); when it is full (the
//! listener is slower than the outcomes, or hangs), the event is dropped for that listener,
//! counted and logged, as for the plain listeners. Up to [`ASYNC_LISTENER_CALLS`] calls of
//! one listener run at once; a call that has not ended after [`ASYNC_LISTENER_TIMEOUT`] is
//! dropped (the future is, at its next `.await`) and logged; a panic is caught and
//! logged. None of it holds up the runtime: no outcome write waits for a listener.

use std::panic::AssertUnwindSafe;
use std::sync::Arc;
use std::time::Duration;

use futures_util::stream::{FuturesUnordered, StreamExt};
use futures_util::FutureExt;
use tokio::sync::mpsc;

use super::{OutcomeEvent, LISTENER_QUEUE};
use crate::base::registry::BoxFuture;
use crate::base::supervise::panic_text;

/// Calls of one async listener running at once, at most.
pub const ASYNC_LISTENER_CALLS: usize = 16;

/// How long a call of an async listener may take before it is given up.
pub const ASYNC_LISTENER_TIMEOUT: Duration = Duration::from_secs(60);

/// An async listener: a function of the event that returns the future to run.
pub(crate) type AsyncListener = Arc<dyn Fn(OutcomeEvent) -> BoxFuture<'static, ()> + Send + Sync>;

/// Boxes an async function of the event as an [`AsyncListener`].
pub(crate) fn boxed<F, Fut>(listener: F) -> AsyncListener
where
    F: Fn(OutcomeEvent) -> Fut + Send + Sync + 'static,
    Fut: std::future::Future<Output = ()> + Send + 'static,
{
    Arc::new(move |event| Box::pin(listener(event)))
}

/// Starts the task of `listener` on `runtime`; returns the sending side of its queue.
/// The task ends once the sending side is dropped (with the runtime) and the calls it
/// began have ended.
pub(crate) fn start(
    listener: AsyncListener,
    runtime: &tokio::runtime::Handle,
) -> mpsc::Sender<OutcomeEvent> {
    let (queue, mut events) = mpsc::channel::<OutcomeEvent>(LISTENER_QUEUE);
    runtime.spawn(async move {
        let mut running = FuturesUnordered::new();
        loop {
            tokio::select! {
                event = events.recv(), if running.len() < ASYNC_LISTENER_CALLS => match event {
                    Some(event) => running.push(call(listener.clone(), event)),
                    None => break,
                },
                Some(()) = running.next(), if !running.is_empty() => {}
            }
        }
        while running.next().await.is_some() {}
    });
    queue
}

/// One call of `listener`, bounded in time, its panic caught.
async fn call(listener: AsyncListener, event: OutcomeEvent) {
    let (id, kind, executor) = (event.id, event.kind, event.executor);
    let future = match std::panic::catch_unwind(AssertUnwindSafe(|| listener(event))) {
        Ok(future) => future,
        Err(panic) => {
            crate::log::error!(id, ?kind, executor, panic = %crate::log::escaped(&panic_text(&*panic)),
                "an async outcome listener panicked; it is called again for the next event");
            return;
        }
    };
    match tokio::time::timeout(
        ASYNC_LISTENER_TIMEOUT,
        AssertUnwindSafe(future).catch_unwind(),
    )
    .await
    {
        Ok(Ok(())) => {}
        Ok(Err(panic)) => {
            crate::log::error!(id, ?kind, executor, panic = %crate::log::escaped(&panic_text(&*panic)),
                "an async outcome listener panicked; it is called again for the next event");
        }
        Err(_) => crate::log::error!(
            id,
            ?kind,
            executor,
            "an async outcome listener did not end within {ASYNC_LISTENER_TIMEOUT:?}: given up"
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::super::{ListenerSet, Notifier, OutcomeKind};
    use super::*;
    use crate::base::outcome::Subject;
    use std::sync::Mutex;

    fn event(id: i64) -> OutcomeEvent {
        Notifier::default().event(OutcomeKind::Dead, id, "x", 1, None, Subject::default())
    }

    /// A listener that hangs on every event: it fills its own queue, and what does not
    /// fit is dropped and counted; a call that does not end is given up after the
    /// timeout, which frees its place for the next event.
    #[tokio::test(flavor = "current_thread", start_paused = true)]
    async fn a_hanging_async_listener_fills_its_own_queue_and_is_given_up_in_time() {
        let started = Arc::new(Mutex::new(Vec::new()));
        let seen = started.clone();
        let mut set = ListenerSet::default();
        set.tasks[2].push(boxed(move |event: OutcomeEvent| {
            seen.lock().unwrap().push(event.id);
            std::future::pending::<()>()
        }));
        let notifier = Notifier::start(set, Arc::from("test")).unwrap();
        assert!(notifier.wants(OutcomeKind::Dead) && !notifier.wants(OutcomeKind::Success));
        // The listener's task has not run yet (one thread, no await): its queue takes
        // LISTENER_QUEUE events and the rest are dropped.
        let sent = LISTENER_QUEUE + ASYNC_LISTENER_CALLS + 5;
        for id in 0..sent as i64 {
            notifier.send(event(id));
        }
        assert_eq!(notifier.dropped(), (sent - LISTENER_QUEUE) as u64);
        tokio::time::sleep(Duration::from_secs(1)).await;
        assert_eq!(started.lock().unwrap().len(), ASYNC_LISTENER_CALLS);
        // Given up at the timeout: the next calls begin.
        tokio::time::sleep(ASYNC_LISTENER_TIMEOUT).await;
        assert_eq!(started.lock().unwrap().len(), 2 * ASYNC_LISTENER_CALLS);
        let started = started.lock().unwrap().clone();
        let expected: Vec<i64> = (0..2 * ASYNC_LISTENER_CALLS as i64).collect();
        assert_eq!(started, expected, "in the order of the queue");
    }

    /// A panic, when the function is called or while its future runs, is caught: the
    /// next events are heard.
    #[tokio::test(flavor = "current_thread")]
    async fn a_panicking_async_listener_hears_the_next_events() {
        let heard = Arc::new(Mutex::new(Vec::new()));
        let seen = heard.clone();
        let mut set = ListenerSet::default();
        set.tasks[2].push(boxed(move |event: OutcomeEvent| {
            if event.id == 1 {
                panic!("panics when called");
            }
            let seen = seen.clone();
            async move {
                if event.id == 2 {
                    panic!("panics while it runs");
                }
                seen.lock().unwrap().push(event.id);
            }
        }));
        let notifier = Notifier::start(set, Arc::from("test")).unwrap();
        for id in 1..=4 {
            notifier.send(event(id));
        }
        for _ in 0..100 {
            if heard.lock().unwrap().len() == 2 {
                break;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        let mut heard = heard.lock().unwrap().clone();
        heard.sort_unstable();
        assert_eq!(heard, [3, 4]);
        assert_eq!(notifier.dropped(), 0);
    }
}

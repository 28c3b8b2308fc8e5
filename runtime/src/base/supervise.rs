//! Keeps the runtime's background parts alive: a part that panics is logged at ERROR and
//! started again (after a short, growing pause), never left silently dead. A part that is
//! a sweep (the heartbeat) counts its panic as a failed round
//! (`async_exec_sweep_failures_total{sweep}`).

use std::future::Future;
use std::panic::AssertUnwindSafe;
use std::sync::Arc;
use std::time::Duration;

use futures_util::FutureExt;
use tokio::sync::Mutex;

use crate::operate::metrics::Sweep;

/// Runs `run` on `state` until it returns; when it panics, logs the panic and runs it
/// again on the same state. The state (a part's channel receiver, say) outlives the
/// panic: it is held in a mutex that is not poisoned by unwinding.
pub(crate) async fn supervised<S, F, Fut>(part: &'static str, state: S, run: F)
where
    S: Send + 'static,
    F: FnMut(Arc<Mutex<S>>) -> Fut,
    Fut: Future<Output = ()>,
{
    supervise(part, None, state, run).await
}

/// [`supervised`], for a part that is a sweep: each panic is also a failed round of
/// `sweep`.
pub(crate) async fn supervised_sweep<S, F, Fut>(sweep: Sweep, state: S, run: F)
where
    S: Send + 'static,
    F: FnMut(Arc<Mutex<S>>) -> Fut,
    Fut: Future<Output = ()>,
{
    supervise(sweep.as_str(), Some(sweep), state, run).await
}

async fn supervise<S, F, Fut>(part: &'static str, sweep: Option<Sweep>, state: S, mut run: F)
where
    S: Send + 'static,
    F: FnMut(Arc<Mutex<S>>) -> Fut,
    Fut: Future<Output = ()>,
{
    let state = Arc::new(Mutex::new(state));
    let mut restarts: u32 = 0;
    loop {
        match AssertUnwindSafe(run(state.clone())).catch_unwind().await {
            Ok(()) => return,
            Err(panic) => {
                if let Some(sweep) = sweep {
                    crate::operate::metrics::sweep_failed(sweep);
                }
                restarts = restarts.saturating_add(1);
                let pause = restart_pause(restarts);
                crate::log::error!(
                    part,
                    panic = %crate::log::escaped(&panic_text(&*panic)),
                    restarts,
                    ?pause,
                    "a runtime part panicked; restarting it"
                );
                tokio::time::sleep(pause).await;
            }
        }
    }
}

/// 100 ms after the first panic, doubling up to 5 s.
fn restart_pause(restarts: u32) -> Duration {
    Duration::from_millis(100)
        .saturating_mul(1 << restarts.saturating_sub(1).min(6))
        .min(Duration::from_secs(5))
}

/// The message of a panic payload.
pub(crate) fn panic_text(panic: &(dyn std::any::Any + Send)) -> String {
    panic
        .downcast_ref::<&str>()
        .map(|s| s.to_string())
        .or_else(|| panic.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "a panic with a non-string payload".into())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicU32, Ordering};

    #[tokio::test]
    async fn a_part_that_panics_is_restarted_with_its_state() {
        let runs = Arc::new(AtomicU32::new(0));
        let counted = runs.clone();
        tokio::time::timeout(
            Duration::from_secs(5),
            supervised("test", vec![1, 2, 3], move |state| {
                let runs = counted.clone();
                async move {
                    let mut items = state.lock().await;
                    let run = runs.fetch_add(1, Ordering::SeqCst);
                    items.pop();
                    if run < 2 {
                        panic!("run {run} fails");
                    }
                }
            }),
        )
        .await
        .expect("the part ends after its panics");
        assert_eq!(runs.load(Ordering::SeqCst), 3);
    }

    /// The heartbeat's panic is a failed round of it; another part's is no sweep's.
    #[test]
    fn a_sweep_part_that_panics_is_counted_as_a_failed_round() {
        let counting = crate::operate::metrics::counting::Counting::default();
        metrics::with_local_recorder(&counting, || {
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_time()
                .start_paused(true)
                .build()
                .unwrap();
            rt.block_on(async {
                let fails_once = |state: Arc<Mutex<u32>>| async move {
                    let mut runs = state.lock().await;
                    *runs += 1;
                    if *runs == 1 {
                        panic!("the first run fails");
                    }
                };
                supervised_sweep(Sweep::Heartbeat, 0u32, fails_once).await;
                supervised("producer", 0u32, fails_once).await;
            });
        });
        assert_eq!(
            counting.get("async_exec_sweep_failures_total{sweep=heartbeat}"),
            1
        );
        assert_eq!(
            counting.get("async_exec_sweep_failures_total{sweep=producer}"),
            0
        );
    }

    #[test]
    fn pauses_grow_and_are_capped() {
        assert_eq!(restart_pause(1), Duration::from_millis(100));
        assert_eq!(restart_pause(2), Duration::from_millis(200));
        assert_eq!(restart_pause(100), Duration::from_secs(5));
    }
}

//! What the sweeps share: the periodic loop, with a backoff while the database fails, and
//! the catching of a round that panics (logged, counted in
//! `async_exec_sweep_failures_total{sweep}` like a round that failed, and backed off from).

use std::future::Future;
use std::panic::AssertUnwindSafe;
use std::time::Duration;

use futures_util::FutureExt;
use tokio_util::sync::CancellationToken;

use crate::base::error::Result;
use crate::base::supervise::panic_text;
use crate::operate::metrics::Sweep;
use crate::operate::pulse::PartPulse;

/// Runs `once` every `interval` until `shutdown` is cancelled. While it fails, the wait
/// doubles (up to [`longest_wait`]) and each failure is logged; the first success after failures says so. Each
/// wait is told to `pulse`, so that a backoff is not taken for a hang. A round that
/// panics is a failed round of `sweep` (unless a part of it counted its panic under its
/// own sweep, with [`caught`]).
pub(crate) async fn every<F, Fut>(
    shutdown: CancellationToken,
    sweep: Sweep,
    interval: Duration,
    pulse: std::sync::Arc<PartPulse>,
    mut once: F,
) where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<()>>,
{
    let name = sweep.as_str();
    let mut failures = 0u32;
    loop {
        let wait = wait_after(sweep, interval, failures);
        pulse.expect_within(wait);
        tokio::select! {
            _ = shutdown.cancelled() => return,
            _ = tokio::time::sleep(wait) => {}
        }
        match caught(sweep, once()).await {
            Ok(()) => {
                if failures > 0 {
                    crate::log::info!(sweep = name, after_failures = failures, "sweep recovered");
                }
                failures = 0;
            }
            Err(error) => {
                failures += 1;
                crate::log::error!(sweep = name, error = %crate::log::escaped(&error), failures, "sweep failed; backing off");
            }
        }
    }
}

/// The longest wait between the failed rounds of `sweep`: a minute, to spare a database
/// that fails, but the stops sweep's few seconds. Its statements are cheap (by primary key,
/// through a partial index) and what it does is promised "within about a second": a
/// cancel asked, or a deadline passed, right after a database failover must not wait a
/// minute more to be heard.
pub(crate) const fn longest_wait(sweep: Sweep) -> Duration {
    match sweep {
        Sweep::Stops => Duration::from_secs(4),
        _ => Duration::from_secs(60),
    }
}

/// How long `sweep`, run every `interval`, waits after `failures` failed rounds in a row.
fn wait_after(sweep: Sweep, interval: Duration, failures: u32) -> Duration {
    if failures == 0 {
        return interval;
    }
    interval
        .saturating_mul(1 << failures.min(6))
        .min(longest_wait(sweep))
}

/// Runs one round of `sweep`; a panic in it is logged, counted as a failed round of
/// `sweep`, and returned as [`Error::Panicked`](crate::Error::Panicked).
pub(crate) async fn caught<T>(sweep: Sweep, round: impl Future<Output = Result<T>>) -> Result<T> {
    AssertUnwindSafe(round)
        .catch_unwind()
        .await
        .unwrap_or_else(|panic| {
            crate::operate::metrics::sweep_failed(sweep);
            crate::log::error!(sweep = sweep.as_str(), panic = %crate::log::escaped(&panic_text(&*panic)), "sweep panicked");
            Err(crate::Error::Panicked(sweep.as_str()))
        })
}

/// Runs `round` again while it comes back full (it did `batch` or more: more may be
/// waiting) and `budget` has not passed since the first, so that a sweep keeps up with a
/// backlog larger than one batch without holding the database for longer than its
/// interval. Returns the sum of what the rounds did. The first round always runs; an
/// error ends the loop with what was done before it lost (the error is returned).
pub(crate) async fn while_full<F, Fut>(batch: u64, budget: Duration, mut round: F) -> Result<u64>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<u64>>,
{
    let until = tokio::time::Instant::now() + budget;
    let mut total = 0u64;
    loop {
        let done = round().await?;
        total = total.saturating_add(done);
        if batch == 0 || done < batch || tokio::time::Instant::now() >= until {
            return Ok(total);
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicU32, Ordering};
    use std::sync::Arc;

    use super::*;
    use crate::operate::metrics::counting::Counting;
    use crate::operate::pulse::Pulses;

    /// A round that panics counts as a failed round of its sweep, as a round that fails
    /// does (`round`, in the sweeps); the loop goes on; a panic caught inside a round under
    /// another sweep counts once, there.
    #[test]
    fn a_failing_sweep_backs_off_to_a_minute_but_the_stops_sweep_to_seconds() {
        let second = Duration::from_secs(1);
        assert_eq!(wait_after(Sweep::Retrier, second, 0), second);
        assert_eq!(wait_after(Sweep::Retrier, second, 1), 2 * second);
        assert_eq!(wait_after(Sweep::Retrier, second, 10), 60 * second);
        assert_eq!(wait_after(Sweep::Stops, second, 0), second);
        assert_eq!(wait_after(Sweep::Stops, second, 1), 2 * second);
        // After a long outage, a cancel is heard within seconds of the database's return.
        assert_eq!(wait_after(Sweep::Stops, second, 10), 4 * second);
        // A failed round of a sweep run hourly is tried again within a minute.
        assert_eq!(
            wait_after(Sweep::Retention, Duration::from_secs(3_600), 1),
            60 * second
        );
    }

    #[test]
    fn a_round_that_panics_is_counted_as_failed() {
        let counting = Counting::default();
        metrics::with_local_recorder(&counting, || {
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_time()
                .start_paused(true)
                .build()
                .unwrap();
            rt.block_on(async {
                let shutdown = CancellationToken::new();
                let rounds = Arc::new(AtomicU32::new(0));
                let (stop, counted) = (shutdown.clone(), rounds.clone());
                let pulses = Pulses::default();
                let pulse = pulses.part("retrier", Some(Duration::from_millis(10)));
                every(
                    shutdown,
                    Sweep::Retrier,
                    Duration::from_millis(10),
                    pulse,
                    move || {
                        let (stop, rounds) = (stop.clone(), counted.clone());
                        async move {
                            match rounds.fetch_add(1, Ordering::SeqCst) {
                                0 => panic!("a sweep round fails"),
                                1 => {
                                    caught(Sweep::Rescuer, async { panic!("the rescue fails") })
                                        .await
                                }
                                2 => crate::operate::metrics::round(
                                    Sweep::Retrier,
                                    Err(crate::Error::Panicked("a failure")),
                                ),
                                _ => {
                                    stop.cancel();
                                    Ok(())
                                }
                            }
                        }
                    },
                )
                .await;
                assert_eq!(rounds.load(Ordering::SeqCst), 4, "the loop went on");
            });
        });
        let failures = |sweep: &str| {
            counting.get(&format!("async_exec_sweep_failures_total{{sweep={sweep}}}"))
        };
        assert_eq!(
            (failures("retrier"), failures("rescuer")),
            (2, 1),
            "the panic and the failure of the retrier, the rescuer's caught panic"
        );
    }

    /// Issue 18 item 9: a sweep whose batches come back full goes on until one is not
    /// full, and stops at its time budget however much is left.
    #[tokio::test(start_paused = true)]
    async fn rounds_repeat_while_full_within_the_budget() {
        let left = Arc::new(AtomicU32::new(2_500));
        let take = |left: Arc<AtomicU32>| {
            move || {
                let left = left.clone();
                async move {
                    let now = left.load(Ordering::SeqCst).min(1_000);
                    left.fetch_sub(now, Ordering::SeqCst);
                    Ok(u64::from(now))
                }
            }
        };
        let done = while_full(1_000, Duration::from_secs(5), take(left.clone()))
            .await
            .unwrap();
        assert_eq!((done, left.load(Ordering::SeqCst)), (2_500, 0));

        let rounds = Arc::new(AtomicU32::new(0));
        let counted = rounds.clone();
        let done = while_full(10, Duration::from_secs(5), move || {
            let rounds = counted.clone();
            async move {
                rounds.fetch_add(1, Ordering::SeqCst);
                tokio::time::sleep(Duration::from_secs(2)).await;
                Ok(10)
            }
        })
        .await
        .unwrap();
        assert_eq!(
            (done, rounds.load(Ordering::SeqCst)),
            (30, 3),
            "always full: rounds at 0, 2 and 4 s, none after the 5 s budget"
        );
    }
}

//! What the sweeps share: the periodic loop, with a backoff while the database fails.

use std::future::Future;
use std::panic::AssertUnwindSafe;
use std::time::Duration;

use futures_util::FutureExt;
use tokio_util::sync::CancellationToken;

use crate::error::Result;
use crate::pulse::PartPulse;
use crate::supervise::panic_text;

/// Runs `once` every `interval` until `shutdown` is cancelled. While it fails, the wait doubles (up to a
/// minute) and each failure is logged; the first success after failures says so. Each
/// wait is told to `pulse`, so that a backoff is not taken for a hang.
pub(crate) async fn every<F, Fut>(
    shutdown: CancellationToken,
    name: &'static str,
    interval: Duration,
    pulse: std::sync::Arc<PartPulse>,
    mut once: F,
) where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<()>>,
{
    let mut failures = 0u32;
    loop {
        let wait = if failures == 0 {
            interval
        } else {
            interval
                .saturating_mul(1 << failures.min(6))
                .min(Duration::from_secs(60))
        };
        pulse.expect_within(wait);
        tokio::select! {
            _ = shutdown.cancelled() => return,
            _ = tokio::time::sleep(wait) => {}
        }
        let outcome = AssertUnwindSafe(once())
            .catch_unwind()
            .await
            .unwrap_or_else(|panic| {
                crate::log::error!(sweep = name, panic = %panic_text(&*panic), "sweep panicked");
                Err(crate::Error::Panicked(name))
            });
        match outcome {
            Ok(()) => {
                if failures > 0 {
                    crate::log::info!(sweep = name, after_failures = failures, "sweep recovered");
                }
                failures = 0;
            }
            Err(error) => {
                failures += 1;
                crate::log::error!(sweep = name, %error, failures, "sweep failed; backing off");
            }
        }
    }
}

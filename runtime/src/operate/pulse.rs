//! The pulse of the runtime's background parts, for [`Runtime::health`](crate::Runtime::health):
//! each part's task is wrapped ([`Pulses::watch`]) so that every time it is polled (it
//! woke up: its timer fired, work arrived, a statement answered) its "last active" instant
//! moves on, and when its task ends (shutdown, an abort) it is marked ended. A part that
//! runs on an interval and was not polled for several of them is stuck: waiting on a
//! statement that never answers, a lock never released, or a loop that never yields.
//!
//! No part knows of this: the wrapping is done where the parts are spawned
//! (`assemble.rs`). A sweep whose wait grows while it fails says so
//! ([`PartPulse::expect_within`]), so that its backoff is not taken for a hang.

use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

/// A part is stale when it was not active for this many of its intervals...
const STALE_INTERVALS: u32 = 3;

/// ... plus this slack, for a statement that waits a moment for a connection of a busy
/// pool, or a slow scheduler.
const STALE_SLACK: Duration = Duration::from_secs(10);

/// The pulses of a runtime's parts.
#[derive(Debug)]
pub(crate) struct Pulses {
    /// The instant every `last` counts from.
    start: Instant,
    /// Added to a part's intervals before it counts as stale.
    slack: Duration,
    parts: Mutex<Vec<Arc<PartPulse>>>,
}

impl Default for Pulses {
    fn default() -> Self {
        Pulses::with_slack(STALE_SLACK)
    }
}

/// One part's pulse.
#[derive(Debug)]
pub(crate) struct PartPulse {
    name: &'static str,
    start: Instant,
    slack: Duration,
    /// How long the part may wait between two activities (ms); 0: it waits for work and
    /// may be idle for ever (the completer).
    interval_ms: AtomicU64,
    /// When it was last polled, in ms since `start`.
    last_ms: AtomicU64,
    ended: AtomicBool,
}

/// What [`Pulses::snapshot`] says of one part.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct PartState {
    pub(crate) name: &'static str,
    pub(crate) alive: bool,
    pub(crate) stale: bool,
    pub(crate) last_active_ago: Duration,
    pub(crate) interval: Option<Duration>,
}

impl PartPulse {
    fn beat(&self) {
        let now = self.start.elapsed().as_millis() as u64;
        self.last_ms.store(now, Ordering::Relaxed);
    }

    /// The part's next activity is due within `wait` (a sweep backing off while it fails).
    pub(crate) fn expect_within(&self, wait: Duration) {
        self.interval_ms
            .store(wait.as_millis().max(1) as u64, Ordering::Relaxed);
    }

    fn state(&self) -> PartState {
        let now = self.start.elapsed();
        let last = Duration::from_millis(self.last_ms.load(Ordering::Relaxed));
        let ago = now.saturating_sub(last);
        let interval = match self.interval_ms.load(Ordering::Relaxed) {
            0 => None,
            ms => Some(Duration::from_millis(ms)),
        };
        let alive = !self.ended.load(Ordering::Acquire);
        let stale =
            alive && interval.is_some_and(|every| ago > every * STALE_INTERVALS + self.slack);
        PartState {
            name: self.name,
            alive,
            stale,
            last_active_ago: ago,
            interval,
        }
    }
}

impl Pulses {
    /// Pulses whose parts are stale after 3 intervals plus `slack`.
    fn with_slack(slack: Duration) -> Self {
        Pulses {
            start: Instant::now(),
            slack,
            parts: Mutex::new(Vec::new()),
        }
    }

    /// A new part's pulse; `interval` is how long it may wait between two activities
    /// (`None`: it waits for work, and may be idle for ever).
    pub(crate) fn part(&self, name: &'static str, interval: Option<Duration>) -> Arc<PartPulse> {
        let pulse = Arc::new(PartPulse {
            name,
            start: self.start,
            slack: self.slack,
            interval_ms: AtomicU64::new(interval.map_or(0, |d| d.as_millis().max(1) as u64)),
            last_ms: AtomicU64::new(self.start.elapsed().as_millis() as u64),
            ended: AtomicBool::new(false),
        });
        self.parts.lock().expect("pulses lock").push(pulse.clone());
        pulse
    }

    /// `part`'s future, beating `pulse` whenever it is polled and marking it ended when it
    /// finishes or is dropped (aborted).
    pub(crate) fn watch<F: Future>(pulse: Arc<PartPulse>, part: F) -> Watched<F> {
        Watched {
            pulse,
            part: Box::pin(part),
        }
    }

    /// Every part's state now, in the order they were started.
    pub(crate) fn snapshot(&self) -> Vec<PartState> {
        let parts = self.parts.lock().expect("pulses lock");
        parts.iter().map(|part| part.state()).collect()
    }
}

/// A part's future with its pulse.
pub(crate) struct Watched<F> {
    pulse: Arc<PartPulse>,
    part: Pin<Box<F>>,
}

impl<F: Future> Future for Watched<F> {
    type Output = F::Output;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<F::Output> {
        self.pulse.beat();
        let polled = self.part.as_mut().poll(cx);
        if polled.is_ready() {
            self.pulse.ended.store(true, Ordering::Release);
        }
        polled
    }
}

impl<F> Drop for Watched<F> {
    fn drop(&mut self) {
        self.pulse.ended.store(true, Ordering::Release);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_part_not_polled_for_several_intervals_is_stale_and_an_ended_one_is_not_alive() {
        let slack = Duration::from_millis(200);
        let pulses = Pulses::with_slack(slack);
        let every = Duration::from_millis(10);
        let ticker = tokio::spawn(Pulses::watch(
            pulses.part("ticking", Some(every)),
            async move {
                loop {
                    tokio::time::sleep(every).await;
                }
            },
        ));
        let (_sender, never) = tokio::sync::oneshot::channel::<()>();
        let stuck = tokio::spawn(Pulses::watch(pulses.part("stuck", Some(every)), never));
        let idle = tokio::spawn(Pulses::watch(
            pulses.part("idle", None),
            std::future::pending::<()>(),
        ));
        tokio::time::sleep(Duration::from_millis(20)).await;
        assert!(pulses.snapshot().iter().all(|p| p.alive && !p.stale));
        tokio::time::sleep(slack + every * (STALE_INTERVALS + 5)).await;
        let state = |name| {
            let parts = pulses.snapshot();
            parts.into_iter().find(|p| p.name == name).unwrap()
        };
        assert!(!state("ticking").stale);
        assert!(state("ticking").last_active_ago < slack);
        assert!(state("stuck").stale, "{:?}", state("stuck"));
        assert!(
            !state("idle").stale,
            "a part that waits for work is never stale"
        );
        ticker.abort();
        let _ = ticker.await;
        assert!(!state("ticking").alive);
        assert!(
            !state("ticking").stale,
            "an ended part is not alive, not stale"
        );
        stuck.abort();
        idle.abort();
    }
}

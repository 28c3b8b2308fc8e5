//! The runtime's clock: the database's. Instances that share a database compare the times
//! they write (due times, key expiry, staleness), so they must read one clock, not each
//! its own. The leases themselves are set and compared by the database in the statement
//! (`lease_until = <database now> + lease`, `lease_until < <database now>`); every other
//! time the runtime writes comes from here: the database's clock, read at start and
//! every [`SYNC_INTERVAL`], carried forward in between by this process's monotonic clock
//! (which a wall-clock step, NTP or a person, does not move).

use std::sync::atomic::{AtomicI64, Ordering};
use std::time::{Duration, Instant};

use crate::base::error::Result;
use crate::base::record::now_ms as wall_ms;
use crate::store::Store;

/// How often the database's clock is read again (monotonic clocks drift by parts per
/// million: milliseconds a day).
pub(crate) const SYNC_INTERVAL: Duration = Duration::from_secs(60);

/// [`Clock::base_ns`] before the database's clock was first read.
const UNREAD: i64 = i64::MIN;

/// How far a reading of the database's clock may differ from what the last one, carried
/// forward by the monotonic clock, predicted before it counts as a step of the
/// database's clock (an NTP step or a person on the database's host, a failover to a node
/// whose clock differs). Drift between two readings a minute apart is milliseconds.
pub(crate) const STEP_MS: i64 = 1_000;

/// [`Clock::stepped_at_ns`] before any step was seen.
const NEVER: i64 = i64::MIN;

/// The database's time, as this process knows it.
#[derive(Debug)]
pub(crate) struct Clock {
    /// What this process's wall clock is off by, for fault-injection tests
    /// ([`Builder::simulated_clock_offset`](crate::Builder::simulated_clock_offset)).
    wall_offset_ms: i64,
    /// A monotonic instant fixed at creation: `base_ns` is the database's time at it.
    anchor: Instant,
    /// The database's time (unix ns) at `anchor`, as the last reading puts it;
    /// [`UNREAD`] until the first. Read on every job, so an atomic rather than a lock.
    base_ns: AtomicI64,
    /// How long the last reading's round trip took (ms): how far behind the database's
    /// clock [`Clock::now_ms`] may be.
    lag_ms: AtomicI64,
    /// When (ns since `anchor`) a reading last found the database's clock stepped by more
    /// than [`STEP_MS`]; [`NEVER`] until then.
    stepped_at_ns: AtomicI64,
}

impl Clock {
    pub(crate) fn new(wall_offset_ms: i64) -> Self {
        Clock {
            wall_offset_ms,
            anchor: Instant::now(),
            base_ns: AtomicI64::new(UNREAD),
            lag_ms: AtomicI64::new(0),
            stepped_at_ns: AtomicI64::new(NEVER),
        }
    }

    /// Whether a reading of the database's clock within the last `within` found it
    /// stepped (by more than [`STEP_MS`] from what the reading before predicted). The
    /// rescuer pauses then: every lease was set by the old clock and looks ended or
    /// longer by the new one until its holder renews it.
    pub(crate) fn stepped_within(&self, within: Duration) -> bool {
        match self.stepped_at_ns.load(Ordering::Acquire) {
            NEVER => false,
            at => nanos(self.anchor.elapsed()).saturating_sub(at) <= nanos(within),
        }
    }

    /// Now, in unix milliseconds of the database's clock (of this process's wall clock
    /// until the database's was first read).
    pub(crate) fn now_ms(&self) -> i64 {
        match self.base_ns.load(Ordering::Acquire) {
            UNREAD => wall_ms().saturating_add(self.wall_offset_ms),
            base => base
                .saturating_add(nanos(self.anchor.elapsed()))
                .div_euclid(1_000_000),
        }
    }

    /// Takes `db` (unix ms) to be the database's time at the instant `at`: from then on
    /// [`Clock::now_ms`] is `db` plus the whole milliseconds since `at`.
    fn set_base(&self, db: i64, at: Instant) {
        let since_anchor = nanos(at.saturating_duration_since(self.anchor));
        let base = db.saturating_mul(1_000_000).saturating_sub(since_anchor);
        self.base_ns.store(base.max(UNREAD + 1), Ordering::Release);
    }

    /// Now by the database's clock, never earlier than it: [`Clock::now_ms`] plus the last
    /// reading's round trip. For times that must not come early (the end of a delay).
    pub(crate) fn latest_ms(&self) -> i64 {
        self.now_ms()
            .saturating_add(self.lag_ms.load(Ordering::Relaxed))
    }

    /// Reads the database's clock; the answer is taken to be the time at the end of the
    /// round trip, so that this reading is never ahead of the database's clock (at most
    /// one round trip behind). Ahead, a record this instance makes due "now" would not be
    /// due yet by the database's clock in the claim that follows, and would wait for the
    /// next poll; behind, it is due a few milliseconds early, and every lease this instance
    /// estimates ends no later than the database's.
    pub(crate) async fn sync(&self, store: &dyn Store) -> Result<()> {
        self.sync_with(store.db_now_ms()).await
    }

    /// [`Clock::sync`] with the reading of the database's clock given as a future.
    pub(crate) async fn sync_with(
        &self,
        reading: impl std::future::Future<Output = Result<i64>>,
    ) -> Result<()> {
        let sent = Instant::now();
        let db = reading.await?;
        let at = Instant::now();
        // The reading may be as old as the round trip, and each side's truncation to
        // milliseconds may lose up to one more.
        let round_trip = at.duration_since(sent).as_micros().div_ceil(1_000);
        let lag = i64::try_from(round_trip)
            .unwrap_or(i64::MAX)
            .saturating_add(2);
        let read_before = self.base_ns.load(Ordering::Acquire) != UNREAD;
        let before = self.now_ms();
        self.set_base(db, at);
        self.lag_ms.store(lag, Ordering::Relaxed);
        let moved = self.now_ms() - before;
        if moved.abs() > STEP_MS {
            if read_before {
                self.stepped_at_ns.store(
                    nanos(at.saturating_duration_since(self.anchor)),
                    Ordering::Release,
                );
                crate::log::warn!(
                    moved_ms = moved,
                    "the database's clock stepped since its last reading; leases are not \
                     rescued until their holders had the time to renew them"
                );
            } else {
                crate::log::info!(
                    moved_ms = moved,
                    "this process's clock differs from the database's; the runtime uses the database's"
                );
            }
        }
        Ok(())
    }

    /// Reads the database's clock every [`SYNC_INTERVAL`] until `stop`.
    pub(crate) async fn keep_synced(
        &self,
        store: &dyn Store,
        stop: tokio_util::sync::CancellationToken,
    ) {
        loop {
            tokio::select! {
                _ = stop.cancelled() => return,
                _ = tokio::time::sleep(SYNC_INTERVAL) => {}
            }
            if let Err(error) = self.sync(store).await {
                crate::log::warn!(error = %crate::log::escaped(&error), "could not read the database's clock; carrying on with the last reading");
            }
        }
    }
}

/// A duration in whole nanoseconds (saturated: `i64` holds 292 years).
fn nanos(d: Duration) -> i64 {
    i64::try_from(d.as_nanos()).unwrap_or(i64::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn before_a_sync_the_wall_clock_with_its_offset() {
        let clock = Clock::new(-10_000);
        let drift = (wall_ms() - 10_000 - clock.now_ms()).abs();
        assert!(drift < 1_000, "{drift}");
    }

    /// Issue 8 item 3 (found under load): a reading taken halfway through the round trip
    /// put the estimate up to half a round trip ahead of the database whenever the
    /// database read its clock late in the trip, and records made due "now" were not due
    /// in the claim that followed.
    #[tokio::test]
    async fn a_reading_is_never_ahead_of_the_database() {
        let clock = Clock::new(0);
        clock
            .sync_with(async {
                // The request is slow to reach the database, which reads its clock on
                // arrival and answers at once.
                tokio::time::sleep(Duration::from_millis(200)).await;
                Ok(wall_ms())
            })
            .await
            .unwrap();
        let ahead = clock.now_ms() - wall_ms();
        assert!(
            ahead <= 5,
            "the estimate is {ahead} ms ahead of the database"
        );
    }

    /// The delay test failed by 1 ms on SQLite (7 of 12 runs): `latest_ms` added a round
    /// trip that no reading ever set. The latest estimate is never behind the database,
    /// whose clock was read at the start of a slow round trip.
    #[tokio::test]
    async fn the_latest_estimate_is_never_behind_the_database() {
        let clock = Clock::new(0);
        let read_at = std::sync::Mutex::new(0);
        clock
            .sync_with(async {
                // The database reads its clock on arrival; its answer is slow to come back.
                let now = wall_ms();
                *read_at.lock().unwrap() = now;
                tokio::time::sleep(Duration::from_millis(150)).await;
                Ok(now)
            })
            .await
            .unwrap();
        for _ in 0..20 {
            let behind = wall_ms() - clock.latest_ms();
            assert!(
                behind <= 0,
                "the latest estimate is {behind} ms behind the database"
            );
            std::thread::sleep(Duration::from_millis(1));
        }
    }

    #[test]
    fn after_a_sync_the_base_moves_with_the_monotonic_clock() {
        let clock = Clock::new(0);
        clock.set_base(1_000, Instant::now());
        std::thread::sleep(Duration::from_millis(20));
        let now = clock.now_ms();
        assert!((1_020..1_500).contains(&now), "{now}");
    }

    /// Issue 18 item 10: a reading that finds the database's clock a lease ahead of what
    /// the last one predicted is a step, remembered for a while; the first reading (this
    /// process's clock against the database's) is not.
    #[tokio::test]
    async fn a_step_between_two_readings_is_remembered() {
        let clock = Clock::new(-3_600_000);
        clock.sync_with(async { Ok(wall_ms()) }).await.unwrap();
        assert!(
            !clock.stepped_within(Duration::from_secs(60)),
            "the first reading"
        );
        clock
            .sync_with(async { Ok(wall_ms() + 200) })
            .await
            .unwrap();
        assert!(
            !clock.stepped_within(Duration::from_secs(60)),
            "within drift"
        );
        clock
            .sync_with(async { Ok(wall_ms() + 30_000) })
            .await
            .unwrap();
        assert!(clock.stepped_within(Duration::from_secs(60)));
        tokio::time::sleep(Duration::from_millis(30)).await;
        assert!(!clock.stepped_within(Duration::from_millis(10)), "long ago");
    }
}

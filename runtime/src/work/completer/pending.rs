//! The outcomes queued or being written, by when they were queued: the age of the oldest
//! tells how far behind the writes are ([`Pending::oldest_age`]), which `health()`
//! compares with the statement bound.

use std::collections::BTreeMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// When an outcome was queued: milliseconds since the completer was made.
pub(super) type Stamp = u64;

/// How many outcomes not yet written were queued in each millisecond.
#[derive(Debug)]
pub(super) struct Pending {
    base: Instant,
    counts: Mutex<BTreeMap<Stamp, u32>>,
}

impl Pending {
    pub(super) fn new() -> Self {
        Pending {
            base: Instant::now(),
            counts: Mutex::new(BTreeMap::new()),
        }
    }

    fn now(&self) -> Stamp {
        u64::try_from(self.base.elapsed().as_millis()).unwrap_or(u64::MAX)
    }

    /// Counts an outcome queued now; returns its stamp, for [`Pending::remove`].
    pub(super) fn add(&self) -> Stamp {
        let stamp = self.now();
        *self
            .counts
            .lock()
            .expect("pending lock")
            .entry(stamp)
            .or_default() += 1;
        stamp
    }

    /// Forgets the outcomes of `stamps`: written, or given up.
    pub(super) fn remove(&self, stamps: impl IntoIterator<Item = Stamp>) {
        let mut counts = self.counts.lock().expect("pending lock");
        for stamp in stamps {
            if let Some(count) = counts.get_mut(&stamp) {
                *count -= 1;
                if *count == 0 {
                    counts.remove(&stamp);
                }
            }
        }
    }

    /// How long ago the oldest outcome not yet written was queued; `None` when none is
    /// waiting.
    pub(super) fn oldest_age(&self) -> Option<Duration> {
        let oldest = *self.counts.lock().expect("pending lock").keys().next()?;
        Some(Duration::from_millis(self.now().saturating_sub(oldest)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_oldest_outcome_left_decides_the_age() {
        let pending = Pending::new();
        assert_eq!(pending.oldest_age(), None);
        let first = pending.add();
        let second = pending.add();
        std::thread::sleep(Duration::from_millis(30));
        let third = pending.add();
        assert!(pending.oldest_age().unwrap() >= Duration::from_millis(30));
        pending.remove([first, second]);
        assert!(pending.oldest_age().unwrap() < Duration::from_millis(30));
        pending.remove([third]);
        assert_eq!(pending.oldest_age(), None);
    }
}

//! Claims that got no answer. A claim statement abandoned at its bound, or whose
//! connection broke, may have been committed by the database all the same (PostgreSQL runs
//! a statement whose client has gone to its end, and commits it). Its records are then
//! running under this instance's lease with no body here: nothing starts them, and when
//! the lease runs out the rescuer counts an attempt that never ran (a request with one
//! attempt went `dead` without having run).
//!
//! The claimer notes the time of each such claim (its `now`, which the claim writes as its
//! records' `update_time`). While one is recent (two leases), rounds, at most every eighth
//! of a lease, look for records this instance holds from those claims but not in its pool,
//! and hand them back without counting the attempt. A round runs [`alone`]: no claim of
//! this instance is between its statement and the reservation of what it took (each holds
//! [`claiming`] that long), so that a record claimed and answered is never taken for one
//! that was not.
//!
//! [`alone`]: Unanswered::alone
//! [`claiming`]: Unanswered::claiming

use std::collections::VecDeque;
use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::Mutex;
use std::time::Duration;

use tokio::sync::{RwLock, RwLockReadGuard, RwLockWriteGuard};

/// The most claim times kept: during a long outage every claim fails; the oldest are let go
/// (their records, if any, go to the rescuer when their lease runs out, as before).
const MOST_NOTED: usize = 1024;

/// No round is due.
const NONE_DUE: i64 = i64::MAX;

/// The claims of this instance that got no answer, and the rounds that look for what they
/// took. See the [module docs](self).
#[derive(Debug)]
pub(crate) struct Unanswered {
    /// Held shared by each claim from its statement until what it took is reserved;
    /// exclusively by a round.
    gate: RwLock<()>,
    /// The times of claims that got no answer, oldest first.
    times: Mutex<VecDeque<i64>>,
    /// When the next round is due (ms, this instance's reading of the database's clock);
    /// [`NONE_DUE`] while no claim time is kept.
    next_round: AtomicI64,
    /// How long a claim time is looked for: two leases (its records, if any, are the
    /// rescuer's once their lease has run out).
    keep_ms: i64,
    /// How long between rounds: an eighth of a lease, at least 50 ms.
    every_ms: i64,
}

impl Unanswered {
    /// For claims whose leases last `lease`.
    pub(crate) fn new(lease: Duration) -> Self {
        let lease_ms = lease.as_millis().min(i64::MAX as u128 / 2) as i64;
        Unanswered {
            gate: RwLock::new(()),
            times: Mutex::new(VecDeque::new()),
            next_round: AtomicI64::new(NONE_DUE),
            keep_ms: lease_ms * 2,
            every_ms: (lease_ms / 8).max(50),
        }
    }

    /// Held by a claim from before its statement until what it took is reserved in the
    /// pool.
    pub(crate) async fn claiming(&self) -> RwLockReadGuard<'_, ()> {
        self.gate.read().await
    }

    /// Held by a round: no claim is under way meanwhile.
    pub(crate) async fn alone(&self) -> RwLockWriteGuard<'_, ()> {
        self.gate.write().await
    }

    /// Notes a claim made at `claimed_at` that got no answer. A round is due at once
    /// unless one is scheduled already (a failing database fails every claim: rounds keep
    /// their pace).
    pub(crate) fn note(&self, claimed_at: i64) {
        let mut times = self.times.lock().expect("unanswered claims lock");
        if times.back() != Some(&claimed_at) {
            if times.len() == MOST_NOTED {
                times.pop_front();
            }
            times.push_back(claimed_at);
        }
        let _ = self.next_round.compare_exchange(
            NONE_DUE,
            claimed_at,
            Ordering::AcqRel,
            Ordering::Acquire,
        );
    }

    /// Takes the round due at `now`, if one is (a caller that loses the race gets `None`):
    /// the claim times to look for, those older than two leases let go. When none is due,
    /// one atomic read: the claims' path pays no more.
    pub(crate) fn take_round(&self, now: i64) -> Option<Vec<i64>> {
        let due = self.next_round.load(Ordering::Acquire);
        if now < due {
            return None;
        }
        let mut times = self.times.lock().expect("unanswered claims lock");
        if self.next_round.load(Ordering::Acquire) != due {
            return None; // another caller took it
        }
        while times
            .front()
            .is_some_and(|&at| at < now.saturating_sub(self.keep_ms))
        {
            times.pop_front();
        }
        if times.is_empty() {
            self.next_round.store(NONE_DUE, Ordering::Release);
            return None;
        }
        self.next_round
            .store(now.saturating_add(self.every_ms), Ordering::Release);
        Some(times.iter().copied().collect())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nothing_is_due_until_a_claim_is_noted() {
        let unanswered = Unanswered::new(Duration::from_secs(8));
        assert_eq!(unanswered.take_round(1_000), None);
        assert_eq!(unanswered.take_round(i64::MAX - 1), None);
    }

    #[test]
    fn a_noted_claim_is_looked_for_at_once_then_every_eighth_of_a_lease() {
        let unanswered = Unanswered::new(Duration::from_secs(8));
        unanswered.note(1_000);
        assert_eq!(unanswered.take_round(1_000), Some(vec![1_000]));
        // Taken: the next is a second later.
        assert_eq!(unanswered.take_round(1_000), None);
        assert_eq!(unanswered.take_round(1_999), None);
        // A claim failing meanwhile does not hurry the next round.
        unanswered.note(1_500);
        assert_eq!(unanswered.take_round(1_999), None);
        assert_eq!(unanswered.take_round(2_000), Some(vec![1_000, 1_500]));
    }

    #[test]
    fn claim_times_are_let_go_after_two_leases() {
        let unanswered = Unanswered::new(Duration::from_secs(8));
        unanswered.note(1_000);
        unanswered.note(5_000);
        assert_eq!(unanswered.take_round(17_000), Some(vec![1_000, 5_000]));
        assert_eq!(unanswered.take_round(18_000), Some(vec![5_000]));
        assert_eq!(unanswered.take_round(21_001), None);
        assert_eq!(
            unanswered.take_round(i64::MAX - 1),
            None,
            "no round left once none is kept"
        );
        // Noted again: due again.
        unanswered.note(30_000);
        assert_eq!(unanswered.take_round(30_000), Some(vec![30_000]));
    }

    #[test]
    fn the_times_kept_are_bounded() {
        let unanswered = Unanswered::new(Duration::from_secs(8));
        for at in 0..(MOST_NOTED as i64 + 10) {
            unanswered.note(at);
        }
        let times = unanswered.take_round(MOST_NOTED as i64 + 10).unwrap();
        assert_eq!(times.len(), MOST_NOTED);
        assert_eq!(times[0], 10);
    }

    #[tokio::test]
    async fn a_round_waits_for_the_claims_under_way() {
        let unanswered = std::sync::Arc::new(Unanswered::new(Duration::from_secs(8)));
        let claim = unanswered.claiming().await;
        let round = tokio::spawn({
            let unanswered = unanswered.clone();
            async move {
                let _alone = unanswered.alone().await;
            }
        });
        tokio::time::sleep(Duration::from_millis(50)).await;
        assert!(!round.is_finished(), "a round ran beside a claim under way");
        drop(claim);
        round.await.unwrap();
    }
}

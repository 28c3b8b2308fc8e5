//! The executor pool: the worker permits, the tasks of running bodies, and the stored jobs
//! this instance holds (reserved, running, or waiting for their outcome to be written).
//! The heartbeat renews what it lists, the completer forgets what it wrote, shutdown waits
//! for and aborts what runs.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use rustc_hash::FxHashMap;
use tokio::sync::Semaphore;
use tokio::task::AbortHandle;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use crate::base::record::RequestId;

/// A running stored job, as the heartbeat and shutdown see it.
#[derive(Debug)]
struct InFlight {
    attempt: i32,
    /// Past this time (unix ms) the body has overrun its timeout without yielding:
    /// its lease is no longer renewed, so that another worker can take the record.
    renew_until: i64,
    /// When the lease, as last set by this instance, ends (unix ms, this clock; taken
    /// before the statement that set it was sent, so never later than the database's).
    lease_until: i64,
    /// Cancelled when the lease ran out or was lost, or the record asked the body to
    /// stop: the body's `Context` sees it.
    lease_lost: CancellationToken,
    /// Another instance holds the record now (or it is gone): not renewed again; the
    /// outcome, if any, is fenced.
    lost: bool,
    /// Asked to stop by its record (a cancel, its deadline): told through `lease_lost`.
    stop: Option<crate::base::record::StopAsked>,
    abort: Option<AbortHandle>,
    /// Shutdown aborted its body (which may not have ended yet: a blocking call).
    aborted: bool,
    /// The body has run to its end; its outcome is on its way to the store.
    done: bool,
}

impl InFlight {
    fn new(attempt: i32, lease_until: i64) -> Self {
        InFlight {
            attempt,
            renew_until: i64::MAX,
            lease_until,
            lease_lost: CancellationToken::new(),
            lost: false,
            stop: None,
            abort: None,
            aborted: false,
            done: false,
        }
    }

    fn lose(&mut self) {
        self.lost = true;
        self.lease_lost.cancel();
    }
}

/// When a stored job is about to start, what decides whether it may (all unix ms, this
/// instance's reading of the database's clock). It may not when its lease was lost while
/// it waited, or ends before the next renewal (a claim answered late, after a stall, holds
/// little of its lease: the body would be cut off mid-way, or run beside another
/// instance's; its lease is left to expire and the record is taken whole, by the rescuer
/// or another claim), or when its deadline has passed (a claim answered late, or a worker
/// freed late: "not started by its deadline" must hold at the body's start, not only at
/// the claim's).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct FlightStart {
    /// Now (the database's clock as last read, up to a round trip behind it).
    pub(crate) now: i64,
    /// Now, never earlier than the database's clock: what the deadline is held to, so
    /// that no body starts at or past it by the clock that set it.
    pub(crate) latest: i64,
    /// Past this the lease is no longer renewed (the body overran its timeout).
    pub(crate) renew_until: i64,
    /// The lease's end, for a job that was not reserved when claimed.
    pub(crate) lease_until: i64,
    /// How far away the next renewal is (ms).
    pub(crate) next_renewal_ms: i64,
    /// The record's deadline, if it has one.
    pub(crate) deadline: Option<i64>,
}

/// The worker pool: a semaphore of `concurrency` permits and the jobs running under them.
#[derive(Debug)]
pub(crate) struct ExecutorPool {
    pub(crate) permits: Arc<Semaphore>,
    /// By record id: ids are the database's, hashed five times a job, and not chosen by
    /// anyone who could make them collide; hence a fast hash rather than SipHash.
    in_flight: Mutex<FxHashMap<RequestId, InFlight>>,
    /// Every body running in this instance, pooled or not.
    pub(crate) tasks: TaskTracker,
}

impl ExecutorPool {
    pub(crate) fn new(concurrency: usize) -> Self {
        ExecutorPool {
            permits: Arc::new(Semaphore::new(concurrency)),
            in_flight: Mutex::new(FxHashMap::default()),
            tasks: TaskTracker::new(),
        }
    }

    /// Registers a stored job that is about to start (attempt `attempt` of record `id`).
    /// Returns the token its body's `Context` sees cancelled when the lease is lost, or
    /// `None` when it must not start here (see [`FlightStart`]); its reservation is then
    /// dropped and the caller hands the record back.
    pub(super) fn start_flight(
        &self,
        id: RequestId,
        attempt: i32,
        start: FlightStart,
    ) -> Option<CancellationToken> {
        let mut in_flight = self.in_flight.lock().expect("in-flight lock");
        let flight = in_flight
            .entry(id)
            .and_modify(|f| {
                if f.attempt != attempt {
                    *f = InFlight::new(attempt, start.lease_until);
                }
            })
            .or_insert_with(|| InFlight::new(attempt, start.lease_until));
        // Asked to stop while it waited (a cancel, its deadline): it must not start
        // either; handed back, it ends `cancelled` (a cancel) or `dead` (its deadline).
        if flight.lost
            || flight.stop.is_some()
            || flight.lease_until <= start.now.saturating_add(start.next_renewal_ms)
            || start
                .deadline
                .is_some_and(|deadline| deadline <= start.latest)
        {
            in_flight.remove(&id);
            return None;
        }
        flight.renew_until = start.renew_until;
        Some(flight.lease_lost.clone())
    }

    /// Notes the task that runs attempt `attempt` of record `id`, for shutdown to abort.
    pub(super) fn started(&self, id: RequestId, attempt: i32, abort: AbortHandle) {
        let mut in_flight = self.in_flight.lock().expect("in-flight lock");
        if let Some(flight) = in_flight.get_mut(&id).filter(|f| f.attempt == attempt) {
            flight.abort = Some(abort);
        }
    }

    /// Registers a claimed record that waits for a worker: the heartbeat renews its lease
    /// (set to end at `lease_until`) until it starts, and shutdown hands it back.
    pub(crate) fn reserve(&self, id: RequestId, attempt: i32, lease_until: i64) {
        self.in_flight
            .lock()
            .expect("in-flight lock")
            .insert(id, InFlight::new(attempt, lease_until));
    }

    /// Notes that a stored job's body has run to its end; returns why its record asked it
    /// to stop, if it did (one lock for both: this is on every job's path).
    pub(super) fn mark_done(
        &self,
        id: RequestId,
        attempt: i32,
    ) -> Option<crate::base::record::StopAsked> {
        let mut in_flight = self.in_flight.lock().expect("in-flight lock");
        let flight = in_flight.get_mut(&id).filter(|f| f.attempt == attempt)?;
        flight.done = true;
        flight.stop
    }

    /// How many stored jobs' bodies are running now.
    pub(crate) fn running(&self) -> usize {
        let in_flight = self.in_flight.lock().expect("in-flight lock");
        in_flight
            .values()
            .filter(|f| f.abort.is_some() && !f.done && !f.aborted)
            .count()
    }

    /// Records whose body finished but whose outcome is not written (yet, or at all).
    pub(crate) fn finished_unwritten(&self) -> Vec<RequestId> {
        let in_flight = self.in_flight.lock().expect("in-flight lock");
        in_flight
            .iter()
            .filter(|(_, f)| f.done)
            .map(|(id, _)| *id)
            .collect()
    }

    /// What shutdown hands back, once the bodies it could stop have stopped: the records
    /// held (id, attempt) whose body never started or was stopped, and is not running now;
    /// and how many bodies are still running (abort did not end them: a blocking call).
    /// Neither a record whose body finished (its outcome, written or not, keeps its
    /// attempt) nor one whose body may still run (handed back, it could run twice at
    /// once) is handed back, nor one lost to another instance.
    pub(crate) fn to_hand_back(&self) -> (Vec<crate::store::Held>, usize) {
        let in_flight = self.in_flight.lock().expect("in-flight lock");
        let mut unstopped = 0;
        let mut held = Vec::new();
        for (id, f) in in_flight.iter() {
            if f.done || f.lost {
                continue;
            }
            if f.abort.as_ref().is_some_and(|abort| !abort.is_finished()) {
                unstopped += 1;
                continue;
            }
            held.push((*id, f.attempt));
        }
        held.sort_unstable();
        (held, unstopped)
    }

    /// Forgets a stored job once its outcome is written.
    pub(crate) fn forget(&self, id: RequestId, attempt: i32) {
        let mut in_flight = self.in_flight.lock().expect("in-flight lock");
        if in_flight.get(&id).is_some_and(|f| f.attempt == attempt) {
            in_flight.remove(&id);
        }
    }

    /// The records (id, attempt) whose leases the heartbeat should renew now, in id order
    /// (the order every statement locks records in), and the earliest end among their
    /// leases that have not ended by `now`. A lease that ended already is still renewed
    /// (a renewal that gets through before another instance takes the record keeps it
    /// here), but it no longer bounds how long a renewal may wait: it would make every
    /// renewal give up at once, and the leases still alive would run out too.
    pub(crate) fn renewable(&self, now: i64) -> (Vec<crate::store::Held>, Option<i64>) {
        let in_flight = self.in_flight.lock().expect("in-flight lock");
        let mut earliest = None::<i64>;
        let mut ids: Vec<crate::store::Held> = in_flight
            .iter()
            .filter(|(_, f)| !f.lost && f.renew_until > now)
            .inspect(|(_, f)| {
                if f.lease_until > now {
                    earliest = Some(earliest.map_or(f.lease_until, |e| e.min(f.lease_until)))
                }
            })
            .map(|(id, f)| (*id, f.attempt))
            .collect();
        ids.sort_unstable();
        (ids, earliest)
    }

    /// Notes a renewal: the leases of `renewal.renewed` now end at `until`; those of
    /// `renewal.held` are unchanged (still this instance's, not renewed this time); those
    /// of `asked` that are in neither and whose body is still running (or waits to) were
    /// taken over or removed: they are lost, their bodies told. Returns the ids lost.
    pub(crate) fn renewed(
        &self,
        asked: &[crate::store::Held],
        renewal: &crate::store::Renewal,
        until: i64,
    ) -> Vec<RequestId> {
        let held: std::collections::HashSet<RequestId> = renewal.held.iter().copied().collect();
        let renewed: std::collections::HashSet<RequestId> =
            renewal.renewed.iter().copied().collect();
        let mut in_flight = self.in_flight.lock().expect("in-flight lock");
        let mut lost = Vec::new();
        for (id, attempt) in asked {
            let Some(flight) = in_flight.get_mut(id).filter(|f| f.attempt == *attempt) else {
                continue;
            };
            if renewed.contains(id) {
                flight.lease_until = flight.lease_until.max(until);
            } else if !flight.done && !flight.lost && !held.contains(id) {
                flight.lose();
                lost.push(*id);
            }
        }
        lost
    }

    /// Tells the running bodies whose lease ended (by this clock) before it could be
    /// renewed: another instance may take their records now. Their leases are still
    /// renewed while this instance holds them (a renewal that gets through keeps the
    /// record here; one that finds it taken over marks it lost). Returns their ids.
    pub(crate) fn lapse(&self, now: i64) -> Vec<RequestId> {
        let mut in_flight = self.in_flight.lock().expect("in-flight lock");
        let mut lapsed = Vec::new();
        for (id, flight) in in_flight.iter_mut() {
            let started = flight.abort.is_some();
            if started
                && !flight.done
                && !flight.lease_lost.is_cancelled()
                && flight.lease_until <= now
            {
                flight.lease_lost.cancel();
                lapsed.push(*id);
            }
        }
        lapsed
    }

    /// The records held here, running or claimed and waiting for a worker, that have not
    /// been asked to stop (nor lost their lease): those a check for cancels and deadlines
    /// looks at. One waiting is asked too, so that it never starts after a cancel or its
    /// deadline (found by the chaos run: an instance whose workers were held up started
    /// such requests seconds after their cancel).
    pub(crate) fn unstopped(&self) -> Vec<crate::store::Held> {
        let in_flight = self.in_flight.lock().expect("in-flight lock");
        let mut held: Vec<crate::store::Held> = in_flight
            .iter()
            .filter(|(_, f)| !f.done && !f.lost && f.stop.is_none())
            .map(|(id, f)| (*id, f.attempt))
            .collect();
        held.sort_unstable();
        held
    }

    /// Tells the body of `id` at `attempt`, if it still runs here, to stop (its
    /// `Context` is cancelled) because of `why`; whether it was told.
    pub(crate) fn ask_stop(
        &self,
        id: RequestId,
        attempt: i32,
        why: crate::base::record::StopAsked,
    ) -> bool {
        let mut in_flight = self.in_flight.lock().expect("in-flight lock");
        match in_flight
            .get_mut(&id)
            .filter(|f| f.attempt == attempt && !f.done && f.stop.is_none())
        {
            Some(flight) => {
                flight.stop = Some(why);
                flight.lease_lost.cancel();
                true
            }
            None => false,
        }
    }

    /// Whether this instance holds record `id` (waiting, running, or with an outcome not
    /// yet written).
    pub(crate) fn holds(&self, id: RequestId) -> bool {
        self.in_flight
            .lock()
            .expect("in-flight lock")
            .contains_key(&id)
    }

    /// How many claimed records this instance holds (waiting, running, or with an
    /// outcome not yet written).
    pub(crate) fn held(&self) -> usize {
        self.in_flight.lock().expect("in-flight lock").len()
    }

    /// Jobs running or waiting for their outcome to be written.
    pub(crate) fn is_idle(&self) -> bool {
        self.tasks.is_empty() && self.in_flight.lock().expect("in-flight lock").is_empty()
    }

    /// Waits until every running body has finished, or `grace` has passed.
    /// Returns whether all finished.
    pub(crate) async fn wait(&self, grace: Duration) -> bool {
        self.tasks.close();
        let done = tokio::time::timeout(grace, self.tasks.wait()).await.is_ok();
        self.tasks.reopen();
        done
    }

    /// Aborts the bodies still running; returns the ids of their records.
    pub(crate) fn abort_all(&self) -> Vec<RequestId> {
        let mut in_flight = self.in_flight.lock().expect("in-flight lock");
        let mut aborted = Vec::new();
        for (id, flight) in in_flight.iter_mut() {
            if flight.done || flight.aborted {
                continue;
            }
            if let Some(abort) = &flight.abort {
                abort.abort();
                flight.aborted = true;
                aborted.push(*id);
            }
        }
        aborted
    }

    /// Workers free right now.
    pub(crate) fn available(&self) -> usize {
        self.permits.available_permits()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Starting at `now`, the next renewal `next_renewal_ms` away, with `deadline`.
    fn at(now: i64, next_renewal_ms: i64, deadline: Option<i64>) -> FlightStart {
        FlightStart {
            now,
            latest: now,
            renew_until: i64::MAX,
            lease_until: 0,
            next_renewal_ms,
            deadline,
        }
    }

    #[test]
    fn a_claim_whose_deadline_passed_while_it_waited_is_not_started() {
        let pool = ExecutorPool::new(1);
        // Claimed before its deadline (2_000), a worker free only at 2_000: not started,
        // though the lease has long to run and no sweep has asked it to stop yet.
        pool.reserve(5, 1, 10_000);
        assert!(pool
            .start_flight(5, 1, at(2_000, 500, Some(2_000)))
            .is_none());
        assert_eq!(pool.held(), 0, "handed back");
        // A millisecond before it: started.
        pool.reserve(6, 1, 10_000);
        assert!(pool
            .start_flight(6, 1, at(1_999, 500, Some(2_000)))
            .is_some());
        // Before it by the last reading, but perhaps not by the database's clock (the
        // reading's round trip ago): not started.
        pool.reserve(4, 1, 10_000);
        let late_reading = FlightStart {
            latest: 2_003,
            ..at(1_990, 500, Some(2_000))
        };
        assert!(pool.start_flight(4, 1, late_reading).is_none());
    }

    #[test]
    fn a_claim_whose_lease_ends_before_the_next_renewal_is_not_started() {
        let pool = ExecutorPool::new(1);
        // Claimed with a lease to 10_000, started at 9_600 (a claim answered late, after a
        // stall), the next renewal 500 ms away: the body would be cut off mid-way.
        pool.reserve(7, 1, 10_000);
        assert!(pool.start_flight(7, 1, at(9_600, 500, None)).is_none());
        assert_eq!(pool.held(), 0, "left to expire and be taken whole");
        // Renewed before the lease ends: started.
        pool.reserve(8, 1, 10_000);
        assert!(pool.start_flight(8, 1, at(9_600, 300, None)).is_some());
    }

    #[test]
    fn a_claim_asked_to_stop_while_it_waits_is_not_started() {
        let pool = ExecutorPool::new(1);
        pool.reserve(9, 1, 10_000);
        // Waiting for a worker, it is among those the stops sweep looks at...
        assert_eq!(pool.unstopped(), vec![(9, 1)]);
        assert!(pool.ask_stop(9, 1, crate::base::record::StopAsked::Cancel));
        assert!(pool.unstopped().is_empty());
        // ... and once asked, a free worker does not start it.
        assert!(pool.start_flight(9, 1, at(1_000, 500, None)).is_none());
        assert_eq!(pool.held(), 0, "handed back");
    }
}

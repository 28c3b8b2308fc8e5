//! Which queues the producer looks at: only those that may have records this instance
//! could claim now, so that an idle queue costs nothing when a commit or an outcome
//! wakes the producer. A queue is marked when one of its requests is committed here,
//! when a record of it that this instance ran is finished (its place is free), and when
//! a claim of it took records or found no worker free (it may have more); at a poll or
//! a wake-up from another instance (their commits and outcomes are not seen here), the
//! queues that hold due records, found by one statement (`store::ops::DueOps`), are
//! marked. A claim that finds a queue empty or full unmarks it.

use std::collections::BTreeSet;
use std::sync::Mutex;

use crate::base::record::RequestId;

/// The queues (by their index in the claimer's list) that may have work. See the
/// [module docs](self).
#[derive(Debug, Default)]
pub(crate) struct WaitingQueues {
    state: Mutex<State>,
}

#[derive(Debug, Default)]
struct State {
    /// Every queue.
    all: bool,
    marked: BTreeSet<usize>,
    /// Records of queues this instance claimed, with their queue, until the pool
    /// forgets them (their outcome is written).
    held: Vec<(RequestId, usize)>,
}

impl WaitingQueues {
    fn state(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().expect("waiting-queues lock")
    }

    /// Every queue may have work (a poll, another instance's wake-up).
    pub(crate) fn mark_all(&self) {
        self.state().all = true;
    }

    /// Queue `at` may have work.
    pub(crate) fn mark(&self, at: usize) {
        self.state().marked.insert(at);
    }

    /// Records of queue `at` claimed here: their outcomes free places of it.
    pub(crate) fn hold(&self, at: usize, ids: impl IntoIterator<Item = RequestId>) {
        self.state().held.extend(ids.into_iter().map(|id| (id, at)));
    }

    /// Marks the queues of held records that `holds` no longer holds (finished); whether
    /// any queue is marked now.
    pub(crate) fn refresh(&self, holds: impl Fn(RequestId) -> bool) -> bool {
        let mut state = self.state();
        let State { held, marked, all } = &mut *state;
        held.retain(|&(id, at)| {
            let still = holds(id);
            if !still {
                marked.insert(at);
            }
            still
        });
        *all || !marked.is_empty()
    }

    /// Whether any queue is marked.
    pub(crate) fn any(&self) -> bool {
        let state = self.state();
        state.all || !state.marked.is_empty()
    }

    /// The marked queues among `count`, in order from `first` (wrapping), unmarked.
    pub(crate) fn take(&self, count: usize, first: usize) -> Vec<usize> {
        let mut state = self.state();
        let taken: Vec<usize> = if std::mem::take(&mut state.all) {
            state.marked.clear();
            (0..count).collect()
        } else {
            std::mem::take(&mut state.marked)
                .into_iter()
                .filter(|&at| at < count)
                .collect()
        };
        let first = if count == 0 { 0 } else { first % count };
        let (after, before): (Vec<usize>, Vec<usize>) =
            taken.into_iter().partition(|&at| at >= first);
        after.into_iter().chain(before).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_marked_queues_are_taken_and_then_unmarked() {
        let waiting = WaitingQueues::default();
        assert!(
            waiting.take(5, 0).is_empty(),
            "an idle queue is not looked at"
        );
        waiting.mark(3);
        waiting.mark(1);
        assert_eq!(
            waiting.take(5, 2),
            vec![3, 1],
            "from the turn's first, wrapping"
        );
        assert!(!waiting.any());
        waiting.mark_all();
        assert_eq!(waiting.take(3, 1), vec![1, 2, 0]);
        assert!(waiting.take(3, 0).is_empty());
    }

    #[test]
    fn a_finished_record_marks_its_queue() {
        let waiting = WaitingQueues::default();
        waiting.hold(2, [10, 11]);
        assert!(!waiting.refresh(|_| true), "both still held");
        assert!(waiting.refresh(|id| id != 10));
        assert_eq!(waiting.take(4, 0), vec![2]);
        assert!(
            !waiting.refresh(|id| id != 10),
            "11 still held, 10 forgotten"
        );
    }
}

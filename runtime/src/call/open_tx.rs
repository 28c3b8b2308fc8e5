//! Which tasks hold an open [`Tx`](crate::Tx) of a runtime: a call made without
//! `.within(&mut tx)` from such a task would not be part of that transaction, so it is
//! refused ([`Error::BareCallInTransaction`](crate::Error::BareCallInTransaction)).

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

/// Who holds a transaction: the tokio task, or the thread when the code runs outside any
/// task (the future given to `block_on`, as in `#[tokio::main]` and `#[tokio::test]`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
enum Holder {
    Task(tokio::task::Id),
    Thread(std::thread::ThreadId),
}

impl Holder {
    fn current() -> Holder {
        match tokio::task::try_id() {
            Some(id) => Holder::Task(id),
            None => Holder::Thread(std::thread::current().id()),
        }
    }
}

/// The open transactions of one runtime, counted by the task (or thread) that began them.
#[derive(Debug, Default)]
pub(crate) struct OpenTxs {
    by_holder: Arc<Mutex<HashMap<Holder, usize>>>,
}

impl OpenTxs {
    /// Notes a transaction begun (or wrapped) by the current task; it counts until the
    /// returned guard is dropped.
    pub(crate) fn open(&self) -> OpenTx {
        let holder = Holder::current();
        *self
            .by_holder
            .lock()
            .expect("open transactions lock")
            .entry(holder)
            .or_default() += 1;
        OpenTx {
            holder,
            by_holder: self.by_holder.clone(),
        }
    }

    /// Whether the current task (or thread) holds an open transaction of this runtime.
    pub(crate) fn held_here(&self) -> bool {
        self.by_holder
            .lock()
            .expect("open transactions lock")
            .contains_key(&Holder::current())
    }
}

/// One open transaction, counted for the task that began it until dropped.
#[derive(Debug)]
pub(crate) struct OpenTx {
    holder: Holder,
    by_holder: Arc<Mutex<HashMap<Holder, usize>>>,
}

impl Drop for OpenTx {
    fn drop(&mut self) {
        let mut by_holder = self.by_holder.lock().expect("open transactions lock");
        if let Some(count) = by_holder.get_mut(&self.holder) {
            *count -= 1;
            if *count == 0 {
                by_holder.remove(&self.holder);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_transaction_counts_for_its_task_until_dropped() {
        let open = OpenTxs::default();
        assert!(!open.held_here());
        let first = open.open();
        let second = open.open();
        assert!(open.held_here());
        let by_holder = open.by_holder.clone();
        let elsewhere = tokio::spawn(async move { OpenTxs { by_holder }.held_here() });
        assert!(
            !elsewhere.await.unwrap(),
            "another task holds no transaction"
        );
        drop(first);
        assert!(open.held_here());
        drop(second);
        assert!(!open.held_here());
    }
}

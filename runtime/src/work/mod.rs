//! The work: what happens to a request once it is committed. The producer
//! (`dispatcher`) receives it from the after-commit channel or finds it in the store, the
//! `claimer` claims it and starts it under a worker permit (`pool`), the `executor` runs
//! its body, the `completer` writes its outcome; `control` holds the pauses of executors
//! and the finished counts.

pub(crate) mod claimer;
pub(crate) mod completer;
pub(crate) mod control;
pub(crate) mod dispatcher;
pub(crate) mod executor;
pub(crate) mod pool;
pub(crate) mod unanswered;
pub(crate) mod waiting_queues;

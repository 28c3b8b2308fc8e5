//! `ctx.progress(done, total)`: what running bodies report of their progress, written to
//! their records at most once a second each (the last report always), fenced by owner
//! and attempt like an outcome.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use rustc_hash::FxHashMap;

use crate::base::context::ProgressSink;
use crate::base::record::RequestId;
use crate::base::registry::BoxFuture;
use crate::store::steps::{NewStep, StoredStep};
use crate::store::Store;

/// The least time between two writes of one request's progress.
const EVERY: Duration = Duration::from_secs(1);

/// Entries kept of when each request's progress was last written, before the old ones
/// (of requests that finished without a last report) are dropped.
const KEPT: usize = 4096;

/// One per executor, shared by every stored job's `Context`: its progress, and its
/// durable steps.
pub(crate) struct ProgressWriter {
    store: Arc<dyn Store>,
    application: Arc<str>,
    owner: Arc<str>,
    clock: Arc<crate::sweeps::clock::Clock>,
    throttle: Throttle,
}

impl ProgressWriter {
    pub(crate) fn new(
        store: Arc<dyn Store>,
        application: Arc<str>,
        owner: Arc<str>,
        clock: Arc<crate::sweeps::clock::Clock>,
    ) -> Self {
        ProgressWriter {
            store,
            application,
            owner,
            clock,
            throttle: Throttle::default(),
        }
    }
}

/// When each request's progress was last written (this process's clock).
#[derive(Default)]
struct Throttle {
    written: Mutex<FxHashMap<RequestId, Instant>>,
}

impl Throttle {
    /// Whether a report of `id` made now is written (and notes it).
    fn is_due(&self, id: RequestId, last: bool, now: Instant) -> bool {
        let mut written = self.written.lock().expect("progress lock");
        if last {
            written.remove(&id);
            return true;
        }
        if written
            .get(&id)
            .is_some_and(|at| now.duration_since(*at) < EVERY)
        {
            return false;
        }
        if written.len() >= KEPT {
            written.retain(|_, at| now.duration_since(*at) < EVERY);
        }
        written.insert(id, now);
        true
    }
}

impl ProgressSink for ProgressWriter {
    fn report(&self, id: RequestId, attempt: u32, done: u64, total: u64) -> BoxFuture<'_, ()> {
        Box::pin(async move {
            if !self.throttle.is_due(id, done >= total, Instant::now()) {
                return;
            }
            let clamp = |n: u64| i64::try_from(n).unwrap_or(i64::MAX);
            let attempt = i32::try_from(attempt).unwrap_or(i32::MAX);
            let wrote = self
                .store
                .execution_progress(id, &self.owner, attempt, (clamp(done), clamp(total)))
                .await;
            if let Err(error) = wrote {
                crate::log::warn!(request_id = id, error = %crate::log::escaped(&error), "could not write a body's progress");
            }
        })
    }

    fn steps(&self, id: RequestId) -> BoxFuture<'_, crate::Result<Vec<StoredStep>>> {
        Box::pin(async move { self.store.execution_steps(id).await })
    }

    fn keep_step<'a>(
        &'a self,
        id: RequestId,
        attempt: u32,
        position: i64,
        name: &'a str,
        value_json: &'a str,
    ) -> BoxFuture<'a, crate::Result<bool>> {
        Box::pin(async move {
            let step = NewStep {
                application: &self.application,
                id,
                owner: &self.owner,
                attempt: i32::try_from(attempt).unwrap_or(i32::MAX),
                position,
                name,
                value_json,
                now: self.clock.now_ms(),
            };
            self.store.execution_step_keep(step).await
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_write_a_second_per_request_and_the_last_always() {
        let writer = Throttle::default();
        let t0 = Instant::now();
        assert!(writer.is_due(1, false, t0));
        assert!(!writer.is_due(1, false, t0 + Duration::from_millis(999)));
        assert!(
            writer.is_due(2, false, t0 + Duration::from_millis(10)),
            "another request"
        );
        assert!(writer.is_due(1, false, t0 + EVERY));
        assert!(writer.is_due(1, true, t0 + EVERY), "the last report");
    }
}

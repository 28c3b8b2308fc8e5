use std::sync::Arc;

use super::*;
use crate::base::registry::ExecutorDef;

static QUEUED: ExecutorDef = ExecutorDef {
    name: "dispatcher_test::queued",
    path: "dispatcher_test::queued",
    sign: "0000000000000000",
    signature: "()",
    remark: "",
    strategy: Strategy::SaveAsync,
    max_attempts: None,
    timeout_ms: None,
    queue: Some("alerts"),
    deadline_ms: None,
    data: &[],
    secrets: &[],
    schedule: None,
    modes: crate::base::registry::Modes::NONE,
    run: |_| Box::pin(async { Ok(()) }),
};

fn queued_job(id: RequestId) -> Job {
    let job = Job {
        def: &QUEUED,
        params: Arc::from("[]"),
        trace: None,
        delay: None,
        record: None,
        due: None,
    };
    stored_job(job, id, None, None)
}

/// A submit-only instance's producer never takes the names of the queues committed to:
/// they are kept once each, not once per call (a leak of one name per queued call).
#[test]
fn committed_queues_are_kept_once_each_with_no_producer() {
    let (dispatcher, _inbox) = Dispatcher::new(4);
    for id in 0..10_000 {
        let _ = dispatcher.try_dispatch(queued_job(id));
    }
    let committed = dispatcher
        .signals
        .queues_committed
        .lock()
        .expect("committed queues' lock")
        .len();
    assert_eq!(committed, 1);
}

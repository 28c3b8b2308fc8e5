//! The checker's own tests: a healthy history passes, and each kind of broken one fails.
use super::*;

pub(super) fn exec(
    run_id: &str,
    id: i64,
    process: &str,
    started: i64,
    ended: Option<i64>,
    outcome: &str,
) -> Execution {
    Execution {
        run_id: run_id.into(),
        request_id: id,
        key: None,
        process: process.into(),
        attempt: 1,
        started,
        ended,
        outcome: outcome.into(),
        plan: None,
    }
}

pub(super) fn receipt(id: i64, key: Option<&str>, outcome: &str) -> ReceiptRow {
    ReceiptRow {
        request_id: Some(id),
        key: key.map(String::from),
        outcome: outcome.into(),
        via: "auto".into(),
        source: "submitter".into(),
        recorded: 0,
        deadline_ms: None,
    }
}

pub(super) fn process(name: &str, started: i64, exited: i64, killed: bool) -> Process {
    Process {
        name: name.into(),
        instance: instance_of(name).into(),
        started,
        exited: Some(exited),
        killed,
        clean_exit: !killed,
        clock_offset_ms: 0,
    }
}

/// A healthy run: w1 killed at 1,000 while it ran request 1, which ran again on w2
/// after the lease; request 2 failed once on purpose; request 3 keyed, called twice;
/// a rolled-back call 4 never ran; both instances ran their probes at the end.
pub(super) fn healthy() -> Run {
    let mut keyed = exec("w2.g1-1", 3, "w2.g1", 200, Some(250), "ok");
    keyed.key = Some("k".into());
    Run {
        backend: "unit".into(),
        executions: vec![
            exec("w1.g1-0", 1, "w1.g1", 900, None, "running"),
            exec("w2.g1-0", 1, "w2.g1", 4_100, Some(4_200), "ok"),
            exec("w2.g1-2", 2, "w2.g1", 100, Some(150), "failed"),
            exec("w2.g1-3", 2, "w2.g1", 300, Some(350), "ok"),
            keyed,
            exec("w1.g2-0", 10, "w1.g2", 9_100, Some(9_120), "ok"),
            exec("w2.g1-4", 11, "w2.g1", 9_100, Some(9_120), "ok"),
        ],
        receipts: vec![
            receipt(1, None, "queued"),
            receipt(2, None, "queued"),
            receipt(3, Some("k"), "queued"),
            receipt(3, Some("k"), "existing"),
            receipt(4, None, "rolled_back"),
            receipt(10, None, "queued"),
            receipt(11, None, "queued"),
        ],
        faults: vec![Fault {
            kind: FaultKind::Kill,
            instance: "w1".into(),
            started: 1_000,
            ended: 1_005,
            detail: String::new(),
        }],
        processes: vec![
            process("w1.g1", 0, 1_005, true),
            process("w1.g2", 2_000, 10_000, false),
            process("w2.g1", 0, 10_000, false),
        ],
        final_phase_start: 9_000,
        ..Run::default()
    }
}

pub(super) fn broken(change: impl FnOnce(&mut Run)) -> Violations {
    let mut run = healthy();
    change(&mut run);
    check(&run).expect_err("the checker accepted a broken history")
}

#[test]
fn a_healthy_history_passes() {
    let summary = check(&healthy()).expect("healthy");
    assert_eq!(summary.requests, 5);
    assert_eq!(summary.reruns.values().sum::<usize>(), 2);
    assert_eq!(summary.reruns["its instance was killed"], 1);
    assert_eq!(summary.duplicate_calls, 1);
}

#[test]
fn a_lost_request_fails() {
    let v = broken(|run| run.executions.retain(|e| e.request_id != 2));
    assert!(v.has("a committed request never succeeded (lost)"), "{v}");
    let v = broken(|run| {
        run.left_in_queue.push(Left {
            id: 2,
            executor: "chaos::work".into(),
            status: "failed".into(),
            exec_count: 1,
            last_error: None,
        })
    });
    assert!(v.has("a record left in async_req after the drain"), "{v}");
}

#[test]
fn overlapping_executions_fail() {
    // The killed instance's execution is taken as running until the kill (1,005).
    let v = broken(|run| run.executions[1].started = 1_002);
    assert!(v.has("two executions of one request overlapped"), "{v}");
    let v = broken(|run| run.executions[3].started = 140);
    assert!(v.has("two executions of one request overlapped"), "{v}");
}

#[test]
fn two_requests_for_a_key_fail() {
    let v = broken(|run| run.receipts.push(receipt(2, Some("k"), "queued")));
    assert!(v.has("two requests for one key"), "{v}");
    let v = broken(|run| run.receipts.push(receipt(1, Some("k"), "existing")));
    assert!(
        v.has("a duplicate call named another request than its key's"),
        "{v}"
    );
}

#[test]
fn an_unexplained_re_execution_fails() {
    // Request 11 runs twice on w2, which had no fault.
    let v = broken(|run| {
        run.executions
            .push(exec("w2.g1-9", 11, "w2.g1", 9_500, Some(9_600), "ok"))
    });
    assert!(
        v.has("a re-execution without a fault or failure to explain it"),
        "{v}"
    );
    // A fault on the instance that ran it again does not explain it.
    let v = broken(|run| run.faults[0].instance = "w2".into());
    assert!(
        v.has("a re-execution without a fault or failure to explain it"),
        "{v}"
    );
    // Nor does latency.
    let v = broken(|run| run.faults[0].kind = FaultKind::Latency);
    assert!(
        v.has("a re-execution without a fault or failure to explain it"),
        "{v}"
    );
}

#[test]
fn a_database_stall_explains_a_re_execution_only_within_its_window() {
    // Request 11 ran at 9,100-9,120 on w2 and again at 9,500: no injected fault, but the
    // database itself did not commit for anyone from 9,200 to 9,450.
    let rerun = |run: &mut Run| {
        run.executions
            .push(exec("w2.g1-9", 11, "w2.g1", 9_500, Some(9_600), "ok"))
    };
    let mut run = healthy();
    rerun(&mut run);
    run.db_stalls = vec![(9_200, 9_450)];
    let summary = check(&run).unwrap_or_else(|v| panic!("{v}"));
    assert_eq!(
        summary
            .reruns
            .get("the database stalled for every instance"),
        Some(&1)
    );
    assert_eq!((summary.db_stalls, summary.longest_db_stall), (1, 250));
    // A stall before the first execution or after the second explains nothing.
    for stall in [(8_000, 9_050), (9_550, 12_000)] {
        let v = broken(|run| {
            rerun(run);
            run.db_stalls = vec![stall];
        });
        assert!(
            v.has("a re-execution without a fault or failure to explain it"),
            "{stall:?}: {v}"
        );
    }
}

#[test]
fn uncommitted_runs_fail() {
    let v = broken(|run| {
        run.executions
            .push(exec("w2.g1-8", 4, "w2.g1", 500, Some(510), "ok"))
    });
    assert!(v.has("a rolled-back request ran"), "{v}");
    let v = broken(|run| {
        run.executions
            .push(exec("w2.g1-8", 99, "w2.g1", 500, Some(510), "ok"))
    });
    assert!(v.has("a request nobody committed ran"), "{v}");
}

/// A call outside a transaction whose write is unknown (`unconfirmed`) may have written
/// its request: one request without a receipt may run for each such call (for a keyed
/// call, a request of its key), no more.
#[test]
fn an_unconfirmed_call_explains_one_request_without_a_receipt() {
    let unconfirmed = |key: Option<&str>| ReceiptRow {
        request_id: None,
        key: key.map(String::from),
        outcome: "unconfirmed".into(),
        via: "auto".into(),
        source: "submitter".into(),
        recorded: 0,
        deadline_ms: None,
    };
    let mut run = healthy();
    run.receipts.push(unconfirmed(None));
    run.executions
        .push(exec("w2.g1-8", 99, "w2.g1", 500, Some(510), "ok"));
    let summary = check(&run).expect("one unkeyed request for one unconfirmed call");
    assert_eq!((summary.unconfirmed, summary.unconfirmed_ran), (1, 1));
    // Two requests without a receipt for one unconfirmed call: one is unexplained.
    run.executions
        .push(exec("w2.g1-9", 98, "w2.g1", 520, Some(530), "ok"));
    let v = check(&run).expect_err("two requests for one call");
    assert!(v.has("a request nobody committed ran"), "{v}");
    // A keyed one explains a request of its key only.
    let mut run = healthy();
    run.receipts.push(unconfirmed(Some("kx")));
    let mut keyed = exec("w2.g1-8", 99, "w2.g1", 500, Some(510), "ok");
    keyed.key = Some("kx".into());
    run.executions.push(keyed);
    check(&run).expect("the request of the unconfirmed call's key");
    run.executions
        .push(exec("w2.g1-9", 98, "w2.g1", 520, Some(530), "ok"));
    let v = check(&run).expect_err("an unkeyed request for a keyed call");
    assert!(v.has("a request nobody committed ran"), "{v}");
}

#[test]
fn a_dead_or_idle_instance_at_the_end_fails() {
    let v = broken(|run| run.executions.retain(|e| e.process != "w1.g2"));
    assert!(
        v.has("an instance ran nothing after the faults ended"),
        "{v}"
    );
    let v = broken(|run| run.processes[1].exited = Some(8_000));
    assert!(v.has("an instance was not running at the end"), "{v}");
    let v = broken(|run| run.processes[2].clean_exit = false);
    assert!(v.has("a process did not stop gracefully on SIGTERM"), "{v}");
}

#[test]
fn failed_calls_and_panics_fail() {
    let v = broken(|run| {
        run.receipts.push(ReceiptRow {
            request_id: None,
            key: Some("x".into()),
            outcome: "error".into(),
            via: "race-auto".into(),
            source: "submitter".into(),
            recorded: 0,
            deadline_ms: None,
        })
    });
    assert!(
        v.has("a call failed or returned an unexpected receipt"),
        "{v}"
    );
    let v = broken(|run| run.panics.push("w1.g1: thread panicked".into()));
    assert!(v.has("a process panicked"), "{v}");
}

//! The checker's tests of its rules for three-attempt requests, in-memory strategies and
//! keyed `SyncSave` calls: healthy histories pass, and each broken one fails.
use super::tests::{exec, healthy, receipt};
use super::*;

// The three-attempt requests (`chaos::work3`).

fn bounded_run(id: i64, attempt: i32, started: i64, outcome: &str, plan: &str) -> Execution {
    let mut e = exec(
        &format!("w2.g1-b{id}-{attempt}-{started}"),
        id,
        "w2.g1",
        started,
        Some(started + 10),
        outcome,
    );
    e.attempt = attempt;
    e.plan = Some(plan.into());
    e
}

fn dead(id: i64, exec_count: i32) -> Left {
    Left {
        id,
        executor: "chaos::work3".into(),
        status: "dead".into(),
        exec_count,
        last_error: Some("gave up after 3 attempts".into()),
    }
}

fn log(id: i64, attempt: i32, outcome: &str) -> AttemptLog {
    AttemptLog {
        request_id: id,
        attempt,
        outcome: outcome.into(),
        error: None,
    }
}

/// Request 20 fails every attempt and is left dead; 21 fails attempts 1 and 2 and then
/// succeeds; 22 fails attempt 1, its attempt 2 is rescued after w1's kill (no run: the
/// process died between claim and start), its attempt 3 stopped by a lost lease: dead.
fn with_bounded() -> Run {
    let mut run = healthy();
    for id in [20, 21, 22] {
        run.receipts.push(receipt(id, None, "queued"));
    }
    run.executions.extend([
        bounded_run(20, 1, 500, "failed", "3:1,2,3"),
        bounded_run(20, 2, 600, "failed", "3:1,2,3"),
        bounded_run(20, 3, 700, "failed", "3:1,2,3"),
        bounded_run(21, 1, 500, "failed", "3:1,2"),
        bounded_run(21, 2, 600, "failed", "3:1,2"),
        bounded_run(21, 3, 700, "ok", "3:1,2"),
        bounded_run(22, 1, 500, "failed", "3:1"),
        bounded_run(22, 3, 5_000, "cancelled", "3:1"),
    ]);
    run.left_in_queue.extend([dead(20, 3), dead(22, 3)]);
    run.attempt_logs.extend([
        log(20, 1, "error"),
        log(20, 2, "error"),
        log(20, 3, "error"),
        log(22, 1, "error"),
        log(22, 2, "lease_expired"),
        log(22, 3, "error"),
    ]);
    run
}

#[test]
fn three_attempt_requests_pass_when_every_attempt_is_explained() {
    let summary = check(&with_bounded()).unwrap_or_else(|v| panic!("{v}"));
    let b = &summary.bounded;
    assert_eq!(
        (b.succeeded, b.dead_as_planned, b.dead_after_faults),
        (1, 1, 1)
    );
    assert_eq!(b.attempts_lost_to_faults, 2);
}

#[test]
fn a_run_past_max_attempts_fails() {
    let mut run = with_bounded();
    run.executions
        .push(bounded_run(20, 4, 800, "failed", "3:1,2,3"));
    let v = check(&run).expect_err("accepted a fourth attempt");
    assert!(v.has("a run's attempt is past max_attempts"), "{v}");
}

#[test]
fn a_dead_request_with_too_few_attempts_fails() {
    let mut run = with_bounded();
    run.left_in_queue[0].exec_count = 2;
    let v = check(&run).expect_err("accepted dead after 2 counted attempts");
    assert!(
        v.has("a dead request has not had max_attempts attempts counted"),
        "{v}"
    );
}

#[test]
fn a_dead_request_planned_to_succeed_needs_faults_for_its_attempts() {
    // Request 21 (fails 1 and 2) left dead after its third attempt ran fine: unexplained.
    let mut run = with_bounded();
    run.left_in_queue.push(dead(21, 3));
    let v = check(&run).expect_err("accepted a dead request whose last attempt succeeded");
    assert!(
        v.has("a request planned to succeed went dead without a fault to explain an attempt"),
        "{v}"
    );
    // Request 22's rescued attempt is not logged: unexplained.
    let mut run = with_bounded();
    run.attempt_logs
        .retain(|l| (l.request_id, l.attempt) != (22, 2));
    let v = check(&run).expect_err("accepted an attempt counted for nothing");
    assert!(
        v.has("a request planned to succeed went dead without a fault to explain an attempt"),
        "{v}"
    );
    // Dead with every attempt planned, but attempt 3 never ran nor was rescued.
    let mut run = with_bounded();
    run.executions
        .retain(|e| !(e.request_id == 20 && e.attempt == 3));
    let v = check(&run).expect_err("accepted an attempt that neither ran nor was rescued");
    assert!(
        v.has("an attempt of a dead request is explained by no failure or fault"),
        "{v}"
    );
}

#[test]
fn a_three_attempt_request_neither_successful_nor_dead_is_lost() {
    let mut run = with_bounded();
    run.left_in_queue.retain(|l| l.id != 20);
    let v = check(&run).expect_err("accepted a lost request");
    assert!(v.has("a committed request never succeeded (lost)"), "{v}");
    // A dead record of the unbounded executor is left in the queue.
    let mut run = with_bounded();
    run.left_in_queue[0].executor = "chaos::work".into();
    let v = check(&run).expect_err("accepted a dead unbounded request");
    assert!(v.has("a record left in async_req after the drain"), "{v}");
}

// In-memory strategies and keyed SyncSave.

fn call(id: &str, strategy: &str, state: &str, receipt: &str, source: &str) -> MemCall {
    MemCall {
        call_id: id.into(),
        strategy: strategy.into(),
        key: None,
        seq: 0,
        tx_id: None,
        state: state.into(),
        receipt: Some(receipt.into()).filter(|r: &String| !r.is_empty()),
        receipt_id: None,
        source: source.into(),
    }
}

fn mem_run(call_id: &str, request_id: Option<i64>, process: &str, outcome: &str) -> MemRun {
    MemRun {
        run_id: format!("{process}-{call_id}-{request_id:?}-{outcome}"),
        call_id: call_id.into(),
        strategy: String::new(),
        request_id,
        process: process.into(),
        attempt: if request_id.is_some() { 2 } else { 1 },
        started: 100,
        ended: Some(110),
        outcome: outcome.into(),
    }
}

fn keyed(mut c: MemCall, key: &str, seq: i64, receipt_id: Option<i64>) -> MemCall {
    c.key = Some(key.into());
    c.seq = seq;
    c.receipt_id = receipt_id;
    c
}

/// On w2 (alive): an Async, a Thread, an AsyncSave that succeeded in memory, an AsyncSave
/// that failed and succeeded from its retry record (request 50), rolled-back calls that
/// never ran; on w1.g1 (killed during the faults): a committed Async and AsyncSave lost
/// with it. Keyed SyncSave: `a` ran and committed, then answered Existing; `b` ran in a
/// rolled-back transaction, then ran again and committed; `c` failed, was written for
/// retry (request 51) and succeeded there, then answered Existing.
fn with_memory() -> Run {
    let mut run = healthy();
    run.mem_calls = vec![
        call("w2.g1-m1", "Async", "committed", "in_memory", "w2.g1"),
        call("w2.g1-m2", "Thread", "committed", "in_memory", "w2.g1"),
        call("w2.g1-m3", "AsyncSave", "committed", "in_memory", "w2.g1"),
        call("w2.g1-m4", "AsyncSave", "committed", "in_memory", "w2.g1"),
        call("w2.g1-m5", "Async", "rolled_back", "in_memory", "w2.g1"),
        call("w2.g1-m6", "AsyncSave", "rolled_back", "in_memory", "w2.g1"),
        call("w2.g1-m7", "Thread", "commit_error", "in_memory", "w2.g1"),
        call("w1.g1-m1", "Async", "committed", "in_memory", "w1.g1"),
        call("w1.g1-m2", "AsyncSave", "committed", "in_memory", "w1.g1"),
        keyed(
            call("submitter-s1", "SyncSave", "committed", "ran", "submitter"),
            "a",
            1,
            None,
        ),
        keyed(
            call(
                "submitter-s2",
                "SyncSave",
                "committed",
                "existing",
                "submitter",
            ),
            "a",
            2,
            None,
        ),
        keyed(
            call(
                "submitter-s3",
                "SyncSave",
                "rolled_back",
                "ran",
                "submitter",
            ),
            "b",
            3,
            None,
        ),
        keyed(
            call("submitter-s4", "SyncSave", "committed", "ran", "submitter"),
            "b",
            4,
            None,
        ),
        keyed(
            call(
                "submitter-s5",
                "SyncSave",
                "committed",
                "deferred",
                "submitter",
            ),
            "c",
            5,
            Some(51),
        ),
        keyed(
            call(
                "submitter-s6",
                "SyncSave",
                "committed",
                "existing",
                "submitter",
            ),
            "c",
            6,
            Some(51),
        ),
    ];
    run.mem_runs = vec![
        mem_run("w2.g1-m1", None, "w2.g1", "ok"),
        mem_run("w2.g1-m2", None, "w2.g1", "failed"),
        mem_run("w2.g1-m3", None, "w2.g1", "ok"),
        mem_run("w2.g1-m4", None, "w2.g1", "failed"),
        mem_run("w2.g1-m4", Some(50), "w1.g2", "ok"),
        mem_run("submitter-s1", None, "submitter", "ok"),
        mem_run("submitter-s3", None, "submitter", "ok"),
        mem_run("submitter-s4", None, "submitter", "ok"),
        mem_run("submitter-s5", None, "submitter", "failed"),
        mem_run("submitter-s5", Some(51), "w2.g1", "ok"),
    ];
    run
}

#[test]
fn in_memory_and_sync_save_calls_pass_when_they_keep_their_strategy() {
    let summary = check(&with_memory()).unwrap_or_else(|v| panic!("{v}"));
    let m = &summary.memory;
    assert_eq!((m.lost_with_process, m.logged_lost), (2, 0));
    assert_eq!(m.async_save_retried, 1);
    assert_eq!(
        (m.sync_repeats_refused, m.sync_ran_then_rolled_back),
        (2, 1)
    );
}

fn broken_memory(change: impl FnOnce(&mut Run)) -> Violations {
    let mut run = with_memory();
    change(&mut run);
    check(&run).expect_err("the checker accepted a broken history")
}

#[test]
fn rolled_back_in_memory_calls_that_ran_fail() {
    for id in ["w2.g1-m5", "w2.g1-m6"] {
        let v = broken_memory(|run| run.mem_runs.push(mem_run(id, None, "w2.g1", "ok")));
        assert!(
            v.has("an in-memory call that was rolled back or refused ran"),
            "{id}: {v}"
        );
    }
    let v = broken_memory(|run| run.mem_runs.push(mem_run("w9-m1", None, "w2.g1", "ok")));
    assert!(v.has("a run of a call nobody made"), "{v}");
}

#[test]
fn async_and_thread_calls_run_at_most_once_and_run_when_committed() {
    for id in ["w2.g1-m1", "w2.g1-m2"] {
        let v = broken_memory(|run| run.mem_runs.push(mem_run(id, None, "w1.g2", "ok")));
        assert!(
            v.has("an Async or Thread call ran more than once"),
            "{id}: {v}"
        );
    }
    // One whose commit's answer was lost may have run, once.
    let mut run = with_memory();
    run.mem_runs.push(mem_run("w2.g1-m7", None, "w2.g1", "ok"));
    check(&run).unwrap_or_else(|v| panic!("{v}"));
    run.mem_runs.push(mem_run("w2.g1-m7", None, "w1.g2", "ok"));
    let v = check(&run).expect_err("accepted two runs of a Thread call");
    assert!(v.has("an Async or Thread call ran more than once"), "{v}");
    let v = broken_memory(|run| run.mem_runs.retain(|r| r.call_id != "w2.g1-m1"));
    assert!(v.has("a committed Async or Thread call never ran"), "{v}");
}

#[test]
fn async_save_calls_run_until_success() {
    // Its retry record's run is missing, and w2 did not die.
    let v = broken_memory(|run| run.mem_runs.retain(|r| r.request_id != Some(50)));
    assert!(v.has("a committed AsyncSave call never succeeded"), "{v}");
    // Unless w2 logged that the retry record was lost.
    let mut run = with_memory();
    run.mem_runs.retain(|r| r.request_id != Some(50));
    run.lost_memory_calls.push("w2.g1-m4".into());
    let summary = check(&run).unwrap_or_else(|v| panic!("{v}"));
    assert_eq!(summary.memory.logged_lost, 1);
    // A call of a dead process that reached the store must succeed there.
    let v = broken_memory(|run| {
        run.mem_runs
            .push(mem_run("w1.g1-m2", Some(52), "w2.g1", "failed"))
    });
    assert!(v.has("a committed AsyncSave call never succeeded"), "{v}");
    // Run again after it succeeded in memory.
    let v = broken_memory(|run| {
        run.mem_runs
            .push(mem_run("w2.g1-m3", Some(53), "w2.g1", "ok"))
    });
    assert!(
        v.has("an AsyncSave call ran again after it succeeded in memory"),
        "{v}"
    );
}

#[test]
fn a_keyed_sync_save_that_runs_again_after_its_key_committed_fails() {
    // `a` committed with s1; s2 ran its body anyway.
    let v = broken_memory(|run| {
        run.mem_runs
            .push(mem_run("submitter-s2", None, "submitter", "ok"))
    });
    assert!(
        v.has("a keyed SyncSave ran again after its key was committed"),
        "{v}"
    );
    assert!(
        v.has("a SyncSave call answered Existing ran its body"),
        "{v}"
    );
    // A third call with `b` after s4 committed, answered Ran.
    let v = broken_memory(|run| {
        run.mem_calls.push(keyed(
            call(
                "submitter-s7",
                "SyncSave",
                "rolled_back",
                "ran",
                "submitter",
            ),
            "b",
            7,
            None,
        ));
        run.mem_runs
            .push(mem_run("submitter-s7", None, "submitter", "ok"));
    });
    assert!(
        v.has("a keyed SyncSave ran again after its key was committed"),
        "{v}"
    );
    // The committed retry record of `c` never succeeded.
    let v = broken_memory(|run| run.mem_runs.retain(|r| r.request_id != Some(51)));
    assert!(
        v.has("a committed SyncSave retry record never succeeded"),
        "{v}"
    );
    // A rolled-back one ran.
    let v = broken_memory(|run| {
        run.mem_calls[13].state = "rolled_back".into();
        run.mem_calls[14].receipt = Some("ran".into());
        run.mem_calls[14].receipt_id = None;
        run.mem_runs
            .push(mem_run("submitter-s6", None, "submitter", "ok"));
    });
    assert!(v.has("a rolled-back SyncSave retry record ran"), "{v}");
}

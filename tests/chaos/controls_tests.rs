//! The checker's tests of its rules for limits, cancels and deadlines: a healthy history
//! passes, and each broken one fails.
use super::controls::{CancelRow, LIMITED_PLAN, STOP_BOUND_MS};
use super::tests::{exec, healthy, receipt};
use super::*;

fn limited(
    run_id: &str,
    id: i64,
    process: &str,
    started: i64,
    ended: Option<i64>,
    outcome: &str,
) -> Execution {
    let mut e = exec(run_id, id, process, started, ended, outcome);
    e.plan = Some(LIMITED_PLAN.into());
    e
}

/// The execution `run_id` of `run`, to change.
fn execution<'r>(run: &'r mut Run, run_id: &str) -> &'r mut Execution {
    run.executions
        .iter_mut()
        .find(|e| e.run_id == run_id)
        .unwrap()
}

fn cancel(id: i64, asked: i64, outcome: &str) -> CancelRow {
    CancelRow {
        request_id: id,
        asked,
        answered: asked + 10,
        outcome: outcome.into(),
    }
}

fn left(id: i64, status: &str, error: &str) -> Left {
    Left {
        id,
        executor: "chaos::work".into(),
        status: status.into(),
        exec_count: 1,
        last_error: Some(error.into()),
    }
}

/// Requests 20-23 of the queue of two: 23 on w1 (killed at 1,000: the store no longer
/// counts its run once its lease ended), 20 and 21 beside it, 22 when 20 ended, 23 again
/// on w2. Request 24 delayed and cancelled while it waited; 25 cancelled while it ran (it
/// stopped 500 ms later); 26 cancelled too late (it had succeeded: "not_found"); 30
/// claimed just before its cancel, its body's first line just after, succeeded; 31
/// claimed before its cancel too, its body started 2.5 s after the answer (the claim's
/// answer came late), succeeded.
/// Request 27 with a deadline of 1 s ran in time; 28's passed while it waited (`dead`);
/// 29's while it ran (stopped, `cancelled`).
fn with_controls() -> Run {
    let mut run = healthy();
    run.executions.extend([
        limited("l-2", 23, "w1.g1", 950, None, "running"),
        limited("l-0", 20, "w2.g1", 1_000, Some(1_300), "ok"),
        limited("l-1", 21, "w2.g1", 1_002, Some(1_400), "ok"),
        limited("l-3", 22, "w2.g1", 1_300, Some(1_600), "ok"),
        limited("l-4", 23, "w2.g1", 4_000, Some(4_100), "ok"),
        exec("c-0", 25, "w2.g1", 2_000, Some(2_510), "cancelled"),
        exec("c-1", 26, "w2.g1", 2_000, Some(2_100), "ok"),
        exec("c-3", 30, "w2.g1", 2_030, Some(2_070), "ok"),
        exec("c-5", 31, "w1.g2", 4_510, Some(4_600), "ok"),
        exec("d-0", 27, "w2.g1", 3_100, Some(3_200), "ok"),
        exec("d-1", 29, "w2.g1", 3_100, Some(4_600), "cancelled"),
    ]);
    for id in 20..=31 {
        run.receipts.push(receipt(id, None, "queued"));
    }
    for (id, recorded) in [(27, 3_000), (28, 3_000), (29, 3_000)] {
        let r = run
            .receipts
            .iter_mut()
            .find(|r| r.request_id == Some(id))
            .unwrap();
        r.recorded = recorded;
        r.deadline_ms = Some(1_000);
    }
    run.cancels = vec![
        cancel(24, 2_000, "cancelled"),
        cancel(25, 2_000, "stop_asked"),
        cancel(26, 2_200, "not_found"),
        cancel(30, 2_000, "stop_asked"),
        cancel(31, 2_000, "stop_asked"),
    ];
    run.left_in_queue = vec![
        left(24, "cancelled", "cancelled"),
        left(
            25,
            "cancelled",
            "cancelled while running: the lease was lost",
        ),
        left(28, "dead", "deadline passed while it waited"),
        left(
            29,
            "cancelled",
            "deadline passed while running: stopped early",
        ),
    ];
    run
}

#[test]
fn controls_pass_when_held() {
    let summary = check(&with_controls()).unwrap_or_else(|v| panic!("{v}"));
    let c = &summary.controls;
    assert_eq!(c.limited_runs, 5);
    assert_eq!((c.limited_peak, c.limited_peak_held), (3, 2));
    assert_eq!((c.cancels["cancelled"], c.cancels["stop_asked"]), (1, 3));
    assert_eq!(c.cancelled_running, 3);
    assert_eq!(c.cancelled_late_start, 1);
    assert_eq!(c.longest_stop_ms, 500);
    assert_eq!(
        (
            c.deadlines,
            c.deadline_succeeded,
            c.deadline_dead,
            c.deadline_stopped
        ),
        (3, 1, 1, 1)
    );
}

fn broken(change: impl FnOnce(&mut Run)) -> Violations {
    let mut run = with_controls();
    change(&mut run);
    check(&run).expect_err("a broken control rule passed")
}

#[test]
fn a_queue_over_its_limit_fails() {
    // The run on w1 had held its record after all: it ended as it should.
    let v = broken(|run| {
        let e = execution(run, "l-2");
        (e.ended, e.outcome) = (Some(1_004), "ok".into());
    });
    assert!(
        v.has("more bodies of a limited queue ran at once than its limit"),
        "{v}"
    );
}

#[test]
fn a_run_after_a_cancel_fails() {
    let v = broken(|run| {
        run.executions
            .push(exec("c-2", 24, "w2.g1", 2_500, Some(2_600), "ok"))
    });
    assert!(v.has("a request ran after its cancel was answered"), "{v}");
    // Asked to stop while running, then run again (a rescue that ignored the stop).
    let v = broken(|run| {
        run.executions
            .push(exec("c-4", 25, "w1.g2", 6_000, Some(6_100), "ok"))
    });
    assert!(
        v.has("a request ran again after a stop was asked of it"),
        "{v}"
    );
    let v = broken(|run| {
        let e = execution(run, "c-0");
        e.ended = Some(2_010 + STOP_BOUND_MS + 1);
    });
    assert!(
        v.has("a running request went on long after its cancel"),
        "{v}"
    );
    let v = broken(|run| run.left_in_queue[0].status = "dead".into());
    assert!(v.has("a cancelled request did not end cancelled"), "{v}");
}

#[test]
fn a_late_start_after_a_stop_is_the_holders_only() {
    // The late-starting holder of 31 ran, then it ran again (a rescue or a retry).
    let v = broken(|run| {
        run.executions
            .push(exec("c-6", 31, "w2.g1", 5_000, Some(5_100), "ok"))
    });
    assert!(
        v.has("a request ran again after a stop was asked of it"),
        "{v}"
    );
    // 25's run held it at the answer: a run starting later is another claim's.
    let v = broken(|run| {
        run.executions
            .push(exec("c-7", 25, "w1.g2", 4_000, Some(4_100), "ok"))
    });
    assert!(
        v.has("a request ran again after a stop was asked of it"),
        "{v}"
    );
    // The late holder went on long after its start, never told.
    let v = broken(|run| {
        let e = execution(run, "c-5");
        e.ended = Some(4_510 + STOP_BOUND_MS + 1);
    });
    assert!(
        v.has("a running request went on long after its cancel"),
        "{v}"
    );
}

#[test]
fn a_run_past_its_deadline_fails() {
    let v = broken(|run| {
        run.executions
            .push(exec("d-2", 28, "w2.g1", 5_100, Some(5_200), "ok"))
    });
    assert!(v.has("a request started after its deadline"), "{v}");
    let v = broken(|run| {
        let e = execution(run, "d-1");
        e.ended = Some(4_000 + STOP_BOUND_MS + 1);
    });
    assert!(v.has("a request ran on long after its deadline"), "{v}");
    // Dead, but not by its deadline: lost.
    let v = broken(|run| run.left_in_queue[2].last_error = Some("boom".into()));
    assert!(
        v.has("a request with a deadline neither succeeded nor ended by it"),
        "{v}"
    );
    assert!(v.has("a committed request never succeeded (lost)"), "{v}");
}

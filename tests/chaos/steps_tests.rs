//! The checker's tests of its rules for durable steps: a healthy history passes, and each
//! broken one fails.
use super::steps::StepRow;
use super::tests::healthy;
use super::*;

fn row(run_id: &str, id: i64, step: &str, kind: &str, nonce: i64, at: i64) -> StepRow {
    StepRow {
        run_id: run_id.into(),
        request_id: id,
        step: step.into(),
        kind: kind.into(),
        nonce,
        at,
    }
}

/// Request 30: run `a` (killed inside `charge`) ran `reserve` and saw it, ran `charge`
/// without seeing it; run `b` skipped `reserve` (saw its kept value), ran `charge` again
/// and `ship`.
fn with_steps() -> Run {
    let mut run = healthy();
    run.steps.extend([
        row("a", 30, "reserve", "ran", 11, 100),
        row("a", 30, "reserve", "saw", 11, 110),
        row("a", 30, "charge", "ran", 12, 120),
        row("b", 30, "reserve", "saw", 11, 300),
        row("b", 30, "charge", "ran", 22, 310),
        row("b", 30, "charge", "saw", 22, 320),
        row("b", 30, "ship", "ran", 23, 330),
        row("b", 30, "ship", "saw", 23, 340),
    ]);
    run
}

#[test]
fn steps_pass_when_finished_ones_are_skipped() {
    let summary = check(&with_steps()).unwrap_or_else(|v| panic!("{v}"));
    assert_eq!(summary.steps.requests, 1);
    assert_eq!(summary.steps.runs, 4);
    assert_eq!(summary.steps.skipped, 1);
    assert_eq!(summary.steps.rerun_before_kept, 1);
}

fn broken(change: impl FnOnce(&mut Run)) -> Violations {
    let mut run = with_steps();
    change(&mut run);
    check(&run).expect_err("a broken step rule passed")
}

#[test]
fn a_finished_step_that_runs_again_fails() {
    let v = broken(|run| run.steps.push(row("b", 30, "reserve", "ran", 31, 290)));
    assert!(v.has("a finished step ran again"), "{v}");
}

#[test]
fn a_changed_or_foreign_value_fails() {
    let v = broken(|run| run.steps[3].nonce = 99);
    assert!(v.has("a step's kept value changed"), "{v}");
    let v = broken(|run| {
        run.steps[1].nonce = 98;
        run.steps[3].nonce = 98;
    });
    assert!(v.has("a step's value is none of its runs'"), "{v}");
}

#[test]
fn steps_seen_out_of_order_fail() {
    let v = broken(|run| {
        run.steps
            .retain(|r| !(r.run_id == "b" && r.step == "charge"))
    });
    assert!(v.has("a body saw its steps out of order"), "{v}");
}

/// A step whose value could not be kept (its statement got no answer within its bound,
/// under latency, which explains no re-execution by itself) fails the attempt: the run
/// after it is explained by that failure.
#[test]
fn a_step_error_explains_the_next_attempt() {
    let mut run = healthy();
    run.executions.extend([
        super::tests::exec("w2.g1-8", 31, "w2.g1", 500, Some(900), "step_error"),
        super::tests::exec("w2.g1-9", 31, "w2.g1", 1_500, Some(1_600), "ok"),
    ]);
    run.receipts.push(super::tests::receipt(31, None, "queued"));
    let summary = check(&run).unwrap_or_else(|v| panic!("{v}"));
    assert_eq!(summary.reruns["the earlier attempt failed"], 2);
}

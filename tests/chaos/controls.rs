//! The checker's rules for the controls of issue 20: a queue's limit, cancels and
//! deadlines, held to under the faults.
//!
//! - **The limit** (`chaos::limited`, a queue of [`LIMITED_CONCURRENCY`] over every
//!   instance): at no moment do more of its bodies run than the limit, but for bodies
//!   whose record had been taken from them (their lease lost: they end `cancelled`, or
//!   never end because their process was killed), which the store no longer counts.
//! - **A cancel** (asked by the submitter, which runs no workers) answered
//!   `Cancelled` (the request was waiting): no execution of it starts after the answer,
//!   and it ends `cancelled`. Answered `StopAsked` (a claim held it): only the run of
//!   that claim runs at or after the cancel: one that started before the answer (or
//!   within [`START_SLACK_MS`] of it), or, when none had, one that starts later (the
//!   claim's answer or a worker came late); it ends within [`STOP_BOUND_MS`] of the
//!   answer or of its start, whichever is later (told by the stops sweep within about a
//!   second, or by its lease if its instance is cut off) or with its process; the
//!   request is not run again, and ends `cancelled` unless that run succeeded.
//! - **A deadline** (`.deadline(d)`, its receipt written at `recorded`, after the call's
//!   commit, so the deadline is at or before `recorded + d`): no execution starts after
//!   it (but for [`START_SLACK_MS`] between a claim made in time and its body's first
//!   line); one running at it ends within [`STOP_BOUND_MS`] of it; and the request ends
//!   succeeded, `dead` ("deadline passed while it waited") or `cancelled` ("deadline
//!   passed while running").
//!
//! Requests that end cancelled or dead by these rules are [`settled`]: the rule that
//! every committed request succeeds leaves them out.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::fmt;

use super::{Execution, Left, Process, Run, Violation};
use crate::cluster::LEASE_MS;

/// The limit of `chaos::limited`'s queue (`examples/chaos.rs`).
pub const LIMITED_CONCURRENCY: usize = 2;

/// The plan a `chaos::limited` body writes into the history.
pub const LIMITED_PLAN: &str = "limited";

/// How long after a cancel's answer, or a deadline, a body running then may go on: a
/// lease (an instance cut off learns it lost its record within it) and two seconds (the
/// stops sweep runs every second; the body's history row is written a moment later).
pub const STOP_BOUND_MS: i64 = LEASE_MS as i64 + 2_000;

/// Between a claim made before a deadline (or a cancel) and its body's first line (the
/// claim's answer, the worker's hand-over, the history row's clock read).
pub const START_SLACK_MS: i64 = 1_000;

/// One `chaos_cancels` row: a cancel the submitter asked, and its answer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CancelRow {
    pub request_id: i64,
    /// Unix ms before it was asked and after it was answered.
    pub asked: i64,
    pub answered: i64,
    /// `cancelled` (it was waiting), `stop_asked` (it was running), `not_found`,
    /// `refused` or `error`.
    pub outcome: String,
}

/// What the control rules counted.
#[derive(Debug, Default)]
pub struct Counts {
    pub limited_runs: usize,
    /// The most `chaos::limited` bodies seen at once, and the most of them whose record
    /// was still theirs.
    pub limited_peak: usize,
    pub limited_peak_held: usize,
    /// Cancels by answer.
    pub cancels: BTreeMap<String, usize>,
    /// Runs told to stop by a cancel, and the longest one went on after it (ms).
    pub cancelled_running: usize,
    pub longest_stop_ms: i64,
    /// Of those, whose body started only after the answer (their claim's answer, or a
    /// worker, came late).
    pub cancelled_late_start: usize,
    /// Requests with a deadline: succeeded, `dead` while waiting, stopped while running.
    pub deadlines: usize,
    pub deadline_succeeded: usize,
    pub deadline_dead: usize,
    pub deadline_stopped: usize,
}

impl fmt::Display for Counts {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "controls: queue of {LIMITED_CONCURRENCY}: runs {}, most at once {} ({} holding \
             their record); cancels {:?}, of running requests {} (stopped within {} ms at \
             most; {} started only after the answer); deadlines {} (succeeded {}, dead waiting {}, stopped running {}); over \
             the limit 0, runs after a cancel or deadline 0",
            self.limited_runs,
            self.limited_peak,
            self.limited_peak_held,
            self.cancels,
            self.cancelled_running,
            self.longest_stop_ms,
            self.cancelled_late_start,
            self.deadlines,
            self.deadline_succeeded,
            self.deadline_dead,
            self.deadline_stopped
        )
    }
}

/// Whether an execution's record may have been taken from it while it ran (its lease
/// lost: the body ends `cancelled`; or its process killed: it never ends).
fn lost_its_record(e: &Execution) -> bool {
    e.ended.is_none() || e.outcome == "cancelled" || e.outcome == "running"
}

/// Whether a cancel was answered with what it did (not refused nor failed).
fn took(c: &CancelRow) -> bool {
    c.outcome == "cancelled" || c.outcome == "stop_asked"
}

/// The requests the controls ended without a success: `cancelled` by a cancel that
/// took, or `dead`/`cancelled` past their deadline.
pub fn settled(run: &Run) -> HashSet<i64> {
    let cancelled: HashSet<i64> = run
        .cancels
        .iter()
        .filter(|c| took(c))
        .map(|c| c.request_id)
        .collect();
    let deadlined: HashSet<i64> = run
        .receipts
        .iter()
        .filter(|r| r.outcome == "queued" && r.deadline_ms.is_some())
        .filter_map(|r| r.request_id)
        .collect();
    run.left_in_queue
        .iter()
        .filter(|l| {
            (l.status == "cancelled" && cancelled.contains(&l.id))
                || (deadlined.contains(&l.id) && ended_by_deadline(l))
        })
        .map(|l| l.id)
        .collect()
}

fn ended_by_deadline(left: &Left) -> bool {
    let error = left.last_error.as_deref().unwrap_or_default();
    (left.status == "dead" && error.starts_with("deadline passed while it waited"))
        || (left.status == "cancelled" && error.starts_with("deadline passed while running"))
}

/// Checks the control rules; flags each one broken into `bad`. `by_request`: the
/// executions of each request in start order; `end_of`: when an execution ended (its
/// own end, or its process's exit).
pub fn check(
    run: &Run,
    by_request: &BTreeMap<i64, Vec<&Execution>>,
    processes: &HashMap<&str, &Process>,
    bad: &mut Vec<Violation>,
) -> Counts {
    let mut counts = Counts::default();
    let end_of = |e: &Execution| {
        e.ended
            .or_else(|| processes.get(e.process.as_str()).and_then(|p| p.exited))
            .unwrap_or(i64::MAX)
    };
    limit(run, &end_of, &mut counts, bad);
    cancels(run, by_request, &end_of, &mut counts, bad);
    deadlines(run, by_request, &end_of, &mut counts, bad);
    counts
}

/// At each start of a `chaos::limited` body, the bodies running then that still held
/// their record number at most the limit.
fn limit(
    run: &Run,
    end_of: &dyn Fn(&Execution) -> i64,
    counts: &mut Counts,
    bad: &mut Vec<Violation>,
) {
    let limited: Vec<&Execution> = run
        .executions
        .iter()
        .filter(|e| e.plan.as_deref() == Some(LIMITED_PLAN))
        .collect();
    counts.limited_runs = limited.len();
    for e in &limited {
        let at_once: Vec<&&Execution> = limited
            .iter()
            .filter(|o| o.started <= e.started && end_of(o) > e.started)
            .collect();
        let held = at_once.iter().filter(|o| !lost_its_record(o)).count();
        counts.limited_peak = counts.limited_peak.max(at_once.len());
        counts.limited_peak_held = counts.limited_peak_held.max(held);
        if held > LIMITED_CONCURRENCY {
            bad.push(Violation {
                what: "more bodies of a limited queue ran at once than its limit",
                rows: format!(
                    "{held} holding their record at {} (limit {LIMITED_CONCURRENCY}): {at_once:?}",
                    e.started
                ),
            });
        }
    }
}

fn cancels(
    run: &Run,
    by_request: &BTreeMap<i64, Vec<&Execution>>,
    end_of: &dyn Fn(&Execution) -> i64,
    counts: &mut Counts,
    bad: &mut Vec<Violation>,
) {
    let left: HashMap<i64, &Left> = run.left_in_queue.iter().map(|l| (l.id, l)).collect();
    let mut flag = |what: &'static str, rows: String| bad.push(Violation { what, rows });
    for c in &run.cancels {
        *counts.cancels.entry(c.outcome.clone()).or_default() += 1;
        let runs = by_request.get(&c.request_id).map_or(&[][..], Vec::as_slice);
        // The runs at or after the cancel.
        let after: Vec<&&Execution> = runs.iter().filter(|e| end_of(e) > c.asked).collect();
        let ended_cancelled = left
            .get(&c.request_id)
            .is_some_and(|l| l.status == "cancelled");
        match c.outcome.as_str() {
            "cancelled" => {
                for e in after.iter().filter(|e| e.started > c.answered) {
                    flag(
                        "a request ran after its cancel was answered",
                        format!("{c:?}, then {e:?}"),
                    );
                }
                if !ended_cancelled {
                    flag(
                        "a cancelled request did not end cancelled",
                        format!("{c:?}: left {:?}, runs {runs:?}", left.get(&c.request_id)),
                    );
                }
            }
            "stop_asked" => {
                let (held, late): (Vec<&&Execution>, Vec<&&Execution>) = after
                    .iter()
                    .partition(|e| e.started <= c.answered + START_SLACK_MS);
                // `StopAsked` says a claim held the record. Its body may start only
                // later (the claim's answer, or a worker, came late: the stops sweep
                // tells it within about a second of its start), so one late run is the
                // holder's when none ran at the answer; any other is a run again.
                if held.len() + late.len() > 1 {
                    flag(
                        "a request ran again after a stop was asked of it",
                        format!("{c:?}: runs {after:?}"),
                    );
                }
                if held.is_empty() && late.len() == 1 {
                    counts.cancelled_late_start += 1;
                }
                // Held at the answer: bounded from it; started late: from its start.
                let bounded_from = held
                    .iter()
                    .map(|e| (e, c.answered))
                    .chain(late.iter().map(|e| (e, e.started)));
                for (e, from) in bounded_from {
                    counts.cancelled_running += 1;
                    let went_on = end_of(e).saturating_sub(from);
                    if went_on > STOP_BOUND_MS {
                        flag(
                            "a running request went on long after its cancel",
                            format!("{c:?}: {e:?} went on {went_on} ms"),
                        );
                    } else {
                        counts.longest_stop_ms = counts.longest_stop_ms.max(went_on);
                    }
                }
                let succeeded = runs.iter().any(|e| e.outcome == "ok");
                if !succeeded && !ended_cancelled {
                    flag(
                        "a cancelled request did not end cancelled",
                        format!("{c:?}: left {:?}, runs {runs:?}", left.get(&c.request_id)),
                    );
                }
            }
            _ => {}
        }
    }
}

fn deadlines(
    run: &Run,
    by_request: &BTreeMap<i64, Vec<&Execution>>,
    end_of: &dyn Fn(&Execution) -> i64,
    counts: &mut Counts,
    bad: &mut Vec<Violation>,
) {
    let left: HashMap<i64, &Left> = run.left_in_queue.iter().map(|l| (l.id, l)).collect();
    for r in run.receipts.iter().filter(|r| r.outcome == "queued") {
        let (Some(id), Some(d)) = (r.request_id, r.deadline_ms) else {
            continue;
        };
        counts.deadlines += 1;
        // At or after the deadline (the database's clock at the insert, plus d).
        let deadline = r.recorded + d;
        let runs = by_request.get(&id).map_or(&[][..], Vec::as_slice);
        for e in runs
            .iter()
            .filter(|e| e.started > deadline + START_SLACK_MS)
        {
            bad.push(Violation {
                what: "a request started after its deadline",
                rows: format!("deadline by {deadline} ({r:?}), then {e:?}"),
            });
        }
        for e in runs
            .iter()
            .filter(|e| e.started <= deadline + START_SLACK_MS)
        {
            let went_on = end_of(e).saturating_sub(deadline);
            if went_on > STOP_BOUND_MS {
                bad.push(Violation {
                    what: "a request ran on long after its deadline",
                    rows: format!("deadline by {deadline} ({r:?}): {e:?} went on {went_on} ms"),
                });
            }
        }
        let succeeded = runs.iter().any(|e| e.outcome == "ok");
        match left.get(&id) {
            _ if succeeded => counts.deadline_succeeded += 1,
            Some(l) if ended_by_deadline(l) && l.status == "dead" => counts.deadline_dead += 1,
            Some(l) if ended_by_deadline(l) => counts.deadline_stopped += 1,
            // Cancelled by a cancel: the cancel rules judge it.
            Some(l)
                if l.status == "cancelled"
                    && run.cancels.iter().any(|c| c.request_id == id && took(c)) => {}
            other => bad.push(Violation {
                what: "a request with a deadline neither succeeded nor ended by it",
                rows: format!("{r:?}: left {other:?}, runs {runs:?}"),
            }),
        }
    }
}

//! The checker's rules for `chaos::stepped`, the requests whose body runs three durable
//! steps (`ctx.step`). Each step writes a `ran` row (with a fresh random value) when its
//! work runs, and the body a `saw` row with the value the step returned, run now or
//! kept by an earlier attempt:
//!
//! - once a body saw a step's value, the step's work never runs again for that request
//!   (a finished step is skipped by every later attempt, on any instance);
//! - every value seen of a step is the same one, and it is the value of one of the
//!   step's runs (a kept value is the one its run returned, not another run's);
//! - a body sees the steps in their order (no step seen before the one before it).
//!
//! A step's work may run more than once only before any body saw its value: its run
//! was stopped (a lost lease, a killed process) or its value could not be kept.

use std::collections::{BTreeMap, HashMap};
use std::fmt;

use super::{Run, Violation};

/// The steps of a `chaos::stepped` body, in order (`examples/chaos.rs`).
pub const STEPS: [&str; 3] = ["reserve", "charge", "ship"];

/// One `chaos_steps` row.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StepRow {
    pub run_id: String,
    pub request_id: i64,
    pub step: String,
    /// `ran`: the step's work ran and produced `nonce`; `saw`: the body got `nonce` back.
    pub kind: String,
    pub nonce: i64,
    /// Unix ms of the wall clock (one machine: every process reads the same clock).
    pub at: i64,
}

/// What the step rules counted.
#[derive(Debug, Default)]
pub struct Counts {
    pub requests: usize,
    /// Runs of a step's work.
    pub runs: usize,
    /// Values a body got back without running the step (kept by an earlier attempt).
    pub skipped: usize,
    /// Steps whose work ran more than once (each time before any body saw its value).
    pub rerun_before_kept: usize,
}

impl fmt::Display for Counts {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "durable steps: requests {}, step runs {}, finished steps skipped by a later \
             attempt {}, steps run again before their value was kept {}, finished steps \
             run again 0, changed values 0",
            self.requests, self.runs, self.skipped, self.rerun_before_kept
        )
    }
}

/// Checks the step rules; flags each one broken into `bad`.
pub fn check(run: &Run, bad: &mut Vec<Violation>) -> Counts {
    let mut flag = |what: &'static str, rows: String| bad.push(Violation { what, rows });
    let mut counts = Counts::default();
    let mut by_step: BTreeMap<(i64, &str), Vec<&StepRow>> = BTreeMap::new();
    for row in &run.steps {
        by_step
            .entry((row.request_id, row.step.as_str()))
            .or_default()
            .push(row);
    }
    counts.requests = run
        .steps
        .iter()
        .map(|r| r.request_id)
        .collect::<std::collections::HashSet<_>>()
        .len();
    for ((id, step), rows) in &by_step {
        let ran: Vec<&&StepRow> = rows.iter().filter(|r| r.kind == "ran").collect();
        let saw: Vec<&&StepRow> = rows.iter().filter(|r| r.kind == "saw").collect();
        counts.runs += ran.len();
        if ran.len() > 1 {
            counts.rerun_before_kept += 1;
        }
        counts.skipped += saw
            .iter()
            .filter(|s| !ran.iter().any(|r| r.run_id == s.run_id))
            .count();
        let Some(first_seen) = saw.iter().min_by_key(|s| s.at) else {
            continue;
        };
        for again in ran.iter().filter(|r| r.at > first_seen.at) {
            flag(
                "a finished step ran again",
                format!("request {id}, step {step}: seen {first_seen:?}, then ran {again:?}"),
            );
        }
        if saw.iter().any(|s| s.nonce != first_seen.nonce) {
            flag(
                "a step's kept value changed",
                format!("request {id}, step {step}: {saw:?}"),
            );
        }
        if !ran.iter().any(|r| r.nonce == first_seen.nonce) {
            flag(
                "a step's value is none of its runs'",
                format!("request {id}, step {step}: seen {first_seen:?}, runs {ran:?}"),
            );
        }
    }
    // Each body sees the steps in order: a `saw` of a step only after one of the step
    // before it in the same execution.
    let mut seen_by_run: HashMap<&str, Vec<&StepRow>> = HashMap::new();
    for row in run.steps.iter().filter(|r| r.kind == "saw") {
        seen_by_run.entry(&row.run_id).or_default().push(row);
    }
    for (run_id, rows) in &seen_by_run {
        let positions: Vec<Option<usize>> = rows
            .iter()
            .map(|r| STEPS.iter().position(|s| *s == r.step))
            .collect();
        let mut sorted: Vec<usize> = positions.iter().flatten().copied().collect();
        sorted.sort_unstable();
        if positions.contains(&None) || sorted != (0..sorted.len()).collect::<Vec<_>>() {
            flag(
                "a body saw its steps out of order",
                format!("run {run_id}: {rows:?}"),
            );
        }
    }
    counts
}

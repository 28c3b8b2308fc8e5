//! The checker's rules for `chaos::work3`, the requests with `max_attempts = 3` whose
//! bodies fail on purpose on planned attempts (`3:1,2,3`, `3:1,2`, `3:1`, `3:`):
//!
//! - no run has an attempt number past `max_attempts` (an attempt handed back without
//!   counting, at shutdown or "not started", runs again under the same number);
//! - a request left `dead` has had exactly `max_attempts` attempts counted (`exec_count`),
//!   and each of them is explained: by a run of that attempt that failed on purpose (its
//!   number is in the plan), by a run of it that a fault stopped (`cancelled`: its lease
//!   was lost; `running`: its process was killed), or by what the runtime logged for it
//!   (`lease_expired`: the rescuer took it back, which covers the known gaps, where a claim
//!   that never ran is rescued with its attempt counted; or a body that gave up because
//!   its history row could not be written). So a request planned to fail fewer times than
//!   its attempts ends `success` unless faults the checker sees took the rest;
//! - one planned to fail every attempt never succeeds and is left `dead` (checked with
//!   the other committed requests: without a successful run it must be a dead record).

use std::collections::{BTreeMap, HashMap};
use std::fmt;

use super::{Execution, Left, Run, Violation};

pub const EXECUTOR: &str = "chaos::work3";
const HISTORY_NOT_WRITTEN: &str = "history not written";

/// A `work3` record left `dead` (kept: only successes are deleted).
pub fn is_dead_bounded(left: &Left) -> bool {
    left.executor == EXECUTOR && left.status == "dead"
}

/// What the bounded rules counted.
#[derive(Debug, Default)]
pub struct Counts {
    /// Requests with a plan, by planned failures (`3:1,2` and so on).
    pub planned: BTreeMap<String, usize>,
    pub succeeded: usize,
    pub dead_as_planned: usize,
    pub dead_after_faults: usize,
    /// Attempts of dead requests explained by a fault rather than by the plan.
    pub attempts_lost_to_faults: usize,
}

impl fmt::Display for Counts {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "max_attempts 3: requests by plan {:?}, succeeded {}, dead as planned {}, \
             dead after faults {} ({} attempts lost to faults)",
            self.planned,
            self.succeeded,
            self.dead_as_planned,
            self.dead_after_faults,
            self.attempts_lost_to_faults
        )
    }
}

/// `3:1,2` as (3, [1, 2]).
pub fn parse_plan(plan: &str) -> Option<(i32, Vec<i32>)> {
    let (max, fails) = plan.split_once(':')?;
    let fails = fails
        .split(',')
        .filter(|s| !s.is_empty())
        .map(|s| s.parse().ok())
        .collect::<Option<Vec<i32>>>()?;
    Some((max.parse().ok()?, fails))
}

pub fn check(
    run: &Run,
    by_request: &BTreeMap<i64, Vec<&Execution>>,
    bad: &mut Vec<Violation>,
) -> Counts {
    let mut counts = Counts::default();
    let mut flag = |what: &'static str, rows: String| bad.push(Violation { what, rows });
    let mut plans: HashMap<i64, (i32, Vec<i32>)> = HashMap::new();
    for (id, runs) in by_request {
        // The plan column also marks `chaos::limited` runs (`controls.rs`): no attempts
        // planned there.
        let Some(text) = runs
            .iter()
            .find_map(|e| e.plan.as_deref())
            .filter(|plan| *plan != super::controls::LIMITED_PLAN)
        else {
            continue;
        };
        let Some((max, fails)) = parse_plan(text) else {
            flag("a run's plan does not parse", format!("{runs:?}"));
            continue;
        };
        *counts.planned.entry(text.to_string()).or_default() += 1;
        if runs.iter().any(|e| e.outcome == "ok") {
            counts.succeeded += 1;
        }
        for e in runs.iter().filter(|e| e.attempt > max || e.attempt < 1) {
            flag(
                "a run's attempt is past max_attempts",
                format!("{e:?}; max_attempts {max}"),
            );
        }
        plans.insert(*id, (max, fails));
    }
    let logs: HashMap<(i64, i32), Vec<&super::AttemptLog>> =
        run.attempt_logs
            .iter()
            .fold(HashMap::new(), |mut map, log| {
                map.entry((log.request_id, log.attempt))
                    .or_default()
                    .push(log);
                map
            });
    for left in run.left_in_queue.iter().filter(|l| is_dead_bounded(l)) {
        let runs = by_request.get(&left.id).cloned().unwrap_or_default();
        // A dead request that never ran has no plan in the history: only faults can
        // explain its attempts then.
        let (max, fails) = plans.get(&left.id).cloned().unwrap_or((3, Vec::new()));
        if left.exec_count != max {
            flag(
                "a dead request has not had max_attempts attempts counted",
                format!("{left:?}; max_attempts {max}; runs {runs:?}"),
            );
        }
        let mut by_fault = 0;
        for attempt in 1..=max {
            let of_attempt: Vec<&&Execution> =
                runs.iter().filter(|e| e.attempt == attempt).collect();
            let planned =
                fails.contains(&attempt) && of_attempt.iter().any(|e| e.outcome == "failed");
            let stopped = of_attempt
                .iter()
                .any(|e| e.outcome == "cancelled" || e.outcome == "running");
            let logged = logs.get(&(left.id, attempt)).is_some_and(|rows| {
                rows.iter().any(|l| {
                    l.outcome == "lease_expired"
                        || l.error
                            .as_deref()
                            .is_some_and(|e| e.contains(HISTORY_NOT_WRITTEN))
                })
            });
            if planned {
                continue;
            }
            if stopped || logged {
                by_fault += 1;
                continue;
            }
            let what = if (fails.len() as i32) < max {
                "a request planned to succeed went dead without a fault to explain an attempt"
            } else {
                "an attempt of a dead request is explained by no failure or fault"
            };
            flag(
                what,
                format!(
                    "{left:?}, attempt {attempt}, plan {fails:?}; its runs {of_attempt:?}; \
                     its logs {:?}",
                    logs.get(&(left.id, attempt))
                ),
            );
        }
        if by_fault == 0 {
            counts.dead_as_planned += 1;
        } else {
            counts.dead_after_faults += 1;
            counts.attempts_lost_to_faults += by_fault;
        }
    }
    counts
}

//! The checker's rules for the in-memory strategies (called by the worker instances, so
//! they run in a faulted process that runs workers) and for keyed `SyncSave` calls in
//! transactions (called by the submitter, one after the other):
//!
//! - every run belongs to a call someone made;
//! - a call whose transaction rolled back (or that failed at the call) never ran, and the
//!   retry record of a rolled-back `SyncSave` never ran either;
//! - `Async` and `Thread`: at most one run, whatever happened (also when the commit's
//!   answer was lost or the caller died before it knew); a committed one ran, unless its
//!   process died (killed or stopped: queued in-memory calls die with it) before the end of
//!   the faults;
//! - `AsyncSave`: at most one run in memory, none after one that succeeded there, and a
//!   committed one succeeded (in memory, or from its retry record after a failure),
//!   unless it never reached the store and its process died, or its process logged that
//!   the retry record of its failure could not be written ("it is lost");
//! - keyed `SyncSave`: a body runs at most once per call, never for a call answered
//!   `Existing`; once a call with the key committed (its body ran, or its failure was
//!   written with the key), no later call with the key runs its body within the
//!   retention (24 h); a body whose transaction rolled back ran, as documented, and the
//!   next call with the key may run again; a committed retry record succeeded.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::fmt;

use super::{MemCall, MemRun, Process, Run, Violation};

/// What the memory rules counted.
#[derive(Debug, Default)]
pub struct Counts {
    /// Calls by strategy and state (`Async committed`).
    pub calls: BTreeMap<String, usize>,
    pub runs: usize,
    /// Committed `AsyncSave` calls that succeeded from their retry record.
    pub async_save_retried: usize,
    /// Committed in-memory calls lost with their process, or logged lost.
    pub lost_with_process: usize,
    pub logged_lost: usize,
    /// `SyncSave` calls answered `Existing` after their key committed.
    pub sync_repeats_refused: usize,
    /// `SyncSave` bodies that ran in a transaction that rolled back.
    pub sync_ran_then_rolled_back: usize,
}

impl fmt::Display for Counts {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "in-memory and SyncSave calls {:?}, runs {}, AsyncSave retried from the store {}, \
             committed calls lost with their process {} or logged lost {}, SyncSave repeats \
             answered Existing {}, SyncSave bodies run in a rolled-back transaction {}",
            self.calls,
            self.runs,
            self.async_save_retried,
            self.lost_with_process,
            self.logged_lost,
            self.sync_repeats_refused,
            self.sync_ran_then_rolled_back
        )
    }
}

pub fn check(run: &Run, processes: &HashMap<&str, &Process>, bad: &mut Vec<Violation>) -> Counts {
    let mut counts = Counts {
        runs: run.mem_runs.len(),
        ..Counts::default()
    };
    let mut flag = |what: &'static str, rows: String| bad.push(Violation { what, rows });
    let calls: HashMap<&str, &MemCall> = run
        .mem_calls
        .iter()
        .map(|c| (c.call_id.as_str(), c))
        .collect();
    let mut runs: HashMap<&str, Vec<&MemRun>> = HashMap::new();
    for r in &run.mem_runs {
        runs.entry(&r.call_id).or_default().push(r);
        if !calls.contains_key(r.call_id.as_str()) {
            flag("a run of a call nobody made", format!("{r:?}"));
        }
    }
    let lost: HashSet<&str> = run.lost_memory_calls.iter().map(String::as_str).collect();
    // Died before the end of the faults: its queued in-memory calls died with it.
    let died = |source: &str| {
        processes
            .get(source)
            .and_then(|p| p.exited)
            .is_some_and(|t| t < run.final_phase_start)
    };
    for c in &run.mem_calls {
        *counts
            .calls
            .entry(format!("{} {}", c.strategy, c.state))
            .or_default() += 1;
        let mine: Vec<&MemRun> = runs.get(c.call_id.as_str()).cloned().unwrap_or_default();
        let inline: Vec<&&MemRun> = mine.iter().filter(|r| r.request_id.is_none()).collect();
        let stored: Vec<&&MemRun> = mine.iter().filter(|r| r.request_id.is_some()).collect();
        if c.strategy == "SyncSave" {
            if c.source == "submitter" && c.state == "error" {
                flag("a SyncSave call of the submitter failed", format!("{c:?}"));
            }
            if inline.len() > 1 {
                flag(
                    "a SyncSave body ran twice at one call",
                    format!("{c:?}: {mine:?}"),
                );
            }
            if c.receipt.as_deref() == Some("existing") && !inline.is_empty() {
                flag(
                    "a SyncSave call answered Existing ran its body",
                    format!("{c:?}: {mine:?}"),
                );
            }
            if c.receipt.as_deref() == Some("deferred") {
                let succeeded = stored
                    .iter()
                    .any(|r| r.request_id == c.receipt_id && r.outcome == "ok");
                match c.state.as_str() {
                    "committed" if !succeeded => flag(
                        "a committed SyncSave retry record never succeeded",
                        format!("{c:?}: {mine:?}"),
                    ),
                    "rolled_back" if !stored.is_empty() => flag(
                        "a rolled-back SyncSave retry record ran",
                        format!("{c:?}: {mine:?}"),
                    ),
                    _ => {}
                }
            } else if !stored.is_empty() {
                flag(
                    "a SyncSave call that wrote no retry record ran from one",
                    format!("{c:?}: {mine:?}"),
                );
            }
            if c.state == "rolled_back" && !inline.is_empty() {
                counts.sync_ran_then_rolled_back += 1;
            }
            continue;
        }
        if matches!(c.state.as_str(), "rolled_back" | "error") && !mine.is_empty() {
            flag(
                "an in-memory call that was rolled back or refused ran",
                format!("{c:?}: {mine:?}"),
            );
            continue;
        }
        match c.strategy.as_str() {
            "Async" | "Thread" => {
                if mine.len() > 1 {
                    flag(
                        "an Async or Thread call ran more than once",
                        format!("{c:?}: {mine:?}"),
                    );
                }
                let ran = mine.iter().any(|r| r.ended.is_some());
                if c.state == "committed" && !ran {
                    if died(&c.source) {
                        counts.lost_with_process += 1;
                    } else {
                        flag(
                            "a committed Async or Thread call never ran",
                            format!("{c:?}: {mine:?}"),
                        );
                    }
                }
            }
            "AsyncSave" => {
                if inline.len() > 1 {
                    flag(
                        "an AsyncSave call ran twice in memory",
                        format!("{c:?}: {mine:?}"),
                    );
                }
                if inline.iter().any(|r| r.outcome == "ok") && !stored.is_empty() {
                    flag(
                        "an AsyncSave call ran again after it succeeded in memory",
                        format!("{c:?}: {mine:?}"),
                    );
                }
                let ok = mine.iter().any(|r| r.outcome == "ok");
                if c.state == "committed" && !ok {
                    if lost.contains(c.call_id.as_str()) {
                        counts.logged_lost += 1;
                    } else if stored.is_empty() && died(&c.source) {
                        counts.lost_with_process += 1;
                    } else {
                        flag(
                            "a committed AsyncSave call never succeeded",
                            format!("{c:?}: {mine:?}"),
                        );
                    }
                }
                if ok && stored.iter().any(|r| r.outcome == "ok") {
                    counts.async_save_retried += 1;
                }
            }
            other => flag("a call of an unknown strategy", format!("{other}: {c:?}")),
        }
    }
    sync_keys(run, &runs, &mut counts, bad);
    counts
}

/// Keyed `SyncSave` calls, key by key in the order each process made them.
fn sync_keys(
    run: &Run,
    runs: &HashMap<&str, Vec<&MemRun>>,
    counts: &mut Counts,
    bad: &mut Vec<Violation>,
) {
    let mut by_key: BTreeMap<(&str, &str), Vec<&MemCall>> = BTreeMap::new();
    for c in run.mem_calls.iter().filter(|c| c.strategy == "SyncSave") {
        if let Some(key) = &c.key {
            by_key.entry((&c.source, key)).or_default().push(c);
        }
    }
    for ((_, key), calls) in by_key.iter_mut() {
        calls.sort_by_key(|c| c.seq);
        // The call whose commit recorded the key, once one did; an unknown commit makes
        // every later call's outcome unknown.
        let mut committed: Option<&MemCall> = None;
        let mut unknown = false;
        for c in calls.iter() {
            let ran_inline = runs
                .get(c.call_id.as_str())
                .is_some_and(|r| r.iter().any(|r| r.request_id.is_none()));
            if let (Some(first), false) = (committed, unknown) {
                if ran_inline || matches!(c.receipt.as_deref(), Some("ran" | "deferred")) {
                    bad.push(Violation {
                        what: "a keyed SyncSave ran again after its key was committed",
                        rows: format!("key {key}: committed by {first:?}, then {c:?}"),
                    });
                } else if c.receipt.as_deref() == Some("existing") {
                    counts.sync_repeats_refused += 1;
                }
            }
            let recorded = matches!(c.receipt.as_deref(), Some("ran" | "deferred"));
            match c.state.as_str() {
                "committed" if recorded && committed.is_none() => committed = Some(c),
                "pending" | "commit_error" if recorded => unknown = true,
                _ => {}
            }
        }
    }
}

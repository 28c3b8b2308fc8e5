//! The chaos test's checker: reads what the bodies wrote (`chaos_history`), what the
//! submitters were told (`chaos_receipts`), what is left in `async_req`, and the fault log,
//! and proves the library's promises held:
//!
//! 1. nothing committed is lost: every committed request has a successful execution, and
//!    nothing is left in `async_req` (but the three-attempt requests left `dead`);
//! 2. nothing uncommitted runs: no execution of a rolled-back (or never written) request;
//! 3. no two executions of one request overlap in time;
//! 4. at most one request per idempotency key;
//! 5. every re-execution follows an earlier execution that failed, or that ran on an
//!    instance killed, stopped, cut off or black-holed around then;
//! 6. every instance is alive and working at the end, and stopped gracefully when asked;
//! 7. no call of the (unfaulted) submitter failed;
//! 8. `max_attempts = 3`: no attempt past it, and every attempt of a request left `dead`
//!    explained by a planned failure or a fault (`bounded.rs`);
//! 9. in-memory strategies: rolled back never runs, `Async`/`Thread` at most once and
//!    (unless their process died) once, `AsyncSave` until success (`memory.rs`);
//! 10. keyed `SyncSave` in transactions: no body runs again once a call with its key
//!     committed (`memory.rs`);
//! 11. durable steps: a step whose value a body saw never runs again, and every value
//!     seen of it is the one its run returned (`steps.rs`);
//! 12. a queue's limit: no more of its bodies at once than the limit, but for those whose
//!     record was taken from them (`controls.rs`);
//! 13. a cancel answered `Cancelled`: nothing of the request starts after it, and it
//!     ends `cancelled`; answered `StopAsked`: only the run that held it goes on, it
//!     stops within a bound, nothing runs it again, and it ends `cancelled` unless that
//!     run succeeded;
//! 14. a deadline: nothing starts after it, a run then stops within a bound, and the
//!     request ends succeeded, `dead` or `cancelled` by it.
//!
//! Pure: it takes rows, so that its own tests can feed it broken histories.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::fmt;

/// One execution of a body, as it wrote itself into the history.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Execution {
    pub run_id: String,
    pub request_id: i64,
    pub key: Option<String>,
    /// The process (`w1.g2`: instance `w1`, second start).
    pub process: String,
    pub attempt: i32,
    pub started: i64,
    pub ended: Option<i64>,
    /// `ok`, `failed` (on purpose), `step_error` (a durable step's value could not be
    /// kept: the attempt fails), `cancelled` (its lease was lost) or `running`.
    pub outcome: String,
    /// A `chaos::work3` run's plan: `3:1,2` (three attempts at most, attempts 1 and 2
    /// fail on purpose); `None` for `chaos::work`.
    pub plan: Option<String>,
}

/// A receipt a caller got, written after its transaction ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReceiptRow {
    pub request_id: Option<i64>,
    pub key: Option<String>,
    /// `queued`, `existing`, `rolled_back`, `commit_error`, `error`, `degraded`, `other`.
    pub outcome: String,
    /// `auto`, `tx`, `rollback`, `race-tx`, `race-auto`, `probe`.
    pub via: String,
    pub source: String,
    /// Unix ms when it was written (after the call's transaction ended).
    pub recorded: i64,
    /// The call's `.deadline(..)`, ms.
    pub deadline_ms: Option<i64>,
}

/// A fault the schedule injected.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum FaultKind {
    /// SIGKILL.
    Kill,
    /// SIGTERM (graceful shutdown).
    Term,
    /// Connections dropped and new ones refused for a while.
    Refuse,
    /// Connections dropped (reset) again and again for a while; new ones accepted.
    Reset,
    /// A stall: nothing moves for a while, on any connection, new ones too.
    Stall,
    /// A black hole: the connections open then go silent for ever (until the server
    /// notices); new ones pass.
    BlackHole,
    /// Every chunk delayed.
    Latency,
    /// Restarted with a skewed clock (the restart is logged as its own `Term`).
    Skew,
}

impl FaultKind {
    /// Whether the fault may make a request held by the instance run again elsewhere.
    fn may_cause_rerun(self) -> bool {
        !matches!(self, FaultKind::Latency | FaultKind::Skew)
    }
}

/// One injected fault, with the wall-clock window it covered (unix ms).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Fault {
    pub kind: FaultKind,
    /// The instance (`w1`).
    pub instance: String,
    pub started: i64,
    pub ended: i64,
    pub detail: String,
}

/// One start of a worker process.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Process {
    /// `w1.g2`.
    pub name: String,
    /// `w1`.
    pub instance: String,
    pub started: i64,
    /// When it was seen gone (unix ms).
    pub exited: Option<i64>,
    /// Killed on purpose (SIGKILL): no clean exit expected.
    pub killed: bool,
    /// Exited with status 0.
    pub clean_exit: bool,
    pub clock_offset_ms: i64,
}

/// Everything one chaos run left behind.
#[derive(Debug, Clone, Default)]
pub struct Run {
    pub backend: String,
    pub seed: u64,
    pub secs: u64,
    pub executions: Vec<Execution>,
    pub receipts: Vec<ReceiptRow>,
    pub faults: Vec<Fault>,
    pub processes: Vec<Process>,
    /// Rows still in `async_req` after the drain.
    pub left_in_queue: Vec<Left>,
    /// `async_log` rows of the requests left `dead`.
    pub attempt_logs: Vec<AttemptLog>,
    /// The in-memory and keyed `SyncSave` calls, as their callers recorded them.
    pub mem_calls: Vec<MemCall>,
    /// Their bodies' runs.
    pub mem_runs: Vec<MemRun>,
    /// Calls whose process logged that the retry record of their failure could not be
    /// written ("it is lost").
    pub lost_memory_calls: Vec<String>,
    /// When the final phase began (faults over, queue drained).
    pub final_phase_start: i64,
    /// Lines of the processes' logs that report a panic.
    pub panics: Vec<String>,
    /// Windows (unix ms) in which the database itself did not commit a probe write for
    /// `probe::STALL_MS` or more (see `tests/chaos/probe.rs`).
    pub db_stalls: Vec<(i64, i64)>,
    /// What the steps of `chaos::stepped` bodies wrote.
    pub steps: Vec<steps::StepRow>,
    /// The cancels the submitter asked, with their answers.
    pub cancels: Vec<controls::CancelRow>,
}

/// A row left in `async_req`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Left {
    pub id: i64,
    pub executor: String,
    pub status: String,
    pub exec_count: i32,
    pub last_error: Option<String>,
}

/// One `async_log` row.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AttemptLog {
    pub request_id: i64,
    pub attempt: i32,
    /// `error`, `lease_expired`, ...
    pub outcome: String,
    pub error: Option<String>,
}

/// An in-memory (`AsyncSave`, `Async`, `Thread`) or keyed `SyncSave` call.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MemCall {
    pub call_id: String,
    pub strategy: String,
    pub key: Option<String>,
    /// The calling process's count: the order of its calls.
    pub seq: i64,
    /// The transaction (its first call's id); `None` in autocommit.
    pub tx_id: Option<String>,
    /// `pending` (its process died before it was settled), `committed`, `rolled_back`,
    /// `commit_error`, `error` (the call itself failed).
    pub state: String,
    /// `in_memory`, `ran`, `deferred`, `existing`, `other`; `None` without a receipt.
    pub receipt: Option<String>,
    pub receipt_id: Option<i64>,
    /// The calling process (`w1.g2`, `submitter`).
    pub source: String,
}

/// One run of an in-memory or `SyncSave` body.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MemRun {
    pub run_id: String,
    pub call_id: String,
    pub strategy: String,
    /// `None` in memory (or inline); the record's id when it runs from a retry record.
    pub request_id: Option<i64>,
    pub process: String,
    pub attempt: i32,
    pub started: i64,
    pub ended: Option<i64>,
    /// `ok`, `failed` (on purpose) or `running`.
    pub outcome: String,
}

/// A broken promise, with the rows that show it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Violation {
    pub what: &'static str,
    pub rows: String,
}

/// Every broken promise found.
#[derive(Debug)]
pub struct Violations(pub Vec<Violation>);

impl Violations {
    pub fn has(&self, what: &str) -> bool {
        self.0.iter().any(|v| v.what == what)
    }
}

impl fmt::Display for Violations {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut kinds: BTreeMap<&str, usize> = BTreeMap::new();
        for v in &self.0 {
            *kinds.entry(v.what).or_default() += 1;
        }
        writeln!(f, "{} violation(s), by kind {kinds:?}:", self.0.len())?;
        for v in self.0.iter().take(50) {
            writeln!(f, "- {}: {}", v.what, v.rows)?;
        }
        if self.0.len() > 50 {
            writeln!(f, "... and {} more", self.0.len() - 50)?;
        }
        Ok(())
    }
}

/// What the checker counted, for the log.
#[derive(Debug, Default)]
pub struct Summary {
    pub backend: String,
    pub seed: u64,
    pub secs: u64,
    pub faults: BTreeMap<FaultKind, usize>,
    pub requests: usize,
    pub executions: usize,
    pub reruns: BTreeMap<&'static str, usize>,
    pub keys: usize,
    pub duplicate_calls: usize,
    pub rolled_back: usize,
    pub commit_errors: usize,
    /// Calls made outside a transaction whose write may have happened
    /// (`Error::Unconfirmed`), and how many requests without a receipt ran for them.
    pub unconfirmed: usize,
    pub unconfirmed_ran: usize,
    pub processes: usize,
    pub final_runs: BTreeMap<String, usize>,
    /// Database stalls the probe saw, and the longest (ms).
    pub db_stalls: usize,
    pub longest_db_stall: i64,
    pub bounded: bounded::Counts,
    pub memory: memory::Counts,
    pub steps: steps::Counts,
    pub controls: controls::Counts,
}

impl fmt::Display for Summary {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(
            f,
            "chaos {}: seed {} ({} s of faults)",
            self.backend, self.seed, self.secs
        )?;
        writeln!(f, "  faults injected: {:?}", self.faults)?;
        writeln!(
            f,
            "  requests committed {}, executions {}, re-executions {:?}",
            self.requests, self.executions, self.reruns
        )?;
        writeln!(
            f,
            "  keys {}, duplicate keyed calls answered Existing {}, calls rolled back {}, commits of unknown result {}, \
             calls unconfirmed {} (of which ran {})",
            self.keys,
            self.duplicate_calls,
            self.rolled_back,
            self.commit_errors,
            self.unconfirmed,
            self.unconfirmed_ran
        )?;
        writeln!(
            f,
            "  worker processes started {}, runs per instance after the faults {:?}",
            self.processes, self.final_runs
        )?;
        writeln!(
            f,
            "  database stalls (a probe write of 1 s or more, not injected) {}, the longest {} ms",
            self.db_stalls, self.longest_db_stall
        )?;
        writeln!(f, "  {}", self.bounded)?;
        writeln!(f, "  {}", self.memory)?;
        writeln!(f, "  {}", self.steps)?;
        writeln!(f, "  {}", self.controls)?;
        write!(
            f,
            "  lost 0, left in queue 0, uncommitted runs 0, overlaps 0, second requests for a key 0, \
             unexplained re-executions 0, failed calls 0, instances not working at the end 0, \
             attempts past max_attempts 0, unexplained dead attempts 0, in-memory calls run \
             against their strategy 0, keyed SyncSave bodies run again 0"
        )
    }
}

fn instance_of(process: &str) -> &str {
    process.split('.').next().unwrap_or(process)
}

/// Checks every promise; `Err` lists each one broken, with its rows.
pub fn check(run: &Run) -> Result<Summary, Violations> {
    let mut bad = Vec::new();
    let mut flag = |what: &'static str, rows: String| bad.push(Violation { what, rows });
    let processes: HashMap<&str, &Process> =
        run.processes.iter().map(|p| (p.name.as_str(), p)).collect();

    // What was committed, by the receipts.
    let mut committed: HashMap<i64, Option<&str>> = HashMap::new();
    let mut unknown: HashSet<i64> = HashSet::new();
    let mut rolled_back: HashSet<i64> = HashSet::new();
    // Calls outside a transaction that failed with their write unknown: a request without
    // a receipt may run for each (for a keyed one, a request of its key).
    let mut unconfirmed_keys: HashSet<&str> = HashSet::new();
    let mut unconfirmed_unkeyed = 0usize;
    let mut summary = Summary {
        backend: run.backend.clone(),
        seed: run.seed,
        secs: run.secs,
        executions: run.executions.len(),
        processes: run.processes.len(),
        db_stalls: run.db_stalls.len(),
        longest_db_stall: run.db_stalls.iter().map(|(s, e)| e - s).max().unwrap_or(0),
        ..Summary::default()
    };
    for r in &run.receipts {
        match (r.outcome.as_str(), r.request_id) {
            ("queued", Some(id)) => {
                committed.insert(id, r.key.as_deref());
            }
            ("commit_error", Some(id)) => {
                unknown.insert(id);
            }
            ("rolled_back", Some(id)) => {
                rolled_back.insert(id);
            }
            ("existing", Some(_)) => summary.duplicate_calls += 1,
            ("unconfirmed", None) => {
                summary.unconfirmed += 1;
                match r.key.as_deref() {
                    Some(key) => {
                        unconfirmed_keys.insert(key);
                    }
                    None => unconfirmed_unkeyed += 1,
                }
            }
            _ => flag(
                "a call failed or returned an unexpected receipt",
                format!("{r:?}"),
            ),
        }
    }
    summary.requests = committed.len();
    summary.rolled_back = rolled_back.len();
    summary.commit_errors = unknown.len();

    // At most one request per key; a duplicate call names the request its key has.
    let mut by_key: HashMap<&str, HashSet<i64>> = HashMap::new();
    for (id, key) in &committed {
        if let Some(key) = key {
            by_key.entry(key).or_default().insert(*id);
        }
    }
    for e in &run.executions {
        if let Some(key) = &e.key {
            if committed.contains_key(&e.request_id) {
                by_key.entry(key).or_default().insert(e.request_id);
            }
        }
    }
    for (key, ids) in &by_key {
        if ids.len() > 1 {
            flag("two requests for one key", format!("{key}: {ids:?}"));
        }
    }
    summary.keys = by_key.len();
    for r in run.receipts.iter().filter(|r| r.outcome == "existing") {
        let (Some(key), Some(id)) = (&r.key, r.request_id) else {
            continue;
        };
        let named = by_key.get(key.as_str());
        if !named.is_some_and(|ids| ids.contains(&id)) && !unknown.contains(&id) {
            flag(
                "a duplicate call named another request than its key's",
                format!("{r:?}; the key's requests: {named:?}"),
            );
        }
    }

    // Executions by request, in start order.
    let mut by_request: BTreeMap<i64, Vec<&Execution>> = BTreeMap::new();
    for e in &run.executions {
        by_request.entry(e.request_id).or_default().push(e);
    }
    for runs in by_request.values_mut() {
        runs.sort_by_key(|e| (e.started, e.run_id.clone()));
    }
    for (id, runs) in &by_request {
        if rolled_back.contains(id) {
            flag("a rolled-back request ran", format!("{runs:?}"));
        } else if !committed.contains_key(id) && !unknown.contains(id) {
            let key = runs.iter().find_map(|e| e.key.as_deref());
            let explained = match key {
                Some(key) => unconfirmed_keys.contains(key),
                None if unconfirmed_unkeyed > 0 => {
                    unconfirmed_unkeyed -= 1;
                    true
                }
                None => false,
            };
            if explained {
                summary.unconfirmed_ran += 1;
            } else {
                flag("a request nobody committed ran", format!("{runs:?}"));
            }
        }
    }
    // A three-attempt request may end `dead`: the bounded rules explain its attempts.
    let dead_bounded: HashSet<i64> = run
        .left_in_queue
        .iter()
        .filter(|l| bounded::is_dead_bounded(l))
        .map(|l| l.id)
        .collect();
    // A cancel or a deadline may end a request without a success.
    let settled = controls::settled(run);
    for id in committed.keys() {
        let ran = by_request
            .get(id)
            .is_some_and(|runs| runs.iter().any(|e| e.outcome == "ok"));
        if !ran && !dead_bounded.contains(id) && !settled.contains(id) {
            flag(
                "a committed request never succeeded (lost)",
                format!("request {id}: {:?}", by_request.get(id)),
            );
        }
    }
    for row in run
        .left_in_queue
        .iter()
        .filter(|l| !bounded::is_dead_bounded(l) && !settled.contains(&l.id))
    {
        flag(
            "a record left in async_req after the drain",
            format!("{row:?}"),
        );
    }

    // No overlap: each execution ends (its own end, or its process's exit) before the
    // next one of the request starts.
    let end_of = |e: &Execution| {
        e.ended
            .or_else(|| processes.get(e.process.as_str()).and_then(|p| p.exited))
    };
    for runs in by_request.values() {
        let mut latest: Option<(&Execution, i64)> = None;
        for e in runs {
            if let Some((before, end)) = latest {
                if e.started < end {
                    flag(
                        "two executions of one request overlapped",
                        format!("{before:?} (until {end}) and {e:?}"),
                    );
                }
            }
            match end_of(e) {
                Some(end) => {
                    if latest.map_or(true, |(_, latest_end)| end > latest_end) {
                        latest = Some((e, end));
                    }
                }
                None => {
                    flag("an execution never ended", format!("{e:?}"));
                    latest = Some((e, i64::MAX));
                }
            }
        }
    }

    // Every re-execution has a reason.
    for runs in by_request.values() {
        for pair in runs.windows(2) {
            let (before, again) = (pair[0], pair[1]);
            // `step_error`: a durable step's value could not be kept (its statement got no
            // answer within its bound), and the body failed the attempt.
            let reason = if before.outcome == "failed" || before.outcome == "step_error" {
                Some("the earlier attempt failed")
            } else {
                let instance = instance_of(&before.process);
                run.faults
                    .iter()
                    .filter(|f| {
                        f.kind.may_cause_rerun()
                            && f.instance == instance
                            && f.started <= again.started
                            && f.ended >= before.started
                    })
                    .map(|f| f.kind)
                    .min()
                    .map(|kind| match kind {
                        FaultKind::Kill => "its instance was killed",
                        FaultKind::Term => "its instance was stopped (SIGTERM)",
                        FaultKind::Refuse => "its instance was cut off",
                        FaultKind::Stall => "its instance was stalled",
                        FaultKind::BlackHole => "its instance's connections were black-holed",
                        _ => "its instance's connections were reset",
                    })
                    .or_else(|| {
                        // Not injected: the database itself did not commit for anyone
                        // while the earlier execution held the record.
                        run.db_stalls
                            .iter()
                            .any(|&(s, e)| s <= again.started && e >= before.started)
                            .then_some("the database stalled for every instance")
                    })
            };
            match reason {
                Some(reason) => *summary.reruns.entry(reason).or_default() += 1,
                None => {
                    let faults: Vec<&Fault> = run
                        .faults
                        .iter()
                        .filter(|f| f.instance == instance_of(&before.process))
                        .collect();
                    flag(
                        "a re-execution without a fault or failure to explain it",
                        format!("{before:?} then {again:?}; faults of that instance: {faults:?}"),
                    );
                }
            }
        }
    }

    // Every instance alive and working at the end, and graceful when asked to stop.
    let mut last: BTreeMap<&str, &Process> = BTreeMap::new();
    for p in &run.processes {
        if last
            .get(p.instance.as_str())
            .map_or(true, |l| p.started > l.started)
        {
            last.insert(&p.instance, p);
        }
        if !p.killed && p.exited.is_some() && !p.clean_exit {
            flag(
                "a process did not stop gracefully on SIGTERM",
                format!("{p:?}"),
            );
        }
    }
    for (instance, p) in &last {
        if p.exited.is_some_and(|t| t < run.final_phase_start) {
            flag("an instance was not running at the end", format!("{p:?}"));
        }
        let runs = run
            .executions
            .iter()
            .filter(|e| {
                e.process == p.name && e.outcome == "ok" && e.started >= run.final_phase_start
            })
            .count();
        summary.final_runs.insert(instance.to_string(), runs);
        if runs == 0 {
            flag(
                "an instance ran nothing after the faults ended",
                format!("{p:?}"),
            );
        }
    }
    for line in &run.panics {
        flag("a process panicked", line.clone());
    }
    for f in &run.faults {
        *summary.faults.entry(f.kind).or_default() += 1;
    }
    summary.bounded = bounded::check(run, &by_request, &mut bad);
    summary.memory = memory::check(run, &processes, &mut bad);
    summary.steps = steps::check(run, &mut bad);
    summary.controls = controls::check(run, &by_request, &processes, &mut bad);
    if bad.is_empty() {
        Ok(summary)
    } else {
        Err(Violations(bad))
    }
}

#[path = "bounded.rs"]
mod bounded;
#[path = "controls.rs"]
pub mod controls;
#[path = "memory.rs"]
mod memory;
#[path = "steps.rs"]
pub mod steps;

#[cfg(test)]
#[path = "controls_tests.rs"]
mod controls_tests;
#[cfg(test)]
#[path = "rules_tests.rs"]
mod rules_tests;
#[cfg(test)]
#[path = "steps_tests.rs"]
mod steps_tests;
#[cfg(test)]
#[path = "checker_tests.rs"]
mod tests;

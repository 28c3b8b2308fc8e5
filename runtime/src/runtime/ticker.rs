//! The ticker: calls each scheduled executor (`every = ...`, `cron = ...`) at its ticks.
//!
//! Every instance that runs workers keeps the schedules; at a tick (by the database's
//! clock, so that the instances agree), each writes the tick's request under the key
//! `tick:<executor>:<unix ms>`: the first writes it, the others find the key taken and
//! write nothing, so each tick is one request whatever the number of instances. A tick
//! passed while no instance ran is skipped (the next one is called), or, with
//! `catch_up = true`, the last one passed is called at start. A paused executor
//! is not called (its ticks while paused are skipped). A tick that could not be written
//! (the database unreachable, or refused by a quota of waiting requests: a tick is a call
//! like any other) is tried again every [`RETRY`] until the next tick is due, then
//! skipped with an error in the log that says why; the next tick is then tried the same
//! way, so that under a quota that stays full one tick is written once it frees.

use std::sync::{Arc, Weak};
use std::time::Duration;

use tokio_util::sync::CancellationToken;

use super::{Inner, Runtime};
use crate::base::error::Result;
use crate::base::record::AnnouncedSchedule;
use crate::base::registry::ExecutorDef;
use crate::base::schedule::{tick_key, Ticks};

/// A scheduled executor and its ticks.
#[derive(Debug, Clone)]
pub(crate) struct Scheduled {
    pub(crate) def: &'static ExecutorDef,
    pub(crate) ticks: Ticks,
}

/// The schedules of `defs`, checked (a cron expression that does not parse is an
/// [`Error::Config`](crate::Error::Config) at start).
pub(crate) fn scheduled<'d>(
    defs: impl IntoIterator<Item = &'d &'static ExecutorDef>,
) -> crate::Result<Vec<Scheduled>> {
    defs.into_iter()
        .filter_map(|def| def.schedule.map(|schedule| (def, schedule)))
        .map(|(def, schedule)| {
            Ok(Scheduled {
                def,
                ticks: schedule.ticks(def.name)?,
            })
        })
        .collect()
}

/// Waits between two tries of a tick that could not be written.
const RETRY: Duration = Duration::from_millis(500);

/// The arguments of a scheduled executor: none.
#[derive(serde::Serialize)]
struct NoArguments {}

/// Calls `scheduled`'s executor at each of its ticks until `stop` (or the runtime is
/// gone). Holds the runtime weakly: a runtime dropped without `shutdown()` is not kept
/// alive by its ticker.
pub(crate) async fn run(runtime: Weak<Inner>, scheduled: Scheduled, stop: CancellationToken) {
    let Some((mut now, retention)) = runtime.upgrade().map(|inner| {
        let retention = inner.settings.key_retention.as_millis() as i64;
        (inner.clock.now_ms(), retention)
    }) else {
        return;
    };
    // The last tick passed, if this schedule catches up: called now, under its tick's
    // key, which is taken if an instance called it already. Only within half the keys'
    // retention: past it, its key may be gone, and a call would run it a second time.
    // Tried again, as any tick, until the next one is due.
    let catch_up = scheduled.def.schedule.is_some_and(|s| s.catches_up());
    if let Some(missed) = catch_up
        .then(|| scheduled.ticks.last_within(now, retention / 2))
        .flatten()
    {
        let next = scheduled.ticks.next_after(now);
        if !call_tick(&runtime, &scheduled, missed, next, &stop).await {
            return;
        }
    }
    while let Some(tick) = scheduled.ticks.next_after(now) {
        // Sleep until the tick by this clock (the database's, as last synced).
        loop {
            let Some(left) = runtime.upgrade().map(|inner| tick - inner.clock.now_ms()) else {
                return;
            };
            if left <= 0 {
                break;
            }
            tokio::select! {
                _ = stop.cancelled() => return,
                _ = tokio::time::sleep(Duration::from_millis(left as u64)) => {}
            }
        }
        let next = scheduled.ticks.next_after(tick);
        if !call_tick(&runtime, &scheduled, tick, next, &stop).await {
            return;
        }
        now = tick;
    }
}

/// Writes the request of `tick` (unless paused), trying again until `next` is due.
/// `false` when the ticker should stop (shutdown, or the runtime is gone).
async fn call_tick(
    runtime: &Weak<Inner>,
    scheduled: &Scheduled,
    tick: i64,
    next: Option<i64>,
    stop: &CancellationToken,
) -> bool {
    let name = scheduled.def.name;
    // Warned once per tick of a refusal by a quota (not every try).
    let mut refused = false;
    loop {
        let Some(inner) = runtime.upgrade() else {
            return false;
        };
        if stop.is_cancelled() {
            return false;
        }
        if inner.control.claimable(&[name]).is_empty() {
            crate::log::debug!(executor = name, tick, "paused: tick skipped");
            return true;
        }
        let rt = Runtime { inner };
        let call = crate::Call::__new(scheduled.def, &NoArguments {})
            .key(tick_key(name, tick))
            .on(&rt);
        match call.await {
            Ok(_) => {
                if refused {
                    crate::log::info!(
                        executor = name,
                        tick,
                        "a tick refused by a quota of waiting requests was written once it freed"
                    );
                }
                return true;
            }
            Err(error) => {
                let quota = matches!(error, crate::Error::QuotaExceeded { .. });
                let late = !next.is_some_and(|next| rt.inner.clock.now_ms() < next);
                if late && quota {
                    crate::log::error!(executor = name, tick, error = %crate::log::escaped(&error),
                        "a tick was refused by a quota of waiting requests until the next one was due: skipped; the next tick is tried the same way");
                    return true;
                }
                if late {
                    crate::log::error!(executor = name, tick, error = %crate::log::escaped(&error),
                        "a tick could not be written before the next one was due: skipped");
                    return true;
                }
                if quota && !refused {
                    refused = true;
                    crate::log::warn!(executor = name, tick, error = %crate::log::escaped(&error),
                        "a tick was refused by a quota of waiting requests; trying again every 0.5 s until the next tick is due");
                } else if !quota {
                    crate::log::warn!(executor = name, tick, error = %crate::log::escaped(&error),
                        "a tick could not be written; trying again");
                }
            }
        }
        drop(rt);
        tokio::select! {
            _ = stop.cancelled() => return false,
            _ = tokio::time::sleep(RETRY) => {}
        }
    }
}

/// What [`Runtime::schedules`] reports of one scheduled executor.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct ScheduleInfo {
    /// The executor's name.
    pub executor: &'static str,
    /// Its schedule, as the attribute gives it.
    pub schedule: crate::Schedule,
    /// Its next ticks (unix ms, the database's clock), the first first.
    pub next: Vec<i64>,
}

impl Runtime {
    /// The scheduled executors (`every = ...`, `cron = ...`) linked into this binary, with
    /// their next `n` ticks (at most 100). Each tick is called once, by whichever instance
    /// that runs workers gets there first.
    ///
    /// ```no_run
    /// # async fn demo(rt: async_exec::Runtime) {
    /// for schedule in rt.schedules(3) {
    ///     println!("{} ({}): next at {:?}", schedule.executor, schedule.schedule.describe(), schedule.next);
    /// }
    /// # }
    /// ```
    pub fn schedules(&self, n: usize) -> Vec<ScheduleInfo> {
        let now = self.inner.clock.now_ms();
        self.inner
            .schedules
            .iter()
            .map(|scheduled| ScheduleInfo {
                executor: scheduled.def.name,
                schedule: scheduled.def.schedule.expect("a scheduled executor"),
                next: scheduled.ticks.next(now, n),
            })
            .collect()
    }
}

/// What [`Runtime::announced_schedules`] reports of one schedule: an executor's, as the
/// live instances that run workers announced it.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct AnnouncedScheduleInfo {
    /// The executor's name.
    pub executor: String,
    /// Its schedule. Two versions side by side that give an executor two schedules are
    /// two entries: each instance ticks by its own.
    pub schedule: AnnouncedSchedule,
    /// Its next ticks (unix ms, the database's clock), the first first; empty when this
    /// version cannot read the schedule (see `error`).
    pub next: Vec<i64>,
    /// Why the next ticks could not be computed, if they could not.
    pub error: Option<String>,
    /// The instances that announce it, by name.
    pub instances: Vec<String>,
}

impl Runtime {
    /// The schedules the live instances of this application that run workers announce
    /// (they are the ones that call them), with their next `n` ticks (at most 100): what
    /// a binary that links no executors, such as the CLI's `schedules`, can list.
    /// Sorted by executor.
    ///
    /// ```no_run
    /// # async fn demo(rt: async_exec::Runtime) -> async_exec::Result<()> {
    /// for s in rt.announced_schedules(3).await? {
    ///     println!("{} ({}) on {:?}: next at {:?}", s.executor, s.schedule.describe(), s.instances, s.next);
    /// }
    /// # Ok(()) }
    /// ```
    pub async fn announced_schedules(&self, n: usize) -> Result<Vec<AnnouncedScheduleInfo>> {
        let instances = self.instances().await?;
        let now = self.inner.clock.now_ms();
        let mut found: Vec<AnnouncedScheduleInfo> = Vec::new();
        for instance in instances.iter().filter(|i| i.workers) {
            for executor in &instance.executors {
                let Some(schedule) = &executor.schedule else {
                    continue;
                };
                match found
                    .iter_mut()
                    .find(|f| f.executor == executor.name && f.schedule == *schedule)
                {
                    Some(known) => known.instances.push(instance.name.clone()),
                    None => {
                        let (next, error) = match schedule.next_ticks(now, n) {
                            Ok(next) => (next, None),
                            Err(e) => (Vec::new(), Some(e.to_string())),
                        };
                        found.push(AnnouncedScheduleInfo {
                            executor: executor.name.clone(),
                            schedule: schedule.clone(),
                            next,
                            error,
                            instances: vec![instance.name.clone()],
                        });
                    }
                }
            }
        }
        found.sort_by(|a, b| a.executor.cmp(&b.executor).then(a.next.cmp(&b.next)));
        Ok(found)
    }
}

/// The schedules of a runtime, shared by its ticker tasks and [`Runtime::schedules`].
pub(crate) type Schedules = Arc<[Scheduled]>;

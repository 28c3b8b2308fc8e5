//! Presence: each instance announces itself in `async_instance` (its name, whether it
//! runs workers, the executors it links and their signatures) at start and every
//! heartbeat interval, with the database's clock. From the live announcements it learns
//! which records to leave alone: those whose signature it does not have while a live
//! instance that runs workers has it (a rolling deploy: old and new versions side by side).

use std::sync::{Arc, RwLock};
use std::time::Duration;

use tokio_util::sync::CancellationToken;

use crate::base::error::Result;
use crate::base::record::{ExecutorSign, InstanceInfo};
use crate::base::registry::Registry;
use crate::store::{Announce, Store};

/// Instances not seen for this long are removed from the table.
const FORGET_AFTER_MS: i64 = 24 * 3600 * 1000;

/// Records of `(executor, sign)` pairs to leave for other instances, as `sign:executor`
/// (a sign is hex: the first `:` ends it).
pub(crate) type SkipList = Arc<RwLock<Arc<Vec<String>>>>;

/// The key of a record's `(executor, sign)` in a [`SkipList`].
pub(crate) fn skip_key(executor: &str, sign: &str) -> String {
    format!("{sign}:{executor}")
}

/// What this instance knows of the others' signatures: the skip list, and how to read it
/// afresh. Shared by the presence part (which reads it every heartbeat interval) and the
/// claimer (which reads it again when a claim meets a signature this binary does not
/// have: a newer instance may have announced itself since the last read).
#[derive(Clone)]
pub(crate) struct Roster {
    store: Arc<dyn Store>,
    application: Arc<str>,
    owner: Arc<str>,
    /// Our executors and their signs, to compare with other instances'.
    ours: Arc<Vec<ExecutorSign>>,
    /// An instance not seen for this long is gone (the lease: its records are rescued by
    /// then too).
    alive_within: Duration,
    skip: SkipList,
}

impl std::fmt::Debug for Roster {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Roster")
            .field("owner", &self.owner)
            .field("alive_within", &self.alive_within)
            .finish_non_exhaustive()
    }
}

impl Roster {
    /// The roster of instance `owner` of `application`, whose executors are `registry`'s.
    pub(crate) fn new(
        store: Arc<dyn Store>,
        application: Arc<str>,
        owner: Arc<str>,
        registry: &Registry,
        alive_within: Duration,
        skip: SkipList,
    ) -> Self {
        Roster {
            store,
            application,
            owner,
            ours: Arc::new(executors_of(registry)),
            alive_within,
            skip,
        }
    }

    /// Our executors and their signs.
    pub(crate) fn ours(&self) -> &[ExecutorSign] {
        &self.ours
    }

    /// The skip list as last read.
    pub(crate) fn current(&self) -> Arc<Vec<String>> {
        self.skip.read().expect("skip list lock").clone()
    }

    /// Reads the live instances now and updates the skip list; returns it.
    pub(crate) async fn refresh(&self) -> Result<Arc<Vec<String>>> {
        let live = self
            .store
            .instance_list(&self.application, self.alive_within_ms())
            .await?;
        Ok(self.update(&live))
    }

    /// Updates the skip list from a list of the live instances; returns it.
    fn update(&self, live: &[InstanceInfo]) -> Arc<Vec<String>> {
        let skip = skip_list(&self.ours, &self.owner, live);
        if !skip.is_empty() {
            crate::log::debug!(
                ?skip,
                "leaving records of other signatures to the instances that have them"
            );
        }
        let skip = Arc::new(skip);
        *self.skip.write().expect("skip list lock") = skip.clone();
        skip
    }

    /// How recently an instance must have announced itself to be alive, in ms.
    fn alive_within_ms(&self) -> i64 {
        self.alive_within.as_millis() as i64
    }
}

/// Our executors and their signs.
pub(crate) fn executors_of(registry: &Registry) -> Vec<ExecutorSign> {
    registry
        .names()
        .iter()
        .filter_map(|name| registry.get(name))
        .map(|def| ExecutorSign {
            name: def.name.to_string(),
            sign: def.sign.to_string(),
            schedule: def.schedule.as_ref().map(Into::into),
        })
        .collect()
}

/// The presence part: announces this instance and keeps the skip list.
pub(crate) struct Presence {
    pub(crate) store: Arc<dyn Store>,
    pub(crate) application: Arc<str>,
    pub(crate) owner: Arc<str>,
    /// Whether this instance runs workers now (`start_workers` turns it on).
    pub(crate) workers: Arc<std::sync::atomic::AtomicBool>,
    /// Our executors and their signs, as JSON.
    pub(crate) executors: String,
    pub(crate) interval: Duration,
    /// The skip list, read after each announcement.
    pub(crate) roster: Roster,
}

impl Presence {
    /// Announces this instance, then reads the live ones and updates the skip list.
    pub(crate) async fn run_once(&self) -> Result<()> {
        self.beat(Some(FORGET_AFTER_MS)).await
    }

    /// The first announcement of a start, which the first claim waits for: the skip list
    /// is known before it. Instances long gone are removed by the next one.
    pub(crate) async fn announce_first(&self) -> Result<()> {
        self.beat(None).await
    }

    async fn beat(&self, forget_after_ms: Option<i64>) -> Result<()> {
        // Within half of the time after which this instance would look gone.
        let patience = (self.roster.alive_within / 2).max(self.interval);
        let live = self
            .store
            .instance_announce(&Announce {
                owner: &self.owner,
                application: &self.application,
                workers: self.workers.load(std::sync::atomic::Ordering::Acquire),
                executors: &self.executors,
                forget_after_ms,
                patience,
                list_within_ms: self.roster.alive_within_ms(),
            })
            .await?;
        self.roster.update(&live);
        Ok(())
    }

    /// Announces every `interval` until `stop`, then removes this instance's row.
    pub(crate) async fn run(&self, stop: CancellationToken) {
        loop {
            tokio::select! {
                _ = stop.cancelled() => break,
                _ = tokio::time::sleep(self.interval) => {}
            }
            if let Err(error) = self.run_once().await {
                crate::log::warn!(error = %crate::log::escaped(&error), "could not announce this instance");
            }
        }
        if let Err(error) = self.store.instance_leave(&self.owner).await {
            crate::log::warn!(error = %crate::log::escaped(&error), "could not remove this instance from async_instance");
        }
    }
}

/// The `(executor, sign)` pairs that live worker instances other than `owner` have and
/// this binary has under another sign.
fn skip_list(ours: &[ExecutorSign], owner: &str, live: &[InstanceInfo]) -> Vec<String> {
    let mut skip: Vec<String> = live
        .iter()
        .filter(|i| i.workers && i.name != owner)
        .flat_map(|i| i.executors.iter())
        .filter(|theirs| {
            ours.iter()
                .any(|mine| mine.name == theirs.name && mine.sign != theirs.sign)
        })
        .map(|theirs| skip_key(&theirs.name, &theirs.sign))
        .collect();
    skip.sort();
    skip.dedup();
    skip
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sign(name: &str, sign: &str) -> ExecutorSign {
        ExecutorSign {
            name: name.into(),
            sign: sign.into(),
            schedule: None,
        }
    }

    fn instance(name: &str, workers: bool, executors: Vec<ExecutorSign>) -> InstanceInfo {
        InstanceInfo {
            name: name.into(),
            application: "app".into(),
            workers,
            started: 0,
            last_seen: 0,
            executors,
        }
    }

    #[test]
    fn only_other_signs_of_our_executors_held_by_live_workers_are_skipped() {
        let ours = vec![sign("mail", "aaaa"), sign("pay", "bbbb")];
        let live = vec![
            instance("me", true, vec![sign("mail", "ffff")]),
            instance(
                "new",
                true,
                vec![
                    sign("mail", "cccc"),
                    sign("pay", "bbbb"),
                    sign("other", "dddd"),
                ],
            ),
            instance("submitter", false, vec![sign("pay", "eeee")]),
        ];
        assert_eq!(skip_list(&ours, "me", &live), vec!["cccc:mail".to_string()]);
    }
}

//! How a call merges with earlier ones: a singleton queue (`QueueLimits::singleton`), the
//! attribute's `unique_for` and `debounce`. Each is a key written with the call's record
//! and held by the store (a unique index, or an idempotency key with the mode's period),
//! so that it holds across instances and callers' transactions, not a read before the
//! write:
//!
//! - singleton: `singleton_key` (queue, partition), unique over live records;
//! - `unique_for`: an idempotency key over the executor and the arguments, kept for the
//!   period;
//! - leading `debounce`: an idempotency key over the executor and the partition, kept for
//!   the window (the first call runs, the later ones of the window get it);
//! - trailing `debounce`: `debounce_key` (executor, partition), unique over waiting
//!   records; a call while one waits replaces its arguments and start.

use std::time::Duration;

use sha2::{Digest, Sha256};

use crate::base::error::{Error, Result};
use crate::base::queue::QueuePlan;
use crate::base::record::NewRequest;
use crate::base::registry::ExecutorDef;
use crate::call::receipt::Submission;

/// The SHA-256 of `parts` (each followed by a NUL), in hex: a key of fixed width
/// whatever the names and arguments hashed.
fn digest(parts: &[&str]) -> String {
    let mut hasher = Sha256::new();
    for part in parts {
        hasher.update(part.as_bytes());
        hasher.update([0]);
    }
    hasher
        .finalize()
        .iter()
        .map(|byte| format!("{byte:02x}"))
        .collect()
}

/// A trailing debounce's window, if the executor has one.
fn trailing(def: &ExecutorDef) -> Option<u64> {
    def.modes
        .debounce_ms
        .filter(|_| !def.modes.debounce_leading)
}

impl Submission {
    /// A call of an executor with a trailing debounce waits for its window (unless it was
    /// given a delay of its own): its record runs at the window's end.
    pub(crate) fn apply_debounce_delay(&mut self) {
        if let (Some(ms), None) = (trailing(self.def), self.delay) {
            self.delay = Some(Duration::from_millis(ms));
        }
    }

    /// Writes into `request` the keys its modes merge it by. A call's own idempotency key
    /// (`Call::key`) comes before `unique_for` and a leading debounce.
    pub(crate) fn merge_keys(&self, plan: &QueuePlan, request: &mut NewRequest) {
        let def = self.def;
        let partition = self.partition.as_deref().unwrap_or("");
        request.singleton = plan.singleton_key(request.queue, partition);
        if request.idempotency_key.is_none() {
            let keyed = match (def.modes.unique_for_ms, def.modes.debounce_ms) {
                (Some(ms), _) => {
                    Some((format!("unique:{}", digest(&[def.name, &self.params])), ms))
                }
                (None, Some(ms)) if def.modes.debounce_leading => {
                    Some((format!("debounce:{}", digest(&[def.name, partition])), ms))
                }
                _ => None,
            };
            if let Some((key, ms)) = keyed {
                request.idempotency_key = Some(key);
                request.key_retention = i64::try_from(ms).unwrap_or(i64::MAX);
            }
        }
        if trailing(def).is_some() {
            request.debounce = Some(digest(&[def.name, partition]));
        }
    }
}

/// Checks the executors' modes against each other at start: `unique_for` hashes the
/// arguments as stored, which `#[secret]` ones are not (they are sealed anew each call);
/// a trailing debounce and a singleton queue both decide what a later call of a
/// partition gets.
pub(crate) fn check(defs: &[&'static ExecutorDef], plan: &QueuePlan) -> Result<()> {
    for def in defs {
        if def.modes.unique_for_ms.is_some() && !def.secrets.is_empty() {
            return Err(Error::Config {
                setting: "unique_for",
                reason: format!(
                    "executor `{}` has #[secret] arguments, sealed anew at each call, so equal \
                     arguments never look equal: remove unique_for, or give each call a \
                     `.key(..)` computed from what makes it unique",
                    def.name
                ),
            });
        }
        if let (Some(_), Some(queue)) = (trailing(def), def.queue) {
            if plan.singleton_key(queue, "").is_some() {
                return Err(Error::Config {
                    setting: "debounce",
                    reason: format!(
                        "executor `{}` debounces its calls in queue {queue:?}, a singleton: \
                         both say what a later call of a partition gets; keep one",
                        def.name
                    ),
                });
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `def` with `modes`, in `queue`.
    fn with_modes(
        def: ExecutorDef,
        modes: crate::base::registry::Modes,
        queue: Option<&'static str>,
    ) -> &'static ExecutorDef {
        Box::leak(Box::new(ExecutorDef {
            modes,
            queue,
            ..def
        }))
    }

    #[test]
    fn modes_that_cannot_hold_are_refused_at_start() {
        use crate::base::registry::Modes;
        use crate::QueueLimits;
        let plain = || crate::base::registry::tests_support::def_with_secrets("shop::plain", &[]);
        let secret =
            crate::base::registry::tests_support::def_with_secrets("shop::card", &["card"]);
        let unique = Modes {
            unique_for_ms: Some(1_000),
            ..Modes::NONE
        };
        let trailing = Modes {
            debounce_ms: Some(1_000),
            ..Modes::NONE
        };
        let leading = Modes {
            debounce_leading: true,
            ..trailing
        };
        let limits: std::collections::BTreeMap<String, QueueLimits> =
            [("q".to_string(), QueueLimits::new().singleton())].into();
        let defs = [
            with_modes(plain(), unique, None),
            with_modes(plain(), leading, Some("q")),
        ];
        let plan = QueuePlan::new(&defs, &limits).unwrap();
        check(&defs, &plan).unwrap();
        let defs = [with_modes(secret, unique, None)];
        let error = check(&defs, &QueuePlan::new(&defs, &Default::default()).unwrap());
        assert!(error.unwrap_err().to_string().contains("#[secret]"));
        let defs = [with_modes(plain(), trailing, Some("q"))];
        let error = check(&defs, &QueuePlan::new(&defs, &limits).unwrap());
        assert!(error.unwrap_err().to_string().contains("a singleton"));
    }

    #[test]
    fn a_digest_is_fixed_width_and_parts_do_not_run_together() {
        let one = digest(&["ab", "c"]);
        assert_eq!(one.len(), 64);
        assert_ne!(one, digest(&["a", "bc"]));
        assert_eq!(one, digest(&["ab", "c"]));
    }
}

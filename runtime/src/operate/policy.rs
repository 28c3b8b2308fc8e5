//! `rt.policy(name)`: changes a queue's policy (or an executor's, for one in no queue)
//! while the service runs, on every instance within about a second, audited.

use std::time::Duration;

use crate::base::error::{Error, Result};
use crate::base::policy::PolicyFields;
use crate::runtime::Runtime;

/// A change of a policy, made by [`Runtime::policy`]; nothing changes until
/// [`apply`](PolicyChange::apply). Each method sets one field; fields it does not set
/// keep what is stored; [`reset`](PolicyChange::reset) first puts every field back to
/// the attribute's and the builder's.
///
/// A policy is named after a queue (`#[async_exec(queue = "...")]`), and then holds for
/// every executor in it, or after an executor in no queue (its stable name). Limits
/// ([`concurrency`](Self::concurrency), [`per_instance`](Self::per_instance),
/// [`rate`](Self::rate)) hold only for a queue: they are kept in its claims. Attempts and
/// backoff count for requests already waiting from their next failure on; a priority
/// boost for new requests; a timeout for bodies that start after the change.
///
/// ```no_run
/// use std::time::Duration;
/// # async fn demo(rt: async_exec::Runtime) -> async_exec::Result<()> {
/// // The gateway is struggling: two charges at a time, a patient backoff, longer calls.
/// rt.policy("payments")
///     .concurrency(2)
///     .backoff(Duration::from_secs(30), Duration::from_secs(600))
///     .timeout(Duration::from_secs(120))
///     .by("alice")
///     .apply()
///     .await?;
/// // Stop it altogether for a while, then let it go again.
/// rt.policy("payments").paused(true).apply().await?;
/// rt.policy("payments").paused(false).apply().await?;
/// // Back to what the code says.
/// rt.policy("payments").reset().apply().await?;
/// # Ok(()) }
/// ```
#[must_use = "a policy change does nothing until it is applied"]
#[derive(Debug)]
pub struct PolicyChange<'r> {
    runtime: &'r Runtime,
    name: String,
    fields: PolicyFields,
    actor: String,
}

impl Runtime {
    /// A change of the policy of queue `name` (or of the executor in no queue of that
    /// stable name); see [`PolicyChange`].
    pub fn policy(&self, name: impl Into<String>) -> PolicyChange<'_> {
        PolicyChange {
            runtime: self,
            name: name.into(),
            fields: PolicyFields::default(),
            actor: "code".into(),
        }
    }
}

impl PolicyChange<'_> {
    /// Every field back to the attribute's and the builder's (then set those given after).
    pub fn reset(mut self) -> Self {
        self.fields = PolicyFields::reset();
        self
    }

    /// Paused: no instance claims its requests (they wait); `false` lets them go.
    pub fn paused(mut self, paused: bool) -> Self {
        self.fields.paused = Some(Some(paused));
        self
    }

    /// At most `n` of the queue's requests run at once over every instance (1 to 100,000).
    pub fn concurrency(mut self, n: u32) -> Self {
        self.fields.concurrency = Some(Some(n));
        self
    }

    /// At most `n` of the queue's requests run at once on each instance.
    pub fn per_instance(mut self, n: u32) -> Self {
        self.fields.per_instance = Some(Some(n));
        self
    }

    /// At most `n` of the queue's requests start per second over every instance.
    pub fn rate(mut self, per_second: u32) -> Self {
        self.fields.rate = Some(Some(per_second));
        self
    }

    /// The attempts a request gets (1 to 2,147,483,647).
    pub fn max_attempts(mut self, n: u32) -> Self {
        self.fields.max_attempts = Some(Some(n));
        self
    }

    /// The backoff of retries: the first delay, doubled for each later retry up to `cap`
    /// (at least 1 ms; at most a year; `base <= cap`).
    pub fn backoff(mut self, base: Duration, cap: Duration) -> Self {
        self.fields.backoff = Some(Some((base, cap)));
        self
    }

    /// A body's timeout (1 ms to a year).
    pub fn timeout(mut self, timeout: Duration) -> Self {
        self.fields.timeout = Some(Some(timeout));
        self
    }

    /// Added to the priority of new requests (-1,000,000 to 1,000,000).
    pub fn priority_boost(mut self, boost: i32) -> Self {
        self.fields.priority_boost = Some(Some(boost));
        self
    }

    /// Who makes the change, for the audit trail (default `code`).
    pub fn by(mut self, actor: impl Into<String>) -> Self {
        self.actor = actor.into();
        self
    }

    /// Writes the change (audited as `policy`); this instance applies it at once, the
    /// others within about a second. Refused with [`Error::Config`] for a value out of
    /// range (naming the range), limits on an executor in no queue, or a name that is
    /// neither a queue nor an executor of the services on this database.
    pub async fn apply(self) -> Result<()> {
        let inner = &self.runtime.inner;
        self.fields.check(&self.name)?;
        let ops = inner.store.ops();
        let plan = inner.claimer.queue_plan();
        let stored = ops.queue_policy_list(&inner.app).await?;
        let known_queue = plan.has(&self.name) || stored.iter().any(|p| p.queue == self.name);
        let known_executor = inner.registry.defs().any(|d| d.name == self.name)
            || announced(self.runtime, &self.name).await?;
        if !known_queue && !known_executor {
            return Err(Error::Config {
                setting: "policy",
                reason: format!(
                    "no queue or executor is named {:?}; the queues: {}; an executor in no \
                     queue goes by its stable name (`async-exec stats` lists them)",
                    self.name,
                    plan.names()
                ),
            });
        }
        if !known_queue && self.fields.sets_limits() {
            return Err(Error::Config {
                setting: "policy",
                reason: format!(
                    "{:?} is an executor in no queue: limits hold only for a queue's claims; \
                     give it `queue = \"...\"` in its attribute and limit the queue",
                    self.name
                ),
            });
        }
        let columns = self.fields.columns();
        let now = inner.now_ms();
        ops.policy_write(&inner.app, &self.name, &columns, &self.actor, now)
            .await?;
        let target = serde_json::json!({
            "policy": self.name,
            "set": columns.iter().map(|(c, v)| (c.to_string(), serde_json::json!(v)))
                .collect::<serde_json::Map<_, _>>(),
        })
        .to_string();
        self.runtime
            .audit(&inner.app, &self.actor, "policy", target, 0)
            .await?;
        // In force here at once; the other instances re-read within a second.
        self.runtime.control_part().refresh_pauses().await
    }
}

/// Whether a live instance of the application (seen within a day) announced an executor
/// named `name`: what a tool without the service's executors (the CLI) knows of them.
pub(crate) async fn announced(runtime: &Runtime, name: &str) -> Result<bool> {
    const DAY_MS: i64 = 24 * 3_600_000;
    let inner = &runtime.inner;
    let instances = inner.store.instance_list(&inner.app, DAY_MS).await?;
    Ok(instances
        .iter()
        .any(|i| i.executors.iter().any(|e| e.name == name)))
}

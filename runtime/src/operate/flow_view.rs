//! Operators see flow: each queue's limits in force, what runs, waits and starts in it,
//! how long its oldest due request has waited, per partition, and the verdict ("limit
//! working" or "stuck", [`Verdict`](crate::Verdict)); and the saturation history, sampled every
//! [`Settings::flow_sample_interval`](crate::Settings::flow_sample_interval) by one
//! instance at a time (the one whose `UPDATE` of `async_flow_slot` moved the period on)
//! and kept for [`Settings::flow_history`](crate::Settings::flow_history).
//!
//! Reads: the queue's live records through the claim index and the running index (one
//! grouped statement for every queue), starts and finishes per minute from
//! `async_queue_stat` (a primary-key range), the policies' rows; never the finished
//! history.

use std::collections::BTreeSet;
use std::time::Duration;

use rustc_hash::FxHashMap;

use crate::base::error::Result;
use crate::base::flow::{judge, FlowSample, PartitionFlow, QueueFlow, QueueSummary, Reading};
use crate::base::query::QueuePolicy;
use crate::runtime::Runtime;
use crate::store::ops::{minute_of, QueueNow, SampleRow};

/// Partitions read to judge whether every one with due requests is at its limit.
const PARTITIONS_JUDGED: i64 = 1_000;

/// A queue's limits in force: the policy's (set while running), else this instance's
/// builder's; and whether its claims are paused.
#[derive(Debug, Clone, Copy, Default)]
struct Limits {
    concurrency: Option<i64>,
    per_instance: Option<i64>,
    per_partition: Option<i64>,
    rate: Option<i64>,
    /// The rate's period (ms): a second unless the builder's `rate_per` says otherwise.
    rate_period_ms: i64,
    paused: bool,
}

/// Starts and finishes by queue over a window that ends now.
struct Starts {
    by_queue: FxHashMap<String, (i64, i64)>,
    window_ms: i64,
}

impl Starts {
    fn of(&self, queue: &str) -> (i64, i64) {
        self.by_queue.get(queue).copied().unwrap_or((0, 0))
    }
}

impl Runtime {
    /// Queue `queue` now: its limits in force (set while running, else the builder's of
    /// this instance), what runs, waits and is due, how long the oldest due request has
    /// waited (`lag_ms`), the attempts started and finished over the last minute or two,
    /// the [`Verdict`](crate::Verdict) with a sentence, and per partition (the `partitions` with the most
    /// waiting, at most 1,000) what runs and waits, its lag and whether it is at its
    /// limit. Reads the queue's live records only.
    ///
    /// ```no_run
    /// # async fn demo(rt: async_exec::Runtime) -> async_exec::Result<()> {
    /// use async_exec::Verdict;
    /// let flow = rt.queue_flow("webhooks", 20).await?;
    /// if flow.verdict == Verdict::Stuck {
    ///     eprintln!("webhooks is stuck: {}", flow.reason);
    /// }
    /// for p in &flow.partitions {
    ///     println!("{}: {} running, {} waiting", p.partition, p.running, p.waiting);
    /// }
    /// # Ok(()) }
    /// ```
    pub async fn queue_flow(&self, queue: &str, partitions: usize) -> Result<QueueFlow> {
        let now = self.inner.now_ms();
        let policies = self.queue_policies().await?;
        let limits = self.limits_of(queue, &policies);
        let ops = self.inner.store.ops();
        let app = &self.inner.app;
        let current = ops
            .queue_now(app, &[queue], now)
            .await?
            .into_iter()
            .next()
            .unwrap_or_default();
        let rows = ops
            .queue_partitions(app, queue, partitions.clamp(1, 1_000) as i64)
            .await?;
        let partitions = self.partition_flows(queue, rows, &limits, now).await?;
        let starts = self.starts(now).await?;
        let (started, finished) = starts.of(queue);
        let reading = reading(
            &current,
            now,
            &limits,
            started,
            starts.window_ms,
            &partitions,
        );
        let (verdict, reason) = judge(&reading);
        Ok(QueueFlow {
            queue: queue.to_string(),
            concurrency: limits.concurrency,
            per_instance: limits.per_instance,
            per_partition: limits.per_partition,
            rate: limits.rate,
            rate_period_ms: limits.rate_period_ms,
            paused: limits.paused,
            running: current.running,
            waiting: current.waiting,
            due: current.due,
            lag_ms: reading.lag_ms,
            started,
            finished,
            rate_window_ms: starts.window_ms,
            verdict,
            reason,
            partitions,
        })
    }

    /// Every queue of the application (those with a policy row, made when a service
    /// naming it starts, and this instance's), by name, each
    /// with what it holds now and its [`Verdict`](crate::Verdict). One grouped read of the live records,
    /// one of the starts; a queue with a per-partition limit, due requests and room
    /// below its queue limit reads its partitions too.
    ///
    /// ```no_run
    /// # async fn demo(rt: async_exec::Runtime) -> async_exec::Result<()> {
    /// for q in rt.queues_flow().await? {
    ///     println!("{}: {} ({})", q.queue, q.verdict.as_str(), q.reason);
    /// }
    /// # Ok(()) }
    /// ```
    pub async fn queues_flow(&self) -> Result<Vec<QueueSummary>> {
        let now = self.inner.now_ms();
        let policies = self.queue_policies().await?;
        let ops = self.inner.store.ops();
        let app = &self.inner.app;
        let known = self.known_queues(&policies);
        let names: Vec<&str> = known.iter().map(String::as_str).collect();
        let mut live: FxHashMap<String, QueueNow> = ops
            .queue_now(app, &names, now)
            .await?
            .into_iter()
            .map(|q| (q.queue.clone(), q))
            .collect();
        let starts = self.starts(now).await?;
        let mut summaries = Vec::with_capacity(known.len());
        for queue in known {
            let limits = self.limits_of(&queue, &policies);
            let current = live.remove(&queue).unwrap_or_default();
            let (started, _) = starts.of(&queue);
            let below = !limits.concurrency.is_some_and(|c| current.running >= c);
            let partitions = if limits.per_partition.is_some() && current.due > 0 && below {
                let rows = ops.queue_partitions(app, &queue, PARTITIONS_JUDGED).await?;
                self.partition_flows(&queue, rows, &limits, now).await?
            } else {
                Vec::new()
            };
            let reading = reading(
                &current,
                now,
                &limits,
                started,
                starts.window_ms,
                &partitions,
            );
            let (verdict, reason) = judge(&reading);
            summaries.push(QueueSummary {
                queue,
                concurrency: limits.concurrency,
                running: current.running,
                waiting: current.waiting,
                due: current.due,
                lag_ms: reading.lag_ms,
                started,
                verdict,
                reason,
            });
        }
        Ok(summaries)
    }

    /// The saturation history of `queue` over the last `span`, oldest first: a sample
    /// every [`Settings::flow_sample_interval`](crate::Settings::flow_sample_interval)
    /// while it held or started anything (periods without one were idle, or no
    /// instance ran workers), kept for [`Settings::flow_history`](crate::Settings::flow_history).
    ///
    /// ```no_run
    /// # async fn demo(rt: async_exec::Runtime) -> async_exec::Result<()> {
    /// use std::time::Duration;
    /// use async_exec::Verdict;
    /// let hour = rt.flow_history("webhooks", Duration::from_secs(3600)).await?;
    /// let saturated = hour.iter().filter(|s| s.verdict == Verdict::LimitWorking).count();
    /// println!("at its limit in {saturated} of {} samples", hour.len());
    /// # Ok(()) }
    /// ```
    pub async fn flow_history(&self, queue: &str, span: Duration) -> Result<Vec<FlowSample>> {
        let since = self.inner.now_ms() - span.as_millis().min(i64::MAX as u128) as i64;
        self.inner
            .store
            .ops()
            .flow_series(&self.inner.app, queue, since)
            .await
    }

    /// Samples every queue into the saturation history now, if no instance sampled the
    /// current period yet (periods of
    /// [`Settings::flow_sample_interval`](crate::Settings::flow_sample_interval), by the
    /// database's clock), and deletes samples older than
    /// [`Settings::flow_history`](crate::Settings::flow_history). Returns the start of
    /// the period sampled, or `None` when another instance (or an earlier call) had
    /// taken it. An instance that runs workers does this by itself; call it from one
    /// that runs none, or in tests.
    ///
    /// ```no_run
    /// # async fn demo(rt: async_exec::Runtime) -> async_exec::Result<()> {
    /// if let Some(at) = rt.sample_flow().await? {
    ///     println!("sampled the period starting at {at}");
    /// }
    /// # Ok(()) }
    /// ```
    pub async fn sample_flow(&self) -> Result<Option<i64>> {
        let settings = &self.inner.settings;
        let every = (settings.flow_sample_interval.as_millis() as i64).max(1);
        let keep = settings.flow_history.as_millis().min(i64::MAX as u128) as i64;
        let now = self.inner.now_ms();
        let at = now.div_euclid(every) * every;
        let ops = self.inner.store.ops();
        let app = &self.inner.app;
        if !ops.flow_slot_take(app, at).await? {
            return Ok(None);
        }
        let rows: Vec<SampleRow> = self
            .queues_flow()
            .await?
            .into_iter()
            .filter(|q| q.running > 0 || q.waiting > 0 || q.started > 0)
            .map(|q| SampleRow {
                sample: FlowSample {
                    at,
                    running: q.running,
                    waiting: q.waiting,
                    due: q.due,
                    lag_ms: q.lag_ms,
                    started: q.started,
                    concurrency: q.concurrency,
                    verdict: q.verdict,
                },
                queue: q.queue,
            })
            .collect();
        ops.flow_write(app, &rows).await?;
        ops.flow_prune(app, now.saturating_sub(keep)).await?;
        Ok(Some(at))
    }

    #[cfg(feature = "console")]
    /// Whether `queue` names a queue of this application: a policy row (made when a
    /// service naming it starts) or this instance's.
    pub(crate) async fn is_queue(&self, queue: &str) -> Result<bool> {
        let policies = self.queue_policies().await?;
        Ok(self.known_queues(&policies).contains(queue))
    }

    /// The queues this instance knows of: policy rows, the builder's, its executors'.
    fn known_queues(&self, policies: &[QueuePolicy]) -> BTreeSet<String> {
        let inner = &self.inner;
        policies
            .iter()
            .map(|p| p.queue.clone())
            .chain(inner.settings.queues.keys().cloned())
            .chain(
                inner
                    .registry
                    .defs()
                    .filter_map(|d| d.queue.map(String::from)),
            )
            .collect()
    }

    /// `queue`'s limits in force, and whether its claims are paused.
    /// The partitions of `queue` read (name, running, waiting, oldest due), each with
    /// its own settings (their rows in `async_partition` only) and the limit in force:
    /// its own concurrency, else the queue's per-partition limit.
    async fn partition_flows(
        &self,
        queue: &str,
        rows: Vec<(String, i64, i64, Option<i64>)>,
        limits: &Limits,
        now: i64,
    ) -> Result<Vec<PartitionFlow>> {
        let keys: Vec<String> = rows.iter().map(|r| r.0.clone()).collect();
        let own = self
            .inner
            .store
            .ops()
            .partition_of(&self.inner.app, queue, &keys)
            .await?;
        Ok(rows
            .into_iter()
            .map(|(partition, running, waiting, oldest_due)| {
                let settings = own.iter().find(|o| o.0 == partition).map(|o| o.1);
                let limit = settings
                    .and_then(|s| s.concurrency_limit())
                    .map(i64::from)
                    .or(limits.per_partition);
                PartitionFlow {
                    partition,
                    running,
                    waiting,
                    oldest_due,
                    lag_ms: lag(oldest_due, now),
                    limit,
                    at_limit: limit.is_some_and(|limit| running >= limit),
                    settings,
                }
            })
            .collect())
    }

    fn limits_of(&self, queue: &str, policies: &[QueuePolicy]) -> Limits {
        let inner = &self.inner;
        let built = inner
            .settings
            .queues
            .get(queue)
            .copied()
            .unwrap_or_default();
        let set = policies.iter().find(|p| p.queue == queue);
        let of = |n: Option<u32>| n.map(i64::from);
        let mut executors = inner.registry.defs().filter(|d| d.queue == Some(queue));
        let first = executors.next();
        // Every executor of the queue this binary knows paused: nothing claims it here.
        let executors_paused = first.is_some_and(|first| {
            inner.control.is_paused(first.name)
                && executors.all(|d| inner.control.is_paused(d.name))
        });
        Limits {
            concurrency: set
                .and_then(|p| p.concurrency)
                .or(of(built.concurrency_limit())),
            per_instance: set
                .and_then(|p| p.per_instance)
                .or(of(built.per_instance_limit())),
            per_partition: of(built.per_partition_limit()),
            rate: set.and_then(|p| p.rate).or(of(built.rate_limit())),
            // A rate set while running is per second.
            rate_period_ms: if set.and_then(|p| p.rate).is_some() {
                1_000
            } else {
                built.rate_period_ms()
            },
            paused: set.is_some_and(|p| p.paused) || executors_paused,
        }
    }

    /// Starts and finishes by queue since the start of the previous minute: every
    /// instance's written to `async_queue_stat`, and this instance's not written yet.
    async fn starts(&self, now: i64) -> Result<Starts> {
        let since = minute_of(now) - 60_000;
        let mut by_queue: FxHashMap<String, (i64, i64)> = self
            .inner
            .store
            .ops()
            .queue_stat_since(&self.inner.app, since)
            .await?
            .into_iter()
            .map(|(queue, started, finished)| (queue, (started, finished)))
            .collect();
        for (queue, [started, finished]) in self.inner.control.queue_pending_since(since) {
            let sum = by_queue.entry(queue.to_string()).or_default();
            sum.0 += started;
            sum.1 += finished;
        }
        Ok(Starts {
            by_queue,
            window_ms: now - since,
        })
    }
}

/// How long ago `due` was, if it has come.
fn lag(due: Option<i64>, now: i64) -> Option<i64> {
    due.filter(|&due| due <= now).map(|due| now - due)
}

/// What a verdict reads of a queue now.
fn reading(
    current: &QueueNow,
    now: i64,
    limits: &Limits,
    started: i64,
    window_ms: i64,
    partitions: &[PartitionFlow],
) -> Reading {
    let with_due: Vec<&PartitionFlow> = partitions.iter().filter(|p| p.lag_ms.is_some()).collect();
    Reading {
        running: current.running,
        due: current.due,
        lag_ms: lag(current.oldest_due, now),
        started,
        window_ms,
        concurrency: limits.concurrency,
        rate: limits.rate,
        paused: limits.paused,
        partitions_full: limits
            .per_partition
            .map(|_| !with_due.is_empty() && with_due.iter().all(|p| p.at_limit)),
    }
}

#[cfg(feature = "console")]
/// The verdicts in the order the console lists them: the ones to look at first.
pub(crate) fn urgency(verdict: crate::Verdict) -> u8 {
    use crate::Verdict;
    match verdict {
        Verdict::Stuck => 0,
        Verdict::Backlogged => 1,
        Verdict::LimitWorking => 2,
        Verdict::Flowing => 3,
        Verdict::Idle => 4,
    }
}

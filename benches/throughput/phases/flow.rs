//! `flow` (only when named): what a queue's limits cost a drain (issue 30). In each
//! repetition, four drains of `--n` records, the one going first turning with the
//! repetition: (a) records in no queue (as `drain`), (b) the same in a queue limited to
//! [`QUEUE_LIMIT`] at once, (c) in a queue limited to [`QUEUE_LIMIT`] and
//! [`PER_PARTITION`] per partition, spread over [`PARTITIONS`] partitions, and the
//! hand-written queue's drain. jobs/s for each, and (b)/(a), (c)/(a) within the
//! repetition. Every body must run exactly once (checked).
//!
//! The limits are above the workers (`--concurrency`, 8): they hold nothing back, so what
//! the phase measures is the claim path a limited queue takes (the queue's row locked,
//! its running requests counted, turns taken between partitions), not the limit.
//!
//! This binary links executors in queues (`bench::flow_*`, `bench::neighbour`), so every
//! runtime it starts has queues: records in no queue, here and in `drain`, are claimed by
//! the path that gives the queues their turns after each batch of free workers.

use async_exec::QueueLimits;

use super::*;

/// The limit of the queues of (b) and (c), over every instance.
pub(crate) const QUEUE_LIMIT: u32 = 100;
/// The limit of each partition in (c).
pub(crate) const PER_PARTITION: u32 = 4;
/// The partitions the records of (c) are spread over, in turn.
pub(crate) const PARTITIONS: i64 = 50;

/// The four drains of the phase.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Flow {
    /// Records in no queue.
    NoQueue,
    /// Records in a queue with `concurrency(100)`.
    Limited,
    /// Records in a queue with `concurrency(100).per_partition(4)`, 50 partitions.
    Partitioned,
    /// The hand-written queue.
    Baseline,
}

impl Flow {
    fn phase(self) -> &'static str {
        match self {
            Flow::NoQueue | Flow::Baseline => "flow_no_queue",
            Flow::Limited => "flow_limit100",
            Flow::Partitioned => "flow_per_partition",
        }
    }
}

impl Bench<'_> {
    /// One repetition of the phase: the four drains, in an order that turns with `rep`.
    pub(crate) async fn flow<DB: BenchDb>(&mut self, rep: usize) -> Result<()> {
        let mut order = [
            Flow::NoQueue,
            Flow::Limited,
            Flow::Partitioned,
            Flow::Baseline,
        ];
        let turn = if self.args.baseline_first {
            rep + 2
        } else {
            rep - 1
        };
        order.rotate_left(turn % 4);
        let mut rates = Vec::with_capacity(order.len());
        for flow in order {
            let rate = self.flow_once::<DB>(flow).await?;
            let i = match flow {
                Flow::Baseline => Impl::Baseline,
                _ => Impl::Lib,
            };
            self.results
                .record(self.kind, flow.phase(), i, rep, rate, "jobs/s");
            rates.push((flow, rate));
        }
        let rate_of = |wanted: Flow| {
            rates
                .iter()
                .find(|(flow, _)| *flow == wanted)
                .map(|(_, rate)| *rate)
                .expect("every drain of the phase ran")
        };
        let none = rate_of(Flow::NoQueue);
        for (flow, phase) in [
            (Flow::Limited, "flow_limit100_vs_no_queue"),
            (Flow::Partitioned, "flow_per_partition_vs_no_queue"),
        ] {
            let ratio = rate_of(flow) / none;
            self.results
                .record(self.kind, phase, Impl::Lib, rep, ratio, "x of no queue");
        }
        Ok(())
    }

    /// Submits `--n` records of `flow` (workers stopped), then times their drain from the
    /// start of the workers to the last body: jobs/s.
    async fn flow_once<DB: BenchDb>(&mut self, flow: Flow) -> Result<f64> {
        let n = self.args.n;
        self.clear_queues().await?;
        let what = format!("flow, {} ({flow:?})", flow.phase());
        if flow == Flow::Baseline {
            for chunk in chunks(n) {
                self.queue.insert_multi(chunk).await?;
            }
            let hits = Hits::new(n);
            let worker =
                QueueWorker::start(self.queue.clone(), hits.clone(), self.args.concurrency);
            hits.wait_for(n, &what).await?;
            let elapsed = hits.epoch.elapsed();
            worker.stop().await?;
            self.queue.pool.wait_empty("bench_queue", &what).await?;
            hits.check_exactly_once(&what)?;
            return Ok(per_second(n, elapsed));
        }
        let rt = self.submit_only().await?;
        for chunk in chunks(n) {
            let mut tx: Tx<DB> = rt.begin().await?;
            match flow {
                Flow::NoQueue => async_exec::batch(chunk.map(job)).within(&mut tx).await?,
                Flow::Limited => {
                    async_exec::batch(chunk.map(flow_limited))
                        .within(&mut tx)
                        .await?
                }
                _ => {
                    async_exec::batch(chunk.map(|m| {
                        flow_partitioned(m).partition(format!("tenant-{}", m % PARTITIONS))
                    }))
                    .within(&mut tx)
                    .await?
                }
            };
            tx.commit().await?;
        }
        rt.shutdown().await?;
        let submitted = self.queue.pool.count("async_req").await?;
        ensure!(
            submitted == n as i64,
            "{what}: {submitted} records, not {n}"
        );
        let builder = match flow {
            Flow::NoQueue => self.builder(),
            Flow::Limited => self
                .builder()
                .queue("bench_limited", QueueLimits::new().concurrency(QUEUE_LIMIT)),
            _ => self.builder().queue(
                "bench_partitioned",
                QueueLimits::new()
                    .concurrency(QUEUE_LIMIT)
                    .per_partition(PER_PARTITION),
            ),
        };
        let hits = Hits::new(n);
        let rt = builder.data_arc(hits.clone()).start().await?;
        hits.wait_for(n, &what).await?;
        let elapsed = hits.epoch.elapsed();
        rt.wait_idle().await;
        self.queue.pool.wait_empty("async_req", &what).await?;
        rt.shutdown().await?;
        hits.check_exactly_once(&what)?;
        Ok(per_second(n, elapsed))
    }
}

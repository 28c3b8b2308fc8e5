//! `crowd` (only when named): a queue's calls beside another queue's backlog of
//! `--crowd-backlog` (100,000) waiting records (issue 30: "100,000 waiting in one queue:
//! another queue's p95 start under 100 ms"). One runtime, two queues:
//! `bench_crowd_busy` (`concurrency(--concurrency)`, bodies of `--neighbour-work-ms`)
//! and `bench_crowd_quiet`. The busy queue's backlog is written first (in batches); then
//! quiet calls at [`QUIET_RATE`] a second for `--neighbour-seconds`, one per
//! transaction. From each quiet call's `commit()` returning to its body's start: p50 and
//! p95 with the backlog (`crowd_quiet_*`) and without it (`crowd_alone_*`), the two runs in
//! the same repetition, the one going first alternating. Every quiet call must run
//! exactly once (checked); the backlog left when they have is dropped.

use async_exec::{batch, QueueLimits};

use super::*;

/// Quiet calls a second.
const QUIET_RATE: usize = 20;
/// Busy records written per batch.
const BATCH: usize = 5_000;

impl Bench<'_> {
    /// One repetition: the run beside the backlog and the run without, alternating.
    pub(crate) async fn crowd<DB: BenchDb>(&mut self, rep: usize) -> Result<()> {
        let crowded_first = (rep % 2 == 1) != self.args.baseline_first;
        let order = if crowded_first {
            [true, false]
        } else {
            [false, true]
        };
        let mut p95 = [0.0; 2];
        for crowded in order {
            let (median, high) = self.crowd_once::<DB>(crowded).await?;
            let (phases, slot) = match crowded {
                true => (["crowd_quiet_p50", "crowd_quiet_p95"], 0),
                false => (["crowd_alone_p50", "crowd_alone_p95"], 1),
            };
            self.results
                .record(self.kind, phases[0], Impl::Lib, rep, median, "ms");
            self.results
                .record(self.kind, phases[1], Impl::Lib, rep, high, "ms");
            p95[slot] = high;
        }
        if p95[1] > 0.0 {
            self.results.record(
                self.kind,
                "crowd_p95_vs_alone",
                Impl::Lib,
                rep,
                p95[0] / p95[1],
                "x of alone",
            );
        }
        Ok(())
    }

    /// One run, beside the backlog or not: the quiet calls' p50 and p95 from commit to
    /// start (ms).
    async fn crowd_once<DB: BenchDb>(&mut self, crowded: bool) -> Result<(f64, f64)> {
        let seconds = self.args.neighbour_seconds;
        ensure!(seconds > 0, "--neighbour-seconds: at least 1");
        let total = QUIET_RATE * seconds;
        let what = if crowded {
            "crowd, beside the backlog"
        } else {
            "crowd, alone"
        };
        self.clear_queues().await?;
        let hits = Hits::timed(total);
        let committed: Vec<AtomicU64> = (0..total).map(|_| AtomicU64::new(0)).collect();
        let rt = self
            .builder()
            .queue(
                "bench_crowd_busy",
                QueueLimits::new().concurrency(self.args.concurrency as u32),
            )
            .queue("bench_crowd_quiet", QueueLimits::new().concurrency(10))
            .data_arc(hits.clone())
            .start()
            .await?;
        let work_us = self.args.neighbour_work_ms * 1_000;
        if crowded {
            let backlog = self.args.crowd_backlog;
            let written = Instant::now();
            for first in (0..backlog).step_by(BATCH) {
                let last = (first + BATCH).min(backlog);
                batch((first..last).map(|n| crowd_busy(n as i64, work_us)))
                    .on(&rt)
                    .await?;
            }
            eprintln!(
                "[{}] {what}: {backlog} busy records written in {:.1} s",
                self.kind.name(),
                written.elapsed().as_secs_f64()
            );
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
        let gap = Duration::from_secs_f64(1.0 / QUIET_RATE as f64);
        let start = tokio::time::Instant::now();
        for (n, at) in committed.iter().enumerate() {
            tokio::time::sleep_until(start + gap.mul_f64(n as f64)).await;
            let mut tx: Tx<DB> = rt.begin().await?;
            crowd_quiet(n as i64).within(&mut tx).await?;
            tx.commit().await?;
            at.store(hits.now_ns(), Ordering::Release);
        }
        let mut left = total;
        let mut moved = Instant::now();
        while left > 0 {
            tokio::time::sleep(Duration::from_millis(20)).await;
            let now = (0..total).filter(|&n| hits.started_ns(n) == 0).count();
            if now < left {
                moved = Instant::now();
            }
            ensure!(
                moved.elapsed() < STALL,
                "{what}: stalled, {now} of {total} quiet calls not started, none in {STALL:?}"
            );
            left = now;
        }
        rt.shutdown().await?;
        let waiting = self.queue.pool.count("async_req").await?;
        self.clear_queues().await?;
        for (n, runs) in hits.runs.iter().enumerate() {
            let runs = runs.load(Ordering::Acquire);
            ensure!(
                runs == 1,
                "{what}: NOT EXACTLY ONCE: call {n} ran {runs} times"
            );
        }
        let mut latencies: Vec<f64> = (0..total)
            .map(|n| {
                let at = committed[n].load(Ordering::Acquire);
                hits.started_ns(n).saturating_sub(at) as f64 / 1e6
            })
            .collect();
        latencies.sort_by(f64::total_cmp);
        let (p50, p95) = (quantile(&latencies, 0.5), quantile(&latencies, 0.95));
        eprintln!(
            "[{}] {what}: {total} quiet calls in {seconds} s, {waiting} records waiting at \
             the end; p50 {p50:.2} ms, p95 {p95:.2} ms, max {:.2} ms",
            self.kind.name(),
            latencies.last().copied().unwrap_or(0.0),
        );
        Ok((p50, p95))
    }
}

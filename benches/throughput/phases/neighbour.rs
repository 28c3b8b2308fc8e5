//! `neighbour` (only when named): a noisy neighbour in a queue limited per partition
//! (issue 30). One queue, `concurrency(--concurrency).per_partition(2)`, [`PARTITIONS`]
//! partitions; calls at a steady `--neighbour-rate` a second for `--neighbour-seconds`,
//! one per transaction, on one runtime whose workers run them (bodies of
//! `--neighbour-work-ms` each). Nine calls in ten are of one partition (`tenant-0`), the
//! tenth goes to the 49 others in turn. From each small call's `commit()` returning to its
//! body's start: p50 and p95, with the noisy partition's calls (`neighbour_small_*`) and
//! without them, the same small calls at the same times (`neighbour_alone_*`), the two
//! runs in the same repetition, the one going first alternating; and their ratios.
//!
//! At the defaults the noisy partition calls faster than its two places let it run (2
//! bodies of 10 ms: 200 a second, against 360 called): its backlog grows for the whole
//! run, as a tenant's that floods a webhook queue does. When every small call has
//! started, the run ends: the runtime shuts down and the noisy backlog left is dropped.
//! Every small call must have run exactly once, and no call more than once (checked).

use async_exec::QueueLimits;

use super::*;

/// Partitions in the queue: the noisy one and 49 small ones.
pub(crate) const PARTITIONS: usize = 50;
/// The limit of each partition.
pub(crate) const PER_PARTITION: u32 = 2;
/// One call in this many is a small partition's.
const SMALL_EVERY: usize = 10;
/// Transactions open at once, at most; past it the caller waits (and falls behind).
const IN_FLIGHT: usize = 64;

/// Whether call `n` is of a small partition.
fn is_small(n: usize) -> bool {
    n % SMALL_EVERY == 0
}

/// The partition of call `n`.
fn partition_of(n: usize) -> String {
    if is_small(n) {
        format!("tenant-{}", 1 + (n / SMALL_EVERY) % (PARTITIONS - 1))
    } else {
        "tenant-0".to_string()
    }
}

impl Bench<'_> {
    /// One repetition: the run with the noisy partition and the run without, the one going
    /// first alternating.
    pub(crate) async fn neighbour<DB: BenchDb>(&mut self, rep: usize) -> Result<()> {
        let noisy_first = (rep % 2 == 1) != self.args.baseline_first;
        let order = if noisy_first {
            [true, false]
        } else {
            [false, true]
        };
        let mut p95 = [0.0; 2];
        let mut p50 = [0.0; 2];
        for noisy in order {
            let (median, high) = self.neighbour_once::<DB>(noisy).await?;
            let (phases, slot) = match noisy {
                true => (["neighbour_small_p50", "neighbour_small_p95"], 0),
                false => (["neighbour_alone_p50", "neighbour_alone_p95"], 1),
            };
            self.results
                .record(self.kind, phases[0], Impl::Lib, rep, median, "ms");
            self.results
                .record(self.kind, phases[1], Impl::Lib, rep, high, "ms");
            p50[slot] = median;
            p95[slot] = high;
        }
        for (phase, [with, alone]) in [
            ("neighbour_p50_vs_alone", p50),
            ("neighbour_p95_vs_alone", p95),
        ] {
            // An alone p95 of 0 (every body started before its commit returned) has no
            // ratio.
            if alone > 0.0 {
                self.results
                    .record(self.kind, phase, Impl::Lib, rep, with / alone, "x of alone");
            }
        }
        Ok(())
    }

    /// One run, with the noisy partition's calls or without: the small calls' p50 and p95
    /// from commit to start (ms).
    async fn neighbour_once<DB: BenchDb>(&mut self, noisy: bool) -> Result<(f64, f64)> {
        let rate = self.args.neighbour_rate;
        let seconds = self.args.neighbour_seconds;
        ensure!(
            rate > 0 && seconds > 0,
            "--neighbour-rate and --neighbour-seconds: at least 1"
        );
        let total = rate * seconds;
        let calls: Vec<usize> = (0..total).filter(|&n| noisy || is_small(n)).collect();
        let small: Vec<usize> = calls.iter().copied().filter(|&n| is_small(n)).collect();
        let what = if noisy {
            "neighbour, with the noisy partition"
        } else {
            "neighbour, small partitions alone"
        };
        self.clear_queues().await?;
        let hits = Hits::timed(total);
        let committed: Arc<Vec<AtomicU64>> =
            Arc::new((0..total).map(|_| AtomicU64::new(0)).collect());
        let limits = QueueLimits::new()
            .concurrency(self.args.concurrency as u32)
            .per_partition(PER_PARTITION);
        let rt = self
            .builder()
            .queue("bench_neighbour", limits)
            .data_arc(hits.clone())
            .start()
            .await?;
        let work_us = self.args.neighbour_work_ms * 1_000;
        // Let the workers settle first.
        tokio::time::sleep(Duration::from_millis(200)).await;
        let gap = Duration::from_secs_f64(1.0 / rate as f64);
        let slots = Arc::new(Semaphore::new(IN_FLIGHT));
        let mut made = tokio::task::JoinSet::new();
        let start = tokio::time::Instant::now();
        for &n in &calls {
            tokio::time::sleep_until(start + gap.mul_f64(n as f64)).await;
            let slot = slots.clone().acquire_owned().await?;
            let (rt, hits, committed) = (rt.clone(), hits.clone(), committed.clone());
            made.spawn(async move {
                let mut tx: Tx<DB> = rt.begin().await?;
                neighbour_job(n as i64, work_us)
                    .partition(partition_of(n))
                    .within(&mut tx)
                    .await?;
                tx.commit().await?;
                committed[n].store(hits.now_ns(), Ordering::Release);
                drop(slot);
                anyhow::Ok(())
            });
        }
        let behind = start.elapsed().as_secs_f64() - seconds as f64;
        while let Some(call) = made.join_next().await {
            call??;
        }
        // Every small call starts; the noisy backlog need not drain.
        let mut left = small.len();
        let mut moved = Instant::now();
        while left > 0 {
            tokio::time::sleep(Duration::from_millis(20)).await;
            let now = small.iter().filter(|&&n| hits.started_ns(n) == 0).count();
            if now < left {
                moved = Instant::now();
            }
            ensure!(
                moved.elapsed() < STALL,
                "{what}: stalled, {now} of {} small calls not started, none in {STALL:?}",
                small.len()
            );
            left = now;
        }
        let noisy_ran = calls
            .iter()
            .filter(|&&n| !is_small(n) && hits.runs[n].load(Ordering::Acquire) > 0)
            .count();
        if !noisy {
            rt.wait_idle().await;
            self.queue.pool.wait_empty("async_req", what).await?;
        }
        rt.shutdown().await?;
        let backlog = self.queue.pool.count("async_req").await?;
        self.clear_queues().await?;
        // Each small call once; nothing more than once, nothing not called.
        for (n, runs) in hits.runs.iter().enumerate() {
            let runs = runs.load(Ordering::Acquire);
            let called = noisy || is_small(n);
            let expected = if is_small(n) && called {
                1..=1
            } else {
                0..=u8::from(called)
            };
            ensure!(
                expected.contains(&runs),
                "{what}: NOT EXACTLY ONCE: call {n} ran {runs} times"
            );
        }
        ensure!(
            hits.out_of_range.load(Ordering::Acquire) == 0,
            "{what}: a body of an unknown call ran"
        );
        let mut latencies: Vec<f64> = small
            .iter()
            .map(|&n| {
                let at = committed[n].load(Ordering::Acquire);
                hits.started_ns(n).saturating_sub(at) as f64 / 1e6
            })
            .collect();
        latencies.sort_by(f64::total_cmp);
        let (p50, p95) = (quantile(&latencies, 0.5), quantile(&latencies, 0.95));
        eprintln!(
            "[{}] {what}: {} calls ({} small) in {seconds} s, the caller {:.2} s behind at \
             the end; {noisy_ran} of the noisy partition's {} ran, {backlog} records left; \
             small: p50 {p50:.2} ms, p95 {p95:.2} ms, max {:.2} ms",
            self.kind.name(),
            calls.len(),
            small.len(),
            behind.max(0.0),
            calls.len() - small.len(),
            latencies.last().copied().unwrap_or(0.0),
        );
        Ok((p50, p95))
    }
}

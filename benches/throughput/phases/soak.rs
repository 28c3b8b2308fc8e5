//! `soak` (only when named): calls at a fixed arrival rate for minutes, on one runtime
//! whose workers run them; per minute: calls made and run, p50/p99/max from the commit to
//! the body's start, the rows in `async_req`, and this process's RSS. What it shows is
//! whether anything grows: latency, rows, memory. async-exec only: a soak measures the
//! library against itself over time, not against the baseline.
//!
//! The arrival rate is `--soak-rate` calls a second, `--soak-per-tx` calls in each
//! transaction (one transaction every `per_tx / rate` seconds, started on time whether or
//! not the one before committed, at most [`IN_FLIGHT`] open at once); a minute that could
//! not keep the rate says so (`made` below the target).

use std::collections::HashMap;
use std::sync::Mutex;

use super::*;

/// Transactions open at once, at most; past it the submitter waits (and falls behind).
const IN_FLIGHT: usize = 64;

/// Commits and starts, matched by call number, and this minute's latencies.
#[derive(Default)]
pub(crate) struct SoakTiming {
    /// The first of commit or start seen for a call, until the other comes.
    pending: Mutex<HashMap<i64, Mark>>,
    /// Commit-to-start latencies of this minute (ms).
    latencies: Mutex<Vec<f64>>,
    started: AtomicU64,
}

enum Mark {
    Committed(Instant),
    Started(Instant),
}

impl SoakTiming {
    fn committed(&self, n: i64, at: Instant) {
        let mut pending = self.pending.lock().expect("soak lock");
        match pending.remove(&n) {
            Some(Mark::Started(started)) => self.latency(started.saturating_duration_since(at)),
            _ => {
                pending.insert(n, Mark::Committed(at));
            }
        }
    }

    fn started(&self, n: i64) {
        let now = Instant::now();
        self.started.fetch_add(1, Ordering::AcqRel);
        let mut pending = self.pending.lock().expect("soak lock");
        match pending.remove(&n) {
            Some(Mark::Committed(committed)) => {
                self.latency(now.saturating_duration_since(committed))
            }
            _ => {
                pending.insert(n, Mark::Started(now));
            }
        }
    }

    fn latency(&self, latency: Duration) {
        self.latencies.lock().expect("soak lock").push(ms(latency));
    }

    /// This minute's latencies, sorted; the next minute starts empty.
    fn take_minute(&self) -> Vec<f64> {
        let mut latencies = std::mem::take(&mut *self.latencies.lock().expect("soak lock"));
        latencies.sort_by(f64::total_cmp);
        latencies
    }
}

/// The benchmarked function of the soak: tells when it started.
#[async_exec(type = SaveAsync, name = "bench::soak")]
pub(crate) async fn soak_job(n: i64, timing: Data<SoakTiming>) {
    timing.started(n);
}

fn quantile(sorted: &[f64], q: f64) -> f64 {
    if sorted.is_empty() {
        return f64::NAN;
    }
    sorted[((sorted.len() - 1) as f64 * q).round() as usize]
}

impl Bench<'_> {
    pub(crate) async fn soak<DB: BenchDb>(&mut self) -> Result<()> {
        let rate = self.args.soak_rate;
        let per_tx = self.args.soak_per_tx;
        let minutes = self.args.soak_minutes;
        ensure!(
            rate > 0 && per_tx > 0 && per_tx <= rate,
            "--soak-rate and --soak-per-tx: at least 1 call per transaction, at most the rate"
        );
        self.clear_queues().await?;
        let timing = Arc::new(SoakTiming::default());
        let rt = self
            .any_builder()
            .data_arc(timing.clone())
            .without_data::<Hits>()
            .start()
            .await?;
        let gap = Duration::from_secs_f64(per_tx as f64 / rate as f64);
        let slots = Arc::new(Semaphore::new(IN_FLIGHT));
        let failed = Arc::new(AtomicUsize::new(0));
        let started = tokio::time::Instant::now();
        let mut next = 0i64;
        let mut made_before = 0i64;
        let mut started_before = 0u64;
        eprintln!(
            "[{}] soak: {rate} calls/s, {per_tx} per transaction, {minutes} min",
            self.kind.name()
        );
        let mut table = Vec::new();
        for minute in 1..=minutes {
            let minute_end = started + Duration::from_secs(60 * minute as u64);
            let mut tick = 0u32;
            let minute_start = tokio::time::Instant::now();
            loop {
                let due = minute_start + gap * tick;
                if due >= minute_end {
                    break;
                }
                tokio::time::sleep_until(due).await;
                tick += 1;
                let slot = slots.clone().acquire_owned().await?;
                let (rt, timing, failed) = (rt.clone(), timing.clone(), failed.clone());
                let first = next;
                next += per_tx as i64;
                tokio::spawn(async move {
                    let committed: Result<()> = async {
                        let mut tx: Tx<DB> = rt.begin().await?;
                        for n in first..first + per_tx as i64 {
                            soak_job(n).within(&mut tx).await?;
                        }
                        tx.commit().await?;
                        Ok(())
                    }
                    .await;
                    let at = Instant::now();
                    match committed {
                        Ok(()) => {
                            for n in first..first + per_tx as i64 {
                                timing.committed(n, at);
                            }
                        }
                        Err(error) => {
                            eprintln!("soak: a transaction failed: {error:#}");
                            failed.fetch_add(1, Ordering::AcqRel);
                        }
                    }
                    drop(slot);
                });
            }
            let latencies = timing.take_minute();
            let rows = self.queue.pool.count("async_req").await?;
            let ran = timing.started.load(Ordering::Acquire);
            let line = json!({
                "backend": self.kind.name(), "phase": "soak", "minute": minute,
                "made": next - made_before, "ran": ran - started_before,
                "p50_ms": round(quantile(&latencies, 0.5)),
                "p99_ms": round(quantile(&latencies, 0.99)),
                "max_ms": round(latencies.last().copied().unwrap_or(f64::NAN)),
                "rows": rows, "rss_mb": round(super::backlog::status_kb("VmRSS")? as f64 / 1024.0),
                "failed_tx": failed.load(Ordering::Acquire),
            });
            println!("{line}");
            eprintln!("[{}] soak {line}", self.kind.name());
            table.push(line);
            made_before = next;
            started_before = ran;
        }
        // Every call made must run, once.
        let total = next as u64;
        let deadline = Instant::now() + STALL;
        while timing.started.load(Ordering::Acquire) < total && Instant::now() < deadline {
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        rt.wait_idle().await;
        rt.shutdown().await?;
        let ran = timing.started.load(Ordering::Acquire);
        let pending = timing.pending.lock().expect("soak lock").len();
        ensure!(
            ran == total && pending == 0 && failed.load(Ordering::Acquire) == 0,
            "soak: {total} calls committed, {ran} bodies ran, {pending} unmatched, {} \
             transactions failed",
            failed.load(Ordering::Acquire)
        );
        eprintln!(
            "\n{:<8} {:>6} {:>8} {:>8} {:>8} {:>8} {:>9} {:>8} {:>7}",
            "backend", "minute", "made", "ran", "p50 ms", "p99 ms", "max ms", "rows", "RSS MB"
        );
        for line in table {
            eprintln!(
                "{:<8} {:>6} {:>8} {:>8} {:>8} {:>8} {:>9} {:>8} {:>7}",
                line["backend"].as_str().unwrap_or_default(),
                line["minute"],
                line["made"],
                line["ran"],
                line["p50_ms"],
                line["p99_ms"],
                line["max_ms"],
                line["rows"],
                line["rss_mb"]
            );
        }
        Ok(())
    }
}

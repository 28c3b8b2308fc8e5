//! What the bodies record: which ran, how often and when; the benchmarked function and
//! the baseline's payload.

use super::*;

/// Which bodies ran, how often and when: one slot per call number.
#[derive(Debug)]
pub(crate) struct Hits {
    pub(crate) epoch: Instant,
    pub(crate) runs: Vec<AtomicU8>,
    /// Nanoseconds after `epoch` that each body started (latency phases only).
    pub(crate) started: Vec<AtomicU64>,
    pub(crate) first: AtomicU64,
    /// Nanoseconds after `epoch` that the latest body started.
    pub(crate) last: AtomicU64,
    /// `epoch` as nanoseconds since the Unix epoch (to compare processes' times).
    pub(crate) epoch_unix_ns: u128,
    pub(crate) done: AtomicUsize,
    pub(crate) out_of_range: AtomicUsize,
    pub(crate) progress: Notify,
}

impl Hits {
    pub(crate) fn new(n: usize) -> Arc<Hits> {
        Self::build(n, false)
    }

    pub(crate) fn timed(n: usize) -> Arc<Hits> {
        Self::build(n, true)
    }

    pub(crate) fn build(n: usize, timed: bool) -> Arc<Hits> {
        Arc::new(Hits {
            epoch: Instant::now(),
            runs: (0..n).map(|_| AtomicU8::new(0)).collect(),
            started: (0..if timed { n } else { 0 })
                .map(|_| AtomicU64::new(0))
                .collect(),
            first: AtomicU64::new(0),
            last: AtomicU64::new(0),
            epoch_unix_ns: std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .expect("after 1970")
                .as_nanos(),
            done: AtomicUsize::new(0),
            out_of_range: AtomicUsize::new(0),
            progress: Notify::new(),
        })
    }

    pub(crate) fn now_ns(&self) -> u64 {
        (self.epoch.elapsed().as_nanos() as u64).max(1)
    }

    /// What every body does, in both implementations.
    pub(crate) fn hit(&self, n: i64) {
        let now = self.now_ns();
        let _ = self
            .first
            .compare_exchange(0, now, Ordering::AcqRel, Ordering::Acquire);
        self.last.fetch_max(now, Ordering::AcqRel);
        if let Some(started) = self.started.get(n as usize) {
            started.store(now, Ordering::Release);
        }
        match self.runs.get(n as usize) {
            Some(runs) => {
                let _ = runs.fetch_update(Ordering::AcqRel, Ordering::Acquire, |r| {
                    Some(r.saturating_add(1))
                });
            }
            None => {
                self.out_of_range.fetch_add(1, Ordering::AcqRel);
            }
        }
        self.done.fetch_add(1, Ordering::AcqRel);
        self.progress.notify_one();
    }

    pub(crate) fn done(&self) -> usize {
        self.done.load(Ordering::Acquire)
    }

    /// Waits until `target` bodies have run; fails when nothing runs for [`STALL`].
    pub(crate) async fn wait_for(&self, target: usize, what: &str) -> Result<()> {
        let mut seen = self.done();
        while seen < target {
            if tokio::time::timeout(STALL, self.progress.notified())
                .await
                .is_err()
            {
                let now = self.done();
                ensure!(
                    now > seen,
                    "{what}: stalled, {now} of {target} bodies ran, none in the last {STALL:?}"
                );
            }
            seen = self.done();
        }
        Ok(())
    }

    /// Every call ran exactly once, and nothing else ran.
    pub(crate) fn check_exactly_once(&self, what: &str) -> Result<()> {
        let mut never = Vec::new();
        let mut twice = Vec::new();
        for (n, runs) in self.runs.iter().enumerate() {
            match runs.load(Ordering::Acquire) {
                1 => {}
                0 => never.push(n),
                _ => twice.push(n),
            }
        }
        let stray = self.out_of_range.load(Ordering::Acquire);
        ensure!(
            never.is_empty() && twice.is_empty() && stray == 0,
            "{what}: NOT EXACTLY ONCE: {} calls never ran (first {:?}), {} ran more than once \
             (first {:?}), {stray} bodies of unknown calls",
            never.len(),
            &never[..never.len().min(10)],
            twice.len(),
            &twice[..twice.len().min(10)],
        );
        Ok(())
    }

    pub(crate) fn first_body(&self) -> Duration {
        Duration::from_nanos(self.first.load(Ordering::Acquire))
    }

    pub(crate) fn started_ns(&self, n: usize) -> u64 {
        self.started[n].load(Ordering::Acquire)
    }
}

/// The benchmarked function: marks its call number.
#[async_exec(type = SaveAsync, name = "bench::job")]
pub(crate) async fn job(n: i64, hits: Data<Hits>) {
    hits.hit(n);
}

/// The flow phase's function in a queue with a limit over every instance (`concurrency(100)`,
/// set by the phase's runtime).
#[async_exec(type = SaveAsync, name = "bench::flow_limited", queue = "bench_limited")]
pub(crate) async fn flow_limited(n: i64, hits: Data<Hits>) {
    hits.hit(n);
}

/// The flow phase's function in a queue with a limit per partition as well
/// (`concurrency(100).per_partition(4)`, set by the phase's runtime).
#[async_exec(
    type = SaveAsync,
    name = "bench::flow_partitioned",
    queue = "bench_partitioned"
)]
pub(crate) async fn flow_partitioned(n: i64, hits: Data<Hits>) {
    hits.hit(n);
}

/// The neighbour phase's function: marks its start, then works `work_us` microseconds
/// (holding its worker and its partition's place), in a queue limited per partition.
#[async_exec(type = SaveAsync, name = "bench::neighbour", queue = "bench_neighbour")]
pub(crate) async fn neighbour_job(n: i64, work_us: u64, hits: Data<Hits>) {
    hits.hit(n);
    tokio::time::sleep(Duration::from_micros(work_us)).await;
}

/// The baseline's payload, JSON as the library's arguments are.
#[derive(Serialize, Deserialize)]
pub(crate) struct Payload {
    pub(crate) n: i64,
}

pub(crate) fn payload(n: i64) -> String {
    serde_json::to_string(&Payload { n }).expect("a payload serializes")
}

/// The crowd phase's busy queue: works `work_us` microseconds; its backlog is what the
/// quiet queue's calls must not wait behind.
#[async_exec(type = SaveAsync, name = "bench::crowd_busy", queue = "bench_crowd_busy")]
pub(crate) async fn crowd_busy(n: i64, work_us: u64) {
    let _ = n;
    tokio::time::sleep(Duration::from_micros(work_us)).await;
}

/// The crowd phase's quiet queue: marks its start.
#[async_exec(type = SaveAsync, name = "bench::crowd_quiet", queue = "bench_crowd_quiet")]
pub(crate) async fn crowd_quiet(n: i64, hits: Data<Hits>) {
    hits.hit(n);
}

//! `scale`: one backlog drained by 1, 2, 3, ... worker processes on one database (this
//! binary, `--phase scale`), for each implementation: how the drain grows with instances.
//!
//! The workers start first, on empty tables, and wait (polling every [`IDLE_POLL`]: the
//! baseline has no cross-process wake-up, and MySQL none at all); the parent then commits
//! `--n` calls (rows) in one transaction, and the drain runs from that commit to the last
//! body any worker ran (each worker reports its last body's wall-clock time: one machine,
//! one clock). Every call must have run exactly once across the workers (checked).

use std::process::Stdio;
use std::time::{SystemTime, UNIX_EPOCH};

use tokio::io::{AsyncBufReadExt, AsyncReadExt, BufReader};
use tokio::process::{Child, ChildStdout, Command};

use super::*;

/// How often an idle worker looks for work, in both implementations.
pub(crate) const IDLE_POLL: Duration = Duration::from_millis(50);

/// The phase's name for each number of worker processes.
pub(crate) const SCALE_PHASES: [&str; 8] = [
    "scale_drain_x1",
    "scale_drain_x2",
    "scale_drain_x3",
    "scale_drain_x4",
    "scale_drain_x5",
    "scale_drain_x6",
    "scale_drain_x7",
    "scale_drain_x8",
];

/// What one worker process ran.
#[derive(Serialize, Deserialize)]
pub(crate) struct ScaleReport {
    /// The call numbers whose bodies it ran, one entry per run.
    ran: Vec<u32>,
    /// The CPU time it used, user and system (ms).
    cpu_ms: f64,
    /// When its first body ran (ns since the Unix epoch); 0 if none ran.
    first_body_unix_ns: u128,
    /// When its last body ran (ns since the Unix epoch); 0 if none ran.
    last_body_unix_ns: u128,
}

fn unix_ns() -> u128 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .expect("after 1970")
        .as_nanos()
}

/// A worker process, started and ready.
struct Worker {
    child: Child,
    stdout: BufReader<ChildStdout>,
}

impl Bench<'_> {
    /// The drain with each number of worker processes in `--instances`, both
    /// implementations, the one going first alternating.
    pub(crate) async fn scale<DB: BenchDb>(&mut self, rep: usize) -> Result<()> {
        let instances = self.args.instances.clone();
        ensure!(
            instances
                .iter()
                .all(|k| (1..=SCALE_PHASES.len()).contains(k)),
            "--instances: each from 1 to {}, not {instances:?}",
            SCALE_PHASES.len()
        );
        let library_first = (rep % 2 == 1) != self.args.baseline_first;
        let order = if library_first {
            [Impl::Lib, Impl::Baseline]
        } else {
            [Impl::Baseline, Impl::Lib]
        };
        for &k in &instances {
            for i in order {
                self.scale_once::<DB>(rep, k, i).await?;
            }
        }
        Ok(())
    }

    async fn scale_once<DB: BenchDb>(&mut self, rep: usize, k: usize, i: Impl) -> Result<()> {
        let n = self.args.n;
        self.clear_queues().await?;
        let mut workers = Vec::with_capacity(k);
        for _ in 0..k {
            workers.push(self.start_worker(i).await?);
        }
        let committed = match i {
            Impl::Lib => {
                let rt = self.submit_only().await?;
                let mut tx: Tx<DB> = rt.begin().await?;
                for chunk in chunks(n) {
                    async_exec::batch(chunk.map(job)).within(&mut tx).await?;
                }
                tx.commit().await?;
                let committed = unix_ns();
                rt.shutdown().await?;
                committed
            }
            _ => {
                self.queue.insert_all_at_once(0..n as i64).await?;
                unix_ns()
            }
        };
        let table = match i {
            Impl::Lib => "async_req",
            _ => "bench_queue",
        };
        self.wait_drained(table, &format!("scale x{k} ({})", i.name()))
            .await?;
        let mut runs = vec![0u8; n];
        let mut last = committed;
        let mut shares = Vec::with_capacity(k);
        for worker in workers {
            let report = worker.stop().await?;
            let after = |ns: u128| ns.saturating_sub(committed) as f64 / 1e6;
            shares.push(format!(
                "{} bodies from {:.0} to {:.0} ms, {:.0} ms of CPU",
                report.ran.len(),
                after(report.first_body_unix_ns),
                after(report.last_body_unix_ns),
                report.cpu_ms
            ));
            for &m in &report.ran {
                let slot = runs
                    .get_mut(m as usize)
                    .ok_or_else(|| anyhow!("a worker ran call {m}, beyond the {n} made"))?;
                *slot = slot.saturating_add(1);
            }
            last = last.max(report.last_body_unix_ns);
        }
        let never = runs.iter().filter(|&&r| r == 0).count();
        let twice = runs.iter().filter(|&&r| r > 1).count();
        ensure!(
            never == 0 && twice == 0,
            "scale x{k} ({}): NOT EXACTLY ONCE: {never} calls never ran, {twice} more than once",
            i.name()
        );
        let drain = Duration::from_nanos((last - committed) as u64);
        eprintln!(
            "[{}] scale x{k} ({}): {}",
            self.kind.name(),
            i.name(),
            shares.join("; ")
        );
        let phase = SCALE_PHASES[k - 1];
        self.results
            .record(self.kind, phase, i, rep, per_second(n, drain), "jobs/s");
        Ok(())
    }

    /// Starts a worker process of implementation `i` and waits until it is ready.
    async fn start_worker(&self, i: Impl) -> Result<Worker> {
        let mut child = Command::new(std::env::current_exe()?)
            .args(["--phase", "scale", "--impl", i.name(), "--url", &self.url])
            .args(["--backend", self.kind.name()])
            .args(["--n", &self.args.n.to_string()])
            .args(["--concurrency", &self.args.concurrency.to_string()])
            .args(["--sqlite-synchronous", &self.args.sqlite_synchronous])
            .args(
                self.args
                    .global_limit
                    .map(|n| ["--global-limit".to_string(), n.to_string()])
                    .into_iter()
                    .flatten(),
            )
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .kill_on_drop(true)
            .spawn()?;
        let mut stdout = BufReader::new(child.stdout.take().context("the worker's stdout")?);
        let mut line = String::new();
        tokio::time::timeout(Duration::from_secs(30), stdout.read_line(&mut line))
            .await
            .context("a scale worker was not ready within 30 s")??;
        ensure!(
            line.trim() == "ready",
            "a scale worker said {line:?}, not \"ready\""
        );
        Ok(Worker { child, stdout })
    }

    /// Waits until `table` is empty; fails when it stops shrinking for [`STALL`].
    async fn wait_drained(&self, table: &str, what: &str) -> Result<()> {
        let mut left = self.queue.pool.count(table).await?;
        let mut moved = Instant::now();
        while left > 0 {
            tokio::time::sleep(Duration::from_millis(20)).await;
            let now = self.queue.pool.count(table).await?;
            if now < left {
                moved = Instant::now();
            }
            ensure!(
                moved.elapsed() < STALL,
                "{what}: stalled, {now} rows left in {table}, none gone in {STALL:?}"
            );
            left = now;
        }
        Ok(())
    }
}

impl Worker {
    /// Closes its stdin (its signal to stop) and reads its report.
    async fn stop(mut self) -> Result<ScaleReport> {
        drop(self.child.stdin.take());
        let mut out = String::new();
        self.stdout.read_to_string(&mut out).await?;
        let status = self.child.wait().await?;
        ensure!(
            status.success(),
            "a scale worker failed: {status}; stdout: {out}"
        );
        let last = out
            .lines()
            .last()
            .ok_or_else(|| anyhow!("a scale worker printed no report"))?;
        Ok(serde_json::from_str(last)?)
    }
}

/// A worker process: runs one implementation's workers until its stdin closes, then
/// prints what it ran.
pub(crate) async fn scale_child(args: &Args) -> Result<()> {
    let url = args.url.clone().context("--url")?;
    let kind: Kind = args.backend.parse()?;
    let hits = Hits::new(args.n);
    let pool = Pool::connect(kind, &url).await?;
    // Its stdin closing is the signal to stop.
    let stop = tokio::task::spawn_blocking(|| {
        let mut rest = Vec::new();
        std::io::Read::read_to_end(&mut std::io::stdin(), &mut rest)
    });
    match args.implementation.as_deref() {
        Some("async-exec") => {
            let builder = match args.global_limit {
                Some(n) => Runtime::builder().global_concurrency(n),
                None => Runtime::builder(),
            };
            let rt = builder
                .database_url(url)
                .application_name(APP)
                .install_global(false)
                .concurrency(args.concurrency)
                .poll_interval(IDLE_POLL)
                .sqlite_synchronous(sqlite_synchronous().1)
                .data_arc(hits.clone())
                .without_data::<SoakTiming>()
                .start()
                .await?;
            println!("ready");
            stop.await??;
            rt.shutdown().await?;
        }
        Some("baseline") => {
            let queue = Queue {
                kind,
                pool: pool.clone(),
            };
            let worker =
                QueueWorker::start_polling(queue, hits.clone(), args.concurrency, IDLE_POLL);
            println!("ready");
            stop.await??;
            worker.stop().await?;
        }
        other => bail!("--impl async-exec|baseline, not {other:?}"),
    }
    pool.close().await;
    let mut ran = Vec::new();
    for (m, runs) in hits.runs.iter().enumerate() {
        for _ in 0..runs.load(Ordering::Acquire) {
            ran.push(m as u32);
        }
    }
    ensure!(
        hits.out_of_range.load(Ordering::Acquire) == 0,
        "a body of an unknown call ran"
    );
    let unix = |ns: u64| match ns {
        0 => 0,
        ns => hits.epoch_unix_ns + u128::from(ns),
    };
    let report = ScaleReport {
        ran,
        cpu_ms: cpu_ms()?,
        first_body_unix_ns: unix(hits.first.load(Ordering::Acquire)),
        last_body_unix_ns: unix(hits.last.load(Ordering::Acquire)),
    };
    println!("{}", serde_json::to_string(&report)?);
    Ok(())
}

/// The CPU time this process used so far, user and system (ms), from `/proc/self/stat`.
fn cpu_ms() -> Result<f64> {
    let stat = std::fs::read_to_string("/proc/self/stat")?;
    // The fields after the command's closing parenthesis; utime and stime are the 12th
    // and 13th of them, in clock ticks (100 a second on Linux).
    let rest = stat
        .rsplit_once(')')
        .map(|(_, rest)| rest)
        .ok_or_else(|| anyhow!("no command in /proc/self/stat"))?;
    let fields: Vec<&str> = rest.split_whitespace().collect();
    let ticks = |i: usize| -> Result<f64> {
        Ok(fields
            .get(i)
            .ok_or_else(|| anyhow!("/proc/self/stat is short"))?
            .parse::<f64>()?)
    };
    Ok((ticks(11)? + ticks(12)?) * 10.0)
}

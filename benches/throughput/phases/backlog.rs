//! `backlog`: queued records drained by a child process (this binary, `--phase
//! backlog`), which reports its peak RSS.

use super::*;

impl Bench<'_> {
    /// Queues `--backlog` records with raw SQL, then drains them in a child process and
    /// reports the child's peak RSS.
    pub(crate) async fn backlog(&mut self, rep: usize, i: Impl) -> Result<()> {
        let m = self.args.backlog;
        let started = Instant::now();
        match i {
            Impl::Lib => self.fill_async_req(m).await?,
            _ => {
                for chunk in chunks(m) {
                    self.queue.insert_multi(chunk).await?;
                }
            }
        }
        eprintln!(
            "[{}] backlog: {m} {} records queued in {:.1} s",
            self.kind.name(),
            i.name(),
            started.elapsed().as_secs_f64()
        );
        let exe = std::env::current_exe()?;
        let output = tokio::process::Command::new(exe)
            .args(["--phase", "backlog", "--impl", i.name(), "--url", &self.url])
            .args(["--backend", self.kind.name()])
            .args(["--backlog", &m.to_string()])
            .args(["--concurrency", &self.args.concurrency.to_string()])
            .args(["--sqlite-synchronous", &self.args.sqlite_synchronous])
            .stderr(std::process::Stdio::inherit())
            .output()
            .await?;
        let stdout = String::from_utf8_lossy(&output.stdout);
        ensure!(
            output.status.success(),
            "the backlog child ({}) failed: {}; stdout: {stdout}",
            i.name(),
            output.status
        );
        let report: BacklogReport = serde_json::from_str(
            stdout
                .lines()
                .last()
                .ok_or_else(|| anyhow!("the backlog child printed nothing"))?,
        )?;
        let kind = self.kind;
        self.results
            .record(kind, "backlog_peak_rss", i, rep, report.peak_rss_mb, "MB");
        self.results
            .record(kind, "backlog_drain", i, rep, report.jobs_per_s, "jobs/s");
        Ok(())
    }

    /// Inserts `m` `init` records as the runtime writes them (columns copied from one
    /// written by a call), with multi-row INSERTs.
    pub(crate) async fn fill_async_req(&self, m: usize) -> Result<()> {
        let rt = self.submit_only().await?;
        let receipt = job(0).on(&rt).await?;
        let id = receipt
            .id
            .ok_or_else(|| anyhow!("no record for a SaveAsync call"))?;
        let template = rt
            .get(id)
            .await?
            .ok_or_else(|| anyhow!("the record just written is gone"))?;
        rt.shutdown().await?;
        self.queue.pool.clear("async_req").await?;
        ensure!(
            template.param_json == payload(0),
            "the runtime writes arguments as {}, not as {}",
            template.param_json,
            payload(0)
        );
        const PER_ROW: usize = 11;
        let kind = self.kind;
        for chunk in chunks(m) {
            let rows: Vec<String> = (0..chunk.clone().count())
                .map(|r| {
                    let p = |k: usize| kind.placeholder(r * PER_ROW + k);
                    format!(
                        "({}, {}, {}, {}, 'init', 0, {}, {}, {}, NULL, 0, {}, NULL, {}, {}, {})",
                        p(1),
                        p(2),
                        p(3),
                        p(4),
                        p(5),
                        p(6),
                        p(7),
                        p(8),
                        p(9),
                        p(10),
                        p(11)
                    )
                })
                .collect();
            let sql = format!(
                "INSERT INTO async_req (application_name, executor, sign, strategy, status, \
                 exec_count, max_attempts, param_json, remark, idempotency_key, priority, run_at, \
                 last_error, trace_json, create_time, update_time) VALUES {}",
                rows.join(", ")
            );
            let now = now_ms();
            on_pool!(&self.queue.pool, |p| {
                let mut query = sqlx::query(&sql);
                for n in chunk {
                    query = query
                        .bind(&template.application_name)
                        .bind(&template.executor)
                        .bind(&template.sign)
                        .bind(&template.strategy)
                        .bind(template.max_attempts)
                        .bind(payload(n))
                        .bind(&template.remark)
                        .bind(now)
                        .bind(&template.trace_json)
                        .bind(now)
                        .bind(now);
                }
                query.execute(p).await?;
            });
        }
        Ok(())
    }
}

#[derive(Serialize, Deserialize)]
pub(crate) struct BacklogReport {
    pub(crate) peak_rss_mb: f64,
    pub(crate) jobs_per_s: f64,
}

/// Drains the backlog (`--backlog` records) with one implementation, checks that each ran
/// exactly once, and prints its peak RSS.
pub(crate) async fn backlog_child(args: &Args) -> Result<()> {
    let url = args.url.clone().context("--url")?;
    let kind: Kind = args.backend.parse()?;
    let m = args.backlog;
    let hits = Hits::new(m);
    let pool = Pool::connect(kind, &url).await?;
    match args.implementation.as_deref() {
        Some("async-exec") => {
            let rt = Runtime::builder()
                .database_url(url)
                .application_name(APP)
                .install_global(false)
                .concurrency(args.concurrency)
                .sqlite_synchronous(sqlite_synchronous().1)
                .data_arc(hits.clone())
                .without_data::<SoakTiming>()
                .start()
                .await?;
            hits.wait_for(m, "backlog (async-exec)").await?;
            rt.wait_idle().await;
            pool.wait_empty("async_req", "backlog (async-exec)").await?;
            rt.shutdown().await?;
        }
        Some("baseline") => {
            let queue = Queue {
                kind,
                pool: pool.clone(),
            };
            let worker = QueueWorker::start(queue, hits.clone(), args.concurrency);
            hits.wait_for(m, "backlog (baseline)").await?;
            worker.stop().await?;
            pool.wait_empty("bench_queue", "backlog (baseline)").await?;
        }
        other => bail!("--impl async-exec|baseline, not {other:?}"),
    }
    let elapsed = hits.epoch.elapsed();
    pool.close().await;
    hits.check_exactly_once("backlog")?;
    let report = BacklogReport {
        peak_rss_mb: peak_rss_kb()? as f64 / 1024.0,
        jobs_per_s: per_second(m, elapsed),
    };
    println!("{}", serde_json::to_string(&report)?);
    Ok(())
}

/// This process's peak resident set size (`VmHWM`), in kB.
pub(crate) fn peak_rss_kb() -> Result<u64> {
    status_kb("VmHWM")
}

/// A size in kB from `/proc/self/status` (`VmHWM`, `VmRSS`, ...).
pub(crate) fn status_kb(field: &str) -> Result<u64> {
    let status = std::fs::read_to_string("/proc/self/status")?;
    status
        .lines()
        .find_map(|line| line.strip_prefix(field)?.strip_prefix(':'))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .ok_or_else(|| anyhow!("no {field} in /proc/self/status"))
}

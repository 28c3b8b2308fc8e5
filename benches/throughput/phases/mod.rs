//! The phases, for async-exec and for the baseline queue, repetitions interleaved: each
//! phase in a module of its own, over the [`Bench`] every phase of one backend shares.

mod backlog;
mod crowd;
mod drain;
mod flow;
mod latency;
mod neighbour;
mod overhead;
mod scale;
mod soak;
mod submit;

use soak::SoakTiming;

pub(crate) use backlog::backlog_child;
pub(crate) use scale::scale_child;

use super::*;

/// Everything one backend's phases share.
pub(crate) struct Bench<'a> {
    pub(crate) args: &'a Args,
    pub(crate) kind: Kind,
    pub(crate) url: String,
    pub(crate) queue: Queue,
    pub(crate) results: &'a mut Results,
}

#[derive(Debug, Clone, Copy)]
pub(crate) enum Submit {
    /// One call (baseline: one INSERT) per transaction.
    PerTx,
    /// [`CHUNK`] calls (baseline: INSERTs) per transaction.
    Tx1000,
    /// The batch API (baseline: one multi-row INSERT) per [`CHUNK`] calls.
    Batch,
}

impl Submit {
    pub(crate) fn phase(self) -> &'static str {
        match self {
            Submit::PerTx => "submit_tx1",
            Submit::Tx1000 => "submit_tx1000",
            Submit::Batch => "submit_batch",
        }
    }
}

impl FromStr for Submit {
    type Err = anyhow::Error;

    fn from_str(s: &str) -> Result<Self> {
        Ok(match s {
            "tx1" => Submit::PerTx,
            "tx1000" => Submit::Tx1000,
            "batch" => Submit::Batch,
            other => bail!("--submit-modes: tx1, tx1000 or batch, not `{other}`"),
        })
    }
}

impl Bench<'_> {
    /// A runtime of the benchmarked function (`job`, which takes `Data<Hits>`), not of
    /// the soak's.
    pub(crate) fn builder(&self) -> async_exec::Builder {
        self.any_builder().without_data::<SoakTiming>()
    }

    pub(crate) fn any_builder(&self) -> async_exec::Builder {
        let builder = Runtime::builder()
            .database_url(self.url.clone())
            .application_name(APP)
            .install_global(false)
            .concurrency(self.args.concurrency)
            .sqlite_synchronous(sqlite_synchronous().1);
        match self.args.global_limit {
            Some(n) => builder.global_concurrency(n),
            None => builder,
        }
    }

    pub(crate) async fn submit_only(&self) -> Result<Runtime> {
        Ok(self.builder().run_workers(false).start().await?)
    }

    pub(crate) async fn run<DB: BenchDb>(&mut self, phases: &[&str]) -> Result<()> {
        self.queue.setup().await?;
        // Creates the library's tables.
        self.submit_only().await?.shutdown().await?;
        let has = |p: &str| phases.contains(&p);
        for rep in 1..=self.args.reps {
            if has("submit") || has("drain") {
                self.submit_phases::<DB>(rep, has("submit")).await?;
            }
            // The two take turns going first: what one leaves in the database (WAL to
            // flush, pages to write back) slows the one after it.
            let library_first = (rep % 2 == 1) != self.args.baseline_first;
            if has("drain") {
                if library_first {
                    self.drain_lib(rep).await?;
                    self.drain_baseline(rep).await?;
                } else {
                    self.drain_baseline(rep).await?;
                    self.drain_lib(rep).await?;
                }
            }
            if has("latency") {
                self.clear_queues().await?;
                if library_first {
                    self.latency_lib::<DB>(rep).await?;
                    self.latency_baseline(rep).await?;
                } else {
                    self.latency_baseline(rep).await?;
                    self.latency_lib::<DB>(rep).await?;
                }
                if self.kind == Kind::Postgres {
                    self.latency_other_instance::<DB>(rep).await?;
                }
            }
            if has("overhead") {
                self.overhead::<DB>(rep).await?;
            }
            if has("scale") {
                self.scale::<DB>(rep).await?;
            }
            if has("flow") {
                self.flow::<DB>(rep).await?;
            }
            if has("neighbour") {
                self.neighbour::<DB>(rep).await?;
            }
            if has("crowd") {
                self.crowd::<DB>(rep).await?;
            }
        }
        if has("soak") {
            self.soak::<DB>().await?;
        }
        if has("backlog") && self.args.backlog > 0 {
            for rep in 1..=self.args.backlog_reps {
                self.backlog(rep, Impl::Lib).await?;
                self.backlog(rep, Impl::Baseline).await?;
            }
        }
        Ok(())
    }

    /// Empties both queues (what a submit phase left when the drain did not run).
    pub(crate) async fn clear_queues(&self) -> Result<()> {
        self.queue.pool.clear("async_req").await?;
        self.queue.pool.clear("bench_queue").await
    }
}

/// Makes `calls` calls [`LATENCY_GAP`] apart; returns when each `call` returned
/// (nanoseconds on the clock of `hits`).
pub(crate) async fn paced<F, Fut>(hits: &Hits, calls: usize, call: F) -> Result<Vec<u64>>
where
    F: Fn(i64) -> Fut,
    Fut: Future<Output = Result<()>>,
{
    // Let the workers (and a PostgreSQL listener) settle first.
    tokio::time::sleep(Duration::from_millis(200)).await;
    let start = tokio::time::Instant::now();
    let mut committed = Vec::with_capacity(calls);
    for n in 0..calls {
        tokio::time::sleep_until(start + LATENCY_GAP * n as u32).await;
        call(n as i64).await?;
        committed.push(hits.now_ns());
    }
    Ok(committed)
}

pub(crate) fn ms(duration: Duration) -> f64 {
    duration.as_secs_f64() * 1e3
}

//! `drain`: workers started on the submitted records; time until every body has run,
//! each exactly once.

use super::*;

impl Bench<'_> {
    /// Starts workers on the `n` records left by the submit phase.
    pub(crate) async fn drain_lib(&mut self, rep: usize) -> Result<()> {
        let n = self.args.n;
        let hits = Hits::new(n);
        let rt = self.builder().data_arc(hits.clone()).start().await?;
        hits.wait_for(n, "drain (async-exec)").await?;
        let elapsed = hits.epoch.elapsed();
        rt.wait_idle().await;
        self.queue
            .pool
            .wait_empty("async_req", "drain (async-exec)")
            .await?;
        rt.shutdown().await?;
        hits.check_exactly_once("drain (async-exec)")?;
        self.record_drain(rep, Impl::Lib, n, elapsed, hits.first_body());
        Ok(())
    }

    pub(crate) async fn drain_baseline(&mut self, rep: usize) -> Result<()> {
        let n = self.args.n;
        let hits = Hits::new(n);
        let worker = QueueWorker::start(self.queue.clone(), hits.clone(), self.args.concurrency);
        hits.wait_for(n, "drain (baseline)").await?;
        let elapsed = hits.epoch.elapsed();
        worker.stop().await?;
        self.queue
            .pool
            .wait_empty("bench_queue", "drain (baseline)")
            .await?;
        hits.check_exactly_once("drain (baseline)")?;
        self.record_drain(rep, Impl::Baseline, n, elapsed, hits.first_body());
        Ok(())
    }

    pub(crate) fn record_drain(
        &mut self,
        rep: usize,
        i: Impl,
        n: usize,
        all: Duration,
        first: Duration,
    ) {
        let kind = self.kind;
        let results = &mut *self.results;
        results.record(kind, "drain", i, rep, per_second(n, all), "jobs/s");
        results.record(kind, "drain_first_body", i, rep, ms(first), "ms");
    }
}

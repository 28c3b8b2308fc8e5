//! `latency`: from the caller's `commit()` returning to the body starting, queue empty;
//! on PostgreSQL also from another instance (`NOTIFY`).

use super::*;

impl Bench<'_> {
    /// Calls one transaction each, [`LATENCY_GAP`] apart, on a runtime whose workers run.
    pub(crate) async fn latency_lib<DB: BenchDb>(&mut self, rep: usize) -> Result<()> {
        let calls = self.args.latency_calls;
        let hits = Hits::timed(calls);
        let rt = self.builder().data_arc(hits.clone()).start().await?;
        let committed = paced(&hits, calls, |n| {
            let rt = rt.clone();
            async move {
                let mut tx: Tx<DB> = rt.begin().await?;
                job(n).within(&mut tx).await?;
                tx.commit().await?;
                Ok(())
            }
        })
        .await?;
        hits.wait_for(calls, "latency (async-exec)").await?;
        rt.shutdown().await?;
        hits.check_exactly_once("latency (async-exec)")?;
        self.record_latency(rep, Impl::Lib, "latency", &hits, &committed);
        Ok(())
    }

    /// The same, the baseline woken in process after its commit.
    pub(crate) async fn latency_baseline(&mut self, rep: usize) -> Result<()> {
        let calls = self.args.latency_calls;
        let hits = Hits::timed(calls);
        let worker = Arc::new(QueueWorker::start(
            self.queue.clone(),
            hits.clone(),
            self.args.concurrency,
        ));
        let committed = paced(&hits, calls, |n| {
            let queue = self.queue.clone();
            let worker = worker.clone();
            async move {
                queue.insert_one(n).await?;
                worker.notify();
                Ok(())
            }
        })
        .await?;
        hits.wait_for(calls, "latency (baseline)").await?;
        let worker = Arc::into_inner(worker).expect("the worker is no longer shared");
        worker.stop().await?;
        hits.check_exactly_once("latency (baseline)")?;
        self.record_latency(rep, Impl::Baseline, "latency", &hits, &committed);
        Ok(())
    }

    /// PostgreSQL: a submit-only runtime commits, another one (workers on) runs the body,
    /// woken by `NOTIFY`.
    pub(crate) async fn latency_other_instance<DB: BenchDb>(&mut self, rep: usize) -> Result<()> {
        let calls = self.args.latency_calls;
        let hits = Hits::timed(calls);
        let worker = self.builder().data_arc(hits.clone()).start().await?;
        let submitter = self.submit_only().await?;
        let committed = paced(&hits, calls, |n| {
            let rt = submitter.clone();
            async move {
                let mut tx: Tx<DB> = rt.begin().await?;
                job(n).within(&mut tx).await?;
                tx.commit().await?;
                Ok(())
            }
        })
        .await?;
        hits.wait_for(calls, "latency, other instance").await?;
        submitter.shutdown().await?;
        worker.shutdown().await?;
        hits.check_exactly_once("latency, other instance")?;
        self.record_latency(rep, Impl::Lib, "latency_other", &hits, &committed);
        Ok(())
    }

    pub(crate) fn record_latency(
        &mut self,
        rep: usize,
        i: Impl,
        prefix: &str,
        hits: &Hits,
        committed: &[u64],
    ) {
        // A body that started before `commit()` returned counts as 0.
        let mut latencies: Vec<f64> = committed
            .iter()
            .enumerate()
            .map(|(n, &at)| hits.started_ns(n).saturating_sub(at) as f64 / 1e6)
            .collect();
        latencies.sort_by(f64::total_cmp);
        let phases: [(&'static str, f64); 3] = match prefix {
            "latency" => [
                ("latency_p50", 0.5),
                ("latency_p99", 0.99),
                ("latency_max", 1.0),
            ],
            _ => [
                ("latency_other_p50", 0.5),
                ("latency_other_p99", 0.99),
                ("latency_other_max", 1.0),
            ],
        };
        for (phase, q) in phases {
            let value = quantile(&latencies, q);
            self.results.record(self.kind, phase, i, rep, value, "ms");
        }
    }
}

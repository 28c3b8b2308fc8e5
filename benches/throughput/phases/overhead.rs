//! `overhead`: a transaction with one business row and one call, over the same
//! transaction without.

use super::*;

impl Bench<'_> {
    /// A business transaction alone, with one call, and with one baseline INSERT,
    /// interleaved; workers of both implementations run meanwhile.
    pub(crate) async fn overhead<DB: BenchDb>(&mut self, rep: usize) -> Result<()> {
        // A submit phase without the drain leaves its records: they are not this phase's.
        self.clear_queues().await?;
        let count = self.args.overhead_n;
        let lib_hits = Hits::new(count);
        let baseline_hits = Hits::new(count);
        let rt = self.builder().data_arc(lib_hits.clone()).start().await?;
        let worker = QueueWorker::start(
            self.queue.clone(),
            baseline_hits.clone(),
            self.args.concurrency,
        );
        let kinds = [Impl::Plain, Impl::Lib, Impl::Baseline];
        let mut times: BTreeMap<Impl, Vec<f64>> = BTreeMap::new();
        for n in 0..count as i64 {
            for k in 0..kinds.len() {
                // Rotate the order so that none always follows another.
                let implementation = kinds[(k + n as usize) % kinds.len()];
                let started = Instant::now();
                // As an application would, run the transaction again on a deadlock (MariaDB's
                // baseline queue meets them; the time includes the retries).
                retry_conflicts(|| async {
                    let mut tx: Tx<DB> = rt.begin().await?;
                    DB::business_insert(&mut **tx.transaction(), n).await?;
                    match implementation {
                        Impl::Lib => {
                            job(n).within(&mut tx).await?;
                        }
                        Impl::Baseline => DB::queue_insert(&mut **tx.transaction(), n).await?,
                        Impl::Plain => {}
                    }
                    tx.commit().await?;
                    Ok(())
                })
                .await?;
                if implementation == Impl::Baseline {
                    worker.notify();
                }
                times
                    .entry(implementation)
                    .or_default()
                    .push(started.elapsed().as_secs_f64() * 1e6);
            }
        }
        lib_hits.wait_for(count, "overhead (async-exec)").await?;
        baseline_hits.wait_for(count, "overhead (baseline)").await?;
        rt.shutdown().await?;
        worker.stop().await?;
        lib_hits.check_exactly_once("overhead (async-exec)")?;
        baseline_hits.check_exactly_once("overhead (baseline)")?;
        self.queue.pool.clear("bench_business").await?;
        let plain = median(&times[&Impl::Plain]);
        let kind = self.kind;
        let results = &mut *self.results;
        results.record(kind, "overhead_plain_tx", Impl::Plain, rep, plain, "us");
        for i in [Impl::Lib, Impl::Baseline] {
            let with = median(&times[&i]);
            results.record(kind, "overhead_tx", i, rep, with, "us");
            results.record(kind, "overhead", i, rep, with / plain, "x");
        }
        Ok(())
    }
}

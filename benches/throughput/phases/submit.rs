//! `submit`: `--n` calls with the workers stopped, one per transaction, 1000 per
//! transaction, and the batch API; the baseline's INSERTs alike.

use super::*;

impl Bench<'_> {
    /// The three submit modes, timed when `timed`; leaves `n` records of each
    /// implementation for the drain.
    pub(crate) async fn submit_phases<DB: BenchDb>(
        &mut self,
        rep: usize,
        timed: bool,
    ) -> Result<()> {
        let pool = self.queue.pool.clone();
        pool.clear("async_req").await?;
        pool.clear("bench_queue").await?;
        let modes: Vec<Submit> = if timed {
            self.args
                .submit_modes
                .split(',')
                .map(|mode| mode.trim().parse())
                .collect::<Result<_>>()?
        } else {
            vec![Submit::Tx1000]
        };
        let n = self.args.n;
        let rt = self.submit_only().await?;
        for (i, &mode) in modes.iter().enumerate() {
            let started = Instant::now();
            submit_lib::<DB>(&rt, mode, n).await?;
            let lib = per_second(n, started.elapsed());
            let started = Instant::now();
            self.submit_baseline(mode, n).await?;
            let baseline = per_second(n, started.elapsed());
            let (lib_rows, baseline_rows) = (
                pool.count("async_req").await?,
                pool.count("bench_queue").await?,
            );
            ensure!(
                lib_rows == n as i64 && baseline_rows == n as i64,
                "{}: {lib_rows} library records and {baseline_rows} queue rows, not {n}",
                mode.phase()
            );
            if timed {
                self.results
                    .record(self.kind, mode.phase(), Impl::Lib, rep, lib, "calls/s");
                self.results.record(
                    self.kind,
                    mode.phase(),
                    Impl::Baseline,
                    rep,
                    baseline,
                    "calls/s",
                );
            }
            if i + 1 < modes.len() {
                pool.clear("async_req").await?;
                pool.clear("bench_queue").await?;
            }
        }
        rt.shutdown().await?;
        Ok(())
    }

    pub(crate) async fn submit_baseline(&self, mode: Submit, n: usize) -> Result<()> {
        match mode {
            Submit::PerTx => {
                for i in 0..n as i64 {
                    self.queue.insert_one(i).await?;
                }
            }
            Submit::Tx1000 => {
                for chunk in chunks(n) {
                    self.queue.insert_each(chunk).await?;
                }
            }
            Submit::Batch => {
                for chunk in chunks(n) {
                    self.queue.insert_multi(chunk).await?;
                }
            }
        }
        Ok(())
    }
}

pub(crate) async fn submit_lib<DB: BenchDb>(rt: &Runtime, mode: Submit, n: usize) -> Result<()> {
    match mode {
        Submit::PerTx => {
            for i in 0..n as i64 {
                let mut tx: Tx<DB> = rt.begin().await?;
                job(i).within(&mut tx).await?;
                tx.commit().await?;
            }
        }
        Submit::Tx1000 => {
            for chunk in chunks(n) {
                let mut tx: Tx<DB> = rt.begin().await?;
                for i in chunk {
                    job(i).within(&mut tx).await?;
                }
                tx.commit().await?;
            }
        }
        Submit::Batch => {
            for chunk in chunks(n) {
                let mut tx: Tx<DB> = rt.begin().await?;
                async_exec::batch(chunk.map(job)).within(&mut tx).await?;
                tx.commit().await?;
            }
        }
    }
    Ok(())
}

//! The chaos run's submitter: a steady, seeded stream of calls until SIGTERM (see the
//! program's own doc in `examples/chaos.rs`), each receipt recorded after its
//! transaction ended.

use std::collections::VecDeque;
use std::sync::atomic::Ordering;
use std::time::Duration;

use async_exec::{Backend, Outcome, Runtime, Tx};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

use super::receipts::CancelAnswer;
use super::{limited, memory, now_ms, stepped, work, work3, Args, Receipts};

/// The receipt of a call made outside a transaction that failed: `unconfirmed` when its
/// record may have been written all the same (the checker then lets one request without
/// a receipt run for it), `error` otherwise.
pub fn failed_call(error: &async_exec::Error) -> &'static str {
    match error {
        async_exec::Error::Unconfirmed { .. } => "unconfirmed",
        _ => "error",
    }
}

/// How many of the latest committed requests a cancel picks from, of each kind.
const RECENT: usize = 32;

/// One call's arguments, drawn from the seeded stream.
struct Draw {
    key: Option<String>,
    work_ms: u64,
    fail_first: bool,
    /// `Some`: a `work3` call (three attempts at most) failing on these attempts.
    fail_on: Option<Vec<u32>>,
    /// A `stepped` call (three durable steps), when it is not a `work3` one.
    stepped: bool,
    /// A `limited` call (a queue of two over every instance), when neither of the above.
    limited: bool,
    /// A `work` call made with `.delay(..)`: waiting, for a cancel to find.
    delay_ms: Option<u64>,
    /// A `work` call made with `.deadline(..)`.
    deadline_ms: Option<u64>,
}

impl Draw {
    /// The call: `work`, `work3` when the draw has a plan of failures, `stepped` or
    /// `limited`; keyed, delayed or with a deadline as drawn.
    fn call(&self) -> async_exec::Call {
        let mut call = match &self.fail_on {
            Some(fail_on) => work3(self.key.clone(), self.work_ms, fail_on.clone()),
            None if self.stepped => stepped(self.key.clone(), self.work_ms, self.fail_first),
            None if self.limited => limited(self.key.clone(), self.work_ms, self.fail_first),
            None => work(self.key.clone(), self.work_ms, self.fail_first),
        };
        if let Some(key) = &self.key {
            call = call.key(key.clone());
        }
        if let Some(ms) = self.delay_ms {
            call = call.delay(Duration::from_millis(ms));
        }
        if let Some(ms) = self.deadline_ms {
            call = call.deadline(Duration::from_millis(ms));
        }
        call
    }
}

struct Submitter<'a> {
    rt: &'a Runtime,
    receipts: Receipts,
    rng: StdRng,
    max_work_ms: u64,
    keys: Vec<String>,
    next_key: u64,
    seed: u64,
    calls: u64,
    /// Scopes whose nested transaction was refused and which rolled back, as they must.
    nested_refused: u64,
    /// The keyed `SyncSave` calls' records and keys.
    sync_calls: memory::Calls,
    sync_keys: memory::SyncKeys,
    /// The latest committed requests, for cancels to pick from: delayed ones (waiting)
    /// and the others (waiting, running or done).
    recent_delayed: VecDeque<i64>,
    recent: VecDeque<i64>,
}

impl Submitter<'_> {
    fn new_key(&mut self) -> String {
        self.next_key += 1;
        let key = format!("k{}-{}", self.seed, self.next_key);
        self.keys.push(key.clone());
        key
    }

    /// Mostly short bodies, some up to `max_work_ms`.
    fn draw(&mut self, key: Option<String>) -> Draw {
        let work_ms = if self.rng.gen_bool(0.8) {
            self.rng.gen_range(5..=50)
        } else {
            self.rng.gen_range(50..=self.max_work_ms.max(51))
        };
        // One call in eight has three attempts: a quarter of those fail every attempt
        // (they go `dead`), the others attempts 1 and 2, attempt 1, or none.
        let fail_on = self
            .rng
            .gen_bool(0.125)
            .then(|| match self.rng.gen_range(0..4) {
                0 => vec![1, 2, 3],
                1 => vec![1, 2],
                2 => vec![1],
                _ => vec![],
            });
        // One call in eight of the others runs in three durable steps; a fifth of those
        // fail their first attempt after the second step.
        let stepped = fail_on.is_none() && self.rng.gen_bool(0.125);
        let fail_first = self.rng.gen_bool(if stepped { 0.2 } else { 0.05 });
        // One in seven of the rest goes to the queue of two, with longer bodies (150 to
        // 400 ms: the queue is full at times); of the plain `work` calls left, one in
        // twelve waits 0.3 to 1.5 s before it may start, one in twelve must start within
        // 0.2 to 2 s.
        let limited = fail_on.is_none() && !stepped && self.rng.gen_bool(1.0 / 7.0);
        let work_ms = if limited {
            self.rng.gen_range(150..=400)
        } else {
            work_ms
        };
        let plain = fail_on.is_none() && !stepped && !limited;
        let (delay_ms, deadline_ms) = match self.rng.gen_range(0..12) {
            0 if plain => (Some(self.rng.gen_range(300..=1_500)), None),
            1 if plain => (None, Some(self.rng.gen_range(200..=2_000))),
            _ => (None, None),
        };
        Draw {
            key,
            work_ms,
            fail_first,
            fail_on,
            stepped,
            limited,
            delay_ms,
            deadline_ms,
        }
    }

    fn draw_key(&mut self) -> Option<String> {
        match self.rng.gen_range(0..10) {
            0..=5 => None,
            6..=8 => Some(self.new_key()),
            _ if !self.keys.is_empty() => {
                // A key used before: submitted twice, one after the other.
                let i = self.rng.gen_range(0..self.keys.len());
                Some(self.keys[i].clone())
            }
            _ => Some(self.new_key()),
        }
    }

    /// Remembers a committed request for cancels to pick from.
    fn committed(&mut self, receipt: &async_exec::Receipt, draw: &Draw) {
        let (Some(id), Outcome::Queued) = (receipt.id, &receipt.outcome) else {
            return;
        };
        let ring = if draw.delay_ms.is_some() {
            &mut self.recent_delayed
        } else {
            &mut self.recent
        };
        if ring.len() == RECENT {
            ring.pop_front();
        }
        ring.push_back(id);
    }

    async fn autocommit(&mut self, draw: Draw) {
        self.calls += 1;
        match draw.call().on(self.rt).await {
            Ok(receipt) => {
                self.committed(&receipt, &draw);
                self.receipts
                    .receipt_with_deadline(&receipt, draw.key.as_deref(), "auto", draw.deadline_ms)
                    .await
            }
            Err(error) => {
                eprintln!("autocommit call failed: {error}");
                self.receipts
                    .record(None, draw.key.as_deref(), failed_call(&error), "auto")
                    .await
            }
        }
    }

    /// A transaction of 1 to 4 calls, committed or (when `rollback`) rolled back.
    async fn transaction<DB: Backend>(&mut self, rollback: bool) {
        let calls = self.rng.gen_range(1..=4);
        let draws: Vec<Draw> = (0..calls)
            .map(|_| {
                let key = self.draw_key();
                self.draw(key)
            })
            .collect();
        self.calls += calls;
        let mut tx: Tx<DB> = match self.rt.begin().await {
            Ok(tx) => tx,
            Err(error) => {
                eprintln!("begin failed: {error}");
                return;
            }
        };
        let mut written = Vec::new();
        let mut failed = false;
        for draw in &draws {
            match draw.call().within(&mut tx).await {
                Ok(receipt) => written.push((receipt, draw.key.clone(), draw)),
                Err(error) => {
                    eprintln!("call in a transaction failed: {error}");
                    failed = true;
                    break;
                }
            }
        }
        let via = if rollback { "rollback" } else { "tx" };
        if rollback || failed {
            let _ = tx.rollback().await;
            let written_here: Vec<Option<i64>> = written
                .iter()
                .filter(|(r, _, _)| r.outcome == Outcome::Queued)
                .map(|(r, _, _)| r.id)
                .collect();
            for (receipt, key, _) in &written {
                // A duplicate key's answer names the key's request: one of this
                // transaction's (rolled back with it), or one committed before.
                if receipt.outcome == Outcome::Existing && !written_here.contains(&receipt.id) {
                    self.receipts.receipt(receipt, key.as_deref(), via).await;
                } else {
                    self.receipts
                        .record(receipt.id, key.as_deref(), "rolled_back", via)
                        .await;
                }
            }
            return;
        }
        match tx.commit().await {
            Ok(()) => {
                for (receipt, key, draw) in &written {
                    self.committed(receipt, draw);
                    self.receipts
                        .receipt_with_deadline(receipt, key.as_deref(), via, draw.deadline_ms)
                        .await;
                }
            }
            Err(error) => {
                // Whether it committed is unknown: the checker counts these apart.
                eprintln!("commit failed: {error}");
                for (receipt, key, _) in &written {
                    self.receipts
                        .record(receipt.id, key.as_deref(), "commit_error", via)
                        .await;
                }
            }
        }
    }

    /// One new key from two calls at once: one in a transaction held open a little, the
    /// other in autocommit. One request is written; the other call gets `Existing`.
    async fn racing_pair<DB: Backend>(&mut self) {
        let key = self.new_key();
        let first = self.draw(Some(key.clone()));
        let second = self.draw(Some(key.clone()));
        let hold = Duration::from_millis(self.rng.gen_range(5..=40));
        self.calls += 2;
        let rt = self.rt;
        let in_tx = async {
            let mut tx: Tx<DB> = rt.begin().await?;
            let receipt = first.call().within(&mut tx).await?;
            tokio::time::sleep(hold).await;
            tx.commit().await?;
            anyhow::Ok(receipt)
        };
        // Joined in this task while its transaction is open: a bare call here would be
        // refused (`Error::BareCallInTransaction`); this one is meant to be on its own.
        let auto = async {
            tokio::time::sleep(hold / 2).await;
            second.call().on(rt).independent().await
        };
        let (in_tx, auto) = tokio::join!(in_tx, auto);
        match in_tx {
            Ok(receipt) => {
                self.committed(&receipt, &first);
                self.receipts
                    .receipt_with_deadline(&receipt, Some(&key), "race-tx", first.deadline_ms)
                    .await
            }
            Err(error) => {
                eprintln!("racing transaction failed: {error}");
                self.receipts
                    .record(None, Some(&key), "error", "race-tx")
                    .await
            }
        }
        match auto {
            Ok(receipt) => {
                self.committed(&receipt, &second);
                self.receipts
                    .receipt_with_deadline(&receipt, Some(&key), "race-auto", second.deadline_ms)
                    .await
            }
            Err(error) => {
                eprintln!("racing autocommit call failed: {error}");
                self.receipts
                    .record(None, Some(&key), failed_call(&error), "race-auto")
                    .await
            }
        }
    }

    /// A transaction scope of 1 to 3 calls that runs a helper opening a scope of its own
    /// (`rt.transaction(..)` inside `rt.transaction(..)`) and swallows its error, as a
    /// careless helper would. The inner scope is refused and the outer one rolls back: none
    /// of the calls may run (the checker flags a request nobody committed that ran, which
    /// an inner scope committed on its own would be), and a scope that committed is
    /// recorded as an unexpected receipt.
    async fn nested_scope<DB: Backend>(&mut self) {
        let calls = self.rng.gen_range(1..=3);
        let draws: Vec<Draw> = (0..calls)
            .map(|_| {
                let key = self.draw_key();
                self.draw(key)
            })
            .collect();
        let inner_draw = self.draw(None);
        self.calls += calls + 1;
        let inner_rt = self.rt.clone();
        let outcome: Result<(), async_exec::Error> = self
            .rt
            .transaction(|_tx: &mut Tx<DB>| {
                Box::pin(async move {
                    for draw in draws {
                        draw.call().await?;
                    }
                    let inner: Result<(), async_exec::Error> = inner_rt
                        .transaction(|_tx: &mut Tx<DB>| {
                            Box::pin(async move {
                                work(None, inner_draw.work_ms, inner_draw.fail_first).await?;
                                Ok(())
                            })
                        })
                        .await;
                    if inner.is_ok() {
                        eprintln!("a transaction inside a transaction scope was not refused");
                    }
                    Ok(())
                })
            })
            .await;
        match outcome {
            Err(async_exec::Error::RollbackOnly { .. }) => self.nested_refused += 1,
            Err(error) => eprintln!("nested scope failed otherwise: {error}"),
            Ok(()) => {
                eprintln!("a scope whose nested transaction was refused committed");
                self.receipts
                    .record(None, None, "nested_committed", "nested")
                    .await
            }
        }
    }

    /// Cancels one of the latest committed requests (a delayed one, waiting, half the
    /// time), from this process, which runs no workers: the request may be waiting,
    /// running on an instance, or done.
    async fn cancel(&mut self) {
        let ring = if self.rng.gen_bool(0.5) && !self.recent_delayed.is_empty() {
            &mut self.recent_delayed
        } else {
            &mut self.recent
        };
        if ring.is_empty() {
            return;
        }
        let i = self.rng.gen_range(0..ring.len());
        let Some(id) = ring.remove(i) else {
            return;
        };
        let asked = now_ms();
        let answer = self.rt.cancel(id).await;
        let answered = now_ms();
        let outcome = match answer {
            Ok(async_exec::CancelOutcome::Cancelled) => "cancelled",
            Ok(async_exec::CancelOutcome::StopAsked) => "stop_asked",
            Ok(other) => {
                eprintln!("cancel of {id} answered {other:?} outside a scope");
                "error"
            }
            Err(async_exec::Error::NotFound(_)) => "not_found",
            Err(async_exec::Error::InvalidState { .. }) => "refused",
            Err(error) => {
                eprintln!("cancel of {id} failed: {error}");
                "error"
            }
        };
        self.receipts
            .cancel(CancelAnswer {
                request_id: id,
                asked,
                answered,
                outcome,
            })
            .await;
    }

    async fn step<DB: Backend>(&mut self) {
        match self.rng.gen_range(0..100) {
            0..=31 => {
                let key = self.draw_key();
                let draw = self.draw(key);
                self.autocommit(draw).await
            }
            32..=39 => {
                memory::sync_keyed::<DB>(
                    self.rt,
                    &self.sync_calls,
                    &mut self.rng,
                    &mut self.sync_keys,
                    self.seed,
                )
                .await
            }
            40..=76 => self.transaction::<DB>(false).await,
            77..=88 => self.racing_pair::<DB>().await,
            89..=91 => self.nested_scope::<DB>().await,
            92..=95 => self.cancel().await,
            _ => self.transaction::<DB>(true).await,
        }
        let pause = self.rng.gen_range(5..=30);
        tokio::time::sleep(Duration::from_millis(pause)).await;
    }
}

pub async fn submit<DB: Backend>(
    rt: &Runtime,
    receipts: Receipts,
    sync_calls: memory::Calls,
    args: &Args,
) -> anyhow::Result<u64> {
    let mut submitter = Submitter {
        sync_calls,
        sync_keys: memory::SyncKeys::default(),
        rt,
        receipts,
        rng: StdRng::seed_from_u64(args.seed),
        max_work_ms: args.max_work_ms,
        keys: Vec::new(),
        next_key: 0,
        seed: args.seed,
        calls: 0,
        nested_refused: 0,
        recent_delayed: VecDeque::new(),
        recent: VecDeque::new(),
    };
    // A step is never cut short (its receipts are written after its commit): SIGTERM is
    // looked at between steps.
    let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())?;
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let stopping = stop.clone();
    tokio::spawn(async move {
        term.recv().await;
        stopping.store(true, Ordering::Release);
    });
    while !stop.load(Ordering::Acquire) {
        submitter.step::<DB>().await;
    }
    println!(
        "nested scopes refused and rolled back {}",
        submitter.nested_refused
    );
    Ok(submitter.calls)
}

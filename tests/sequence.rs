//! Issue 30, item 4: a sequence queue (`QueueLimits::sequence`) runs each partition's
//! requests one at a time in the order they were called, over every instance. What a
//! failure does to the partition's later requests is the queue's choice: they wait while
//! it retries and go on once it is dead (the default), they wait until an operator
//! replays it (`SequenceFailure::Hold`), or they go on while it waits for its retry
//! (`SequenceFailure::StepAside`).
#![allow(clippy::extra_unused_type_parameters)] // every test takes the backend, used or not

#[macro_use]
mod common;

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use async_exec::{async_exec, batch, Backend, Data, QueueLimits, Runtime, SequenceFailure};
use common::TestDb;

/// What ran: every start by (queue, account), the most running at once in each, the
/// failures still to come of each (queue, account, n), the successes.
#[derive(Clone, Default)]
struct Book(Arc<Mutex<Pages>>);

#[derive(Default)]
struct Pages {
    starts: HashMap<String, Vec<u64>>,
    running: HashMap<String, usize>,
    most: HashMap<String, usize>,
    failures: HashMap<(String, u64), u32>,
    succeeded: usize,
}

impl Book {
    /// `(queue, account)`'s request `n` fails its next `times` attempts.
    fn fail(&self, queue: &str, account: &str, n: u64, times: u32) {
        let key = (format!("{queue}/{account}"), n);
        self.0.lock().unwrap().failures.insert(key, times);
    }

    async fn run(&self, queue: &str, account: &str, n: u64) -> Result<(), String> {
        let label = format!("{queue}/{account}");
        {
            let mut pages = self.0.lock().unwrap();
            pages.starts.entry(label.clone()).or_default().push(n);
            let running = pages.running.entry(label.clone()).or_default();
            *running += 1;
            let now = *running;
            let most = pages.most.entry(label.clone()).or_default();
            *most = (*most).max(now);
        }
        tokio::time::sleep(Duration::from_millis(30)).await;
        let mut pages = self.0.lock().unwrap();
        *pages.running.get_mut(&label).unwrap() -= 1;
        match pages.failures.get_mut(&(label.clone(), n)) {
            Some(left) if *left > 0 => {
                *left -= 1;
                Err(format!("{label} #{n} fails on purpose"))
            }
            _ => {
                pages.succeeded += 1;
                Ok(())
            }
        }
    }

    fn starts(&self, queue: &str, account: &str) -> Vec<u64> {
        let pages = self.0.lock().unwrap();
        let label = format!("{queue}/{account}");
        pages.starts.get(&label).cloned().unwrap_or_default()
    }

    fn most(&self, queue: &str, account: &str) -> usize {
        let pages = self.0.lock().unwrap();
        let label = format!("{queue}/{account}");
        pages.most.get(&label).copied().unwrap_or(0)
    }

    async fn wait_succeeded(&self, n: usize) {
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            let succeeded = self.0.lock().unwrap().succeeded;
            if succeeded >= n {
                return;
            }
            assert!(
                Instant::now() < deadline,
                "{succeeded} of {n} succeeded: {:?}",
                self.0.lock().unwrap().starts
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
}

/// A ledger entry of an account: the default choice on failure.
#[async_exec(type = SaveAsync, queue = "ledger", partition = account, max_attempts = 3)]
async fn ledger(account: String, n: u64, book: Data<Book>) -> Result<(), String> {
    book.run("ledger", &account, n).await
}

/// The same, in a queue that holds a partition behind a dead request.
#[async_exec(type = SaveAsync, queue = "held", partition = account, max_attempts = 2)]
async fn held(account: String, n: u64, book: Data<Book>) -> Result<(), String> {
    book.run("held", &account, n).await
}

/// The same, in a queue whose failed requests step aside while they wait to retry.
#[async_exec(type = SaveAsync, queue = "aside", partition = account, max_attempts = 3)]
async fn aside(account: String, n: u64, book: Data<Book>) -> Result<(), String> {
    book.run("aside", &account, n).await
}

async fn instance(db: &TestDb, book: &Book, retry_delay: Duration) -> Runtime {
    let _ = tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::from_default_env())
        .with_test_writer()
        .try_init();
    db.builder()
        .concurrency(8)
        .delete_on_success(false)
        .poll_interval(Duration::from_millis(50))
        .retry_base_delay(retry_delay)
        .retry_max_delay(retry_delay)
        .data(book.clone())
        .queue("ledger", QueueLimits::new().concurrency(8).sequence())
        .queue(
            "held",
            QueueLimits::new().sequence_on_failure(SequenceFailure::Hold),
        )
        .queue(
            "aside",
            QueueLimits::new().sequence_on_failure(SequenceFailure::StepAside),
        )
        .start()
        .await
        .unwrap()
}

/// The status of request `n` of `account` in `queue` (its arguments' `n`).
async fn status_of(db: &TestDb, queue: &str, account: &str, n: u64) -> i64 {
    db.count(&format!(
        "async_req WHERE queue_name = '{queue}' AND partition_key = '{account}' \
         AND status = 'dead' AND param_json LIKE '%\"n\":{n}%'"
    ))
    .await
}

/// Two instances, three accounts of six entries each, called at once; one entry of two
/// accounts fails once or twice. Each account's entries start in the order called, each
/// one after the one before succeeded (its retries first), never two at once. (Without
/// the sequence, the per-partition limit alone ran the next entry while a failed one
/// waited for its retry.)
async fn order_holds_per_partition_across_instances_and_retries<DB: Backend>(db: TestDb) {
    let book = Book::default();
    book.fail("ledger", "a", 2, 1);
    book.fail("ledger", "b", 3, 2);
    let retry = Duration::from_millis(150);
    let rts = [
        instance(&db, &book, retry).await,
        instance(&db, &book, retry).await,
    ];
    for (i, account) in ["a", "b", "c"].into_iter().enumerate() {
        batch((0..6).map(|n| ledger(account.into(), n)))
            .on(&rts[i % 2])
            .await
            .unwrap();
    }
    book.wait_succeeded(18).await;
    assert_eq!(book.starts("ledger", "a"), vec![0, 1, 2, 2, 3, 4, 5]);
    assert_eq!(book.starts("ledger", "b"), vec![0, 1, 2, 3, 3, 3, 4, 5]);
    assert_eq!(book.starts("ledger", "c"), vec![0, 1, 2, 3, 4, 5]);
    for account in ["a", "b", "c"] {
        assert_eq!(book.most("ledger", account), 1, "{account}");
    }
    for rt in rts {
        rt.shutdown().await.unwrap();
    }
}

/// By default a request out of attempts (`dead`) lets the later ones go.
async fn a_dead_request_lets_the_later_ones_go<DB: Backend>(db: TestDb) {
    let book = Book::default();
    book.fail("ledger", "a", 1, u32::MAX);
    let rt = instance(&db, &book, Duration::from_millis(50)).await;
    batch((0..4).map(|n| ledger("a".into(), n)))
        .on(&rt)
        .await
        .unwrap();
    book.wait_succeeded(3).await;
    assert_eq!(book.starts("ledger", "a"), vec![0, 1, 1, 1, 2, 3]);
    assert_eq!(status_of(&db, "ledger", "a", 1).await, 1, "entry 1 is dead");
    rt.shutdown().await.unwrap();
}

/// `Hold`: a dead request keeps its partition's later requests waiting (the other
/// partitions go on) until an operator replays it; then it runs, and they follow.
async fn hold_keeps_the_partition_until_the_dead_one_is_replayed<DB: Backend>(db: TestDb) {
    let book = Book::default();
    book.fail("held", "a", 1, 2);
    let rt = instance(&db, &book, Duration::from_millis(50)).await;
    let receipts = batch((0..4).map(|n| held("a".into(), n)))
        .on(&rt)
        .await
        .unwrap();
    batch((0..2).map(|n| held("b".into(), n)))
        .on(&rt)
        .await
        .unwrap();
    book.wait_succeeded(3).await;
    common::wait_for(|| async { status_of(&db, "held", "a", 1).await == 1 }).await;
    tokio::time::sleep(Duration::from_millis(800)).await;
    assert_eq!(
        book.starts("held", "a"),
        vec![0, 1, 1],
        "held behind the dead one"
    );
    assert_eq!(book.starts("held", "b"), vec![0, 1]);
    rt.retry_now(receipts[1].id.unwrap()).await.unwrap();
    book.wait_succeeded(6).await;
    assert_eq!(book.starts("held", "a"), vec![0, 1, 1, 1, 2, 3]);
    assert_eq!(book.most("held", "a"), 1);
    rt.shutdown().await.unwrap();
}

/// `StepAside`: the later requests go on while a failed one waits for its retry; it runs
/// again when due, never at once with another of its partition.
async fn a_failed_request_steps_aside_while_it_waits<DB: Backend>(db: TestDb) {
    let book = Book::default();
    book.fail("aside", "a", 1, 1);
    // A retry 1.5 s later: the three after it (30 ms each) run before it.
    let rt = instance(&db, &book, Duration::from_millis(1_500)).await;
    batch((0..5).map(|n| aside("a".into(), n)))
        .on(&rt)
        .await
        .unwrap();
    book.wait_succeeded(5).await;
    assert_eq!(book.starts("aside", "a"), vec![0, 1, 2, 3, 4, 1]);
    assert_eq!(book.most("aside", "a"), 1);
    rt.shutdown().await.unwrap();
}

/// The builder refuses a sequence with a per-partition limit above 1, and
/// `set_queue_limits` refuses to set a mode while running.
async fn a_sequence_refuses_what_it_cannot_keep<DB: Backend>(db: TestDb) {
    let error = db
        .builder()
        .queue("ledger", QueueLimits::new().sequence().per_partition(2))
        .start()
        .await
        .expect_err("refused")
        .to_string();
    assert!(error.contains("per_partition(2)"), "{error}");
    let rt = instance(&db, &Book::default(), Duration::from_millis(50)).await;
    for limits in [
        QueueLimits::new().sequence(),
        QueueLimits::new().singleton(),
    ] {
        let error = rt
            .set_queue_limits("ledger", limits, "test")
            .await
            .expect_err("refused")
            .to_string();
        assert!(error.contains("set on the builder"), "{error}");
    }
    rt.shutdown().await.unwrap();
}

backend_suite!(
    order_holds_per_partition_across_instances_and_retries,
    a_dead_request_lets_the_later_ones_go,
    hold_keeps_the_partition_until_the_dead_one_is_replayed,
    a_failed_request_steps_aside_while_it_waits,
    a_sequence_refuses_what_it_cannot_keep,
);

//! Issue 20: queues with limits. Executors that name one `queue` share its limits: at
//! most `concurrency` of their requests run at once over every instance, at most
//! `per_instance` on each; claims count in the store, so the limits hold across
//! instances, for retries too, and a full queue holds up no other.
#![allow(clippy::extra_unused_type_parameters)] // every test takes the backend, used or not

#[macro_use]
mod common;

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use async_exec::{async_exec, batch, Backend, Data, QueueLimits, Runtime};
use common::TestDb;

/// Bodies running now and the most seen at once, by queue, and every run's start and end.
#[derive(Clone, Default)]
struct History(Arc<Mutex<Seen>>);

#[derive(Default)]
struct Seen {
    running: HashMap<&'static str, usize>,
    most: HashMap<&'static str, usize>,
    /// (queue, n, started, ended) of each run, in ms since the first start.
    runs: Vec<(&'static str, u64, u128, u128)>,
    epoch: Option<Instant>,
}

impl History {
    /// Runs `work` as one body of `queue`, counting it among those running.
    async fn run(&self, queue: &'static str, n: u64, work: Duration) {
        let started = {
            let mut seen = self.0.lock().unwrap();
            let epoch = *seen.epoch.get_or_insert_with(Instant::now);
            let running = seen.running.entry(queue).or_default();
            *running += 1;
            let now = *running;
            let most = seen.most.entry(queue).or_default();
            *most = (*most).max(now);
            epoch.elapsed().as_millis()
        };
        tokio::time::sleep(work).await;
        let mut seen = self.0.lock().unwrap();
        *seen.running.get_mut(queue).unwrap() -= 1;
        let ended = seen.epoch.unwrap().elapsed().as_millis();
        seen.runs.push((queue, n, started, ended));
    }

    /// Forgets the most seen at once so far.
    fn reset_most(&self) {
        self.0.lock().unwrap().most.clear();
    }

    fn most(&self, queue: &str) -> usize {
        self.0.lock().unwrap().most.get(queue).copied().unwrap_or(0)
    }

    /// The most bodies of any queue that ran at once, from every run's start and end.
    fn most_overall(&self) -> usize {
        let seen = self.0.lock().unwrap();
        let mut edges: Vec<(u128, i32)> = Vec::new();
        for &(_, _, started, ended) in &seen.runs {
            edges.push((started, 1));
            edges.push((ended, -1));
        }
        // An end before a start at the same millisecond: a slot handed on is not overlap.
        edges.sort();
        let (mut now, mut most) = (0i32, 0i32);
        for (_, step) in edges {
            now += step;
            most = most.max(now);
        }
        most as usize
    }

    fn runs(&self, queue: &str) -> Vec<(u64, u128, u128)> {
        let seen = self.0.lock().unwrap();
        let mut runs: Vec<_> = seen
            .runs
            .iter()
            .filter(|r| r.0 == queue)
            .map(|r| (r.1, r.2, r.3))
            .collect();
        runs.sort();
        runs
    }

    async fn wait_runs(&self, queue: &str, n: usize, limit: Duration) {
        let deadline = Instant::now() + limit;
        while self.runs(queue).len() < n {
            assert!(
                Instant::now() < deadline,
                "{queue}: {} of {n} runs within {limit:?}",
                self.runs(queue).len()
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
}

/// A payment: 150 ms (from 100 on, 600 ms); every fourth fails its first attempt (its
/// retry is claimed within the queue's limits too).
#[async_exec(type = SaveAsync, queue = "payments")]
async fn charge(n: u64, history: Data<History>, ctx: async_exec::Context) -> Result<(), String> {
    let work = Duration::from_millis(if n >= 100 { 600 } else { 150 });
    history.run("payments", n, work).await;
    if n % 4 == 0 && ctx.attempt() == 1 {
        return Err(format!("charge {n}: the gateway said try again"));
    }
    Ok(())
}

/// Another executor of the same queue: it shares the queue's slots.
#[async_exec(type = SaveAsync, queue = "payments")]
async fn refund(n: u64, history: Data<History>) {
    history
        .run("payments", n + 1_000, Duration::from_millis(150))
        .await;
}

/// An export: one at a time on each instance.
#[async_exec(type = SaveAsync, queue = "exports")]
async fn export(n: u64, history: Data<History>) {
    history.run("exports", n, Duration::from_millis(100)).await;
}

/// A notification: its queue has no limits from the builder (they are set while running).
#[async_exec(type = SaveAsync, queue = "notifications")]
async fn notify(n: u64, history: Data<History>) {
    history
        .run("notifications", n, Duration::from_millis(100))
        .await;
}

/// A call to a rate-limited API: its queue starts at most 5 a second.
#[async_exec(type = SaveAsync, queue = "gateway")]
async fn ping(n: u64, history: Data<History>) {
    history.run("gateway", n, Duration::from_millis(10)).await;
}

/// A mail: in no queue, unlimited.
#[async_exec(type = SaveAsync)]
async fn mail(n: u64, history: Data<History>) {
    history.run("mails", n, Duration::from_millis(20)).await;
}

/// An instance of the test application with the queues' limits every test uses.
async fn instance(db: &TestDb, history: &History) -> Runtime {
    db.builder()
        .concurrency(8)
        .poll_interval(Duration::from_millis(50))
        .data(history.clone())
        .queue("payments", QueueLimits::new().concurrency(2))
        .queue("exports", QueueLimits::new().per_instance(1))
        .queue("gateway", QueueLimits::new().rate(5))
        .start()
        .await
        .unwrap()
}

/// Three instances, 24 charges and 8 refunds submitted at once: never more than two of
/// the queue run at once (bodies counted in the process, across the three runtimes),
/// the limit is reached, and every request ran and succeeded.
async fn a_queue_limit_holds_across_instances<DB: Backend>(db: TestDb) {
    let history = History::default();
    let rts = [
        instance(&db, &history).await,
        instance(&db, &history).await,
        instance(&db, &history).await,
    ];
    batch((0..24).map(charge)).on(&rts[0]).await.unwrap();
    batch((0..8).map(refund)).on(&rts[1]).await.unwrap();
    // 32 bodies and 6 retries of 150 ms, two at a time: about 2.9 s.
    history
        .wait_runs("payments", 38, Duration::from_secs(30))
        .await;
    assert_eq!(
        history.most("payments"),
        2,
        "{:?}",
        history.runs("payments")
    );
    // Every request succeeded (and its record was deleted).
    common::wait_for(|| async { db.count("async_req").await == 0 }).await;
    for rt in rts {
        rt.shutdown().await.unwrap();
    }
}

/// Two instances, exports one at a time on each: 12 exports never run more than two at
/// once in all, one on each instance (each instance's bodies counted by its own history).
async fn a_per_instance_limit_holds_on_each<DB: Backend>(db: TestDb) {
    let (first, second) = (History::default(), History::default());
    let a = instance(&db, &first).await;
    let b = instance(&db, &second).await;
    batch((0..12).map(export)).on(&a).await.unwrap();
    let deadline = Instant::now() + Duration::from_secs(30);
    while first.runs("exports").len() + second.runs("exports").len() < 12 {
        assert!(Instant::now() < deadline, "12 exports within 30 s");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(first.most("exports"), 1, "{:?}", first.runs("exports"));
    assert!(second.most("exports") <= 1, "{:?}", second.runs("exports"));
    a.shutdown().await.unwrap();
    b.shutdown().await.unwrap();
}

/// One instance, payments two at a time: 6 charges of 600 ms wait in their queue, and
/// 20 mails submitted after them all finish while the first two charges still run.
async fn a_full_queue_holds_up_no_other<DB: Backend>(db: TestDb) {
    let history = History::default();
    let rt = instance(&db, &history).await;
    batch((0..6).map(|n| charge(101 + n * 2)))
        .on(&rt)
        .await
        .unwrap(); // odd: no failures
    let submitted = Instant::now();
    batch((0..20).map(mail)).on(&rt).await.unwrap();
    history
        .wait_runs("mails", 20, Duration::from_secs(10))
        .await;
    let mails_done = submitted.elapsed();
    let charges_done = history.runs("payments").len();
    assert!(
        charges_done == 0,
        "20 mails took {mails_done:?}: they waited for {charges_done} charges"
    );
    history
        .wait_runs("payments", 6, Duration::from_secs(10))
        .await;
    assert_eq!(history.most("payments"), 2);
    rt.shutdown().await.unwrap();
}

/// Two queues far from their limits and two workers: 60 exports wait (a queue named
/// first), then 4 notifications are submitted. Claims take turns between the queues, so
/// the notifications run while the exports' backlog is still long (they used to wait
/// for all of it: the first queue took every worker that came free).
async fn a_queue_with_a_backlog_takes_no_turn_from_another<DB: Backend>(db: TestDb) {
    let history = History::default();
    let rt = db
        .builder()
        .concurrency(2)
        .poll_interval(Duration::from_millis(50))
        .data(history.clone())
        .queue("exports", QueueLimits::new().concurrency(100))
        .queue("notifications", QueueLimits::new().concurrency(100))
        .start()
        .await
        .unwrap();
    batch((0..60).map(export)).on(&rt).await.unwrap();
    history
        .wait_runs("exports", 2, Duration::from_secs(10))
        .await;
    let submitted = Instant::now();
    batch((0..4).map(notify)).on(&rt).await.unwrap();
    history
        .wait_runs("notifications", 4, Duration::from_secs(20))
        .await;
    let took = submitted.elapsed();
    let exports_done = history.runs("exports").len();
    eprintln!(
        "4 notifications ran by {took:?} after their call; {exports_done} of 60 exports done"
    );
    assert!(
        exports_done < 30,
        "4 notifications took {took:?}: they waited for {exports_done} of 60 exports"
    );
    history
        .wait_runs("exports", 60, Duration::from_secs(20))
        .await;
    rt.shutdown().await.unwrap();
}

/// A limit for a queue that no executor names is refused at start, naming the queues
/// there are; absurd limits are refused with their range.
async fn a_queue_no_executor_names_is_refused<DB: Backend>(db: TestDb) {
    let error = db
        .builder()
        .data(History::default())
        .queue("paymnets", QueueLimits::new().concurrency(2))
        .start()
        .await
        .unwrap_err()
        .to_string();
    assert!(
        error.contains("no executor names queue \"paymnets\""),
        "{error}"
    );
    assert!(
        error.contains("exports, gateway, notifications, payments"),
        "{error}"
    );
    let error = db
        .builder()
        .data(History::default())
        .queue("payments", QueueLimits::new().per_instance(0))
        .start()
        .await
        .unwrap_err()
        .to_string();
    assert!(error.contains("between 1 and 100000, not 0"), "{error}");
}

/// Limits set while running hold on every instance from the next claim, override the
/// builder's, and cleared, give the builder's back; a queue without builder limits gets
/// some; each change is audited; a queue no executor names, or a limit of 0, is refused.
async fn limits_set_while_running_apply_at_once<DB: Backend>(db: TestDb) {
    let history = History::default();
    let a = instance(&db, &history).await;
    let b = instance(&db, &history).await;
    a.set_queue_limits("payments", QueueLimits::new().concurrency(1), "alice")
        .await
        .unwrap();
    batch((0..8).map(|n| charge(n * 2 + 1)))
        .on(&a)
        .await
        .unwrap(); // odd: no failures
    history
        .wait_runs("payments", 8, Duration::from_secs(20))
        .await;
    assert_eq!(
        history.most("payments"),
        1,
        "{:?}",
        history.runs("payments")
    );
    let policies = b.queue_policies().await.unwrap();
    let payments = policies.iter().find(|p| p.queue == "payments").unwrap();
    assert_eq!(
        (payments.concurrency, payments.per_instance),
        (Some(1), None)
    );
    assert_eq!(payments.changed_by.as_deref(), Some("alice"));
    assert!(b
        .audit_trail(10)
        .await
        .unwrap()
        .iter()
        .any(|e| e.action == "queue-limits" && e.actor == "alice"));

    // Cleared: the builder's two at once again.
    b.set_queue_limits("payments", QueueLimits::new(), "bob")
        .await
        .unwrap();
    history.reset_most();
    batch((0..8).map(|n| charge(n * 2 + 1)))
        .on(&b)
        .await
        .unwrap();
    history
        .wait_runs("payments", 16, Duration::from_secs(20))
        .await;
    assert_eq!(
        history.most("payments"),
        2,
        "{:?}",
        history.runs("payments")
    );

    // A queue the builder left unlimited: one at a time on each instance.
    a.set_queue_limits("notifications", QueueLimits::new().per_instance(1), "alice")
        .await
        .unwrap();
    batch((0..6).map(notify)).on(&a).await.unwrap();
    history
        .wait_runs("notifications", 6, Duration::from_secs(20))
        .await;
    assert!(
        history.most("notifications") <= 2,
        "{:?}",
        history.runs("notifications")
    );

    let unknown = a
        .set_queue_limits("paymnets", QueueLimits::new().concurrency(1), "alice")
        .await
        .unwrap_err()
        .to_string();
    assert!(
        unknown.contains("no executor names queue \"paymnets\""),
        "{unknown}"
    );
    let zero = a
        .set_queue_limits("payments", QueueLimits::new().concurrency(0), "alice")
        .await
        .unwrap_err()
        .to_string();
    assert!(zero.contains("between 1 and 100000, not 0"), "{zero}");
    a.shutdown().await.unwrap();
    b.shutdown().await.unwrap();
}

/// Issue 30: `set_queue_limits` with `max_waiting` (a quota of the builder's, which this
/// call does not set) is refused, saying so, and keeps the limits set before; before the
/// fix it answered `Ok` and cleared them (seen failing: the concurrency of 1 was gone).
async fn max_waiting_set_while_running_is_refused_and_clears_nothing<DB: Backend>(db: TestDb) {
    let history = History::default();
    let a = instance(&db, &history).await;
    a.set_queue_limits("payments", QueueLimits::new().concurrency(1), "alice")
        .await
        .unwrap();
    let refused = a
        .set_queue_limits("payments", QueueLimits::new().max_waiting(5), "alice")
        .await;
    let policies = a.queue_policies().await.unwrap();
    let payments = policies.iter().find(|p| p.queue == "payments").unwrap();
    assert_eq!(
        payments.concurrency,
        Some(1),
        "the limit set before is kept"
    );
    let error = refused.unwrap_err().to_string();
    assert!(
        error.contains("max_waiting") && error.contains("Builder::queue"),
        "{error}"
    );
    a.shutdown().await.unwrap();
}

/// A queue of 5 starts a second over two instances: 15 requests start in no less than
/// two seconds (5 at once, then 5 a second), and no stretch of time has more starts
/// than 5 plus 5 a second of it (one more for the instances' clocks).
async fn a_rate_limit_holds_across_instances<DB: Backend>(db: TestDb) {
    let history = History::default();
    let a = instance(&db, &history).await;
    let b = instance(&db, &history).await;
    batch((0..15).map(ping)).on(&a).await.unwrap();
    history
        .wait_runs("gateway", 15, Duration::from_secs(30))
        .await;
    let mut starts: Vec<u128> = history.runs("gateway").iter().map(|r| r.1).collect();
    starts.sort();
    let span = starts[14] - starts[0];
    assert!(span >= 1_600, "15 starts in {span} ms: {starts:?}");
    for i in 0..starts.len() {
        for j in i..starts.len() {
            let allowed = 5 + 5 * (starts[j] - starts[i]) / 1_000 + 1;
            assert!(
                (j - i + 1) as u128 <= allowed,
                "{} starts within {} ms: {starts:?}",
                j - i + 1,
                starts[j] - starts[i]
            );
        }
    }
    a.shutdown().await.unwrap();
    b.shutdown().await.unwrap();
}

/// With a limit over every queue, two instances never run more than it at once, in all:
/// mails (in no queue), charges (a queue of 2) and exports together; each queue's own
/// limit still holds; the limit changes while running (`rt.policy("(all)")`).
async fn a_global_limit_holds_over_every_queue<DB: Backend>(db: TestDb) {
    let history = History::default();
    let mut rts = Vec::new();
    for _ in 0..2 {
        let rt = db
            .builder()
            .concurrency(8)
            .poll_interval(Duration::from_millis(50))
            .data(history.clone())
            .queue("payments", QueueLimits::new().concurrency(2))
            .global_concurrency(3)
            .start()
            .await
            .unwrap();
        rts.push(rt);
    }
    batch((200..212).map(mail)).on(&rts[0]).await.unwrap();
    batch((0..8).map(|n| charge(n * 4 + 1)))
        .on(&rts[1])
        .await
        .unwrap();
    batch((300..306).map(export)).on(&rts[0]).await.unwrap();
    history
        .wait_runs("mails", 12, Duration::from_secs(30))
        .await;
    history
        .wait_runs("payments", 8, Duration::from_secs(30))
        .await;
    history
        .wait_runs("exports", 6, Duration::from_secs(30))
        .await;
    let most = history.most_overall();
    assert_eq!(most, 3, "at most 3 at once over every queue: {most}");
    assert!(history.most("payments") <= 2);
    // Raised while running: more at once, still bounded.
    rts[0].policy("(all)").concurrency(6).apply().await.unwrap();
    tokio::time::sleep(Duration::from_millis(200)).await;
    history.reset_most();
    let before = history.runs("mails").len();
    batch((400..424).map(mail)).on(&rts[0]).await.unwrap();
    history
        .wait_runs("mails", before + 24, Duration::from_secs(30))
        .await;
    assert!(history.most("mails") <= 6, "{}", history.most("mails"));
    for rt in rts {
        rt.shutdown().await.unwrap();
    }
}

backend_suite!(
    a_global_limit_holds_over_every_queue,
    a_rate_limit_holds_across_instances,
    limits_set_while_running_apply_at_once,
    max_waiting_set_while_running_is_refused_and_clears_nothing,
    a_queue_limit_holds_across_instances,
    a_per_instance_limit_holds_on_each,
    a_full_queue_holds_up_no_other,
    a_queue_with_a_backlog_takes_no_turn_from_another,
    a_queue_no_executor_names_is_refused,
);

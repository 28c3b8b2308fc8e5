//! Issue 30: the record knows its flow. A request carries its queue and its partition (a
//! tenant: `Call::partition`, else its owner); a queue's `per_partition` limit holds for
//! each partition across instances, the queue's claims take turns between partitions,
//! the queue's count is read from the records (pausing an executor never lifts it), a
//! rate-limited backlog drains at its rate, and claims state their isolation.
#![allow(clippy::extra_unused_type_parameters)] // every test takes the backend, used or not

#[macro_use]
mod common;

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use async_exec::{async_exec, batch, Backend, Data, QueueLimits, Runtime};
use common::TestDb;

/// Bodies running now and the most seen at once, by group (a partition, a queue), and
/// the order runs started in.
#[derive(Clone, Default)]
struct History(Arc<Mutex<Seen>>);

#[derive(Default)]
struct Seen {
    running: HashMap<String, usize>,
    most: HashMap<String, usize>,
    /// Every start, in order: (group, n).
    starts: Vec<(String, u64)>,
    /// When each run (by group and n) started.
    started_at: HashMap<(String, u64), Instant>,
    ended: usize,
}

impl History {
    async fn run(&self, groups: &[&str], n: u64, work: Duration) {
        {
            let mut seen = self.0.lock().unwrap();
            for group in groups {
                let running = seen.running.entry(group.to_string()).or_default();
                *running += 1;
                let now = *running;
                let most = seen.most.entry(group.to_string()).or_default();
                *most = (*most).max(now);
            }
            seen.starts.push((groups[0].to_string(), n));
            seen.started_at
                .insert((groups[0].to_string(), n), Instant::now());
        }
        tokio::time::sleep(work).await;
        let mut seen = self.0.lock().unwrap();
        for group in groups {
            *seen.running.get_mut(*group).unwrap() -= 1;
        }
        seen.ended += 1;
    }

    fn most(&self, group: &str) -> usize {
        self.0.lock().unwrap().most.get(group).copied().unwrap_or(0)
    }

    fn starts(&self) -> Vec<(String, u64)> {
        self.0.lock().unwrap().starts.clone()
    }

    async fn wait_ended(&self, n: usize, limit: Duration) {
        let deadline = Instant::now() + limit;
        loop {
            let ended = self.0.lock().unwrap().ended;
            if ended >= n {
                return;
            }
            assert!(
                Instant::now() < deadline,
                "{ended} of {n} runs ended within {limit:?}: {:?}",
                self.starts()
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
}

/// A webhook delivery of a tenant: 150 ms.
#[async_exec(type = SaveAsync, queue = "webhooks")]
async fn deliver(tenant: String, n: u64, history: Data<History>) {
    history
        .run(
            &[tenant.as_str(), "webhooks"],
            n,
            Duration::from_millis(150),
        )
        .await;
}

/// A report of a tenant: 50 ms, one queue with no per-partition limit.
#[async_exec(type = SaveAsync, queue = "reports")]
async fn report(tenant: String, n: u64, history: Data<History>) {
    history
        .run(&[tenant.as_str(), "reports"], n, Duration::from_millis(50))
        .await;
}

/// A slow sync of queue "syncs" (1.5 s), and a quick one of the same queue.
#[async_exec(type = SaveAsync, queue = "syncs")]
async fn slow_sync(n: u64, history: Data<History>) {
    history
        .run(&["syncs", "slow"], n, Duration::from_millis(1_500))
        .await;
}

#[async_exec(type = SaveAsync, queue = "syncs")]
async fn quick_sync(n: u64, history: Data<History>) {
    history
        .run(&["syncs", "quick"], n, Duration::from_millis(100))
        .await;
}

/// A call to an API that takes 5 a second.
#[async_exec(type = SaveAsync, queue = "api")]
async fn call_api(n: u64, history: Data<History>) {
    history.run(&["api"], n, Duration::from_millis(5)).await;
}

async fn instance(db: &TestDb, history: &History, workers: usize) -> Runtime {
    let _ = tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::from_default_env())
        .with_test_writer()
        .try_init();
    db.builder()
        .concurrency(workers)
        .poll_interval(Duration::from_millis(50))
        .data(history.clone())
        .queue(
            "webhooks",
            QueueLimits::new().concurrency(4).per_partition(1),
        )
        .queue("reports", QueueLimits::new().concurrency(1))
        .queue("syncs", QueueLimits::new().concurrency(2))
        .queue("api", QueueLimits::new().rate(5))
        .start()
        .await
        .unwrap()
}

/// Three instances, three tenants with six deliveries each, submitted at once: never two
/// of a tenant at once (each tenant reaches its one), never more than three in all.
async fn a_partition_limit_holds_across_instances<DB: Backend>(db: TestDb) {
    let history = History::default();
    let rts = [
        instance(&db, &history, 8).await,
        instance(&db, &history, 8).await,
        instance(&db, &history, 8).await,
    ];
    for (i, tenant) in ["t1", "t2", "t3"].into_iter().enumerate() {
        batch((0..6).map(|n| deliver(tenant.into(), n).partition(tenant)))
            .on(&rts[i])
            .await
            .unwrap();
    }
    history.wait_ended(18, Duration::from_secs(30)).await;
    for tenant in ["t1", "t2", "t3"] {
        assert_eq!(history.most(tenant), 1, "{tenant}: {:?}", history.starts());
    }
    assert!(
        history.most("webhooks") <= 3,
        "{}",
        history.most("webhooks")
    );
    common::wait_for(|| async { db.count("async_req").await == 0 }).await;
    for rt in rts {
        rt.shutdown().await.unwrap();
    }
}

/// One at a time in the queue: 20 reports of a busy tenant wait, then 2 of a small one
/// are called. The queue's claims take turns between tenants: the small tenant's two
/// start among the first few, not after the busy tenant's backlog.
async fn a_busy_partition_takes_turns_with_the_others<DB: Backend>(db: TestDb) {
    let history = History::default();
    // No workers until both tenants have called: then the claims choose.
    let rt = instance(&db, &history, 4).await;
    rt.pause_executor("partitions::report", "test")
        .await
        .unwrap();
    batch((0..20).map(|n| report("busy".into(), n).owner("busy")))
        .on(&rt)
        .await
        .unwrap();
    batch((0..2).map(|n| report("small".into(), 100 + n).owner("small")))
        .on(&rt)
        .await
        .unwrap();
    rt.resume_executor("partitions::report", "test")
        .await
        .unwrap();
    history.wait_ended(22, Duration::from_secs(30)).await;
    let starts = history.starts();
    let small: Vec<usize> = starts
        .iter()
        .enumerate()
        .filter(|(_, (group, _))| group == "small")
        .map(|(i, _)| i)
        .collect();
    assert!(
        small.iter().all(|&i| i < 6),
        "the small tenant's reports started at {small:?} of {}: {starts:?}",
        starts.len()
    );
    assert_eq!(history.most("reports"), 1);
    rt.shutdown().await.unwrap();
}

/// Two slow syncs fill the queue (two at a time), then their executor is paused and four
/// quick syncs are called: the slow ones still count, so the quick ones wait for them
/// (before, the queue's count went by the executors claimed, and four ran at once).
async fn pausing_an_executor_keeps_its_running_requests_in_the_count<DB: Backend>(db: TestDb) {
    let history = History::default();
    let rt = instance(&db, &history, 8).await;
    batch((0..2).map(slow_sync)).on(&rt).await.unwrap();
    let deadline = Instant::now() + Duration::from_secs(10);
    while history.most("slow") < 2 {
        assert!(Instant::now() < deadline, "two slow syncs running");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    rt.pause_executor("partitions::slow_sync", "test")
        .await
        .unwrap();
    batch((0..4).map(quick_sync)).on(&rt).await.unwrap();
    history.wait_ended(6, Duration::from_secs(30)).await;
    assert_eq!(history.most("syncs"), 2, "{:?}", history.starts());
    rt.shutdown().await.unwrap();
}

/// The limit over every queue takes a concurrency only: a rate, a per-instance or a
/// per-partition limit there was accepted and ignored; it is refused, naming it.
async fn the_global_limit_refuses_what_it_would_ignore<DB: Backend>(db: TestDb) {
    for (limits, named) in [
        (QueueLimits::new().concurrency(2).rate(5), "rate"),
        (
            QueueLimits::new().concurrency(2).per_instance(1),
            "per_instance",
        ),
        (QueueLimits::new().per_partition(1), "per_partition"),
    ] {
        let error = db
            .builder()
            .queue("(all)", limits)
            .start()
            .await
            .expect_err("refused")
            .to_string();
        assert!(error.contains(named), "{error}");
    }
}

/// A queue with a rate and a backlog: once its bucket is spent, it is claimed again when
/// the bucket has refilled, not at the next poll (an hour here; before, the calls past
/// the first second's waited for it).
async fn a_rate_limited_backlog_drains_at_its_rate<DB: Backend>(db: TestDb) {
    let history = History::default();
    let rt = db
        .builder()
        .concurrency(8)
        .data(history.clone())
        .queue("api", QueueLimits::new().rate(5))
        .start()
        .await
        .unwrap();
    let called = Instant::now();
    batch((0..12).map(call_api)).on(&rt).await.unwrap();
    history.wait_ended(12, Duration::from_secs(10)).await;
    let took = called.elapsed();
    // 5 at once, then one every 200 ms: about 1.4 s; never faster than the rate.
    assert!(took >= Duration::from_millis(1_200), "{took:?}");
    assert!(took < Duration::from_secs(5), "{took:?}");
    rt.shutdown().await.unwrap();
}

/// What runs and waits in a queue, per partition, the most waiting first, with the
/// limits in force: from code, and over the JSON API (an unknown queue is a 404).
async fn the_flow_of_a_queue_shows_its_partitions<DB: Backend>(db: TestDb) {
    let history = History::default();
    let rt = db
        .builder()
        .run_workers(false)
        .data(history.clone())
        .queue(
            "webhooks",
            QueueLimits::new().concurrency(4).per_partition(1),
        )
        .start()
        .await
        .unwrap();
    for (tenant, n) in [("t1", 3), ("t2", 1)] {
        batch((0..n).map(|i| deliver(tenant.into(), i).partition(tenant)))
            .on(&rt)
            .await
            .unwrap();
    }
    batch((0..2).map(|i| deliver("none".into(), i)))
        .on(&rt)
        .await
        .unwrap();
    let flow = rt.queue_flow("webhooks", 10).await.unwrap();
    assert_eq!((flow.running, flow.waiting), (0, 6));
    assert_eq!((flow.concurrency, flow.per_partition), (Some(4), Some(1)));
    let partitions: Vec<(&str, i64)> = flow
        .partitions
        .iter()
        .map(|p| (p.partition.as_str(), p.waiting))
        .collect();
    assert_eq!(partitions, vec![("t1", 3), ("", 2), ("t2", 1)]);
    assert!(flow
        .partitions
        .iter()
        .all(|p| p.oldest_due.is_some() && !p.at_limit));
    let two = rt.queue_flow("webhooks", 2).await.unwrap();
    assert_eq!(
        (two.partitions.len(), two.waiting),
        (2, 6),
        "totals over all"
    );
    #[cfg(feature = "console")]
    {
        use common::console::{get, mounted, Auth, VIEWER_TOKEN};
        let app = mounted(&rt);
        let reply = get(
            &app,
            "/api/queues/webhooks/flow",
            Auth::Bearer(VIEWER_TOKEN),
        )
        .await;
        assert_eq!(reply.status, 200, "{}", reply.body);
        assert_eq!(reply.json()["partitions"][0]["partition"], "t1");
        assert_eq!(reply.json()["waiting"], 6);
        let unknown = get(&app, "/api/queues/nope/flow", Auth::Bearer(VIEWER_TOKEN)).await;
        assert_eq!(unknown.status, 404, "{}", unknown.body);
        let odd = get(
            &app,
            "/api/queues/webhooks/flow?bogus=1",
            Auth::Bearer(VIEWER_TOKEN),
        )
        .await;
        assert_eq!(odd.status, 400, "{}", odd.body);
    }
    rt.shutdown().await.unwrap();
}

backend_suite!(
    the_flow_of_a_queue_shows_its_partitions,
    a_rate_limited_backlog_drains_at_its_rate,
    a_partition_limit_holds_across_instances,
    a_busy_partition_takes_turns_with_the_others,
    pausing_an_executor_keeps_its_running_requests_in_the_count,
    the_global_limit_refuses_what_it_would_ignore,
);

/// PostgreSQL whose sessions begin at REPEATABLE READ: claims state READ COMMITTED, so
/// that the partition and queue limits hold and no claim fails (before, a claim counted
/// from a snapshot that missed the claim before it, or failed with 40001).
#[cfg_attr(
    not(all(feature = "postgres", async_exec_test_postgres)),
    allow(dead_code)
)]
async fn limits_hold_when_the_server_defaults_to_repeatable_read(db: TestDb) {
    let name = db
        .url
        .rsplit('/')
        .next()
        .unwrap()
        .split('?')
        .next()
        .unwrap();
    db.exec(&format!(
        "ALTER DATABASE {name} SET default_transaction_isolation = 'repeatable read'"
    ))
    .await;
    let history = History::default();
    let rts = [
        instance(&db, &history, 8).await,
        instance(&db, &history, 8).await,
    ];
    for (i, tenant) in ["t1", "t2"].into_iter().enumerate() {
        batch((0..8).map(|n| deliver(tenant.into(), n).partition(tenant)))
            .on(&rts[i])
            .await
            .unwrap();
    }
    history.wait_ended(16, Duration::from_secs(30)).await;
    for tenant in ["t1", "t2"] {
        assert_eq!(history.most(tenant), 1, "{tenant}: {:?}", history.starts());
    }
    common::wait_for(|| async { db.count("async_req").await == 0 }).await;
    for rt in rts {
        rt.shutdown().await.unwrap();
    }
}

mod repeatable_read {
    #[cfg(all(feature = "postgres", async_exec_test_postgres))]
    #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
    async fn postgres() {
        let db = crate::common::TestDb::new(crate::common::Kind::Postgres).await;
        super::limits_hold_when_the_server_defaults_to_repeatable_read(db).await;
    }
}

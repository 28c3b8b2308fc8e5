//! Issue 30, items 2 and 3: a partition's own settings, in the database and changeable
//! while running (`rt.set_partition`): its weight in the queue's turns (a tenant of weight
//! 3 gets about three starts for one of a tenant of weight 1 when both wait), its own
//! limit of running requests (in place of the queue's per_partition, with or without
//! one) and its own rate over a period, each held over two instances; what is absurd is
//! refused, and every change is audited.
#![allow(clippy::extra_unused_type_parameters)] // every test takes the backend, used or not

#[macro_use]
mod common;

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use async_exec::{async_exec, batch, Backend, Data, PartitionSettings, QueueLimits, Rate, Runtime};
use common::TestDb;

/// Bodies running now and the most seen at once, by partition, and every start in order
/// with its time.
#[derive(Clone, Default)]
struct History(Arc<Mutex<Seen>>, Arc<std::sync::OnceLock<sqlx::AnyPool>>);

#[derive(Default)]
struct Seen {
    running: HashMap<String, usize>,
    most: HashMap<String, usize>,
    starts: Vec<(String, Instant)>,
    /// When each run was claimed (the claim's clock, unix ms), by partition: the time its
    /// bucket was computed at.
    claimed: Vec<(String, i64)>,
    ended: usize,
}

impl History {
    async fn run(&self, partition: &str, work: Duration) {
        {
            let mut seen = self.0.lock().unwrap();
            let running = seen.running.entry(partition.to_string()).or_default();
            *running += 1;
            let now = *running;
            let most = seen.most.entry(partition.to_string()).or_default();
            *most = (*most).max(now);
            seen.starts.push((partition.to_string(), Instant::now()));
        }
        tokio::time::sleep(work).await;
        let mut seen = self.0.lock().unwrap();
        *seen.running.get_mut(partition).unwrap() -= 1;
        seen.ended += 1;
    }

    /// Notes when the request was claimed (its `update_time`, written by the claim), with
    /// the pool given by [`History::read_claims`].
    async fn note_claim(&self, partition: &str, ctx: &async_exec::Context) {
        let (Some(pool), Some(id)) = (self.1.get(), ctx.request_id()) else {
            return;
        };
        let (at,): (i64,) = sqlx::query_as(&format!(
            "SELECT update_time FROM async_req WHERE id = {id}"
        ))
        .fetch_one(pool)
        .await
        .unwrap();
        self.0
            .lock()
            .unwrap()
            .claimed
            .push((partition.to_string(), at));
    }

    /// Bodies note their claim's time from now on.
    async fn read_claims(&self, db: &TestDb) {
        let pool = sqlx::AnyPool::connect(&db.url).await.unwrap();
        let _ = self.1.set(pool);
    }

    /// The claim times of a partition, in order.
    fn claimed(&self, partition: &str) -> Vec<i64> {
        let mut at: Vec<i64> = self
            .0
            .lock()
            .unwrap()
            .claimed
            .iter()
            .filter(|(p, _)| p == partition)
            .map(|(_, t)| *t)
            .collect();
        at.sort_unstable();
        at
    }

    fn most(&self, partition: &str) -> usize {
        self.0
            .lock()
            .unwrap()
            .most
            .get(partition)
            .copied()
            .unwrap_or(0)
    }

    fn starts(&self) -> Vec<(String, Instant)> {
        self.0.lock().unwrap().starts.clone()
    }

    fn order(&self) -> Vec<String> {
        self.starts().into_iter().map(|(p, _)| p).collect()
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
                self.order()
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
}

/// A share of queue "shares" (one at a time): 10 ms.
#[async_exec(type = SaveAsync, queue = "shares")]
async fn share(tenant: String, history: Data<History>) {
    history.run(&tenant, Duration::from_millis(10)).await;
}

/// A delivery of queue "hooks" (per_partition 1): 150 ms.
#[async_exec(type = SaveAsync, queue = "hooks")]
async fn hook(tenant: String, history: Data<History>) {
    history.run(&tenant, Duration::from_millis(150)).await;
}

/// A sync of queue "plain" (no per-partition limit): 150 ms.
#[async_exec(type = SaveAsync, queue = "plain")]
async fn plain(tenant: String, history: Data<History>) {
    history.run(&tenant, Duration::from_millis(150)).await;
}

/// A call of queue "metered" (no rate of its own): 5 ms.
#[async_exec(type = SaveAsync, queue = "metered")]
async fn metered(tenant: String, history: Data<History>, ctx: async_exec::Context) {
    history.note_claim(&tenant, &ctx).await;
    history.run(&tenant, Duration::from_millis(5)).await;
}

/// A report of queue "reports" (3 a minute): 5 ms.
#[async_exec(type = SaveAsync, queue = "reports")]
async fn report(n: u64, history: Data<History>) {
    let _ = n;
    history.run("reports", Duration::from_millis(5)).await;
}

async fn instance(db: &TestDb, history: &History) -> Runtime {
    built(db, history, true).await
}

/// An instance that runs nothing: what is called waits.
async fn idle(db: &TestDb, history: &History) -> Runtime {
    built(db, history, false).await
}

async fn built(db: &TestDb, history: &History, workers: bool) -> Runtime {
    let _ = tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::from_default_env())
        .with_test_writer()
        .try_init();
    db.builder()
        .run_workers(workers)
        .concurrency(16)
        .poll_interval(Duration::from_millis(50))
        .data(history.clone())
        .queue("shares", QueueLimits::new().concurrency(1))
        .queue("hooks", QueueLimits::new().concurrency(10).per_partition(1))
        .queue("plain", QueueLimits::new().concurrency(10))
        .queue("metered", QueueLimits::new().concurrency(20))
        .queue("reports", QueueLimits::new().rate_per(Rate::per_minute(3)))
        .start()
        .await
        .unwrap()
}

/// One at a time in the queue, 24 waiting of "heavy" (weight 3) and 24 of "light": while
/// both wait, heavy gets three starts for each of light's (18 of the first 24; before
/// weights, 12: the turns went one and one).
async fn a_heavier_partition_gets_more_starts<DB: Backend>(db: TestDb) {
    let history = History::default();
    let rt = instance(&db, &history).await;
    rt.set_partition(
        "shares",
        "heavy",
        PartitionSettings::new().weight(3),
        "test",
    )
    .await
    .unwrap();
    rt.pause_executor("partition_settings::share", "test")
        .await
        .unwrap();
    for tenant in ["light", "heavy"] {
        batch((0..24).map(|_| share(tenant.into()).partition(tenant)))
            .on(&rt)
            .await
            .unwrap();
    }
    rt.resume_executor("partition_settings::share", "test")
        .await
        .unwrap();
    history.wait_ended(48, Duration::from_secs(60)).await;
    let order = history.order();
    let heavy = order[..24].iter().filter(|p| *p == "heavy").count();
    assert!(
        (16..=20).contains(&heavy),
        "heavy had {heavy} of the first 24 starts: {order:?}"
    );
    assert_eq!((history.most("heavy"), history.most("light")), (1, 1));
    rt.shutdown().await.unwrap();
}

/// Two instances. Queue "hooks" (per_partition 1): "big" has its own 3, "small" the
/// queue's 1. Queue "plain" (no per-partition limit): "capped" has its own 2, "free" none.
/// Each is reached and never passed.
async fn a_partitions_own_concurrency_holds_across_instances<DB: Backend>(db: TestDb) {
    let history = History::default();
    let rts = [instance(&db, &history).await, instance(&db, &history).await];
    let three = PartitionSettings::new().concurrency(3);
    rts[0]
        .set_partition("hooks", "big", three, "test")
        .await
        .unwrap();
    let two = PartitionSettings::new().concurrency(2);
    rts[1]
        .set_partition("plain", "capped", two, "test")
        .await
        .unwrap();
    for (i, (tenant, n)) in [("big", 12), ("small", 4)].into_iter().enumerate() {
        batch((0..n).map(|_| hook(tenant.into()).partition(tenant)))
            .on(&rts[i])
            .await
            .unwrap();
    }
    for (i, (tenant, n)) in [("capped", 8), ("free", 6)].into_iter().enumerate() {
        batch((0..n).map(|_| plain(tenant.into()).partition(tenant)))
            .on(&rts[i])
            .await
            .unwrap();
    }
    history.wait_ended(30, Duration::from_secs(60)).await;
    let seen: Vec<(&str, usize)> = ["big", "small", "capped", "free"]
        .into_iter()
        .map(|p| (p, history.most(p)))
        .collect();
    assert_eq!(
        &seen[..3],
        &[("big", 3), ("small", 1), ("capped", 2)],
        "{:?}",
        history.order()
    );
    assert!(
        seen[3].1 >= 3,
        "free is limited by nothing of its own: {seen:?}"
    );
    for rt in rts {
        rt.shutdown().await.unwrap();
    }
}

/// Two instances. "fast" may start 5 a second: 15 calls take at least 2 s, and by any
/// time t after the first claim no more than 5 + 5t were claimed (by the claims' clock). "slow" may start 3 a
/// minute: 3 start, the other 3 wait. "free" (no rate) runs through meanwhile.
async fn a_partitions_rate_holds_across_instances<DB: Backend>(db: TestDb) {
    let history = History::default();
    let rts = [instance(&db, &history).await, instance(&db, &history).await];
    history.read_claims(&db).await; // the database file exists now (SQLite)
    rts[0]
        .set_partition(
            "metered",
            "fast",
            PartitionSettings::new().rate(Rate::per_second(5)),
            "test",
        )
        .await
        .unwrap();
    rts[1]
        .set_partition(
            "metered",
            "slow",
            PartitionSettings::new().rate(Rate::per_minute(3)),
            "test",
        )
        .await
        .unwrap();
    for (i, (tenant, n)) in [("fast", 15), ("slow", 6), ("free", 10)]
        .into_iter()
        .enumerate()
    {
        batch((0..n).map(|_| metered(tenant.into()).partition(tenant)))
            .on(&rts[i % 2])
            .await
            .unwrap();
    }
    // fast's 15, slow's 3, free's 10.
    history.wait_ended(28, Duration::from_secs(20)).await;
    let starts = history.starts();
    let of = |p: &str| -> Vec<Instant> {
        starts
            .iter()
            .filter(|(q, _)| q == p)
            .map(|(_, t)| *t)
            .collect()
    };
    let fast = of("fast");
    assert_eq!(fast.len(), 15);
    assert!(
        fast[14].duration_since(fast[0]) >= Duration::from_millis(1_800),
        "15 at 5 a second in {:?}",
        fast[14].duration_since(fast[0])
    );
    // By the claims' clock (the one the bucket is kept by): by t ms after the first
    // claim, at most 5 + 5t/1000 claimed.
    let claimed = history.claimed("fast");
    assert_eq!(claimed.len(), 15);
    for (i, t) in claimed.iter().enumerate() {
        let since = t - claimed[0];
        assert!(
            (i as i64 + 1) * 1_000 <= 5_000 + 5 * since,
            "claim {} of fast {since} ms after the first: more than 5 + 5t ({claimed:?})",
            i + 1
        );
    }
    let free = of("free");
    assert_eq!(free.len(), 10);
    assert!(free[9] < fast[14], "free never waits for fast");
    // A little longer: slow stays at 3 this minute.
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(of("slow").len(), 3, "{:?}", history.order());
    for rt in rts {
        rt.shutdown().await.unwrap();
    }
}

/// Issue 30 item 5: a queue's rate per minute (before, per second only), over two
/// instances: 3 of 6 start, the others wait for the minute; the flow says the period; a
/// rate per minute set while running is refused (the row's rate is per second).
async fn a_queues_rate_per_minute_holds_across_instances<DB: Backend>(db: TestDb) {
    let history = History::default();
    let rts = [instance(&db, &history).await, instance(&db, &history).await];
    for (i, rt) in rts.iter().enumerate() {
        batch((0..3).map(|n| report(i as u64 * 10 + n)))
            .on(rt)
            .await
            .unwrap();
    }
    history.wait_ended(3, Duration::from_secs(10)).await;
    tokio::time::sleep(Duration::from_millis(1_500)).await;
    assert_eq!(history.order().len(), 3, "{:?}", history.order());
    let flow = rts[0].queue_flow("reports", 10).await.unwrap();
    assert_eq!((flow.rate, flow.rate_period_ms), (Some(3), 60_000));
    assert_eq!(flow.waiting, 3);
    let error = rts[0]
        .set_queue_limits(
            "reports",
            QueueLimits::new().rate_per(Rate::per_minute(5)),
            "test",
        )
        .await
        .expect_err("per second only")
        .to_string();
    assert!(error.contains("per second"), "{error}");
    for rt in rts {
        rt.shutdown().await.unwrap();
    }
}

/// Settings are refused for an unknown queue and absurd values, with errors that say
/// what to do; a name of any characters is kept as given, shown in the flow with its
/// settings, listed, and cleared; every change is in the audit trail.
async fn partition_settings_are_checked_shown_and_audited<DB: Backend>(db: TestDb) {
    let history = History::default();
    // Runs nothing: what is called waits.
    let rt = idle(&db, &history).await;
    let fine = PartitionSettings::new().weight(2);
    let refused = |e: async_exec::Error| e.to_string();
    let error = refused(
        rt.set_partition("nope", "t", fine, "test")
            .await
            .expect_err("unknown queue"),
    );
    assert!(error.contains("no executor names queue"), "{error}");
    for (settings, says) in [
        (PartitionSettings::new(), "clear_partition"),
        (PartitionSettings::new().weight(0), "weight"),
        (PartitionSettings::new().weight(5_000), "weight"),
        (PartitionSettings::new().concurrency(0), "concurrency"),
        (
            PartitionSettings::new().concurrency(u32::MAX),
            "concurrency",
        ),
        (PartitionSettings::new().rate(Rate::per_day(0)), "rate"),
    ] {
        let error = refused(
            rt.set_partition("hooks", "t", settings, "test")
                .await
                .expect_err(says),
        );
        assert!(error.contains(says), "{says}: {error}");
    }
    let error = refused(
        rt.set_partition("hooks", "a\0b", fine, "test")
            .await
            .expect_err("NUL"),
    );
    assert!(error.contains("without NUL"), "{error}");
    assert!(rt.clear_partition("nope", "t", "test").await.is_err());
    // A hostile name is kept as given.
    let odd = "<b>t\u{1b}[31m\n'\"";
    let set = PartitionSettings::new()
        .weight(4)
        .concurrency(7)
        .rate(Rate::per_hour(100));
    rt.set_partition("hooks", odd, set, "alice").await.unwrap();
    rt.set_partition("hooks", "t2", fine, "alice")
        .await
        .unwrap();
    let listed = rt.partition_settings("hooks", None, 10).await.unwrap();
    let names: Vec<&str> = listed.iter().map(|p| p.partition.as_str()).collect();
    assert_eq!(names, vec![odd, "t2"]);
    assert_eq!(listed[0].settings, set);
    assert_eq!(listed[0].changed_by.as_deref(), Some("alice"));
    let page = rt.partition_settings("hooks", Some(odd), 10).await.unwrap();
    assert_eq!(page.len(), 1);
    // The flow shows the partition's own settings, and its own limit.
    hook("x".into()).partition(odd).on(&rt).await.unwrap();
    let flow = rt.queue_flow("hooks", 10).await.unwrap();
    assert_eq!(flow.partitions.len(), 1);
    assert_eq!(flow.partitions[0].partition, odd);
    assert_eq!(flow.partitions[0].settings, Some(set));
    // Cleared: the queue's defaults again.
    assert!(rt.clear_partition("hooks", odd, "alice").await.unwrap());
    assert!(!rt.clear_partition("hooks", odd, "alice").await.unwrap());
    let flow = rt.queue_flow("hooks", 10).await.unwrap();
    assert_eq!(flow.partitions[0].settings, None);
    let trail = rt.audit_trail(20).await.unwrap();
    let actions: Vec<&str> = trail
        .iter()
        .filter(|e| e.actor == "alice")
        .map(|e| e.action.as_str())
        .collect();
    assert_eq!(
        actions,
        vec![
            "partition-clear",
            "partition-clear",
            "partition",
            "partition"
        ]
    );
    assert!(trail.iter().any(|e| e.target.contains("\"weight\":4")));
    rt.shutdown().await.unwrap();
}

/// The JSON API beside the queue's flow: viewers read, operators change (audited with
/// their name); absurd, negative and unknown fields are refused; a name of any characters
/// goes in the body and comes back as given.
#[cfg(feature = "console")]
async fn partitions_over_the_json_api<DB: Backend>(db: TestDb) {
    use common::console::{get, mounted, post_json, Auth, OPERATOR_TOKEN, VIEWER_TOKEN};
    use serde_json::json;
    let history = History::default();
    let rt = instance(&db, &history).await;
    let app = mounted(&rt);
    let path = "/api/queues/hooks/partitions";
    let odd = "t/<script>\u{7}";
    let body = json!({ "partition": odd,
        "settings": { "weight": 3, "rate": { "starts": 10, "period": "minute" } } });
    let viewer = post_json(&app, path, Auth::Bearer(VIEWER_TOKEN), None, body.clone()).await;
    assert_eq!(viewer.status, 403, "{}", viewer.body);
    let set = post_json(&app, path, Auth::Bearer(OPERATOR_TOKEN), None, body).await;
    assert_eq!(set.status, 200, "{}", set.body);
    assert_eq!(set.json()["settings"]["weight"], 3);
    for (wrong, status) in [
        (
            json!({ "partition": "t", "settings": { "weight": 0 } }),
            422,
        ),
        (
            json!({ "partition": "t", "settings": { "weight": -1 } }),
            422,
        ),
        (
            json!({ "partition": "t", "settings": { "concurrency": 1e12 } }),
            422,
        ),
        (
            json!({ "partition": "t", "settings": { "rate": { "starts": 5, "period": "week" } } }),
            422,
        ),
        (json!({ "partition": "t", "settings": { "bogus": 1 } }), 422),
        (
            json!({ "partition": "t", "settings": { "rate": { "starts": 5, "period": "second", "burst": 9 } } }),
            422,
        ),
        (json!({ "partition": "", "settings": { "weight": 2 } }), 422),
    ] {
        let reply = post_json(
            &app,
            path,
            Auth::Bearer(OPERATOR_TOKEN),
            None,
            wrong.clone(),
        )
        .await;
        assert_eq!(reply.status, status, "{wrong}: {}", reply.body);
    }
    let unknown = post_json(
        &app,
        "/api/queues/nope/partitions",
        Auth::Bearer(OPERATOR_TOKEN),
        None,
        json!({ "partition": "t", "settings": { "weight": 2 } }),
    )
    .await;
    assert_eq!(unknown.status, 422, "{}", unknown.body);
    assert!(
        unknown.body.contains("no executor names queue"),
        "{}",
        unknown.body
    );
    let listed = get(&app, path, Auth::Bearer(VIEWER_TOKEN)).await;
    assert_eq!(listed.status, 200, "{}", listed.body);
    assert_eq!(listed.json()[0]["partition"], odd);
    assert_eq!(listed.json()[0]["changed_by"], "ops-bot");
    assert_eq!(listed.json()[0]["settings"]["rate"]["period"], "minute");
    let cleared = post_json(
        &app,
        path,
        Auth::Bearer(OPERATOR_TOKEN),
        None,
        json!({ "partition": odd, "settings": null }),
    )
    .await;
    assert_eq!(cleared.status, 200, "{}", cleared.body);
    assert_eq!(cleared.json()["cleared"], true);
    let listed = get(&app, path, Auth::Bearer(VIEWER_TOKEN)).await;
    assert_eq!(listed.json(), json!([]));
    let doc = get(&app, "/api/openapi.json", Auth::None).await;
    assert!(doc.body.contains("/api/queues/{name}/partitions"));
    rt.shutdown().await.unwrap();
}

#[cfg(not(feature = "console"))]
async fn partitions_over_the_json_api<DB: Backend>(_db: TestDb) {}

/// The console's flow page of a queue: partitions with their own settings, a hostile name
/// escaped; an operator's form sets and clears them (audited as the operator), a viewer
/// has no form and cannot post, a rate it cannot read is refused.
#[cfg(feature = "console")]
async fn the_flow_page_shows_and_changes_partitions<DB: Backend>(db: TestDb) {
    use common::console::{get, login, mounted, post_form, Auth};
    let history = History::default();
    let rt = idle(&db, &history).await;
    let odd = "<img src=x onerror=alert(1)>";
    hook("x".into()).partition(odd).on(&rt).await.unwrap();
    let app = mounted(&rt);
    let (cookie, csrf) = login(&app, "alice", "operator pass").await;
    let alice = Auth::Cookie(&cookie);
    let form = [
        ("csrf", csrf.as_str()),
        ("partition", odd),
        ("weight", "3"),
        ("rate", "600/minute"),
        ("do", "set"),
    ];
    let applied = post_form(&app, "/queues/hooks/partitions", alice, &form).await;
    assert_eq!(applied.status, 303, "{}", applied.body);
    let listed = rt.partition_settings("hooks", None, 10).await.unwrap();
    assert_eq!(listed[0].partition, odd);
    assert_eq!(listed[0].changed_by.as_deref(), Some("alice"));
    let page = get(&app, "/queues/hooks/flow", alice).await;
    assert_eq!(page.status, 200, "{}", page.body);
    assert!(page.body.contains("weight 3, 600/minute"), "{}", page.body);
    assert!(!page.body.contains(odd), "escaped: {}", page.body);
    assert!(page.body.contains("&lt;img src=x onerror=alert(1)&gt;"));
    let bad = [
        ("csrf", csrf.as_str()),
        ("partition", "t"),
        ("rate", "5/week"),
        ("do", "set"),
    ];
    let refused = post_form(&app, "/queues/hooks/partitions", alice, &bad).await;
    assert_eq!(refused.status, 422, "{}", refused.body);
    let zero = [
        ("csrf", csrf.as_str()),
        ("partition", "t"),
        ("weight", "0"),
        ("do", "set"),
    ];
    let refused = post_form(&app, "/queues/hooks/partitions", alice, &zero).await;
    assert_eq!(refused.status, 422, "{}", refused.body);
    let (viewer_cookie, viewer_csrf) = login(&app, "victor", "viewer pass").await;
    let victor = Auth::Cookie(&viewer_cookie);
    let page = get(&app, "/queues/hooks/flow", victor).await;
    assert_eq!(page.status, 200);
    assert!(
        !page.body.contains("<form class=\"partition\""),
        "{}",
        page.body
    );
    let attempt = [
        ("csrf", viewer_csrf.as_str()),
        ("partition", odd),
        ("do", "clear"),
    ];
    let refused = post_form(&app, "/queues/hooks/partitions", victor, &attempt).await;
    assert_eq!(refused.status, 403);
    let clear = [("csrf", csrf.as_str()), ("partition", odd), ("do", "clear")];
    let cleared = post_form(&app, "/queues/hooks/partitions", alice, &clear).await;
    assert_eq!(cleared.status, 303, "{}", cleared.body);
    assert!(rt
        .partition_settings("hooks", None, 10)
        .await
        .unwrap()
        .is_empty());
    let unknown = get(&app, "/queues/nope/flow", alice).await;
    assert_eq!(unknown.status, 422, "{}", unknown.body);
    rt.shutdown().await.unwrap();
}

#[cfg(not(feature = "console"))]
async fn the_flow_page_shows_and_changes_partitions<DB: Backend>(_db: TestDb) {}

backend_suite!(
    the_flow_page_shows_and_changes_partitions,
    a_queues_rate_per_minute_holds_across_instances,
    partitions_over_the_json_api,
    a_heavier_partition_gets_more_starts,
    a_partitions_own_concurrency_holds_across_instances,
    a_partitions_rate_holds_across_instances,
    partition_settings_are_checked_shown_and_audited,
);

/// PostgreSQL whose sessions begin at REPEATABLE READ (MariaDB's sessions here begin at
/// REPEATABLE READ already): a partition's own concurrency and rate still hold.
#[cfg_attr(
    not(all(feature = "postgres", async_exec_test_postgres)),
    allow(dead_code)
)]
async fn repeatable_read_by_default(db: TestDb) -> TestDb {
    let name = db
        .url
        .rsplit('/')
        .next()
        .unwrap()
        .split('?')
        .next()
        .unwrap()
        .to_string();
    db.exec(&format!(
        "ALTER DATABASE {name} SET default_transaction_isolation = 'repeatable read'"
    ))
    .await;
    db
}

mod repeatable_read {
    #[cfg(all(feature = "postgres", async_exec_test_postgres))]
    #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
    async fn postgres_concurrency() {
        let db = crate::common::TestDb::new(crate::common::Kind::Postgres).await;
        let db = super::repeatable_read_by_default(db).await;
        super::a_partitions_own_concurrency_holds_across_instances::<async_exec::Postgres>(db)
            .await;
    }

    #[cfg(all(feature = "postgres", async_exec_test_postgres))]
    #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
    async fn postgres_rate() {
        let db = crate::common::TestDb::new(crate::common::Kind::Postgres).await;
        let db = super::repeatable_read_by_default(db).await;
        super::a_partitions_rate_holds_across_instances::<async_exec::Postgres>(db).await;
    }
}

//! Issue 30: `#[async_exec(queue = "..", partition = <expr>)]`. The expression, over the
//! call's stored parameters (a name, a field, `format!`; a `String`, an `i64`, a
//! `Display` id), is each record's `partition_key`; `.partition(..)` on the call replaces
//! it, `.owner(..)` does not; a queue's `per_partition(1)` holds for the partitions the
//! attribute gives, and tenants run side by side.
#![allow(clippy::extra_unused_type_parameters)] // every test takes the backend, used or not

#[macro_use]
mod common;

use std::collections::HashMap;
use std::fmt;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use async_exec::{async_exec, batch, Backend, Data, QueueLimits, Runtime};
use common::TestDb;
use serde::{Deserialize, Serialize};
use sqlx::AnyPool;

/// Bodies running now and the most seen at once, by tenant and over all.
#[derive(Clone, Default)]
struct Running(Arc<Mutex<Seen>>);

#[derive(Default)]
struct Seen {
    now: HashMap<String, usize>,
    most: HashMap<String, usize>,
    ended: usize,
}

impl Running {
    async fn run(&self, tenant: String) {
        for group in [tenant.clone(), "all".to_string()] {
            let mut seen = self.0.lock().unwrap();
            let now = {
                let now = seen.now.entry(group.clone()).or_default();
                *now += 1;
                *now
            };
            let most = seen.most.entry(group).or_default();
            *most = (*most).max(now);
        }
        tokio::time::sleep(Duration::from_millis(150)).await;
        let mut seen = self.0.lock().unwrap();
        for group in [tenant, "all".to_string()] {
            *seen.now.get_mut(&group).unwrap() -= 1;
        }
        seen.ended += 1;
    }

    fn most(&self, group: &str) -> usize {
        self.0.lock().unwrap().most.get(group).copied().unwrap_or(0)
    }

    async fn wait_ended(&self, n: usize) {
        let deadline = Instant::now() + Duration::from_secs(30);
        while self.0.lock().unwrap().ended < n {
            assert!(
                Instant::now() < deadline,
                "{n} runs did not end within 30 s"
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
}

/// A tenant's id as a service would have it: `Display`, not a string (a `Uuid` is alike).
#[derive(Clone, Copy, Serialize, Deserialize)]
struct TenantId(u128);

impl fmt::Display for TenantId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:08x}-tenant", self.0)
    }
}

#[derive(Serialize, Deserialize)]
struct Order {
    id: i64,
    tenant: String,
}

/// Partitioned by an `i64` parameter.
#[async_exec(type = SaveAsync, queue = "hooks", partition = tenant_id)]
async fn by_number(tenant_id: i64, running: Data<Running>) {
    running.run(format!("n{tenant_id}")).await;
}

/// By a `String` parameter, which the call still stores after computing it.
#[async_exec(type = SaveAsync, queue = "hooks", partition = tenant)]
async fn by_name(tenant: String, running: Data<Running>) {
    running.run(tenant).await;
}

/// By a `Display` id.
#[async_exec(type = SaveAsync, queue = "hooks", partition = tenant)]
async fn by_id(tenant: TenantId, running: Data<Running>) {
    running.run(tenant.to_string()).await;
}

/// By `format!` over two parameters, one of them a field.
#[async_exec(type = SaveAsync, queue = "hooks", partition = format!("{region}/{}", order.tenant))]
async fn by_format(region: String, order: Order, running: Data<Running>) {
    let _ = order.id;
    running.run(format!("{region}/{}", order.tenant)).await;
}

/// A service whose method is partitioned by a field of its argument.
struct Hooks;

#[async_exec]
impl Hooks {
    #[async_exec(type = SaveAsync, queue = "hooks", partition = order.tenant)]
    async fn by_field(&self, order: Order, running: Data<Running>) {
        let _ = order.id;
        running.run(order.tenant).await;
    }
}

const EXECUTORS: [&str; 5] = [
    "partition_attr::by_number",
    "partition_attr::by_name",
    "partition_attr::by_id",
    "partition_attr::by_format",
    "partition_attr::Hooks::by_field",
];

async fn instance(db: &TestDb, running: &Running, hooks: &Arc<Hooks>) -> Runtime {
    db.builder()
        .concurrency(4)
        .poll_interval(Duration::from_millis(50))
        .data(running.clone())
        .service(hooks.clone())
        .queue("hooks", QueueLimits::new().concurrency(4).per_partition(1))
        .start()
        .await
        .unwrap()
}

/// `(executor, partition_key)` of every record, in the order written.
async fn partitions(db: &TestDb) -> Vec<(String, String)> {
    let pool = AnyPool::connect(&db.url).await.unwrap();
    let rows: Vec<(String, String)> =
        sqlx::query_as("SELECT executor, partition_key FROM async_req ORDER BY id")
            .fetch_all(&pool)
            .await
            .unwrap();
    pool.close().await;
    rows
}

fn order(tenant: &str) -> Order {
    Order {
        id: 1,
        tenant: tenant.into(),
    }
}

/// Each record's `partition_key` is the value of its executor's expression; a call's
/// `.partition(..)` replaces it, its `.owner(..)` does not (the owner is the partition
/// only of a call that has none).
async fn the_expression_is_the_records_partition<DB: Backend>(db: TestDb) {
    let running = Running::default();
    let hooks = Arc::new(Hooks);
    let rt = instance(&db, &running, &hooks).await;
    // Kept waiting, so that their records can be read.
    for executor in EXECUTORS {
        rt.pause_executor(executor, "test").await.unwrap();
    }
    by_number(7).on(&rt).await.unwrap();
    by_name("acme".into()).on(&rt).await.unwrap();
    by_id(TenantId(0xbeef)).on(&rt).await.unwrap();
    by_format("eu".into(), order("acme")).on(&rt).await.unwrap();
    hooks.by_field(order("globex")).on(&rt).await.unwrap();
    by_number(7).partition("moved").on(&rt).await.unwrap();
    hooks
        .by_field(order("globex"))
        .partition("moved too")
        .on(&rt)
        .await
        .unwrap();
    by_name("acme".into())
        .owner("someone")
        .on(&rt)
        .await
        .unwrap();
    let expected = [
        ("by_number", "7"),
        ("by_name", "acme"),
        ("by_id", "0000beef-tenant"),
        ("by_format", "eu/acme"),
        ("Hooks::by_field", "globex"),
        ("by_number", "moved"),
        ("Hooks::by_field", "moved too"),
        ("by_name", "acme"),
    ]
    .map(|(executor, partition)| (format!("partition_attr::{executor}"), partition.to_string()));
    assert_eq!(partitions(&db).await, expected);
    for executor in EXECUTORS {
        rt.resume_executor(executor, "test").await.unwrap();
    }
    running.wait_ended(expected.len()).await;
    rt.shutdown().await.unwrap();
}

/// `per_partition(1)`, two tenants with four calls each (numbers and names): never two
/// of a tenant at once, and the two tenants side by side (with every call in one
/// partition, as before the attribute's key, never more than one at once).
async fn a_tenant_runs_one_at_a_time_beside_the_other<DB: Backend>(db: TestDb) {
    let running = Running::default();
    let hooks = Arc::new(Hooks);
    let rt = instance(&db, &running, &hooks).await;
    batch((0..4).flat_map(|_| [by_number(1), by_number(2)]))
        .on(&rt)
        .await
        .unwrap();
    running.wait_ended(8).await;
    batch((0..4).flat_map(|_| [by_name("a".into()), hooks.by_field(order("b"))]))
        .on(&rt)
        .await
        .unwrap();
    running.wait_ended(16).await;
    for tenant in ["n1", "n2", "a", "b"] {
        assert_eq!(running.most(tenant), 1, "{tenant}");
    }
    assert_eq!(running.most("all"), 2);
    common::wait_for(|| async { db.count("async_req").await == 0 }).await;
    rt.shutdown().await.unwrap();
}

backend_suite!(
    the_expression_is_the_records_partition,
    a_tenant_runs_one_at_a_time_beside_the_other,
);

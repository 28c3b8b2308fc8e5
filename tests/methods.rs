//! Issue 21, "methods on services": `#[async_exec]` on the `impl` block of a service and
//! `#[async_exec(type = ...)]` on its `async fn x(&self, ..)` methods. A call made through
//! any instance runs on the instance registered with `Builder::service`; the executor is
//! named after the type; retries, transactions and injected values behave as for a free
//! function; a runtime that would run a method of a service not registered refuses to
//! start, naming it.
#![allow(clippy::extra_unused_type_parameters)] // every test takes the backend, used or not

#[macro_use]
mod common;

use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_exec::{async_exec, Backend, Context, Data, Error, Runtime, Status};
use common::{wait_for, Probe, TestDb};

/// A billing service: which instance ran each charge, and with what.
struct Billing {
    name: &'static str,
    charged: Mutex<Vec<(&'static str, i64, i64, u32)>>,
}

impl Billing {
    fn new(name: &'static str) -> Billing {
        Billing {
            name,
            charged: Mutex::new(Vec::new()),
        }
    }

    fn charged(&self) -> Vec<(&'static str, i64, i64, u32)> {
        self.charged.lock().unwrap().clone()
    }
}

#[async_exec]
impl Billing {
    /// A plain method beside the executors: left as it is.
    fn label(&self) -> &'static str {
        self.name
    }

    /// Charges an order; order 13 is declined on its first attempt.
    #[async_exec(type = SaveAsync, remark = "charge the order", max_attempts = 3)]
    async fn charge(&self, order: i64, cents: i64, ctx: Context) -> Result<(), String> {
        self.charged
            .lock()
            .unwrap()
            .push((self.label(), order, cents, ctx.attempt()));
        if order == 13 && ctx.attempt() == 1 {
            return Err(format!("order {order}: declined, try again"));
        }
        Ok(())
    }

    /// Takes an injected value too, and returns a kept result.
    #[async_exec(type = SaveAsync, name = "billing::refund")]
    async fn refund(&self, order: i64, probe: Data<Probe>) -> anyhow::Result<i64> {
        probe.record(&format!("refund {order} by {}", self.label()), 1);
        Ok(order * 100)
    }
}

async fn started(db: &TestDb, billing: &Arc<Billing>) -> Runtime {
    db.builder()
        .retry_interval(Duration::from_millis(100))
        .service(billing.clone())
        .start()
        .await
        .unwrap()
}

/// Calls made through another instance run on the registered one, under the type's
/// name; a failed attempt is retried; a call in a rolled-back transaction never runs.
async fn a_method_runs_on_the_registered_instance<DB: Backend>(db: TestDb) {
    let registered = Arc::new(Billing::new("registered"));
    let rt = started(&db, &registered).await;
    let caller = Billing::new("caller");
    caller.charge(1, 500).on(&rt).await.unwrap();
    caller.charge(13, 700).on(&rt).await.unwrap();
    let mut tx = rt.begin::<DB>().await.unwrap();
    caller.charge(99, 900).within(&mut tx).await.unwrap();
    tx.rollback().await.unwrap();
    let seen = registered.clone();
    wait_for(move || {
        let seen = seen.clone();
        async move { seen.charged().len() >= 3 }
    })
    .await;
    rt.wait_idle().await;
    tokio::time::sleep(Duration::from_millis(200)).await;
    let mut charged = registered.charged();
    charged.sort_unstable();
    assert_eq!(
        charged,
        [
            ("registered", 1, 500, 1),
            ("registered", 13, 700, 1),
            ("registered", 13, 700, 2)
        ]
    );
    assert!(
        caller.charged().is_empty(),
        "the caller's instance ran nothing"
    );
    assert_eq!(
        db.count("async_req").await,
        0,
        "both succeeded and were deleted"
    );
    assert!(
        rt.executors().contains(&"methods::Billing::charge"),
        "named after the type: {:?}",
        rt.executors()
    );
    rt.shutdown().await.unwrap();
}

/// An injected `Data<T>` and a kept result work as on a free function; `name = ...`
/// names it.
async fn a_method_takes_injected_values_and_keeps_its_result<DB: Backend>(db: TestDb) {
    let registered = Arc::new(Billing::new("registered"));
    let rt = db
        .builder()
        .delete_on_success(false)
        .service(registered.clone())
        .start()
        .await
        .unwrap();
    let id = Billing::new("caller")
        .refund(7)
        .on(&rt)
        .await
        .unwrap()
        .id
        .unwrap();
    rt.wait_idle().await;
    let record = rt.get(id).await.unwrap().unwrap();
    assert_eq!(record.executor, "billing::refund");
    assert_eq!(record.status, Status::Success);
    assert_eq!(rt.result::<i64>(id).await.unwrap(), Some(700));
    rt.shutdown().await.unwrap();
}

/// A runtime that would run the methods of a service whose instance is not registered
/// refuses to start, naming the method and the type; one without workers starts.
async fn a_service_not_registered_is_refused_at_start<DB: Backend>(db: TestDb) {
    let refused = db.builder().start().await.unwrap_err();
    assert!(matches!(refused, Error::MissingData { .. }), "{refused}");
    let message = refused.to_string();
    for needle in [
        "`methods::Billing::charge` is a method of the service `methods::Billing`",
        ".service(Arc::new(",
    ] {
        assert!(message.contains(needle), "{needle} in {message}");
    }
    let submit_only = db.builder().run_workers(false).start().await.unwrap();
    let id = Billing::new("caller")
        .charge(5, 100)
        .on(&submit_only)
        .await
        .unwrap()
        .id
        .unwrap();
    let record = submit_only.get(id).await.unwrap().unwrap();
    assert_eq!(record.status, Status::Init);
    submit_only.shutdown().await.unwrap();
}

backend_suite!(
    a_method_runs_on_the_registered_instance,
    a_method_takes_injected_values_and_keeps_its_result,
    a_service_not_registered_is_refused_at_start,
);

//! Issue 20: results. A body's `Ok` value that serializes is kept with its record when the
//! record is kept after its success, and read back with `rt.result::<T>(id)`; `Partial`
//! is the value of batch work where some items failed.
#![allow(clippy::extra_unused_type_parameters)] // every test takes the backend, used or not

#[macro_use]
mod common;

use std::time::Duration;

use async_exec::{async_exec, Backend, Error, Partial, Status};
use common::TestDb;

#[derive(Debug, PartialEq, serde::Serialize, serde::Deserialize)]
struct Invoice {
    number: String,
    total_cents: i64,
}

#[async_exec(type = SaveAsync)]
async fn make_invoice(order: i64) -> anyhow::Result<Invoice> {
    Ok(Invoice {
        number: format!("INV-{order}"),
        total_cents: order * 100,
    })
}

#[async_exec(type = SaveAsync)]
async fn import(rows: Vec<String>) -> Result<Partial, String> {
    let bad: Vec<&String> = rows.iter().filter(|r| !r.contains(',')).collect();
    Ok(Partial::new(
        (rows.len() - bad.len()) as u64,
        bad.len() as u64,
        serde_json::json!({ "rejected": bad }),
    ))
}

#[async_exec(type = SaveAsync)]
async fn nothing(n: i64) {
    let _ = n;
}

#[async_exec(type = SaveAsync, max_attempts = 1)]
async fn refused(n: i64) -> Result<i64, String> {
    Err(format!("no {n}"))
}

async fn finished(rt: &async_exec::Runtime, id: i64) {
    for _ in 0..500 {
        let status = rt.get(id).await.unwrap().map(|r| r.status);
        if matches!(status, Some(Status::Success | Status::Dead) | None) {
            return;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    panic!("request {id} did not finish");
}

/// Values are kept with kept records and read back in their type; `()`, failures and
/// unfinished requests keep none; a wrong type is refused, saying so.
async fn a_bodys_value_is_kept_and_read_back<DB: Backend>(db: TestDb) {
    let rt = db.builder().delete_on_success(false).start().await.unwrap();
    let invoice = make_invoice(42).on(&rt).await.unwrap().id.unwrap();
    let batch = import(vec!["a,1".into(), "b".into(), "c,3".into()])
        .on(&rt)
        .await
        .unwrap()
        .id
        .unwrap();
    let unit = nothing(1).on(&rt).await.unwrap().id.unwrap();
    let dead = refused(1).on(&rt).await.unwrap().id.unwrap();
    let later = nothing(2)
        .delay(Duration::from_secs(3_600))
        .on(&rt)
        .await
        .unwrap()
        .id
        .unwrap();
    for id in [invoice, batch, unit, dead] {
        finished(&rt, id).await;
    }
    assert_eq!(
        rt.result::<Invoice>(invoice).await.unwrap(),
        Some(Invoice {
            number: "INV-42".into(),
            total_cents: 4_200
        })
    );
    let partial = rt.result::<Partial>(batch).await.unwrap().unwrap();
    assert_eq!((partial.ok, partial.failed), (2, 1));
    assert_eq!(partial.details["rejected"][0], "b");
    assert_eq!(rt.result::<serde_json::Value>(unit).await.unwrap(), None);
    assert_eq!(rt.result::<i64>(dead).await.unwrap(), None);
    assert_eq!(rt.result::<i64>(later).await.unwrap(), None, "not run yet");
    let wrong = rt.result::<Vec<String>>(invoice).await.unwrap_err();
    assert!(
        matches!(wrong, Error::ResultType { id, .. } if id == invoice),
        "{wrong}"
    );
    assert!(wrong.to_string().contains("does not decode"), "{wrong}");
    assert!(matches!(
        rt.result::<i64>(invoice + 1_000).await,
        Err(Error::NotFound(_))
    ));
    rt.shutdown().await.unwrap();
}

/// With records deleted on success (the default), nothing is kept: the request is gone.
async fn a_deleted_record_keeps_no_value<DB: Backend>(db: TestDb) {
    let rt = db.builder().start().await.unwrap();
    let id = make_invoice(7).on(&rt).await.unwrap().id.unwrap();
    finished(&rt, id).await;
    assert!(matches!(
        rt.result::<Invoice>(id).await,
        Err(Error::NotFound(_))
    ));
    rt.shutdown().await.unwrap();
}

backend_suite!(
    a_bodys_value_is_kept_and_read_back,
    a_deleted_record_keeps_no_value
);

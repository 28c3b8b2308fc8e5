//! Issue 9, "for the people who write code against it": receipts and requests serialize
//! (arguments as a JSON value, not a JSON string inside JSON), counts by status include
//! the zeros, a bad status name lists the valid ones, and `rt.purge` from code.
#![allow(clippy::extra_unused_type_parameters)] // every test takes the backend, used or not

#[macro_use]
mod common;

use std::time::Duration;

use async_exec::{async_exec, Backend, Error, PageSpec, Purge, Request, RequestQuery, Status};
use common::TestDb;
use serde_json::json;

#[derive(serde::Serialize, serde::Deserialize)]
struct Address {
    street: String,
    zip: Option<u32>,
}

#[async_exec(type = SaveAsync, name = "serialize::ship")]
async fn ship(order: i64, to: Address, note: String) {
    let _ = (order, to, note);
}

async fn requests_and_receipts_serialize_as_json_values<DB: Backend>(db: TestDb) {
    let rt = db.builder().run_workers(false).start().await.unwrap();
    let to = Address {
        street: "Rue d'Été 5, \"B\"".into(),
        zip: None,
    };
    let receipt = ship(42, to, "🎉\n".into())
        .key("k-1")
        .on(&rt)
        .await
        .unwrap();
    let id = receipt.id.unwrap();
    assert_eq!(
        serde_json::to_value(&receipt).unwrap(),
        json!({ "id": id, "outcome": { "kind": "queued" } })
    );
    let again = ship(
        43,
        Address {
            street: String::new(),
            zip: Some(1),
        },
        String::new(),
    )
    .key("k-1")
    .on(&rt)
    .await
    .unwrap();
    assert_eq!(
        serde_json::to_value(&again).unwrap(),
        json!({ "id": id, "outcome": { "kind": "existing" } })
    );

    let request = rt.get(id).await.unwrap().unwrap();
    let value = serde_json::to_value(&request).unwrap();
    assert_eq!(
        value["param_json"],
        json!({ "order": 42, "to": { "street": "Rue d'Été 5, \"B\"", "zip": null }, "note": "🎉\n" }),
        "{value}"
    );
    assert_eq!(value["status"], "init");
    assert_eq!(value["executor"], "serialize::ship");
    assert_eq!(value["idempotency_key"], "k-1");
    assert_eq!(value["id"], id);
    // And back: the JSON columns are text again, holding the same JSON.
    let back: Request = serde_json::from_value(value).unwrap();
    assert_eq!(
        serde_json::from_str::<serde_json::Value>(&back.param_json).unwrap(),
        serde_json::from_str::<serde_json::Value>(&request.param_json).unwrap()
    );
    assert_eq!(back.id, request.id);
    assert_eq!(back.trace_json.is_some(), request.trace_json.is_some());
    rt.shutdown().await.unwrap();
}

async fn counts_by_status_include_the_zeros<DB: Backend>(db: TestDb) {
    let rt = db.builder().run_workers(false).start().await.unwrap();
    let zeros: Vec<(Status, i64)> = Status::ALL.iter().map(|&s| (s, 0)).collect();
    assert_eq!(rt.count_by_status().await.unwrap(), zeros);
    let id = ship(
        1,
        Address {
            street: "a".into(),
            zip: None,
        },
        String::new(),
    )
    .on(&rt)
    .await
    .unwrap()
    .id
    .unwrap();
    ship(
        2,
        Address {
            street: "b".into(),
            zip: None,
        },
        String::new(),
    )
    .on(&rt)
    .await
    .unwrap();
    rt.cancel(id).await.unwrap();
    let counts = rt.count_by_status().await.unwrap();
    assert_eq!(
        counts,
        vec![
            (Status::Init, 1),
            (Status::Running, 0),
            (Status::Success, 0),
            (Status::Failed, 0),
            (Status::Dead, 0),
            (Status::Cancelled, 1),
        ]
    );
    rt.shutdown().await.unwrap();
}

async fn purge_from_code_keeps_what_may_still_run<DB: Backend>(db: TestDb) {
    let rt = db.builder().run_workers(false).start().await.unwrap();
    let mut ids = Vec::new();
    for n in 0..5 {
        let call = ship(
            n,
            Address {
                street: "s".into(),
                zip: None,
            },
            String::new(),
        );
        ids.push(call.on(&rt).await.unwrap().id.unwrap());
    }
    for id in &ids[..3] {
        rt.cancel(*id).await.unwrap();
    }
    let day = 86_400_000;
    db.exec(&format!(
        "UPDATE async_req SET update_time = update_time - {}",
        2 * day
    ))
    .await;
    let week = Duration::from_secs(7 * 86_400);
    assert_eq!(rt.purge(Purge::older_than(week)).await.unwrap().requests, 0);
    let report = rt
        .purge(Purge::older_than(Duration::from_secs(86_400)).batch(2))
        .await
        .unwrap();
    assert_eq!((report.requests, report.attempt_logs), (3, 0), "{report:?}");
    assert_eq!(
        report.batches, 3,
        "2 + 1 records, then one pass over the logs: {report:?}"
    );
    let left: Vec<i64> = rt
        .list(&RequestQuery::default(), &PageSpec::default())
        .await
        .unwrap()
        .requests
        .iter()
        .map(|r| r.id)
        .collect();
    assert_eq!(left, vec![ids[4], ids[3]], "init records are never purged");
    for batch in [0, 1001] {
        let refused = rt.purge(Purge::older_than(week).batch(batch)).await;
        assert!(
            matches!(&refused, Err(Error::InvalidFilter(m)) if m.contains("1 to 1000")),
            "{refused:?}"
        );
    }
    rt.shutdown().await.unwrap();
}

backend_suite!(
    requests_and_receipts_serialize_as_json_values,
    counts_by_status_include_the_zeros,
    purge_from_code_keeps_what_may_still_run,
);

#[test]
fn a_bad_status_name_lists_the_valid_ones() {
    let error = "Dead".parse::<Status>().unwrap_err();
    assert!(matches!(error, Error::UnknownStatus(ref s) if s == "Dead"));
    assert_eq!(
        error.to_string(),
        "unknown status `Dead`: expected one of init, running, success, failed, dead, cancelled (lowercase)"
    );
    for status in Status::ALL {
        assert_eq!(status.as_str().parse::<Status>().unwrap(), status);
    }
}

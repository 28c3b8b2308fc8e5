//! Issue 18 item 9: sweeps that keep up. Expired idempotency keys were deleted 1,000 per
//! `compensate_interval` (about 33 keyed calls/s at the default 30 s): above that,
//! `async_key` grew forever. A sweep now deletes again while its batches come back full,
//! for up to half of its interval. (The rescuer's rounds, likewise: `rescuer.rs`'s unit
//! tests.)
#![allow(clippy::extra_unused_type_parameters)] // every test takes the backend, used or not

#[macro_use]
mod common;

use std::time::{Duration, Instant};

use async_exec::{async_exec, Backend, Tx};
use common::{now_ms, TestDb};

#[async_exec(type = SaveAsync)]
async fn keyed(n: u64) {
    let _ = n;
}

/// Writes `n` keys of application `tests` that expired a minute ago, 500 rows a statement.
async fn expired_keys(db: &TestDb, n: usize) {
    let expired = now_ms() - 60_000;
    let rows: Vec<String> = (0..n)
        .map(|i| format!("('tests', 'backlog-{i}', NULL, {expired}, {expired})"))
        .collect();
    for chunk in rows.chunks(500) {
        db.exec(&format!(
            "INSERT INTO async_key (application_name, idempotency_key, request_id, create_time, expire_time) \
             VALUES {}",
            chunk.join(", ")
        ))
        .await;
    }
}

/// A backlog of 2,500 expired keys is gone after one compensation sweep (before: 1,000 of
/// them, seen failing with `keys_expired` 1,000).
async fn a_backlog_of_expired_keys_is_deleted_in_one_sweep<DB: Backend>(db: TestDb) {
    let rt = db.builder().start().await.unwrap();
    expired_keys(&db, 2_500).await;
    let report = rt.compensator().run_once().await.unwrap();
    assert_eq!(report.keys_expired, 2_500, "{report:?}");
    assert_eq!(db.count("async_key").await, 0);
    rt.shutdown().await.unwrap();
}

/// 500 keyed calls a second for 5 s, keys kept 1 s, a compensation sweep every 4 s (the
/// old sweep deleted 250 keys a second at that interval): one sweep after the calls end
/// every key has gone, and none was deleted before its retention ended.
async fn keys_of_500_calls_a_second_are_deleted_as_they_expire<DB: Backend>(db: TestDb) {
    let rt = db
        .builder()
        .key_retention(Duration::from_secs(1))
        .compensate_interval(Duration::from_secs(4))
        .start()
        .await
        .unwrap();
    let started = Instant::now();
    let mut made = 0u64;
    while started.elapsed() < Duration::from_secs(5) {
        // 50 calls every 100 ms, in a transaction, each with a key of its own (SQLite
        // commits about 200 transactions a second here with `synchronous = FULL`).
        let tick = Instant::now();
        let mut tx: Tx<DB> = rt.begin().await.unwrap();
        for n in made..made + 50 {
            keyed(n)
                .key(format!("rate-{n}"))
                .within(&mut tx)
                .await
                .unwrap();
        }
        tx.commit().await.unwrap();
        made += 50;
        tokio::time::sleep(Duration::from_millis(100).saturating_sub(tick.elapsed())).await;
    }
    let rate = made as f64 / started.elapsed().as_secs_f64();
    println!("{:?}: {made} keyed calls, {rate:.0} a second", db.kind);
    assert!(
        rate >= 300.0,
        "the test made {rate:.0} keyed calls a second"
    );
    let keys = db.count("async_key").await;
    assert!(
        keys > 0,
        "keys of the last second are kept for their retention ({keys} left)"
    );
    // Calls ended at 5 s; the sweeps run at 4 s and 8 s: the one at 8 s finds every key
    // expired (made before 5 s, kept 1 s). Two seconds of slack for a loaded machine.
    let deadline = started + Duration::from_secs(10);
    let mut left = keys;
    while Instant::now() < deadline && left > 0 {
        tokio::time::sleep(Duration::from_millis(200)).await;
        left = db.count("async_key").await;
    }
    assert_eq!(
        left, 0,
        "{made} keys made, {left} left 10 s after the first"
    );
    rt.shutdown().await.unwrap();
}

backend_suite!(
    a_backlog_of_expired_keys_is_deleted_in_one_sweep,
    keys_of_500_calls_a_second_are_deleted_as_they_expire,
);

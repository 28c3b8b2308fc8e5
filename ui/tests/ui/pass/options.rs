#![deny(warnings)]
use async_exec::*;

#[async_exec(type = SaveAsync, name = "mail.send_welcome", remark = "stable name")]
async fn named(user_id: i64) {
    let _ = user_id;
}

#[async_exec(type = SaveAsync, max_attempts = 5)]
async fn attempts(user_id: i64) {
    let _ = user_id;
}

#[async_exec(type = SaveAsync, timeout = 30)]
async fn timeout_seconds(user_id: i64) {
    let _ = user_id;
}

#[async_exec(type = SaveAsync, timeout = "250ms")]
async fn timeout_ms(user_id: i64) {
    let _ = user_id;
}

#[async_exec(type = SaveAsync, timeout = "10s")]
async fn timeout_s(user_id: i64) {
    let _ = user_id;
}

#[async_exec(type = SaveAsync, timeout = "5m")]
async fn timeout_m(user_id: i64) {
    let _ = user_id;
}

#[async_exec(type = SaveAsync, timeout = "2h")]
async fn timeout_h(user_id: i64) {
    let _ = user_id;
}

#[async_exec(
    crate = "::async_exec",
    timeout = "1m",
    max_attempts = 1,
    name = "all.options",
    remark = "every key, in another order",
    type = Thread,
)]
async fn all_options(user_id: i64) {
    let _ = user_id;
}

fn main() {
    let _calls: [Call; 8] = [
        named(1),
        attempts(2),
        timeout_seconds(3),
        timeout_ms(4),
        timeout_s(5),
        timeout_m(6),
        timeout_h(7),
        all_options(8),
    ];
}

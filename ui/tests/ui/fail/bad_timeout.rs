use async_exec::*;

#[async_exec(type = SaveAsync, timeout = "30 seconds")]
async fn bad_unit(id: i64) {
    let _ = id;
}

#[async_exec(type = SaveAsync, timeout = 0)]
async fn zero(id: i64) {
    let _ = id;
}

#[async_exec(type = SaveAsync, timeout = "0ms")]
async fn zero_ms(id: i64) {
    let _ = id;
}

fn main() {
    let _calls: [Call; 3] = [bad_unit(1), zero(2), zero_ms(3)];
}

use async_exec::*;

#[async_exec(type = SaveAsync, retries = 3)]
async fn send(id: i64) {
    let _ = id;
}

// The function is still replaced by one returning a `Call`: no follow-on errors here.
fn main() {
    let _call: Call = send(1);
}

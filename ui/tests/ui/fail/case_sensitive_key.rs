use async_exec::*;

#[async_exec(Type = SaveAsync)]
async fn send(id: i64) {
    let _ = id;
}

fn main() {
    let _call: Call = send(1);
}

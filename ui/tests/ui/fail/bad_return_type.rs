use async_exec::*;

#[async_exec(type = SaveAsync)]
async fn send(id: i64) -> i64 {
    id
}

fn main() {
    let _call: Call = send(1);
}

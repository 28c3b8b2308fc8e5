use async_exec::*;

#[async_exec(type = SaveAsync)]
fn send(id: i64) {
    let _ = id;
}

fn main() {
    send(1);
}

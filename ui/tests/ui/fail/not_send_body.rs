use async_exec::*;
use std::rc::Rc;

async fn tick() {}

#[async_exec(type = SaveAsync)]
async fn send(id: i64) {
    let rc = Rc::new(id);
    tick().await;
    let _ = rc;
}

fn main() {
    let _call: Call = send(1);
}

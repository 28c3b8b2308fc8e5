use async_exec::async_exec;

// A queue's limits hold in the store's claims: an in-memory strategy cannot have one.
#[async_exec(type = Async, queue = "payments")]
async fn charge(order: i64) {
    let _ = order;
}

fn main() {}

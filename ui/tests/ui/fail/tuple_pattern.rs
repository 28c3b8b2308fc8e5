use async_exec::*;

#[async_exec(type = SaveAsync)]
async fn send((x, y): (i64, i64)) {
    let _ = (x, y);
}

fn main() {
    let _ = send((1, 2));
}

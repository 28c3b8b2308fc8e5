use async_exec::*;

#[async_exec(remark = "no strategy")]
async fn send(id: i64) {
    let _ = id;
}

fn main() {
    let _call: Call = send(1);
}

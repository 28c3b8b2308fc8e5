use async_exec::*;

#[async_exec(type = SaveAsync, every = "1m")]
async fn report(month: u32) {
    let _ = month;
}

fn main() {}

use async_exec::*;

#[async_exec(type = SaveAsync, every = "500ms")]
async fn too_often() {}

#[async_exec(type = SaveAsync, cron = "*/5 * * * *")]
async fn five_fields() {}

#[async_exec(type = Async, every = "1h", cron = "0 0 * * * *")]
async fn twice_and_in_memory() {}

#[async_exec(type = SaveAsync, catch_up = true)]
async fn nothing_to_catch_up() {}

#[async_exec(type = SaveAsync, every = "1m")]
async fn report(month: u32) {
    let _ = month;
}

fn main() {}

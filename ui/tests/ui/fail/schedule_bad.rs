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

#[async_exec(type = SaveAsync, every = "1h", time_zone = "Europe/Paris")]
async fn a_zone_for_a_period() {}

#[async_exec(type = SaveAsync, time_zone = "Europe/Paris")]
async fn a_zone_without_a_schedule() {}

#[async_exec(type = SaveAsync, cron = "0 0 9 * * *", time_zone = "Europe Paris")]
async fn a_zone_with_a_space() {}

fn main() {}

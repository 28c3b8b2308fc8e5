#![deny(warnings)]
use async_exec::*;

#[async_exec(type = SaveAsync)]
async fn unit(id: i64) {
    let _ = id;
}

#[async_exec(type = SaveAsync)]
async fn explicit_unit(id: i64) -> () {
    let _ = id;
}

#[async_exec(type = SaveAsync)]
async fn anyhow_result(id: i64) -> anyhow::Result<()> {
    anyhow::ensure!(id > 0, "id must be positive");
    Ok(())
}

#[async_exec(type = SaveAsync)]
async fn string_error(id: i64) -> Result<(), String> {
    if id < 0 {
        return Err(format!("negative id {id}"));
    }
    Ok(())
}

fn main() {
    let _calls: [Call; 4] = [unit(1), explicit_unit(2), anyhow_result(3), string_error(4)];
}

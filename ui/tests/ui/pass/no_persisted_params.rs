#![deny(warnings)]
use async_exec::*;

struct Cache;

#[async_exec(type = SaveAsync)]
async fn nothing() {}

#[async_exec(type = SaveAsync)]
async fn only_injected(cache: Data<Cache>, ctx: Context) -> anyhow::Result<()> {
    let _ = (&*cache, ctx);
    Ok(())
}

fn main() {
    let _a: Call = nothing();
    let _b: Call = only_injected();
}

#![deny(warnings)]

use async_exec::{async_exec, Context, Data};

struct Gateway;

/// `#[secret]` on persisted parameters (raw names and `mut` too) leaves the wrapper and
/// the body's signature: nothing for rustc to reject.
#[async_exec(type = SaveAsync, name = "ui::charge")]
async fn charge(
    order_id: i64,
    #[secret] card: String,
    #[secret] mut r#ref: Option<String>,
    gateway: Data<Gateway>,
    ctx: Context,
) -> anyhow::Result<()> {
    r#ref.take();
    let _ = (order_id, card, gateway, ctx);
    Ok(())
}

fn main() {
    let _call: async_exec::Call = charge(1, "4242".into(), None);
}

use async_exec::{async_exec, Context, Data};

struct Gateway;

#[async_exec(type = SaveAsync)]
async fn charge(#[secret] gateway: Data<Gateway>, #[secret(key = "k1")] card: String, #[secret] ctx: Context) {
    let _ = (gateway, card, ctx);
}

fn main() {}

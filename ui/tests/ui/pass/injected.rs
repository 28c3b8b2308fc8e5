#![deny(warnings)]
use async_exec::*;

struct Mailer {
    from: String,
}

struct Pool;

#[async_exec(type = SaveAsync, remark = "send the welcome mail")]
async fn send_welcome(
    user_id: i64,
    mailer: Data<Mailer>,
    mut email: String,
    ctx: Context,
    pool: async_exec::Data<Pool>,
    tags: Vec<String>,
) -> anyhow::Result<()> {
    email.push_str(&mailer.from);
    let _ = (user_id, ctx, &*pool, tags);
    Ok(())
}

fn main() {
    let _call: Call = send_welcome(42, "a@b.c".to_string(), vec!["new".into()]);
}

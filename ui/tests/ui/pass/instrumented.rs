#![deny(warnings)]

use async_exec::{async_exec, Context, Data};

#[derive(Debug)]
pub struct Mailer;

/// `#[tracing::instrument]` and lint levels apply to the body (the span is entered when
/// it runs); docs stay on the wrapper.
#[async_exec(type = SaveAsync)]
#[tracing::instrument(skip(mailer, ctx), fields(user = user_id), err)]
#[deny(unused_variables)]
#[allow(clippy::too_many_arguments)]
pub async fn send(user_id: i64, email: String, mailer: Data<Mailer>, ctx: Context) -> Result<(), String> {
    let _ = (&email, &mailer, &ctx);
    tracing::info!("sending");
    Ok(())
}

/// Named spans keep their name.
#[async_exec(type = Async)]
#[tracing::instrument(name = "mail.ping", level = "debug")]
pub async fn ping(host: String) {
    let _ = host;
}

fn main() {
    let _a: async_exec::Call = send(1, "a@b.c".into());
    let _b: async_exec::Call = ping("mx".into());
}

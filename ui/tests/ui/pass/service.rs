//! A service: its marked methods are executors, the others stay as written; the
//! wrappers keep their visibility and docs, and take the persisted parameters only.
use std::sync::Arc;

use async_exec::*;

pub struct Mailer {
    from: String,
}

pub struct Templates;

#[async_exec]
impl Mailer {
    /// Not an executor.
    pub fn from(&self) -> &str {
        &self.from
    }

    /// Sends the welcome mail.
    #[async_exec(type = SaveAsync, remark = "welcome mail", max_attempts = 5)]
    pub async fn send_welcome(
        &self,
        user_id: i64,
        #[secret] email: String,
        templates: Data<Templates>,
        ctx: Context,
    ) -> anyhow::Result<()> {
        let _ = (user_id, email, templates, ctx, self.from());
        Ok(())
    }

    #[async_exec(type = Async)]
    async fn ping(&self) {}

    #[async_exec(type = SaveAsync, queue = "mails")]
    #[tracing::instrument(skip(self))]
    pub(crate) async fn count(&self, n: u32) -> Result<u32, String> {
        Ok(n)
    }
}

fn main() {
    let mailer = Arc::new(Mailer { from: "x".into() });
    let _call: Call = mailer.send_welcome(1, "a@b.c".into());
    let _ = mailer.ping();
    let _ = mailer.count(3);
    let _builder = Runtime::builder().service(mailer.clone()).data(Templates);
}

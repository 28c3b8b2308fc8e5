use async_exec::{async_exec, Context, Data};

// A partition is one of a queue's, whose claims only SaveAsync requests go through.
#[async_exec(type = SaveAsync, partition = tenant)]
async fn no_queue(tenant: String) {
    let _ = tenant;
}

#[async_exec(type = Async, queue = "hooks", partition = tenant)]
async fn in_memory(tenant: String) {
    let _ = tenant;
}

// A string would be one partition for every call.
#[async_exec(type = SaveAsync, queue = "hooks", partition = "tenant")]
async fn a_string(tenant: String) {
    let _ = tenant;
}

// The call has only its stored parameters; a secret one is not stored in plain text.
pub struct Region(pub i64);

#[async_exec(type = SaveAsync, queue = "hooks", partition = format!("{card}-{}-{}", ctx.attempt(), region.0))]
async fn not_the_calls(card: String, ctx: Context, region: Data<Region>) {
    let _ = (card, ctx, region);
}

#[async_exec(type = SaveAsync, queue = "hooks", partition = tenant)]
async fn secret(#[secret] tenant: String) {
    let _ = tenant;
}

pub struct Hooks {
    tenant: String,
}

#[async_exec]
impl Hooks {
    #[async_exec(type = SaveAsync, queue = "hooks", partition = self.tenant)]
    async fn caller_instance(&self, event: String) {
        let _ = (&self.tenant, event);
    }
}

#[async_exec(type = SaveAsync, queue = "hooks", every = "1m", partition = "x".len())]
async fn scheduled() {}

fn main() {}

use async_exec::async_exec;

#[derive(serde::Serialize, serde::Deserialize)]
pub struct Tenant {
    id: i64,
}

// The partition is the expression's `Display` text: a struct without it is refused at
// the expression.
#[async_exec(type = SaveAsync, queue = "hooks", partition = tenant)]
async fn deliver(tenant: Tenant) {
    let _ = tenant.id;
}

fn main() {}

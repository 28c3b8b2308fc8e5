#![deny(warnings)]
use async_exec::*;
use serde::{Deserialize, Serialize};

// `partition = <expr>`: over the call's stored parameters, computed before they are
// stored (a `String` is borrowed, not moved), any `Display` value.

#[async_exec(type = SaveAsync, queue = "hooks", partition = tenant)]
async fn by_name(tenant: String, event: String) {
    let _ = (tenant, event);
}

#[async_exec(type = SaveAsync, queue = "hooks", partition = tenant_id)]
async fn by_number(tenant_id: i64, ctx: Context) {
    let _ = (tenant_id, ctx);
}

#[derive(Clone, Copy, Serialize, Deserialize)]
pub struct TenantId(u128);

impl std::fmt::Display for TenantId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{:032x}", self.0)
    }
}

#[async_exec(type = SaveAsync, queue = "hooks", partition = tenant)]
async fn by_id(tenant: TenantId) {
    let _ = tenant;
}

#[derive(Serialize, Deserialize)]
pub struct Order {
    tenant: String,
    region: String,
}

#[async_exec(type = SaveAsync, queue = "hooks", partition = format!("{}/{}", order.region, order.tenant))]
async fn by_format(order: Order, #[secret] card: String) {
    let _ = (order, card);
}

pub struct Mailer;

#[async_exec]
impl Mailer {
    #[async_exec(type = SaveAsync, queue = "mails", partition = order.tenant)]
    async fn by_field(&self, order: Order) {
        let _ = order;
    }
}

fn main() {
    let _ = by_name("acme".into(), "paid".into()).partition("override");
    let _ = by_number(7);
    let _ = by_id(TenantId(1));
    let order = Order {
        tenant: "acme".into(),
        region: "eu".into(),
    };
    let _ = by_format(order, "4242".into());
    let order = Order {
        tenant: "acme".into(),
        region: "eu".into(),
    };
    let _ = Mailer.by_field(order);
}

use async_exec::*;

struct Reports;

#[async_exec]
impl Reports {
    #[async_exec(type = SaveAsync)]
    async fn build(month: u32) {
        let _ = month;
    }
}

fn main() {}

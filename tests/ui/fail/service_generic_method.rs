use async_exec::*;

struct Exporter;

#[async_exec]
impl Exporter {
    #[async_exec(type = SaveAsync)]
    async fn export<T: serde::Serialize>(&self, rows: Vec<i64>) {
        let _ = rows;
    }
}

fn main() {}

use async_exec::*;

struct Counter;

#[async_exec]
impl Counter {
    #[async_exec(type = SaveAsync)]
    async fn bump(&mut self, by: i64) {
        let _ = by;
    }
}

fn main() {}

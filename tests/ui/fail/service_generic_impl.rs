use async_exec::*;

struct Store<T>(T);

#[async_exec]
impl<T: Send + Sync + 'static> Store<T> {
    #[async_exec(type = SaveAsync)]
    async fn save(&self, id: i64) {
        let _ = id;
    }
}

fn main() {}

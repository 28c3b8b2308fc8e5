use async_exec::*;

struct Mailer;

#[async_exec]
impl Mailer {
    #[async_exec(type = SaveAsync)]
    async fn send(self, id: i64) {
        let _ = id;
    }
}

fn main() {}

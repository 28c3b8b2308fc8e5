use async_exec::*;

struct Mailer;

impl Mailer {
    #[async_exec(type = SaveAsync)]
    async fn send(&self, id: i64) {
        let _ = id;
    }
}

fn main() {
    let _ = Mailer.send(1);
}

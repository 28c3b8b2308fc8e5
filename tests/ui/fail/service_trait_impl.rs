use async_exec::*;

struct Mailer;

trait Sends {
    fn send(&self, id: i64);
}

#[async_exec]
impl Sends for Mailer {
    fn send(&self, id: i64) {
        let _ = id;
    }
}

fn main() {}

use async_exec::*;

struct Counter;

#[async_exec]
impl Counter {
    #[async_exec(type = SaveAsync)]
    async fn bump(&mut self, by: i64) {
        let _ = by;
    }
}

struct Mailer;

#[async_exec]
impl Mailer {
    #[async_exec(type = SaveAsync)]
    async fn send(self, id: i64) {
        let _ = id;
    }
}

struct Store<T>(T);

#[async_exec]
impl<T: Send + Sync + 'static> Store<T> {
    #[async_exec(type = SaveAsync)]
    async fn save(&self, id: i64) {
        let _ = id;
    }
}

struct Exporter;

#[async_exec]
impl Exporter {
    #[async_exec(type = SaveAsync)]
    async fn export<T: serde::Serialize>(&self, rows: Vec<i64>) {
        let _ = rows;
    }
}

struct Pager;

trait Sends {
    fn send(&self, id: i64);
}

#[async_exec]
impl Sends for Pager {
    fn send(&self, id: i64) {
        let _ = id;
    }
}

struct Reports;

#[async_exec]
impl Reports {
    #[async_exec(type = SaveAsync)]
    async fn build(month: u32) {
        let _ = month;
    }
}

struct Notifier;

#[async_exec(type = SaveAsync)]
impl Notifier {
    #[async_exec(type = SaveAsync)]
    async fn notify(&self, id: i64) {
        let _ = id;
    }
}

fn main() {}

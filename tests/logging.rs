//! What the runtime logs for people (issue 8, item 10): a request going dead is an ERROR.

#[macro_use]
mod common;

use std::io::Write;
use std::sync::{Arc, Mutex};

use async_exec::{async_exec, Status};
use common::{Kind, TestDb};

#[async_exec(type = SaveAsync, max_attempts = 1)]
async fn fails_for_good(label: String) -> Result<(), String> {
    Err(format!("{label}: the mail server refused it"))
}

/// Log lines, written by a `fmt` subscriber.
#[derive(Clone, Default)]
struct Captured(Arc<Mutex<Vec<u8>>>);

impl Write for Captured {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(buf);
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl Captured {
    fn text(&self) -> String {
        String::from_utf8_lossy(&self.0.lock().unwrap()).into_owned()
    }
}

#[tokio::test]
async fn a_request_going_dead_is_logged_at_error() {
    let captured = Captured::default();
    let writer = captured.clone();
    let subscriber = tracing_subscriber::fmt()
        .with_ansi(false)
        .with_max_level(tracing::Level::INFO)
        .with_writer(move || writer.clone())
        .finish();
    let _guard = tracing::subscriber::set_default(subscriber);

    let db = TestDb::new(Kind::Sqlite).await;
    let rt = db.builder().start().await.unwrap();
    let id = fails_for_good("welcome".into())
        .on(&rt)
        .await
        .unwrap()
        .id
        .unwrap();
    common::wait_for(|| {
        let rt = rt.clone();
        async move { rt.get(id).await.unwrap().unwrap().status == Status::Dead }
    })
    .await;
    rt.shutdown().await.unwrap();
    let logged = captured.text();
    let line = logged
        .lines()
        .find(|l| l.contains("is dead"))
        .unwrap_or_else(|| panic!("no line says the request is dead:\n{logged}"));
    assert!(line.contains("ERROR"), "{line}");
    assert!(line.contains(&format!("request_id={id}")), "{line}");
    assert!(line.contains("the mail server refused it"), "{line}");
}

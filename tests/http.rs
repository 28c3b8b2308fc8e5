//! Issue 19: the routers of `async_exec::http` and the console's mount, served on a real
//! port and called over HTTP, on every backend: `GET /health` (200 with the report, 503
//! once the runtime is shut down; `console::health_router` answers the same), `GET
//! /metrics` with the runtime's own series, `/console/` redirected to `/console` with its
//! query string.
#![cfg(all(feature = "console", feature = "prometheus"))]
#![allow(clippy::extra_unused_type_parameters)] // every test takes the backend, used or not

#[macro_use]
mod common;

use std::net::SocketAddr;
use std::time::Duration;

use async_exec::{async_exec, console, http, Backend};
use axum::Router;
use common::TestDb;
use serde_json::Value;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

#[async_exec(type = SaveAsync, name = "http::job")]
async fn job(n: i64) {
    let _ = n;
}

/// Serves `app` on a free loopback port.
async fn serve(app: Router) -> SocketAddr {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        axum::serve(
            listener,
            app.into_make_service_with_connect_info::<SocketAddr>(),
        )
        .await
        .unwrap()
    });
    addr
}

/// What one `GET` answered: the status, the headers (lower case) and the body.
struct Answer {
    status: u16,
    head: String,
    body: String,
}

impl Answer {
    fn header(&self, name: &str) -> Option<&str> {
        self.head.lines().find_map(|line| {
            let (key, value) = line.split_once(':')?;
            key.eq_ignore_ascii_case(name).then(|| value.trim())
        })
    }
}

/// `GET path` over HTTP/1.1 (the body read to the connection's close).
async fn get(addr: SocketAddr, path: &str) -> Answer {
    let mut stream = tokio::net::TcpStream::connect(addr).await.unwrap();
    let request = format!("GET {path} HTTP/1.1\r\nhost: {addr}\r\nconnection: close\r\n\r\n");
    stream.write_all(request.as_bytes()).await.unwrap();
    let mut answer = String::new();
    tokio::time::timeout(Duration::from_secs(10), stream.read_to_string(&mut answer))
        .await
        .expect("an answer within 10 s")
        .unwrap();
    let (head, body) = answer.split_once("\r\n\r\n").expect("headers");
    let status = head.split_whitespace().nth(1).unwrap().parse().unwrap();
    let chunked = head
        .to_ascii_lowercase()
        .contains("transfer-encoding: chunked");
    let body = if chunked {
        let mut out = String::new();
        let mut rest = body;
        loop {
            let (size, tail) = rest.split_once("\r\n").unwrap();
            let size = usize::from_str_radix(size.trim(), 16).unwrap();
            if size == 0 {
                break out;
            }
            out.push_str(&tail[..size]);
            rest = &tail[size + 2..];
        }
    } else {
        body.to_string()
    };
    Answer {
        status,
        head: head.to_string(),
        body,
    }
}

async fn health_is_served_without_the_console<DB: Backend>(db: TestDb) {
    let rt = db.builder().start().await.unwrap();
    let addr = serve(http::health_router(&rt)).await;
    let ok = get(addr, "/health").await;
    assert_eq!(ok.status, 200, "{}", ok.body);
    assert_eq!(ok.header("cache-control"), Some("no-store"));
    let report: Value = serde_json::from_str(&ok.body).unwrap();
    assert_eq!(report["status"], "ok", "{report}");
    assert_eq!(report["application"], "tests");
    assert_eq!(report["store"]["reachable"], true);
    // The console's name for it is the same router.
    let again = serve(console::health_router(&rt)).await;
    let report_again: Value = serde_json::from_str(&get(again, "/health").await.body).unwrap();
    assert_eq!(report_again["instance"], report["instance"]);

    rt.shutdown().await.unwrap();
    let down = get(addr, "/health").await;
    assert_eq!(down.status, 503, "{}", down.body);
    let report: Value = serde_json::from_str(&down.body).unwrap();
    assert_eq!(
        (&report["status"], &report["shut_down"]),
        (&"down".into(), &true.into())
    );
}

async fn metrics_show_the_runtime<DB: Backend>(db: TestDb) {
    let metrics = http::metrics_router().unwrap();
    // Asked again (another backend's test in this binary, or the application twice):
    // the same recorder, no error.
    let again = http::metrics_router().unwrap();
    let rt = db.builder().start().await.unwrap();
    for n in 0..3 {
        job(n).on(&rt).await.unwrap();
    }
    rt.wait_idle().await;
    let addr = serve(metrics).await;
    let answer = get(addr, "/metrics").await;
    assert_eq!(answer.status, 200);
    assert!(
        answer
            .header("content-type")
            .is_some_and(|t| t.starts_with("text/plain; version=0.0.4")),
        "{}",
        answer.head
    );
    let line = |name: &str| {
        answer
            .body
            .lines()
            .find(|l| {
                l.starts_with(name)
                    && l.contains("executor=\"http::job\"")
                    && !l.contains("outcome=\"failure\"")
                    && !l.contains("outcome=\"snoozed\"")
            })
            .map(str::to_string)
    };
    let submitted = line("async_exec_submitted_total{").unwrap_or_else(|| {
        panic!(
            "no async_exec_submitted_total of http::job:\n{}",
            answer.body
        )
    });
    let count: f64 = submitted.rsplit(' ').next().unwrap().parse().unwrap();
    assert!(count >= 3.0, "{submitted}");
    let finished = line("async_exec_finished_total{").expect("finished_total");
    assert!(finished.contains("outcome=\"success\""), "{finished}");
    let count: f64 = finished.rsplit(' ').next().unwrap().parse().unwrap();
    assert!(count >= 3.0, "{finished}");
    assert!(
        line("async_exec_duration_seconds").is_some(),
        "{}",
        answer.body
    );
    let served_again = serve(again).await;
    assert!(get(served_again, "/metrics")
        .await
        .body
        .contains("async_exec_submitted_total"));
    rt.shutdown().await.unwrap();
}

async fn console_slash_redirects<DB: Backend>(db: TestDb) {
    let rt = db.builder().start().await.unwrap();
    let config = console::ConsoleConfig::new().listen("127.0.0.1:0".parse().unwrap());
    let console = console::router(&rt, config).unwrap();
    let addr = serve(Router::new().merge(console::mount("/console", console))).await;

    let plain = get(addr, "/console/").await;
    assert_eq!(plain.status, 308, "{}", plain.head);
    assert_eq!(plain.header("location"), Some("/console"));
    let query = get(addr, "/console/?status=dead&executor=a%20b").await;
    assert_eq!(query.status, 308, "{}", query.head);
    assert_eq!(
        query.header("location"),
        Some("/console?status=dead&executor=a%20b")
    );
    // Where it leads is the console, as are the pages under it.
    let console_root = get(addr, "/console?status=dead").await;
    assert!(
        matches!(console_root.status, 200 | 303),
        "{}",
        console_root.head
    );
    assert_eq!(get(addr, "/console/login").await.status, 200);
    assert_eq!(get(addr, "/console/nothing-here").await.status, 404);

    // Nested in an application that is itself nested, the redirect keeps the outer path.
    let console = console::router(
        &rt,
        console::ConsoleConfig::new().listen("127.0.0.1:0".parse().unwrap()),
    )
    .unwrap();
    let outer = Router::new().nest("/admin", console::mount("/ops", console));
    let addr = serve(outer).await;
    let nested = get(addr, "/admin/ops/?a=1").await;
    assert_eq!(nested.status, 308, "{}", nested.head);
    assert_eq!(nested.header("location"), Some("/admin/ops?a=1"));
    rt.shutdown().await.unwrap();
}

backend_suite!(
    health_is_served_without_the_console,
    metrics_show_the_runtime,
    console_slash_redirects
);

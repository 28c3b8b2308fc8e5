//! `service --self-check`: the service calls itself over HTTP (a few lines of HTTP/1.1 on
//! a TCP stream, so that the example needs no HTTP client), then asks itself to stop with
//! SIGTERM, as an orchestrator would.

use std::net::SocketAddr;
use std::time::Duration;

use anyhow::{bail, ensure, Context};
use serde_json::Value;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// Whether to check: `--self-check`, or `SERVICE_SELF_CHECK=1` (how `tests/service.rs`
/// asks, where the arguments are the test harness's).
pub fn asked() -> bool {
    std::env::args().any(|a| a == "--self-check")
        || std::env::var("SERVICE_SELF_CHECK").is_ok_and(|v| v == "1")
}

/// Creates an invoice, waits until its mail went out, checks `/health`, `/metrics` and
/// `/console`, then sends this process SIGTERM (also when a check failed, so that the
/// service stops and says why).
pub async fn run(addr: SocketAddr) -> anyhow::Result<()> {
    let checked = check(addr).await;
    let pid = std::process::id().to_string();
    let sent = tokio::process::Command::new("kill")
        .args(["-TERM", &pid])
        .status()
        .await?;
    ensure!(sent.success(), "kill -TERM {pid} failed");
    println!("self-check: SIGTERM sent");
    checked
}

async fn check(addr: SocketAddr) -> anyhow::Result<()> {
    let (status, body) = call(
        addr,
        "POST",
        "/invoices",
        Some(r#"{"email":"ada@example.com","cents":4200}"#),
    )
    .await?;
    ensure!(status == 201, "POST /invoices answered {status}: {body}");
    let id = serde_json::from_str::<Value>(&body)?["id"]
        .as_i64()
        .context("POST /invoices answered no id")?;
    println!("self-check: invoice {id} created");

    let mut mailed = false;
    for _ in 0..200 {
        let (status, body) = call(addr, "GET", &format!("/invoices/{id}"), None).await?;
        ensure!(
            status == 200,
            "GET /invoices/{id} answered {status}: {body}"
        );
        if serde_json::from_str::<Value>(&body)?["mailed"] == true {
            mailed = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    ensure!(mailed, "invoice {id} was not mailed within 10 s");
    println!("self-check: invoice {id} mailed");

    let (status, body) = call(addr, "GET", "/health", None).await?;
    ensure!(status == 200, "GET /health answered {status}: {body}");
    ensure!(
        serde_json::from_str::<Value>(&body)?["status"] == "ok",
        "GET /health: {body}"
    );
    let (status, body) = call(addr, "GET", "/metrics", None).await?;
    ensure!(status == 200, "GET /metrics answered {status}");
    let mailed_ok = body
        .lines()
        .find(|l| {
            l.starts_with("async_exec_finished_total{")
                && l.contains("mail_invoice")
                && l.contains("outcome=\"success\"")
        })
        .with_context(|| format!("GET /metrics has no success of mail_invoice:\n{body}"))?;
    ensure!(mailed_ok.ends_with(" 1"), "{mailed_ok}");
    let (status, _) = call(addr, "GET", "/console/login", None).await?;
    ensure!(status == 200, "GET /console/login answered {status}");
    println!("self-check: /health, /metrics and /console answer");
    Ok(())
}

/// Fails unless the shutdown left nothing behind.
pub fn clean(report: &async_exec::ShutdownReport) -> anyhow::Result<()> {
    if !report.finished || report.unwritten > 0 || report.unstopped > 0 {
        bail!("the shutdown was not clean: {report:?}");
    }
    Ok(())
}

/// One HTTP/1.1 request; returns the status and the body.
async fn call(
    addr: SocketAddr,
    method: &str,
    path: &str,
    json: Option<&str>,
) -> anyhow::Result<(u16, String)> {
    let mut stream = tokio::net::TcpStream::connect(addr).await?;
    let body = json.unwrap_or("");
    let request = format!(
        "{method} {path} HTTP/1.1\r\nhost: {addr}\r\nconnection: close\r\n\
         content-type: application/json\r\ncontent-length: {}\r\n\r\n{body}",
        body.len()
    );
    stream.write_all(request.as_bytes()).await?;
    let mut answer = String::new();
    tokio::time::timeout(Duration::from_secs(10), stream.read_to_string(&mut answer))
        .await
        .context("no answer within 10 s")??;
    let (head, body) = answer
        .split_once("\r\n\r\n")
        .context("an answer without headers")?;
    let status = head
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .context("an answer without a status")?;
    let body = if head
        .to_ascii_lowercase()
        .contains("transfer-encoding: chunked")
    {
        dechunk(body)?
    } else {
        body.to_string()
    };
    Ok((status, body))
}

/// A chunked body, joined.
fn dechunk(mut body: &str) -> anyhow::Result<String> {
    let mut out = String::new();
    loop {
        let (size, rest) = body.split_once("\r\n").context("a chunk without a size")?;
        let size = usize::from_str_radix(size.trim(), 16)?;
        if size == 0 {
            return Ok(out);
        }
        out.push_str(rest.get(..size).context("a short chunk")?);
        body = rest.get(size + 2..).context("a chunk without its end")?;
    }
}

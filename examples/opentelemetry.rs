//! One OpenTelemetry trace from an HTTP request, through the commit of its transaction,
//! to the body running on another instance (feature `opentelemetry`).
//!
//! Two runtimes share one SQLite file: `web` only takes calls (`run_workers(false)`), as
//! an HTTP tier does; `worker` runs them. A request to `POST /orders` carries a W3C
//! `traceparent` header, as one from a gateway or a browser's instrumentation would; the
//! handler's span continues that trace, and the body's span on the worker is a child of
//! the handler's. Every span is written to stdout by `opentelemetry-stdout` as it ends;
//! the example then prints the trace as a tree, and fails if it is not one trace.
//!
//!     cargo run --example opentelemetry --features opentelemetry
//!
//! To send the spans to a collector instead, give the tracer provider an OTLP exporter
//! (the `opentelemetry-otlp` crate) in place of the stdout one: nothing else changes.

use std::collections::HashMap;
use std::time::Duration;

use async_exec::{async_exec, Runtime, Sqlite, Tx};
use axum::extract::State;
use axum::http::{HeaderMap, Request, StatusCode};
use axum::routing::post;
use axum::Router;
use opentelemetry::propagation::TextMapPropagator;
use opentelemetry::trace::TracerProvider as _;
use opentelemetry_sdk::propagation::TraceContextPropagator;
use opentelemetry_sdk::trace::{InMemorySpanExporter, SdkTracerProvider};
use tower::ServiceExt;
use tracing::{Instrument, Level};
use tracing_opentelemetry::OpenTelemetrySpanExt;
use tracing_subscriber::filter::Targets;
use tracing_subscriber::layer::SubscriberExt;

/// Runs on the worker, after the commit, in a span that is a child of the handler's.
#[async_exec(type = SaveAsync, remark = "send the order confirmation")]
async fn send_confirmation(order_id: i64) {
    tracing::info!(order_id, "confirmation sent");
}

/// `POST /orders`: writes the order and the call in one transaction.
async fn create_order(State(web): State<Runtime>, headers: HeaderMap) -> StatusCode {
    // The incoming W3C context, as an HTTP middleware would extract it.
    let carrier: HashMap<String, String> = headers
        .iter()
        .filter_map(|(name, value)| Some((name.to_string(), value.to_str().ok()?.to_string())))
        .collect();
    let span = tracing::info_span!("POST /orders", otel.kind = "server");
    let _ = span.set_parent(TraceContextPropagator::new().extract(&carrier));
    async move {
        let mut tx: Tx<Sqlite> = web.begin().await.expect("begin");
        sqlx::query("INSERT INTO orders (id) VALUES (42)")
            .execute(tx.conn())
            .await
            .expect("insert the order");
        send_confirmation(42)
            .within(&mut tx)
            .await
            .expect("record the call");
        tx.commit().await.expect("commit");
        StatusCode::CREATED
    }
    .instrument(span)
    .await
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    // Spans go to stdout as they end, and to memory for the summary at the end.
    let memory = InMemorySpanExporter::default();
    let provider = SdkTracerProvider::builder()
        .with_simple_exporter(opentelemetry_stdout::SpanExporter::default())
        .with_simple_exporter(memory.clone())
        .build();
    // This example's spans and async-exec's; not sqlx's statements.
    let only = Targets::new()
        .with_target("opentelemetry", Level::INFO)
        .with_target(async_exec::LOG_TARGET, Level::INFO);
    tracing::subscriber::set_global_default(
        tracing_subscriber::registry()
            .with(tracing_opentelemetry::layer().with_tracer(provider.tracer("shop")))
            .with(only),
    )?;

    let dir = tempfile::tempdir()?;
    let url = format!("sqlite:{}", dir.path().join("shop.db").display());
    let web = Runtime::builder()
        .database_url(&url)
        .run_workers(false)
        .install_global(false)
        .start()
        .await?;
    let worker = Runtime::builder()
        .database_url(&url)
        .install_global(false)
        .poll_interval(Duration::from_millis(100))
        .start()
        .await?;
    let mut tx: Tx<Sqlite> = web.begin().await?;
    sqlx::query("CREATE TABLE orders (id INTEGER PRIMARY KEY)")
        .execute(tx.conn())
        .await?;
    tx.commit().await?;

    let incoming = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";
    let app = Router::new()
        .route("/orders", post(create_order))
        .with_state(web.clone());
    let response = app
        .oneshot(
            Request::post("/orders")
                .header("traceparent", incoming)
                .body(axum::body::Body::empty())?,
        )
        .await?;
    println!(
        "POST /orders with traceparent {incoming}: {}",
        response.status()
    );

    // The worker finds the request by polling (the web tier runs no workers here).
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    while memory
        .get_finished_spans()?
        .iter()
        .all(|s| s.name != "async_exec")
    {
        anyhow::ensure!(
            tokio::time::Instant::now() < deadline,
            "the body did not run"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    web.shutdown().await?;
    worker.shutdown().await?;
    provider.force_flush()?;

    let spans = memory.get_finished_spans()?;
    println!("\nthe trace, as exported:");
    for span in &spans {
        println!(
            "  trace {}  span {}  parent {}  {}",
            span.span_context.trace_id(),
            span.span_context.span_id(),
            span.parent_span_id,
            span.name
        );
    }
    let http = spans
        .iter()
        .find(|s| s.name == "POST /orders")
        .expect("the handler's span");
    let body = spans
        .iter()
        .find(|s| s.name == "async_exec")
        .expect("the body's span");
    anyhow::ensure!(
        http.span_context.trace_id().to_string() == "4bf92f3577b34da6a3ce929d0e0e4736",
        "the handler's span continues the incoming trace"
    );
    anyhow::ensure!(
        body.span_context.trace_id() == http.span_context.trace_id()
            && body.parent_span_id == http.span_context.span_id(),
        "the body's span is a child of the handler's, in the same trace"
    );
    println!(
        "\none trace: the gateway's span -> POST /orders (web) -> async_exec {} (worker)",
        body.attributes
            .iter()
            .find(|kv| kv.key.as_str() == "executor")
            .map(|kv| kv.value.to_string())
            .unwrap_or_default()
    );
    provider.shutdown()?;
    Ok(())
}

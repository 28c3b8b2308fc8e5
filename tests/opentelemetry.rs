//! Issue 21: OpenTelemetry (feature `opentelemetry`). A call made in a span that has an
//! OpenTelemetry context stores the span's W3C `traceparent` with its request, and the
//! execution span becomes its child in the same trace, on whichever instance and attempt
//! runs the body (or links to it, with `TracePropagation::Link`). The spans are read back
//! from an in-memory exporter behind `tracing-opentelemetry`'s layer.
#![allow(clippy::extra_unused_type_parameters)] // every test takes the backend, used or not

#[macro_use]
mod common;

use std::sync::OnceLock;
use std::time::Duration;

use async_exec::{async_exec, Backend, Context, Status, TracePropagation};
use common::TestDb;
use opentelemetry::trace::{SpanId, TraceContextExt, TraceId, TracerProvider as _};
use opentelemetry::Value;
use opentelemetry_sdk::trace::{InMemorySpanExporter, SdkTracerProvider, SpanData};
use tracing::Instrument;
use tracing_opentelemetry::OpenTelemetrySpanExt;
use tracing_subscriber::layer::SubscriberExt;

/// Every span this test binary ends, exported as it ends.
fn exporter() -> &'static InMemorySpanExporter {
    static EXPORTER: OnceLock<InMemorySpanExporter> = OnceLock::new();
    EXPORTER.get_or_init(|| {
        let exporter = InMemorySpanExporter::default();
        let provider = SdkTracerProvider::builder()
            .with_simple_exporter(exporter.clone())
            .build();
        let subscriber = tracing_subscriber::registry()
            .with(tracing_opentelemetry::layer().with_tracer(provider.tracer("tests")));
        tracing::subscriber::set_global_default(subscriber).expect("one global subscriber");
        exporter
    })
}

/// Fails its first attempt, so that a second one (a retry, claimed from the store) runs.
#[async_exec(type = SaveAsync, max_attempts = 3)]
async fn ship(order: i64, ctx: Context) -> Result<(), String> {
    if ctx.attempt() == 1 {
        return Err(format!("carrier busy for order {order}"));
    }
    Ok(())
}

#[async_exec(type = SaveAsync)]
async fn receipt(order: i64) {
    let _ = order;
}

/// The ids of the execution spans (`async_exec`) of request `id`, by attempt, once
/// `attempts` of them have ended; filtered by `trace` first, so that the other backends'
/// tests (the same ids in other databases) are not counted.
async fn executions(trace: impl Fn(&SpanData) -> bool, id: i64, attempts: usize) -> Vec<SpanData> {
    for _ in 0..1_000 {
        let mut spans: Vec<SpanData> = exporter()
            .get_finished_spans()
            .unwrap()
            .into_iter()
            .filter(|span| span.name == "async_exec" && trace(span))
            .filter(|span| {
                span.attributes
                    .iter()
                    .any(|kv| kv.key.as_str() == "request_id" && kv.value == Value::I64(id))
            })
            .collect();
        if spans.len() >= attempts {
            spans.sort_by_key(|span| span.start_time);
            return spans;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    panic!("request {id}: fewer than {attempts} execution spans ended");
}

async fn finished(rt: &async_exec::Runtime, id: i64) {
    for _ in 0..1_000 {
        let status = rt.get(id).await.unwrap().map(|r| r.status);
        if matches!(status, Some(Status::Success | Status::Dead) | None) {
            return;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    panic!("request {id} did not finish");
}

/// The OpenTelemetry ids of a `tracing` span.
fn ids_of(span: &tracing::Span) -> (TraceId, SpanId) {
    let context = span.context();
    let span_context = context.span().span_context().clone();
    assert!(
        span_context.is_valid(),
        "the caller's span has an OpenTelemetry context"
    );
    (span_context.trace_id(), span_context.span_id())
}

/// One trace from the caller's span (an HTTP request's, on a submit-only instance) through
/// the commit to every attempt of the body on another instance: the failed first attempt
/// and the retry the sweep claimed from the store are both children of the caller's span.
async fn the_execution_is_a_child_of_the_callers_span_on_another_instance<DB: Backend>(db: TestDb) {
    exporter();
    let web = db.builder().run_workers(false).start().await.unwrap();
    let retried = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
    let seen = retried.clone();
    let worker = db
        .builder()
        .on_retry(move |event| seen.lock().unwrap().push(event.traceparent.clone()))
        .poll_interval(Duration::from_millis(50))
        .retry_interval(Duration::from_millis(50))
        .start()
        .await
        .unwrap();
    let request = tracing::info_span!("POST /orders");
    let (trace, caller) = ids_of(&request);
    let id = async {
        let mut tx = web.begin::<DB>().await.unwrap();
        let id = ship(42).within(&mut tx).await.unwrap().id.unwrap();
        tx.commit().await.unwrap();
        id
    }
    .instrument(request.clone())
    .await;
    drop(request);
    finished(&worker, id).await;
    let spans = executions(|span| span.span_context.trace_id() == trace, id, 2).await;
    assert_eq!(spans.len(), 2, "two attempts, both in the caller's trace");
    for span in &spans {
        assert_eq!(span.parent_span_id, caller, "a child of the caller's span");
        assert!(
            span.parent_span_is_remote,
            "its parent came from stored text"
        );
    }
    assert_ne!(
        spans[0].span_context.span_id(),
        spans[1].span_context.span_id()
    );
    // Listeners get the caller's traceparent: `00-<trace>-<span>-<flags>`.
    let traceparent = format!("00-{trace}-{caller}-01");
    common::wait_for(|| {
        let retried = retried.clone();
        async move { !retried.lock().unwrap().is_empty() }
    })
    .await;
    assert_eq!(*retried.lock().unwrap(), vec![Some(traceparent)]);
    web.shutdown().await.unwrap();
    worker.shutdown().await.unwrap();
}

/// With `TracePropagation::Link` the execution starts a trace of its own, with a link to
/// the caller's span.
async fn the_execution_links_to_the_callers_span_when_asked<DB: Backend>(db: TestDb) {
    exporter();
    let rt = db
        .builder()
        .trace_propagation(TracePropagation::Link)
        .start()
        .await
        .unwrap();
    let request = tracing::info_span!("POST /receipts");
    let (trace, caller) = ids_of(&request);
    let id = async { receipt(7).on(&rt).await.unwrap().id.unwrap() }
        .instrument(request.clone())
        .await;
    drop(request);
    let linked = |span: &SpanData| {
        span.links
            .links
            .iter()
            .any(|link| link.span_context.trace_id() == trace)
    };
    let spans = executions(linked, id, 1).await;
    let link = &spans[0].links.links[0];
    assert_eq!(link.span_context.span_id(), caller);
    assert_ne!(
        spans[0].span_context.trace_id(),
        trace,
        "a trace of its own"
    );
    assert_eq!(spans[0].parent_span_id, SpanId::INVALID, "a root");
    rt.shutdown().await.unwrap();
}

/// A record whose stored context is not valid W3C text (written by hand, or altered)
/// runs all the same, in a root span; and a stored span id is not taken for a span of
/// this process (it was another process's): before the fix, the execution followed
/// whatever live span here held that id, and OpenTelemetry linked the two.
async fn a_stored_context_from_elsewhere_is_not_taken_for_a_local_span<DB: Backend>(db: TestDb) {
    exporter();
    let rt = db
        .builder()
        .poll_interval(Duration::from_millis(50))
        .start()
        .await
        .unwrap();
    // A live span of this process whose id the stored record happens to name.
    let bystander = tracing::info_span!("bystander");
    let (bystander_trace, _) = ids_of(&bystander);
    let stored_id = bystander.id().unwrap().into_u64();
    let receipt = rt
        .executor_infos()
        .into_iter()
        .find(|e| e.name.ends_with("receipt"))
        .unwrap();
    let id = db
        .insert_raw(&receipt.name, &receipt.sign, r#"{"order":9}"#)
        .await;
    db.exec(&format!(
        "UPDATE async_req SET trace_json = '{{\"span\":{stored_id},\"traceparent\":\"00-zz-not-a-trace\"}}' WHERE id = {id}"
    ))
    .await;
    finished(&rt, id).await;
    // The span ends before the record is finished; other backends' requests may have
    // the same id, so every execution span of that id is looked at.
    let spans = executions(|span| span.parent_span_id == SpanId::INVALID, id, 1).await;
    for span in &spans {
        assert!(
            !span
                .links
                .links
                .iter()
                .any(|link| link.span_context.trace_id() == bystander_trace),
            "the execution is not linked to an unrelated span of this process"
        );
    }
    drop(bystander);
    rt.shutdown().await.unwrap();
}

backend_suite!(
    the_execution_is_a_child_of_the_callers_span_on_another_instance,
    the_execution_links_to_the_callers_span_when_asked,
    a_stored_context_from_elsewhere_is_not_taken_for_a_local_span,
);

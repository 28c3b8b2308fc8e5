//! Issue 8 item 11: attributes on an annotated fn that concern its body land on the body.
//! A span of `#[tracing::instrument]` is entered while the body runs (on a worker, after
//! the commit), not around the call.

#[macro_use]
mod common;

use std::sync::OnceLock;

use async_exec::{async_exec, Backend, Context, Data, Tx};
use common::{Probe, TestDb};

#[async_exec(type = SaveAsync)]
#[tracing::instrument(skip(probe, ctx), fields(label = %label))]
async fn traced(label: String, probe: Data<Probe>, ctx: Context) {
    let span = tracing::Span::current();
    let name = span.metadata().map_or("(no span)", |m| m.name());
    probe.record(&format!("{label} in {name}"), ctx.attempt());
}

#[async_exec(type = SaveAsync)]
#[tracing::instrument(name = "mail.send", skip_all)]
async fn traced_named(label: String, probe: Data<Probe>, ctx: Context) {
    let span = tracing::Span::current();
    let name = span.metadata().map_or("(no span)", |m| m.name());
    probe.record(&format!("{label} in {name}"), ctx.attempt());
}

/// Spans are tracked for `Span::current()` on every thread (the bodies run on workers).
fn install_subscriber() {
    static INSTALLED: OnceLock<()> = OnceLock::new();
    INSTALLED.get_or_init(|| {
        tracing::subscriber::set_global_default(tracing_subscriber::registry())
            .expect("no other global subscriber in this test binary");
    });
}

async fn instrument_spans_the_body_when_it_runs<DB: Backend>(db: TestDb) {
    install_subscriber();
    let rt = db.builder().start().await.unwrap();
    let probe = rt.data::<Probe>().unwrap();
    let mut tx: Tx<DB> = rt.begin().await.unwrap();
    traced("a".into()).within(&mut tx).await.unwrap();
    traced_named("b".into()).within(&mut tx).await.unwrap();
    tx.commit().await.unwrap();
    probe.wait_runs("a in traced", 1).await;
    probe.wait_runs("b in mail.send", 1).await;
    rt.shutdown().await.unwrap();
}

backend_suite!(instrument_spans_the_body_when_it_runs);

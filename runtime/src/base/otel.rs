//! The caller's OpenTelemetry trace context (feature `opentelemetry`): read from the
//! current span as a W3C `traceparent` (and `tracestate`) when a call is made, and made
//! the parent of the execution span, or a link from it, when the body runs, on whichever
//! instance and attempt that is.
//!
//! The context is taken from the `tracing` span the call is made in (through
//! `tracing-opentelemetry`'s layer), else from OpenTelemetry's own current context. It is
//! written with the W3C propagator whatever propagator the application installed
//! globally: the stored text is read back by other instances and other versions, so its
//! format must not depend on a process's configuration.

use std::collections::HashMap;

use opentelemetry::propagation::TextMapPropagator;
use opentelemetry::trace::TraceContextExt;
use opentelemetry_sdk::propagation::TraceContextPropagator;
use tracing_opentelemetry::OpenTelemetrySpanExt;

const TRACEPARENT: &str = "traceparent";
const TRACESTATE: &str = "tracestate";

/// The W3C `traceparent` and `tracestate` (when not empty) of the current context; `None`
/// outside a sampled or unsampled but valid OpenTelemetry span.
pub(crate) fn capture() -> Option<(String, Option<String>)> {
    let mut context = tracing::Span::current().context();
    if !context.span().span_context().is_valid() {
        context = opentelemetry::Context::current();
    }
    if !context.span().span_context().is_valid() {
        return None;
    }
    let mut carrier = HashMap::new();
    TraceContextPropagator::new().inject_context(&context, &mut carrier);
    let traceparent = carrier.remove(TRACEPARENT)?;
    let tracestate = carrier.remove(TRACESTATE).filter(|state| !state.is_empty());
    Some((traceparent, tracestate))
}

/// How an execution span is related to the caller's.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Relation {
    /// The caller's span is its parent.
    Child,
    /// It links to the caller's span.
    Link,
}

/// Makes the stored context the parent of `span`, or adds a link to it. Text that is not
/// a valid `traceparent` (a record written by hand, or altered) is ignored with a debug
/// event: the body runs all the same.
pub(crate) fn attach(
    span: &tracing::Span,
    traceparent: &str,
    tracestate: Option<&str>,
    relation: Relation,
) {
    let mut carrier = HashMap::with_capacity(2);
    carrier.insert(TRACEPARENT.to_string(), traceparent.to_string());
    if let Some(state) = tracestate {
        carrier.insert(TRACESTATE.to_string(), state.to_string());
    }
    let context = TraceContextPropagator::new().extract(&carrier);
    let caller = context.span().span_context().clone();
    if !caller.is_valid() {
        crate::log::debug!(
            traceparent,
            "the stored traceparent is not valid W3C trace context; the execution span is not linked to the caller's"
        );
        return;
    }
    match relation {
        Relation::Child => {
            // Fails only when no OpenTelemetry layer is installed or the span is disabled:
            // then there is no OpenTelemetry span to give a parent.
            let _ = span.set_parent(context);
        }
        Relation::Link => span.add_link(caller),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nothing_is_captured_outside_an_opentelemetry_span() {
        assert_eq!(capture(), None);
    }

    #[test]
    fn hostile_text_is_ignored() {
        let span = tracing::Span::none();
        for text in [
            "",
            "00-zz-zz-01",
            &"0".repeat(100_000),
            "00-00000000000000000000000000000000-0000000000000000-01",
        ] {
            attach(&span, text, Some("\u{0}"), Relation::Child);
            attach(&span, text, None, Relation::Link);
        }
    }
}

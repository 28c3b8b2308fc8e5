//! The caller's tracing context, carried with the record and restored around execution.
//!
//! Two things travel: the id of the caller's current `tracing` span (the execution span
//! records it as `caller_span` and, in the same process, `follows_from` it), and the
//! caller's *baggage*: a few string fields such as a tenant or a W3C `traceparent`, set with
//! [`with_baggage`] around the code that makes calls and read back in the body with
//! [`baggage`] or [`Context::baggage`](crate::Context::baggage). With the `opentelemetry`
//! feature, a third: the caller's OpenTelemetry context as W3C `traceparent` and
//! `tracestate`, which the execution span takes as its parent (see [`TracePropagation`]).

use std::future::Future;

use serde::{Deserialize, Serialize};

use crate::base::text;

/// The most bytes of one baggage key or value stored in `trace_json`; the JSON as a whole
/// is held to [`text::MAX_STORED_TEXT`] by leaving out the last fields.
const MAX_BAGGAGE_TEXT: usize = 1024;

tokio::task_local! {
    static BAGGAGE: Vec<(String, String)>;
}

/// Runs `future` with these baggage fields; calls made inside it carry them to their
/// executions, where the body's span records them and [`baggage`] returns them.
///
/// ```
/// # async fn demo() {
/// async_exec::with_baggage([("tenant", "acme")], async {
///     assert_eq!(async_exec::baggage("tenant").as_deref(), Some("acme"));
/// })
/// .await;
/// # }
/// ```
pub async fn with_baggage<K, V, F>(fields: impl IntoIterator<Item = (K, V)>, future: F) -> F::Output
where
    K: Into<String>,
    V: Into<String>,
    F: Future,
{
    let mut merged = current_baggage();
    for (key, value) in fields {
        let key = key.into();
        merged.retain(|(k, _)| *k != key);
        merged.push((key, value.into()));
    }
    BAGGAGE.scope(merged, future).await
}

/// A baggage field of the current task: set by [`with_baggage`] in the caller, or restored
/// from the record during an execution.
pub fn baggage(key: &str) -> Option<String> {
    BAGGAGE
        .try_with(|fields| {
            fields
                .iter()
                .find(|(k, _)| k == key)
                .map(|(_, v)| v.clone())
        })
        .ok()
        .flatten()
}

pub(crate) fn current_baggage() -> Vec<(String, String)> {
    BAGGAGE
        .try_with(|fields| fields.clone())
        .unwrap_or_default()
}

pub(crate) async fn scope_baggage<F: Future>(
    fields: Vec<(String, String)>,
    future: F,
) -> F::Output {
    BAGGAGE.scope(fields, future).await
}

/// The most bytes of a stored `tracestate` (the W3C limit is 512 for what a vendor must
/// propagate); a longer one is not stored.
const MAX_TRACESTATE: usize = 512;

/// How an execution's span relates to the OpenTelemetry span its call was made in
/// (feature `opentelemetry`; [`Builder::trace_propagation`](crate::Builder::trace_propagation)).
///
/// The caller's W3C `traceparent` is stored with the request whatever this says, so the
/// choice is made where the body runs and can change without touching stored requests;
/// the console shows the stored `traceparent` on a request's page.
///
/// ```
/// # async fn demo() -> async_exec::Result<()> {
/// use async_exec::{Runtime, TracePropagation};
/// // Each attempt its own trace, linked to the caller's (long-lived or fan-out work).
/// let rt = Runtime::builder().trace_propagation(TracePropagation::Link).start().await?;
/// # Ok(()) }
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub enum TracePropagation {
    /// The execution span is a child of the caller's span, in the caller's trace (the
    /// default): one trace from the HTTP request through the commit to every attempt.
    #[default]
    Child,
    /// The execution span starts a trace of its own with a link to the caller's span, as
    /// OpenTelemetry's messaging conventions suggest for work that outlives its caller
    /// by far or that one call fans out.
    Link,
    /// The execution span is not related to the caller's OpenTelemetry span.
    None,
}

/// What is stored in `trace_json`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct TraceContext {
    /// The caller's span id, if it was in one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) span: Option<u64>,
    /// The caller's baggage.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub(crate) baggage: Vec<(String, String)>,
    /// The caller's OpenTelemetry span as a W3C `traceparent` (feature `opentelemetry`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) traceparent: Option<String>,
    /// Its W3C `tracestate`, when not empty.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) tracestate: Option<String>,
    /// Captured in this process (not read from a record): only then does `span` name a
    /// span of this process's subscriber. A stored span id read elsewhere may name an
    /// unrelated live span there, which `follows_from` would relate the execution to.
    #[serde(skip)]
    pub(crate) local: bool,
}

impl TraceContext {
    /// Captures the current task's context; `None` when there is nothing to carry.
    pub(crate) fn capture() -> Option<TraceContext> {
        let span = tracing::Span::current().id().map(|id| id.into_u64());
        let baggage = current_baggage();
        let (traceparent, tracestate) = capture_opentelemetry();
        (span.is_some() || !baggage.is_empty() || traceparent.is_some()).then_some(TraceContext {
            span,
            baggage,
            traceparent,
            tracestate: tracestate.filter(|state| state.len() <= MAX_TRACESTATE),
            local: true,
        })
    }

    /// Relates `span` (an execution's) to the caller's OpenTelemetry span, as
    /// `propagation` says; nothing without the `opentelemetry` feature.
    #[cfg_attr(not(feature = "opentelemetry"), allow(unused_variables))]
    pub(crate) fn attach_to(&self, span: &tracing::Span, propagation: TracePropagation) {
        #[cfg(feature = "opentelemetry")]
        if let Some(traceparent) = &self.traceparent {
            use crate::base::otel::{attach, Relation};
            let relation = match propagation {
                TracePropagation::Child => Relation::Child,
                TracePropagation::Link => Relation::Link,
                TracePropagation::None => return,
            };
            attach(span, traceparent, self.tracestate.as_deref(), relation);
        }
    }

    /// The JSON stored in `trace_json`: keys and values sanitized and capped, and the
    /// last fields left out (with a warning) while it is longer than the stored text cap.
    pub(crate) fn to_json(&self) -> String {
        // Most contexts are small and clean: stored as they are, serialized once.
        let json = serde_json::to_string(self).expect("a trace context serializes");
        if json.len() <= text::MAX_STORED_TEXT && !json.contains("\\u0000") {
            return json;
        }
        let field = |text: &str| text::capped(&text::sanitized(text), MAX_BAGGAGE_TEXT);
        let mut stored = TraceContext {
            span: self.span,
            traceparent: self.traceparent.as_deref().map(field),
            tracestate: self.tracestate.as_deref().map(field),
            local: false,
            baggage: self
                .baggage
                .iter()
                .map(|(key, value)| (field(key), field(value)))
                .collect(),
        };
        loop {
            let json = serde_json::to_string(&stored).expect("a trace context serializes");
            if json.len() <= text::MAX_STORED_TEXT || stored.baggage.is_empty() {
                return json;
            }
            let (key, _) = stored.baggage.pop().expect("a field to leave out");
            crate::log::warn!(key = %crate::log::escaped(&key), max_bytes = text::MAX_STORED_TEXT,
                "baggage field not carried to the execution: the baggage is larger than async-exec stores");
        }
    }

    pub(crate) fn from_json(json: Option<&str>) -> TraceContext {
        json.and_then(|j| serde_json::from_str(j).ok())
            .unwrap_or_default()
    }

    pub(crate) fn baggage_field(&self) -> String {
        self.baggage
            .iter()
            .map(|(k, v)| format!("{k}={v}"))
            .collect::<Vec<_>>()
            .join(",")
    }
}

#[cfg(feature = "opentelemetry")]
fn capture_opentelemetry() -> (Option<String>, Option<String>) {
    match crate::base::otel::capture() {
        Some((traceparent, tracestate)) => (Some(traceparent), tracestate),
        None => (None, None),
    }
}

#[cfg(not(feature = "opentelemetry"))]
fn capture_opentelemetry() -> (Option<String>, Option<String>) {
    (None, None)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn context(baggage: &[(&str, &str)]) -> TraceContext {
        TraceContext {
            span: Some(7),
            baggage: baggage
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
            traceparent: Some("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01".into()),
            tracestate: None,
            local: false,
        }
    }

    #[test]
    fn a_small_clean_context_is_stored_as_it_is() {
        let trace = context(&[("tenant", "acme")]);
        let json = trace.to_json();
        assert_eq!(json, serde_json::to_string(&trace).unwrap());
        assert_eq!(TraceContext::from_json(Some(&json)), trace);
    }

    #[test]
    fn nul_is_replaced_and_large_baggage_capped_as_valid_json() {
        let huge = "v".repeat(100_000);
        let fields: Vec<(String, &str)> =
            (0..20).map(|i| (format!("k{i}"), huge.as_str())).collect();
        let mut trace = context(&[("tenant", "a\0b")]);
        trace
            .baggage
            .extend(fields.iter().map(|(k, v)| (k.clone(), v.to_string())));
        let json = trace.to_json();
        assert!(json.len() <= text::MAX_STORED_TEXT, "{} bytes", json.len());
        assert!(!json.contains("\\u0000"));
        let stored = TraceContext::from_json(Some(&json));
        assert_eq!(stored.span, Some(7));
        assert_eq!(
            stored.traceparent, trace.traceparent,
            "the traceparent is kept"
        );
        assert_eq!(stored.baggage[0], ("tenant".into(), "a\u{FFFD}b".into()));
        assert!(
            stored.baggage.len() > 1,
            "capped fields are kept while they fit"
        );
        assert!(stored.baggage.len() < 21, "the last fields are left out");
    }
}

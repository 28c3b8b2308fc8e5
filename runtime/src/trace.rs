//! The caller's tracing context, carried with the record and restored around execution.
//!
//! Two things travel: the id of the caller's current `tracing` span (the execution span
//! records it as `caller_span` and, in the same process, `follows_from` it), and the
//! caller's *baggage*: a few string fields such as a tenant or a W3C `traceparent`, set with
//! [`with_baggage`] around the code that makes calls and read back in the body with
//! [`baggage`] or [`Context::baggage`](crate::Context::baggage).

use std::future::Future;

use serde::{Deserialize, Serialize};

tokio::task_local! {
    static BAGGAGE: Vec<(String, String)>;
}

/// Runs `future` with these baggage fields; calls made inside it carry them to their
/// executions, where the body's span records them and [`baggage`] returns them.
///
/// ```
/// # async fn demo() {
/// async_exec_runtime::with_baggage([("tenant", "acme")], async {
///     assert_eq!(async_exec_runtime::baggage("tenant").as_deref(), Some("acme"));
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

/// What is stored in `trace_json`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct TraceContext {
    /// The caller's span id, if it was in one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) span: Option<u64>,
    /// The caller's baggage.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub(crate) baggage: Vec<(String, String)>,
}

impl TraceContext {
    /// Captures the current task's context; `None` when there is nothing to carry.
    pub(crate) fn capture() -> Option<TraceContext> {
        let span = tracing::Span::current().id().map(|id| id.into_u64());
        let baggage = current_baggage();
        (span.is_some() || !baggage.is_empty()).then_some(TraceContext { span, baggage })
    }

    pub(crate) fn to_json(&self) -> String {
        serde_json::to_string(self).expect("a trace context serializes")
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

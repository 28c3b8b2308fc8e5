//! Issue 19: `http::metrics_router()` when the process has another global metrics
//! recorder already: an error that says what to do, not a panic (a test binary of its own:
//! the recorder is global).
#![cfg(feature = "prometheus")]

#[test]
fn another_recorder_is_refused_with_what_to_do() {
    metrics::set_global_recorder(metrics::NoopRecorder).unwrap();
    let refused = async_exec::http::metrics_router().unwrap_err();
    assert!(
        matches!(refused, async_exec::Error::MetricsRecorder(_)),
        "{refused:?}"
    );
    let message = refused.to_string();
    assert!(
        message.contains("another global metrics recorder is installed already")
            && message.contains("serve that recorder's output at /metrics yourself"),
        "{message}"
    );
}

//! What the console checks on every request before its handler, and adds to every
//! answer: the `Host` it is asked under (against DNS rebinding), the size of a body, and
//! headers that keep answers out of caches and content sniffing.

use std::sync::Arc;

use axum::extract::{Request, State as Shared};
use axum::http::{header, HeaderValue, StatusCode};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};

use super::State;

/// The largest request body read (a login form, a JSON action): 16 KiB.
pub(crate) const MAX_BODY: usize = 16 * 1024;

/// The host part of a `Host` header (`[::1]:8080` → `[::1]`, `Example.com:80` →
/// `example.com`).
fn host_name(host: &str) -> String {
    let host = host.trim().to_ascii_lowercase();
    if host.starts_with('[') {
        return match host.find(']') {
            Some(end) => host[..=end].to_string(),
            None => host,
        };
    }
    match host.rsplit_once(':') {
        Some((name, port)) if port.chars().all(|c| c.is_ascii_digit()) => name.to_string(),
        _ => host,
    }
}

/// Whether the console answers to `host`.
fn host_allowed(state: &State, host: &str) -> bool {
    let name = host_name(host);
    let full = host.trim().to_ascii_lowercase();
    let listen = state.config.listen.map(|a| match a.ip() {
        std::net::IpAddr::V6(ip) => format!("[{ip}]"),
        ip => ip.to_string(),
    });
    ["localhost", "127.0.0.1", "[::1]"].contains(&name.as_str())
        || listen.as_deref() == Some(name.as_str())
        || state
            .config
            .hosts
            .iter()
            .any(|h| *h == full || host_name(h) == name && !h.contains(':'))
}

/// Refuses (421) a request whose `Host` the console does not answer to, on the open
/// loopback console and wherever [`super::ConsoleConfig::hosts`] names hosts. A request
/// without `Host` (HTTP/1.0, or sent in-process) passes: browsers always send one.
pub(crate) async fn check_host(
    Shared(state): Shared<Arc<State>>,
    request: Request,
    next: Next,
) -> Response {
    let checked = !state.login_required || !state.config.hosts.is_empty();
    if checked {
        let host = request
            .headers()
            .get(header::HOST)
            .map(|v| v.to_str().unwrap_or("\u{fffd}").to_string())
            .or_else(|| request.uri().authority().map(|a| a.to_string()));
        if let Some(host) = host.filter(|h| !host_allowed(&state, h)) {
            crate::log::warn!(host = ?crate::base::text::capped(&host, 100), "console: refused a request for another host");
            return (
                StatusCode::MISDIRECTED_REQUEST,
                [(header::CACHE_CONTROL, "no-store")],
                "this console does not answer to this host name: open it as localhost or \
                 127.0.0.1, or add the name to ConsoleConfig::hosts",
            )
                .into_response();
        }
    }
    next.run(request).await
}

/// Adds `X-Content-Type-Options: nosniff` to every answer and `Cache-Control: no-store`
/// to every answer that does not say how to cache it (JSON and errors as much as pages).
pub(crate) async fn safe_headers(mut response: Response) -> Response {
    let headers = response.headers_mut();
    headers.insert(
        header::X_CONTENT_TYPE_OPTIONS,
        HeaderValue::from_static("nosniff"),
    );
    if !headers.contains_key(header::CACHE_CONTROL) {
        headers.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    }
    response
}

#[cfg(test)]
mod tests {
    use super::host_name;

    #[test]
    fn host_names_lose_their_port() {
        assert_eq!(host_name("LocalHost:8080"), "localhost");
        assert_eq!(host_name("[::1]:80"), "[::1]");
        assert_eq!(host_name("127.0.0.1"), "127.0.0.1");
        assert_eq!(host_name("evil.example:1"), "evil.example");
    }
}

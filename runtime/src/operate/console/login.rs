//! The login: its page, the check of a name and password against the limiter and the
//! gate (shared with the JSON API), and the cookies of a successful one.

use axum::extract::{Query, State as Shared};
use axum::http::request::Parts;
use axum::http::{header, StatusCode};
use axum::response::{AppendHeaders, IntoResponse, Redirect, Response};
use axum::Form;
use maud::html;
use serde::Deserialize;
use std::sync::Arc;

use super::auth;
use super::config::Role;
use super::limiter;
use super::pages::page;
use super::views::{layout, notice};
use super::State;

/// The login form's fields.
#[derive(Debug, Deserialize)]
pub(crate) struct LoginForm {
    #[serde(default)]
    user: String,
    #[serde(default)]
    password: String,
    /// The page to go back to, inside the console.
    #[serde(default)]
    next: Option<String>,
}

/// The login page's query string.
#[derive(Debug, Default, Deserialize)]
pub(crate) struct LoginParams {
    #[serde(default)]
    next: Option<String>,
}

fn login_page(
    base: &str,
    open: bool,
    status: StatusCode,
    error: Option<&str>,
    next: Option<&str>,
) -> Response {
    let next = next.and_then(auth::safe_next);
    let body = html! {
        (notice(None, error))
        @if open {
            p.hint id="open-console" { "This console listens on a loopback address with no users configured: anyone on this machine is an operator." }
        }
        form.login id="login-form" method="post" action={ (base) "/login" } {
            label for="login-user" { "User" }
            input id="login-user" name="user" autocomplete="username" autofocus;
            label for="login-password" { "Password" }
            input id="login-password" name="password" type="password" autocomplete="current-password";
            @if let Some(next) = next { input type="hidden" name="next" value=(next); }
            button id="login-submit" type="submit" { "Log in" }
        }
    };
    page(status, layout(base, None, "Log in", body))
}

/// The login page.
pub(crate) async fn login_form(
    Shared(state): Shared<Arc<State>>,
    Query(params): Query<LoginParams>,
    parts: Parts,
) -> Response {
    login_page(
        &auth::base_of(&parts),
        !state.login_required,
        StatusCode::OK,
        None,
        params.next.as_deref(),
    )
}

/// The longest user name and password a login reads; longer ones are refused unread.
const MAX_CREDENTIAL: usize = 1024;

/// Why a login was refused: the status, what to say, and for 429/503 the seconds to wait
/// (`Retry-After`).
#[derive(Debug)]
pub(crate) struct LoginRefused {
    pub(crate) status: StatusCode,
    pub(crate) message: String,
    pub(crate) retry_after: Option<u64>,
}

impl LoginRefused {
    fn wrong() -> LoginRefused {
        LoginRefused {
            status: StatusCode::UNAUTHORIZED,
            message: "wrong user name or password".to_string(),
            retry_after: None,
        }
    }

    /// 429: this pair failed too often.
    fn pair_waits(wait: std::time::Duration) -> LoginRefused {
        let seconds = wait.as_secs() + 1;
        LoginRefused {
            status: StatusCode::TOO_MANY_REQUESTS,
            message: format!(
                "too many failed logins for this user from this address: wait {seconds} s \
                 (after {} failures, each one doubles the wait, up to 15 minutes)",
                limiter::FREE_FAILURES
            ),
            retry_after: Some(seconds),
        }
    }

    /// 429: this address failed too often (a user's wrong password from there, or a name
    /// that is no user's: told apart by nothing).
    fn address_waits(wait: std::time::Duration) -> LoginRefused {
        let seconds = wait.as_secs() + 1;
        LoginRefused {
            status: StatusCode::TOO_MANY_REQUESTS,
            message: format!(
                "too many failed logins from this address: wait {seconds} s (after {} \
                 failures, each one doubles the wait, up to 15 minutes)",
                limiter::ADDRESS_FREE_FAILURES
            ),
            retry_after: Some(seconds),
        }
    }

    /// 503: too many password checks under way.
    fn busy() -> LoginRefused {
        LoginRefused {
            status: StatusCode::SERVICE_UNAVAILABLE,
            message: "too many logins at once: try again in a second".to_string(),
            retry_after: Some(1),
        }
    }

    /// The `Retry-After` header, when there is one.
    pub(crate) fn headers(&self) -> Vec<(header::HeaderName, String)> {
        self.retry_after
            .map(|s| (header::RETRY_AFTER, s.to_string()))
            .into_iter()
            .collect()
    }
}

/// Checks a login: the user's role, or why it is refused (401 for a wrong name or
/// password, 429 while this address must wait before trying this user again, or, for a
/// wrong password, while this address failed too often, 503 when too many password
/// checks are under way). Logged and audited (`login`, `login_refused`, with the client
/// address) once the password was checked, refusals within a budget a second (see
/// [`limiter::Told`]). Shared with the JSON API.
pub(crate) async fn check_login(
    state: &State,
    parts: &Parts,
    user: &str,
    password: &str,
) -> Result<(String, Role), LoginRefused> {
    if !state.login_required {
        return Ok(("local".to_string(), Role::Operator));
    }
    if user.len() > MAX_CREDENTIAL || password.len() > MAX_CREDENTIAL {
        return Err(LoginRefused::wrong());
    }
    let address = limiter::client_address(parts, &state.config.trusted_proxies);
    // A browser that logged in as this user before is counted apart from its address.
    let counted_as = state
        .devices
        .of_request(parts, user)
        .unwrap_or_else(|| address.clone());
    let known = auth::is_user(&state.config, user);
    let attempt = limiter::Try {
        address: &address,
        counted_as: &counted_as,
        user,
        known,
    };
    let started = match state.limiter.try_start(attempt) {
        Ok(started) => started,
        Err(limiter::Wait::Pair(wait)) => return Err(LoginRefused::pair_waits(wait)),
        Err(limiter::Wait::Address(wait)) => {
            // A name that is no user's, from an address that failed too often: answered
            // as a user's wrong password from there is, as late, without a check.
            return match state.gate.pretend(&state.config, user, password).await {
                Ok(()) => Err(LoginRefused::address_waits(wait)),
                Err(_) => Err(LoginRefused::busy()),
            };
        }
    };
    let checked = if known {
        let device = counted_as != address;
        state
            .gate
            .verify(&state.config, user, password, device)
            .await
    } else {
        state
            .gate
            .pretend(&state.config, user, password)
            .await
            .map(|()| None)
    };
    let Ok(role) = checked else {
        state.limiter.not_tried(attempt);
        return Err(LoginRefused::busy());
    };
    // Names are logged escaped (Debug) and cut short: no forged log lines.
    let shown = crate::base::text::capped(user, 64);
    let (outcome, left_out) = match role {
        Some(role) => {
            state.limiter.succeeded(attempt);
            crate::log::info!(user = ?shown, address = ?address, "console login");
            (Ok((user.to_string(), role)), Some(0))
        }
        None => {
            // Counted by try_start already. Told (logged and audited) within a budget a
            // second: a flood from many addresses writes no line nor row for each try.
            let left_out = state.told.take();
            if let Some(left_out) = left_out {
                crate::log::warn!(
                    user = ?shown,
                    address = ?address,
                    left_out,
                    "console login refused"
                );
            }
            let refused = match started.address_wait {
                Some(wait) => LoginRefused::address_waits(wait),
                None => LoginRefused::wrong(),
            };
            (Err(refused), left_out)
        }
    };
    let Some(left_out) = left_out else {
        return outcome;
    };
    let action = if outcome.is_ok() {
        "login"
    } else {
        "login_refused"
    };
    let target = if left_out > 0 {
        serde_json::json!({ "address": address, "refusals_left_out": left_out })
    } else {
        serde_json::json!({ "address": address })
    };
    let audited = state
        .rt
        .audit(
            state.rt.application(),
            &shown,
            action,
            target.to_string(),
            0,
        )
        .await;
    if let Err(error) = audited {
        crate::log::warn!(error = ?error.to_string(), "console: could not audit a login");
    }
    outcome
}

/// The cookies of a successful login: the session's (first), then the device cookie
/// that counts this browser's later logins as `user` apart from its address.
pub(crate) fn login_cookies(
    state: &State,
    parts: &Parts,
    base: &str,
    user: &str,
    token: &str,
) -> AppendHeaders<[(header::HeaderName, String); 2]> {
    let secure = state.config.secure_cookie || auth::over_tls(parts);
    let device = super::device::device_cookie(base, &state.devices.issue(user), secure);
    AppendHeaders([
        (
            header::SET_COOKIE,
            auth::session_cookie(base, token, secure),
        ),
        (header::SET_COOKIE, device),
    ])
}

/// Logs in: a session cookie, then the overview.
pub(crate) async fn login(
    Shared(state): Shared<Arc<State>>,
    parts: Parts,
    Form(form): Form<LoginForm>,
) -> Response {
    let base = auth::base_of(&parts);
    match check_login(&state, &parts, &form.user, &form.password).await {
        Ok((name, role)) => {
            let token = state.sessions.open(&name, role);
            let cookies = login_cookies(&state, &parts, &base, &name, &token);
            let to = match form.next.as_deref().and_then(auth::safe_next) {
                Some(next) => format!("{base}{next}"),
                None => super::views::home(&base).to_string(),
            };
            (cookies, Redirect::to(&to)).into_response()
        }
        Err(refused) => {
            let mut response = login_page(
                &base,
                !state.login_required,
                refused.status,
                Some(&refused.message),
                form.next.as_deref(),
            );
            for (name, value) in refused.headers() {
                if let Ok(value) = value.parse() {
                    response.headers_mut().insert(name, value);
                }
            }
            response
        }
    }
}

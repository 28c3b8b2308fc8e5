//! What the pages' forms post: login, logout, actions on requests (with a confirmation
//! page that shows how many requests the action changes), pauses of executors.
//! Every state-changing form carries the session's CSRF token; viewers get 403.

use std::net::SocketAddr;
use std::sync::Arc;

use axum::extract::{ConnectInfo, State as Shared};
use axum::http::request::Parts;
use axum::http::{header, StatusCode};
use axum::response::{IntoResponse, Redirect, Response};
use axum::Form;
use maud::html;
use serde::Deserialize;

use super::auth::{self, PageWho, Who};
use super::config::Role;
use super::filter::FilterForm;
use super::pages::{action_label, error_page, hidden_filter, page, urlencode};
use super::views::{count_of, csrf_field, layout, notice};
use super::State;
use crate::query::Action;

/// The login form's fields.
#[derive(Debug, Deserialize)]
pub(crate) struct LoginForm {
    #[serde(default)]
    user: String,
    #[serde(default)]
    password: String,
}

fn login_page(base: &str, open: bool, status: StatusCode, error: Option<&str>) -> Response {
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
            button id="login-submit" type="submit" { "Log in" }
        }
    };
    page(status, layout(base, None, "Log in", body))
}

/// The login page.
pub(crate) async fn login_form(Shared(state): Shared<Arc<State>>, parts: Parts) -> Response {
    login_page(
        &auth::base_of(&parts),
        !state.login_required,
        StatusCode::OK,
        None,
    )
}

/// The client's address, when the server was started with connect info.
fn client_address(parts: &Parts) -> String {
    parts
        .extensions
        .get::<ConnectInfo<SocketAddr>>()
        .map_or_else(|| "unknown".to_string(), |c| c.0.ip().to_string())
}

/// Checks a login: the user's role, or the response refusing it (401 for a wrong name or
/// password, 429 after too many failures). Shared with the JSON API.
pub(crate) fn check_login(
    state: &State,
    parts: &Parts,
    user: &str,
    password: &str,
) -> Result<(String, Role), (StatusCode, String)> {
    if !state.login_required {
        return Ok(("local".to_string(), Role::Operator));
    }
    let address = client_address(parts);
    if state.limiter.blocked(user, &address) {
        return Err((
            StatusCode::TOO_MANY_REQUESTS,
            format!(
                "too many failed logins for this user or from this address: wait 15 minutes \
                 (at most {} failures in 15 minutes)",
                auth::MAX_FAILURES
            ),
        ));
    }
    match auth::verify_password(&state.config, user, password) {
        Some(role) => {
            state.limiter.succeeded(user);
            Ok((user.to_string(), role))
        }
        None => {
            state.limiter.failed(user, &address);
            crate::log::warn!(user, address, "console login refused");
            Err((
                StatusCode::UNAUTHORIZED,
                "wrong user name or password".to_string(),
            ))
        }
    }
}

/// Logs in: a session cookie, then the overview.
pub(crate) async fn login(
    Shared(state): Shared<Arc<State>>,
    parts: Parts,
    Form(form): Form<LoginForm>,
) -> Response {
    let base = auth::base_of(&parts);
    match check_login(&state, &parts, &form.user, &form.password) {
        Ok((name, role)) => {
            let token = state.sessions.open(&name, role);
            let cookie = auth::session_cookie(
                &base,
                &token,
                state.config.secure_cookie || auth::over_tls(&parts),
            );
            (
                [(header::SET_COOKIE, cookie)],
                Redirect::to(super::views::home(&base)),
            )
                .into_response()
        }
        Err((status, message)) => login_page(&base, !state.login_required, status, Some(&message)),
    }
}

/// A form that carries only the CSRF token (and an executor, for pauses).
#[derive(Debug, Deserialize)]
pub(crate) struct CsrfForm {
    #[serde(default)]
    csrf: Option<String>,
    #[serde(default)]
    executor: Option<String>,
}

/// Logs out.
pub(crate) async fn logout(
    PageWho { who, base }: PageWho,
    Shared(state): Shared<Arc<State>>,
    parts: Parts,
    Form(form): Form<CsrfForm>,
) -> Response {
    if !who.csrf_ok(form.csrf.as_deref()) {
        return csrf_refused(&base, &who);
    }
    if let Some(token) = auth::cookie(&parts, auth::COOKIE) {
        state.sessions.close(token);
    }
    let cookie = auth::cleared_cookie(&base, state.config.secure_cookie || auth::over_tls(&parts));
    (
        [(header::SET_COOKIE, cookie)],
        Redirect::to(&format!("{base}/login")),
    )
        .into_response()
}

fn csrf_refused(base: &str, who: &Who) -> Response {
    error_page(
        base,
        who,
        StatusCode::FORBIDDEN,
        "the form's CSRF token is missing or stale: reload the page and try again",
    )
}

/// Refuses viewers and forms without the session's CSRF token.
fn may_act(base: &str, who: &Who, csrf: Option<&str>) -> Option<Response> {
    if who.role != Role::Operator {
        return Some(error_page(
            base,
            who,
            StatusCode::FORBIDDEN,
            "viewers cannot act on requests or executors: ask an operator",
        ));
    }
    if !who.csrf_ok(csrf) {
        return Some(csrf_refused(base, who));
    }
    None
}

/// The action form's fields.
#[derive(Debug, Deserialize)]
pub(crate) struct ActionForm {
    #[serde(default)]
    csrf: Option<String>,
    #[serde(default)]
    action: String,
    /// `yes` to act; otherwise the confirmation page is shown.
    #[serde(default)]
    confirm: Option<String>,
    /// Where to go afterwards, inside the console (`/requests/42`).
    #[serde(default)]
    back: Option<String>,
    #[serde(flatten)]
    filter: FilterForm,
}

/// An action on every request matching the filter: first the confirmation with the
/// count, then the action (audited) and back to the list with a notice.
pub(crate) async fn action(
    PageWho { who, base }: PageWho,
    Shared(state): Shared<Arc<State>>,
    Form(form): Form<ActionForm>,
) -> Response {
    if let Some(refused) = may_act(&base, &who, form.csrf.as_deref()) {
        return refused;
    }
    let Some(action) = Action::parse(&form.action) else {
        let names: Vec<&str> = Action::ALL.iter().map(|a| a.as_str()).collect();
        let message = format!(
            "unknown action `{}`: use one of {}",
            form.action,
            names.join(", ")
        );
        return error_page(&base, &who, StatusCode::BAD_REQUEST, &message);
    };
    let query = match form.filter.to_query() {
        Ok(query) => query,
        Err(message) => return error_page(&base, &who, StatusCode::BAD_REQUEST, &message),
    };
    let filter_qs = form.filter.to_query_string();
    if form.confirm.as_deref() != Some("yes") {
        let count = match state.rt.count_actionable(action, &query).await {
            Ok(count) => count,
            Err(error) => {
                return error_page(&base, &who, StatusCode::BAD_REQUEST, &error.to_string())
            }
        };
        let statuses: Vec<&str> = action.applies_to().iter().map(|s| s.as_str()).collect();
        let body = html! {
            p id="confirm-text" {
                (action_label(action)) ": "
                strong id="confirm-count" data-count=(count) { (count_of(count, "request")) }
                " match" (if count == 1 { "es" } else { "" }) " the filter and " (if count == 1 { "is " } else { "are " }) (statuses.join(", ")) "."
                @if form.filter.is_empty() { " The filter is empty: this is every such request." }
            }
            form.inline method="post" action={ (base) "/actions" } {
                (csrf_field(&who))
                (hidden_filter(&form.filter))
                input type="hidden" name="action" value=(action.as_str());
                input type="hidden" name="confirm" value="yes";
                button id="confirm-submit" type="submit" disabled[count == 0] { (action_label(action)) " " (count) }
            }
            " "
            a id="confirm-cancel" href={ (base) "/requests?" (filter_qs) } { "Cancel" }
        };
        return page(StatusCode::OK, layout(&base, Some(&who), "Confirm", body));
    }
    let done = state.rt.act(action, &query, &who.name).await;
    state.counts.recount_soon(&state.rt);
    let changed = match done {
        Ok(changed) => changed,
        Err(error) => {
            return error_page(
                &base,
                &who,
                StatusCode::INTERNAL_SERVER_ERROR,
                &error.to_string(),
            )
        }
    };
    let text = format!(
        "{}: {} changed",
        action_label(action),
        count_of(changed as i64, "request")
    );
    let back = form
        .back
        .filter(|b| b.starts_with('/') && !b.starts_with("//") && !b.contains('\\'))
        .filter(|_| action != Action::Delete)
        .unwrap_or_else(|| format!("/requests?{filter_qs}"));
    let sep = if back.contains('?') { "&" } else { "?" };
    Redirect::to(&format!("{base}{back}{sep}notice={}", urlencode(&text))).into_response()
}

async fn set_pause(state: &State, who: &Who, base: &str, form: CsrfForm, pause: bool) -> Response {
    if let Some(refused) = may_act(base, who, form.csrf.as_deref()) {
        return refused;
    }
    let Some(executor) = form.executor.filter(|e| !e.is_empty()) else {
        return error_page(base, who, StatusCode::BAD_REQUEST, "say which executor");
    };
    let done = match pause {
        true => state.rt.pause_executor(&executor, &who.name).await,
        false => state
            .rt
            .resume_executor(&executor, &who.name)
            .await
            .map(|_| ()),
    };
    if let Err(error) = done {
        return error_page(
            base,
            who,
            StatusCode::INTERNAL_SERVER_ERROR,
            &error.to_string(),
        );
    }
    let text = match pause {
        true => format!("{executor}: claims paused on every instance"),
        false => format!("{executor}: claims resumed"),
    };
    Redirect::to(&format!("{base}/executors?notice={}", urlencode(&text))).into_response()
}

/// Pauses an executor's claims.
pub(crate) async fn pause(
    PageWho { who, base }: PageWho,
    Shared(state): Shared<Arc<State>>,
    Form(form): Form<CsrfForm>,
) -> Response {
    set_pause(&state, &who, &base, form, true).await
}

/// Resumes an executor's claims.
pub(crate) async fn resume(
    PageWho { who, base }: PageWho,
    Shared(state): Shared<Arc<State>>,
    Form(form): Form<CsrfForm>,
) -> Response {
    set_pause(&state, &who, &base, form, false).await
}

//! What the pages' forms post: login, logout, actions on requests (with a confirmation
//! page that shows how many requests the action changes), pauses of executors.
//! Every state-changing form carries the session's CSRF token; viewers get 403.

use std::sync::Arc;

use axum::extract::{Query, State as Shared};
use axum::http::request::Parts;
use axum::http::{header, StatusCode};
use axum::response::{AppendHeaders, IntoResponse, Redirect, Response};
use axum::Form;
use maud::html;
use serde::Deserialize;

use super::auth::{self, PageWho, Who};
use super::config::Role;
use super::filter::{urlencode, FilterForm};
use super::limiter;
use super::pages::{error_page, hidden_filter, page};
use super::reads::{scoped_query, Refused};
use super::views::{action_label, count_of, csrf_field, layout, notice};
use super::State;
use crate::base::query::Action;

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
        state.gate.verify(&state.config, user, password).await
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
pub(crate) fn may_act(base: &str, who: &Who, csrf: Option<&str>) -> Option<Response> {
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
    /// The most requests to change: the count the confirmation showed.
    #[serde(default)]
    up_to: Option<String>,
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
    let query = match scoped_query(&state, &form.filter) {
        Ok(query) => query,
        Err(refused) => return error_page(&base, &who, refused.status, &refused.message),
    };
    let filter_qs = form.filter.to_query_string();
    let up_to = form.up_to.as_deref().and_then(|u| u.parse::<i64>().ok());
    let confirmed = form.confirm.as_deref() == Some("yes");
    let Some(up_to) = up_to.filter(|_| confirmed) else {
        let count = match state.rt.count_actionable(action, &query).await {
            Ok(count) => count,
            Err(error) => {
                let refused = Refused::from(error);
                return error_page(&base, &who, refused.status, &refused.message);
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
                input type="hidden" name="up_to" value=(count);
                @if let Some(back) = form.back.as_deref() { input type="hidden" name="back" value=(back); }
                button id="confirm-submit" type="submit" disabled[count == 0] { (action_label(action)) " " (count) }
            }
            " "
            a id="confirm-cancel" href={ (base) "/requests?" (filter_qs) } { "Cancel" }
        };
        return page(StatusCode::OK, layout(&base, Some(&who), "Confirm", body));
    };
    let changed = match act_up_to(&state, action, &query, up_to, &who.name).await {
        Ok(changed) => changed,
        Err(refused) => return error_page(&base, &who, refused.status, &refused.message),
    };
    let back = form
        .back
        .filter(|b| b.starts_with('/') && !b.starts_with("//") && !b.contains('\\'))
        .filter(|_| action != Action::Delete)
        .unwrap_or_else(|| format!("/requests?{filter_qs}"));
    let sep = if back.contains('?') { "&" } else { "?" };
    Redirect::to(&format!(
        "{base}{back}{sep}notice=done&action={}&changed={changed}",
        action.as_str()
    ))
    .into_response()
}

/// Applies `action` to the requests matching `query` (audited as `actor`'s), unless more
/// than `up_to` match now (409: the count changed since it was shown); never to more than
/// `up_to`, nor to one that came to match after the action started.
pub(crate) async fn act_up_to(
    state: &State,
    action: Action,
    query: &crate::RequestQuery,
    up_to: i64,
    actor: &str,
) -> Result<u64, Refused> {
    let done = state
        .rt
        .act_up_to(action, query, up_to.max(0) as u64, actor)
        .await;
    state.counts.recount_soon(&state.rt);
    Ok(done?)
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
        let refused = Refused::from(error);
        return error_page(base, who, refused.status, &refused.message);
    }
    let code = if pause { "paused" } else { "resumed" };
    Redirect::to(&format!(
        "{base}/executors?notice={code}&executor={}",
        urlencode(&executor)
    ))
    .into_response()
}

/// The most requests one action on ticked rows may name (a page holds at most 1,000).
const MAX_SELECTED: usize = 1_000;

/// An action on the requests ticked on a page: each one that the action applies to is
/// changed (audited one by one, as the console's action on one request is); the others
/// are counted as left.
pub(crate) async fn act_on_selected(
    PageWho { who, base }: PageWho,
    Shared(state): Shared<Arc<State>>,
    Form(fields): Form<Vec<(String, String)>>,
) -> Response {
    let field = |name: &str| {
        fields
            .iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.as_str())
    };
    if let Some(refused) = may_act(&base, &who, field("csrf")) {
        return refused;
    }
    let Some(action) = field("action").and_then(Action::parse) else {
        return error_page(&base, &who, StatusCode::BAD_REQUEST, "say which action");
    };
    let ids: Result<Vec<i64>, _> = fields
        .iter()
        .filter(|(k, _)| k == "id")
        .map(|(_, v)| v.parse::<i64>())
        .collect();
    let ids = match ids {
        Ok(ids) if ids.is_empty() => {
            return error_page(
                &base,
                &who,
                StatusCode::BAD_REQUEST,
                "no request is ticked: tick the ones to act on",
            )
        }
        Ok(ids) if ids.len() > MAX_SELECTED => {
            let message = format!("at most {MAX_SELECTED} ticked requests at once");
            return error_page(&base, &who, StatusCode::BAD_REQUEST, &message);
        }
        Ok(ids) => ids,
        Err(_) => {
            return error_page(
                &base,
                &who,
                StatusCode::BAD_REQUEST,
                "a request id is a whole number",
            )
        }
    };
    let mut changed = 0i64;
    for id in &ids {
        let query = crate::RequestQuery::default().id(*id);
        match state.rt.act(action, &query, &who.name).await {
            Ok(n) => changed += n as i64,
            Err(error) => {
                let refused = Refused::from(error);
                return error_page(&base, &who, refused.status, &refused.message);
            }
        }
    }
    let back = field("back")
        .filter(|b| b.starts_with("/requests"))
        .unwrap_or("/requests");
    let sep = if back.contains('?') { "&" } else { "?" };
    Redirect::to(&format!(
        "{base}{back}{sep}notice=done&action={}&changed={changed}",
        action.as_str()
    ))
    .into_response()
}

/// Asks a running request to stop (`rt.cancel`), audited as `cancel` on its id.
pub(crate) async fn cancel_running(
    PageWho { who, base }: PageWho,
    Shared(state): Shared<Arc<State>>,
    axum::extract::Path(id): axum::extract::Path<String>,
    Form(form): Form<CsrfForm>,
) -> Response {
    if let Some(refused) = may_act(&base, &who, form.csrf.as_deref()) {
        return refused;
    }
    let Ok(id) = id.parse::<i64>() else {
        return error_page(
            &base,
            &who,
            StatusCode::BAD_REQUEST,
            "a request id is a whole number",
        );
    };
    let done = state.rt.cancel(id).await;
    let target = serde_json::json!({ "id": id }).to_string();
    let audited = state
        .rt
        .audit_action(&who.name, "cancel", &target, u64::from(done.is_ok()))
        .await;
    if let Err(error) = done.and(audited) {
        let refused = Refused::from(error);
        return error_page(&base, &who, refused.status, &refused.message);
    }
    Redirect::to(&format!("{base}/requests/{id}?notice=stop")).into_response()
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

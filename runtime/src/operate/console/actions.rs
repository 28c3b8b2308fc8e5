//! What the pages' forms post (the login's in `login`): logout, actions on requests (with a confirmation
//! page that shows how many requests the action changes), pauses of executors.
//! Every state-changing form carries the session's CSRF token; viewers get 403.

use std::sync::Arc;

use axum::extract::State as Shared;
use axum::http::request::Parts;
use axum::http::{header, StatusCode};
use axum::response::{IntoResponse, Redirect, Response};
use axum::Form;
use maud::html;
use serde::Deserialize;

use super::auth::{self, PageWho, Who};
use super::config::Role;
use super::filter::{urlencode, FilterForm};
use super::pages::{error_page, hidden_filter, page};
use super::reads::{scoped_query, Refused};
use super::views::{action_label, count_of, csrf_field, layout};
use super::State;
use crate::base::query::Action;

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
        return confirm_page(&base, &who, &form, action, count, None);
    };
    let changed = match act_up_to(&state, action, &query, up_to, &who.name).await {
        Ok(changed) => changed,
        // The set moved since the count: offer the action on what matches now.
        Err(crate::Error::MoreMatch { matching, up_to }) => {
            let count = i64::try_from(matching).unwrap_or(i64::MAX);
            return confirm_page(&base, &who, &form, action, count, Some(up_to));
        }
        Err(error) => {
            let refused = Refused::from(error);
            return error_page(&base, &who, refused.status, &refused.message);
        }
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

/// The page that shows how many requests `action` changes (`count`, matching the form's
/// filter now) and asks to go on; `moved`: the number confirmed before, when more came to
/// match since (the action is offered on what matches now).
fn confirm_page(
    base: &str,
    who: &Who,
    form: &ActionForm,
    action: Action,
    count: i64,
    moved: Option<u64>,
) -> Response {
    let statuses: Vec<&str> = action.applies_to().iter().map(|s| s.as_str()).collect();
    let filter_qs = form.filter.to_query_string();
    let body = html! {
        @if let Some(confirmed) = moved {
            p.notice id="confirm-moved" data-confirmed=(confirmed) {
                "The requests changed since you confirmed " (count_of(confirmed as i64, "request"))
                ": nothing was changed. This is what matches now."
            }
        }
        p id="confirm-text" {
            (action_label(action)) ": "
            strong id="confirm-count" data-count=(count) { (count_of(count, "request")) }
            " match" (if count == 1 { "es" } else { "" }) " the filter and " (if count == 1 { "is " } else { "are " }) (statuses.join(", ")) "."
            @if form.filter.is_empty() { " The filter is empty: this is every such request." }
        }
        form.inline method="post" action={ (base) "/actions" } {
            (csrf_field(who))
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
    page(StatusCode::OK, layout(base, Some(who), "Confirm", body))
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
) -> crate::Result<u64> {
    let done = state
        .rt
        .act_up_to(action, query, up_to.max(0) as u64, actor)
        .await;
    state.counts.recount_soon(&state.rt);
    done
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
/// are counted as left. Delete asks first (a page that names them, `confirm=yes` to go
/// on).
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
    let back = field("back")
        .filter(|b| b.starts_with("/requests"))
        .unwrap_or("/requests");
    if action == Action::Delete && field("confirm") != Some("yes") {
        // Delete asks first, here as from a filter: what it deletes is gone for good.
        let count = ids.len() as i64;
        let listed: Vec<String> = ids.iter().map(i64::to_string).collect();
        let body = html! {
            p id="confirm-text" {
                (action_label(action)) ": "
                strong id="confirm-count" data-count=(count) { (count_of(count, "ticked request")) }
                " (" (listed.join(", ")) "), with " (if count == 1 { "its" } else { "their" }) " attempts: gone for good."
            }
            form.inline method="post" action={ (base) "/actions/selected" } {
                (csrf_field(&who))
                input type="hidden" name="action" value=(action.as_str());
                input type="hidden" name="confirm" value="yes";
                input type="hidden" name="back" value=(back);
                @for id in &listed { input type="hidden" name="id" value=(id); }
                button id="confirm-submit" type="submit" { (action_label(action)) " " (count) }
            }
            " "
            a id="confirm-cancel" href={ (base) (back) } { "Cancel" }
        };
        return page(StatusCode::OK, layout(&base, Some(&who), "Confirm", body));
    }
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

//! The JSON API's changes: actions on the requests matching a filter (counted first, and
//! refused when more match than confirmed) and pauses of executors, and the checks every
//! change passes (operators only, the session's CSRF token). Part of the API of `api`,
//! whose routes and OpenAPI document list these handlers too.

use std::sync::Arc;

use axum::extract::rejection::JsonRejection;
use axum::extract::State as Shared;
use axum::http::request::Parts;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde::{Deserialize, Serialize};

use super::auth::ApiWho;
use super::config::Role;
use super::filter::FilterForm;
use super::reads::{problem, scoped_query, Problem};
use super::State;
use crate::base::query::Action;

/// A runtime error as a problem: its status and message (an internal error is logged,
/// and answered without its detail).
pub(crate) fn failed(error: crate::Error) -> Response {
    let refused = super::reads::Refused::from(error);
    problem(refused.status, &refused.message)
}

/// Refuses viewers (403) and session writes without the session's CSRF token (403).
pub(crate) fn may_act(caller: &ApiWho) -> Option<Response> {
    if caller.who.role != Role::Operator {
        return Some(problem(
            StatusCode::FORBIDDEN,
            "viewers cannot act on requests or executors: use an operator's login or token",
        ));
    }
    if !caller.who.csrf_ok(caller.csrf_header.as_deref()) {
        return Some(problem(
            StatusCode::FORBIDDEN,
            "send the session's CSRF token (from GET api/session) in the X-CSRF-Token header",
        ));
    }
    None
}

/// How many requests an action would change.
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub(crate) struct ActionCount {
    action: Action,
    count: i64,
}

/// The action named `name`, or the message listing the valid ones.
fn parse_action(name: &str) -> Result<Action, String> {
    Action::parse(name).ok_or_else(|| {
        let names: Vec<&str> = Action::ALL.iter().map(|a| a.as_str()).collect();
        format!("unknown action `{name}`: use one of {}", names.join(", "))
    })
}

/// The `action` of a count's query string and its filter; a field neither knows is
/// refused (400, naming it).
fn count_params(query: Option<&str>) -> Result<(Action, FilterForm), String> {
    let pairs: Vec<(String, String)> =
        serde_urlencoded::from_str(query.unwrap_or("")).map_err(|e| e.to_string())?;
    let mut action = None;
    let mut filter = serde_json::Map::new();
    for (name, value) in pairs {
        if name == "action" {
            action = Some(value);
        } else if super::filter::FIELDS.contains(&name.as_str()) {
            filter.insert(name, serde_json::Value::String(value));
        } else {
            return Err(format!(
                "unknown field `{}`: the filter's fields are {}, with `action`",
                crate::base::text::capped(&name, 100),
                super::filter::FIELDS.join(", ")
            ));
        }
    }
    let action = parse_action(&action.unwrap_or_default())?;
    let filter =
        serde_json::from_value(serde_json::Value::Object(filter)).map_err(|e| e.to_string())?;
    Ok((action, filter))
}

/// How many requests matching the filter an action would change: show it, then send it
/// as `up_to` with the action (`POST api/actions`). A field it does not know is refused.
#[utoipa::path(get, path = "/api/actions/count", params(
        ("action" = String, Query, description = "`retry`, `cancel`, `delete` or `replay_dead`"),
        FilterForm),
    responses((status = 200, body = ActionCount), (status = 400, body = Problem), (status = 401, body = Problem), (status = 403, body = Problem)),
    security(("session" = []), ("bearer" = [])))]
pub(crate) async fn count_action(
    _caller: ApiWho,
    Shared(state): Shared<Arc<State>>,
    parts: Parts,
) -> Response {
    let (action, filter) = match count_params(parts.uri.query()) {
        Ok(params) => params,
        Err(message) => return problem(StatusCode::BAD_REQUEST, &message),
    };
    let query = match scoped_query(&state, &filter) {
        Ok(query) => query,
        Err(refused) => return problem(refused.status, &refused.message),
    };
    match state.rt.count_actionable(action, &query).await {
        Ok(count) => Json(ActionCount { action, count }).into_response(),
        Err(error) => failed(error),
    }
}

/// An action on the requests matching a filter, no more of them than the caller counted.
/// A field it does not know is refused.
#[derive(Debug, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct ActionBody {
    action: Action,
    /// Which requests: the fields of `GET api/actions/count` (`{"id": 42}` for one; `{}`
    /// for every request of the application the action applies to).
    #[serde(default)]
    filter: FilterForm,
    /// The most requests it may change: the count the caller saw. When more match now,
    /// nothing changes (409): count again.
    up_to: i64,
}

/// What an action changed.
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub(crate) struct ActionDone {
    action: Action,
    changed: u64,
}

/// Retries, cancels, deletes or replays the requests matching the filter (audited),
/// refused when more than `up_to` match.
#[utoipa::path(post, path = "/api/actions", request_body = ActionBody,
    responses((status = 200, body = ActionDone), (status = 400, body = Problem), (status = 401, body = Problem),
        (status = 403, body = Problem), (status = 409, description = "More requests match than `up_to`: nothing changed; `matching` says how many match now", body = Moved),
        (status = 422, description = "A field is unknown or of the wrong type", body = Problem)),
    security(("session" = []), ("bearer" = [])))]
pub(crate) async fn run_action(
    caller: ApiWho,
    Shared(state): Shared<Arc<State>>,
    body: Result<Json<ActionBody>, JsonRejection>,
) -> Response {
    if let Some(refused) = may_act(&caller) {
        return refused;
    }
    let body = match body {
        Ok(Json(body)) => body,
        Err(rejection) => return problem(rejection.status(), &rejection.body_text()),
    };
    let query = match scoped_query(&state, &body.filter) {
        Ok(query) => query,
        Err(refused) => return problem(refused.status, &refused.message),
    };
    let done =
        super::actions::act_up_to(&state, body.action, &query, body.up_to, &caller.who.name).await;
    match done {
        Ok(changed) => Json(ActionDone {
            action: body.action,
            changed,
        })
        .into_response(),
        Err(error @ crate::Error::MoreMatch { matching, up_to }) => (
            StatusCode::CONFLICT,
            Json(Moved {
                error: error.to_string(),
                matching,
                up_to,
            }),
        )
            .into_response(),
        Err(error) => failed(error),
    }
}

/// More requests match than the action was confirmed for: nothing changed. Send the
/// action again with `up_to` = `matching` to act on what matches now.
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub(crate) struct Moved {
    /// What happened, and what to do.
    error: String,
    /// How many match now.
    matching: u64,
    /// How many the action was confirmed for.
    up_to: u64,
}

/// An executor to pause or resume.
#[derive(Debug, Deserialize, utoipa::ToSchema)]
pub(crate) struct ExecutorBody {
    executor: String,
}

/// Whether an executor is paused now.
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub(crate) struct PauseState {
    executor: String,
    paused: bool,
}

/// Pauses the claims of an executor on every instance (audited).
#[utoipa::path(post, path = "/api/executors/pause", request_body = ExecutorBody,
    responses((status = 200, body = PauseState), (status = 401, body = Problem), (status = 403, body = Problem)),
    security(("session" = []), ("bearer" = [])))]
pub(crate) async fn pause_executor(
    caller: ApiWho,
    Shared(state): Shared<Arc<State>>,
    Json(body): Json<ExecutorBody>,
) -> Response {
    if let Some(refused) = may_act(&caller) {
        return refused;
    }
    match state
        .rt
        .pause_executor(&body.executor, &caller.who.name)
        .await
    {
        Ok(()) => Json(PauseState {
            executor: body.executor,
            paused: true,
        })
        .into_response(),
        Err(error) => failed(error),
    }
}

/// Resumes the claims of an executor (audited).
#[utoipa::path(post, path = "/api/executors/resume", request_body = ExecutorBody,
    responses((status = 200, body = PauseState), (status = 401, body = Problem), (status = 403, body = Problem)),
    security(("session" = []), ("bearer" = [])))]
pub(crate) async fn resume_executor(
    caller: ApiWho,
    Shared(state): Shared<Arc<State>>,
    Json(body): Json<ExecutorBody>,
) -> Response {
    if let Some(refused) = may_act(&caller) {
        return refused;
    }
    match state
        .rt
        .resume_executor(&body.executor, &caller.who.name)
        .await
    {
        Ok(_) => Json(PauseState {
            executor: body.executor,
            paused: false,
        })
        .into_response(),
        Err(error) => failed(error),
    }
}

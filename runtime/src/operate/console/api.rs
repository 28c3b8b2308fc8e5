//! The JSON API: every page and action, under the same authentication (a session cookie
//! whose writes carry `X-CSRF-Token`, or `Authorization: Bearer <token>`), described by
//! the OpenAPI document at `api/openapi.json` (generated from these handlers).

use std::sync::Arc;
use std::time::Duration;

use axum::extract::{Path, Query, RawQuery, State as Shared};
use axum::http::request::Parts;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use serde::{Deserialize, Serialize};
use utoipa::OpenApi;

use super::api_changes::{self as changes, failed, may_act};
use super::auth::{self, ApiWho};
use super::config::Role;
use super::filter::{self, FilterForm, PageForm};
use super::fleet::{executor_views, instance_views, ExecutorView, InstanceView};
use super::login::check_login;
use super::overview::Overview;
use super::reads::{problem, Attempt, Problem};
use super::State;
use crate::base::query::{AuditEntry, Cursor};
use crate::base::record::Request;

pub(crate) fn routes() -> Router<Arc<State>> {
    Router::new()
        .route("/api/openapi.json", get(openapi))
        .route("/api/login", post(login))
        .route("/api/session", get(session))
        .route("/api/overview", get(overview))
        .route("/api/requests", get(list_requests))
        .route("/api/requests/{id}", get(get_request))
        .route("/api/executors", get(list_executors))
        .route("/api/executors/pause", post(changes::pause_executor))
        .route("/api/executors/resume", post(changes::resume_executor))
        .route("/api/instances", get(list_instances))
        .route("/api/audit", get(list_audit))
        .route("/api/policies", get(list_policies).post(change_policy))
        .route("/api/queues", get(super::flow::list_queues))
        .route("/api/queues/{name}/flow", get(super::flow::queue_flow))
        .route(
            "/api/queues/{name}/partitions",
            get(super::partitions::list_partitions).post(super::partitions::change_partition),
        )
        .route(
            "/api/queues/{name}/history",
            get(super::flow::queue_history),
        )
        .route("/api/actions/count", get(changes::count_action))
        .route("/api/actions", post(changes::run_action))
}

/// Who is logged in, and the CSRF token that the session's writes carry.
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub(crate) struct SessionInfo {
    user: String,
    role: Role,
    /// `null` for a bearer token.
    csrf: Option<String>,
}

/// A login.
#[derive(Debug, Deserialize, utoipa::ToSchema)]
pub(crate) struct LoginBody {
    user: String,
    password: String,
}

/// Logs in: sets the session cookie and returns the session's CSRF token.
#[utoipa::path(post, path = "/api/login", request_body = LoginBody, responses(
    (status = 200, description = "Logged in; the cookie is set", body = SessionInfo),
    (status = 401, description = "Wrong user name or password", body = Problem),
    (status = 429, description = "Too many failed logins of this user from this address: wait `Retry-After` seconds", body = Problem),
    (status = 503, description = "Too many logins at once: retry after `Retry-After` seconds", body = Problem)))]
async fn login(
    Shared(state): Shared<Arc<State>>,
    parts: Parts,
    Json(body): Json<LoginBody>,
) -> Response {
    match check_login(&state, &parts, &body.user, &body.password).await {
        Ok((name, role)) => {
            let token = state.sessions.open(&name, role);
            let base = auth::base_of(&parts);
            let cookies = super::login::login_cookies(&state, &parts, &base, &name, &token);
            let who = state.sessions.find(&token, state.config.idle_timeout);
            let info = SessionInfo {
                user: name,
                role,
                csrf: who.and_then(|w| w.csrf),
            };
            (cookies, Json(info)).into_response()
        }
        Err(refused) => {
            let mut response = problem(refused.status, &refused.message);
            for (name, value) in refused.headers() {
                if let Ok(value) = value.parse() {
                    response.headers_mut().insert(name, value);
                }
            }
            response
        }
    }
}

/// The caller and the session's CSRF token.
#[utoipa::path(get, path = "/api/session", responses((status = 200, body = SessionInfo), (status = 401, body = Problem)),
    security(("session" = []), ("bearer" = [])))]
async fn session(caller: ApiWho) -> Json<SessionInfo> {
    Json(SessionInfo {
        user: caller.who.name,
        role: caller.who.role,
        csrf: caller.who.csrf,
    })
}

/// Counts (as of `counts_as_of`: kept and counted again in the background), the oldest
/// waiting request, the failure rate and the series of the charts.
#[utoipa::path(get, path = "/api/overview", responses((status = 200, body = Overview), (status = 401, body = Problem)),
    security(("session" = []), ("bearer" = [])))]
async fn overview(_caller: ApiWho, Shared(state): Shared<Arc<State>>) -> Response {
    match super::overview::overview(&state).await {
        Ok(overview) => Json(overview).into_response(),
        Err(error) => failed(error),
    }
}

/// A page of requests.
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub(crate) struct RequestPage {
    requests: Vec<Request>,
    /// The `after` of the next page; `null` on the last.
    next: Option<String>,
    /// With a text filter (`remark`, `error`): how many requests the page looked at when
    /// its search window ended it before it filled (fewer requests, maybe none: continue
    /// the search with `next`); `null` otherwise.
    searched: Option<i64>,
}

/// The query string of a page of requests: the filter and the paging.
#[derive(Debug, Deserialize)]
pub(crate) struct ListParams {
    #[serde(flatten)]
    filter: FilterForm,
    #[serde(flatten)]
    page: PageForm,
}

/// Requests matching the filter, a keyset page at a time.
#[utoipa::path(get, path = "/api/requests", params(FilterForm, PageForm),
    responses((status = 200, body = RequestPage), (status = 400, body = Problem), (status = 401, body = Problem)),
    security(("session" = []), ("bearer" = [])))]
async fn list_requests(
    _caller: ApiWho,
    Shared(state): Shared<Arc<State>>,
    RawQuery(query): RawQuery,
) -> Response {
    let known = [&filter::FIELDS[..], &filter::PAGE_FIELDS[..]];
    if let Err(message) = filter::known_fields_only(query.as_deref(), &known) {
        return problem(StatusCode::BAD_REQUEST, &message);
    }
    let params: ListParams = match serde_urlencoded::from_str(query.as_deref().unwrap_or("")) {
        Ok(params) => params,
        Err(error) => return problem(StatusCode::BAD_REQUEST, &error.to_string()),
    };
    match super::reads::request_list(&state, &params.filter, &params.page).await {
        Ok(list) => Json(RequestPage {
            requests: list.rows,
            next: list.next.map(Cursor::to_text),
            searched: list.searched,
        })
        .into_response(),
        Err(refused) => problem(refused.status, &refused.message),
    }
}

/// A request with its attempts.
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub(crate) struct RequestDetail {
    request: Request,
    /// Its arguments, parsed.
    arguments: serde_json::Value,
    /// Every attempt logged, oldest first, each with its run (a replay starts one).
    attempts: Vec<Attempt>,
}

/// One request, its arguments and every attempt logged.
#[utoipa::path(get, path = "/api/requests/{id}", params(("id" = i64, Path, description = "The request id")),
    responses((status = 200, body = RequestDetail), (status = 404, body = Problem), (status = 401, body = Problem)),
    security(("session" = []), ("bearer" = [])))]
async fn get_request(
    _caller: ApiWho,
    Shared(state): Shared<Arc<State>>,
    Path(id): Path<i64>,
) -> Response {
    match super::reads::request_with_attempts(&state, id).await {
        Ok((request, attempts)) => Json(RequestDetail {
            arguments: serde_json::from_str(&crate::mask_sealed(&request.param_json))
                .unwrap_or(serde_json::Value::String(request.param_json.clone())),
            request,
            attempts,
        })
        .into_response(),
        Err(refused) => problem(refused.status, &refused.message),
    }
}

/// Executors registered in this build and seen in the table.
#[utoipa::path(get, path = "/api/executors", responses((status = 200, body = [ExecutorView]), (status = 401, body = Problem)),
    security(("session" = []), ("bearer" = [])))]
async fn list_executors(_caller: ApiWho, Shared(state): Shared<Arc<State>>) -> Response {
    match executor_views(&state).await {
        Ok(views) => Json(views).into_response(),
        Err(error) => failed(error),
    }
}

/// Instances alive.
#[utoipa::path(get, path = "/api/instances", responses((status = 200, body = [InstanceView]), (status = 401, body = Problem)),
    security(("session" = []), ("bearer" = [])))]
async fn list_instances(_caller: ApiWho, Shared(state): Shared<Arc<State>>) -> Response {
    match instance_views(&state).await {
        Ok(views) => Json(views).into_response(),
        Err(error) => failed(error),
    }
}

/// How many audit entries.
#[derive(Debug, Deserialize, utoipa::IntoParams)]
#[into_params(parameter_in = Query)]
pub(crate) struct AuditParams {
    /// At most this many, newest first (default 200).
    limit: Option<i64>,
}

/// The audit trail, newest first.
#[utoipa::path(get, path = "/api/audit", params(AuditParams), responses((status = 200, body = [AuditEntry]), (status = 401, body = Problem)),
    security(("session" = []), ("bearer" = [])))]
async fn list_audit(
    _caller: ApiWho,
    Shared(state): Shared<Arc<State>>,
    Query(params): Query<AuditParams>,
) -> Response {
    match state.rt.audit_trail(params.limit.unwrap_or(200)).await {
        Ok(entries) => Json(entries).into_response(),
        Err(error) => failed(error),
    }
}

/// The policies of the application's queues (and of executors given one), as stored.
#[utoipa::path(get, path = "/api/policies", responses((status = 200, body = [crate::QueuePolicy]), (status = 401, body = Problem)),
    security(("session" = []), ("bearer" = [])))]
async fn list_policies(_caller: ApiWho, Shared(state): Shared<Arc<State>>) -> Response {
    match state.rt.queue_policies().await {
        Ok(policies) => Json(policies).into_response(),
        Err(error) => failed(error),
    }
}

/// A change of a policy: the fields given are set (`null` puts one back to the code's),
/// those left out keep what is stored; `reset` first puts every field back.
#[derive(Debug, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct PolicyBody {
    /// The queue, or an executor in no queue.
    name: String,
    #[serde(default)]
    reset: bool,
    #[serde(default)]
    paused: Option<bool>,
    #[serde(default)]
    concurrency: Option<u32>,
    #[serde(default)]
    per_instance: Option<u32>,
    #[serde(default)]
    rate: Option<u32>,
    #[serde(default)]
    max_attempts: Option<u32>,
    /// With `backoff_cap_ms`.
    #[serde(default)]
    backoff_base_ms: Option<u64>,
    #[serde(default)]
    backoff_cap_ms: Option<u64>,
    #[serde(default)]
    timeout_ms: Option<u64>,
    #[serde(default)]
    priority_boost: Option<i32>,
}

/// Changes a policy on every instance (audited as `policy`); answers the policy as stored.
#[utoipa::path(post, path = "/api/policies", request_body = PolicyBody,
    responses((status = 200, body = crate::QueuePolicy), (status = 401, body = Problem), (status = 403, body = Problem), (status = 422, body = Problem)),
    security(("session" = []), ("bearer" = [])))]
async fn change_policy(
    caller: ApiWho,
    Shared(state): Shared<Arc<State>>,
    Json(body): Json<PolicyBody>,
) -> Response {
    if let Some(refused) = may_act(&caller) {
        return refused;
    }
    let mut change = state
        .rt
        .policy(body.name.clone())
        .by(caller.who.name.clone());
    if body.reset {
        change = change.reset();
    }
    if let Some(paused) = body.paused {
        change = change.paused(paused);
    }
    if let Some(n) = body.concurrency {
        change = change.concurrency(n);
    }
    if let Some(n) = body.per_instance {
        change = change.per_instance(n);
    }
    if let Some(n) = body.rate {
        change = change.rate(n);
    }
    if let Some(n) = body.max_attempts {
        change = change.max_attempts(n);
    }
    match (body.backoff_base_ms, body.backoff_cap_ms) {
        (Some(base), Some(cap)) => {
            change = change.backoff(Duration::from_millis(base), Duration::from_millis(cap))
        }
        (None, None) => {}
        _ => {
            return problem(
                StatusCode::UNPROCESSABLE_ENTITY,
                "give both backoff_base_ms and backoff_cap_ms, or neither",
            )
        }
    }
    if let Some(ms) = body.timeout_ms {
        change = change.timeout(Duration::from_millis(ms));
    }
    if let Some(boost) = body.priority_boost {
        change = change.priority_boost(boost);
    }
    if let Err(error) = change.apply().await {
        return failed(error);
    }
    match state.rt.queue_policies().await {
        Ok(policies) => match policies.into_iter().find(|p| p.queue == body.name) {
            Some(policy) => Json(policy).into_response(),
            None => problem(
                StatusCode::NOT_FOUND,
                "the policy was written but is not listed",
            ),
        },
        Err(error) => failed(error),
    }
}

/// The security schemes: the session cookie and bearer tokens.
struct SecuritySchemes;

impl utoipa::Modify for SecuritySchemes {
    fn modify(&self, openapi: &mut utoipa::openapi::OpenApi) {
        use utoipa::openapi::security::{
            ApiKey, ApiKeyValue, HttpAuthScheme, HttpBuilder, SecurityScheme,
        };
        let components = openapi.components.get_or_insert_with(Default::default);
        components.add_security_scheme(
            "bearer",
            SecurityScheme::Http(HttpBuilder::new().scheme(HttpAuthScheme::Bearer).build()),
        );
        components.add_security_scheme(
            "session",
            SecurityScheme::ApiKey(ApiKey::Cookie(ApiKeyValue::with_description(
                auth::COOKIE,
                "The session cookie of a login; writes also send X-CSRF-Token",
            ))),
        );
    }
}

#[derive(OpenApi)]
#[openapi(
    info(title = "async-exec console API", description = "Requests, executors, instances and operator actions of an async-exec database."),
    paths(login, session, overview, list_requests, get_request, list_executors, list_instances,
        list_audit, changes::count_action, changes::run_action, changes::pause_executor,
        changes::resume_executor, list_policies, change_policy,
        super::flow::list_queues, super::flow::queue_flow, super::flow::queue_history,
        super::partitions::list_partitions, super::partitions::change_partition),
    modifiers(&SecuritySchemes)
)]
struct ApiDoc;

/// The OpenAPI document of this API, with the mount path as its server.
async fn openapi(parts: Parts) -> Response {
    let mut doc = ApiDoc::openapi();
    let base = auth::base_of(&parts);
    let base = if base.is_empty() {
        "/".to_string()
    } else {
        base
    };
    doc.servers = Some(vec![utoipa::openapi::Server::new(base)]);
    Json(doc).into_response()
}

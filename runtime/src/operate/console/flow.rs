//! The flow of queues over the JSON API: `GET api/queues` (every queue with its verdict,
//! [`Runtime::queues_flow`](crate::Runtime::queues_flow)), `GET api/queues/{name}/flow`
//! (a queue's limits in force, what runs, waits and starts in it, per partition,
//! [`Runtime::queue_flow`](crate::Runtime::queue_flow)) and `GET
//! api/queues/{name}/history` (its saturation history,
//! [`Runtime::flow_history`](crate::Runtime::flow_history)).

use std::sync::Arc;
use std::time::Duration;

use axum::extract::{Path, Query, State as Shared};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde::Deserialize;

use super::auth::ApiWho;
use super::reads::{problem, Problem};
use super::State;

fn failed(error: crate::Error) -> Response {
    let refused = super::reads::Refused::from(error);
    problem(refused.status, &refused.message)
}

/// The most history one read returns: the default retention.
const MAX_SPAN_SECS: u64 = 24 * 3600;

/// How many partitions to list.
#[derive(Debug, Deserialize, utoipa::IntoParams)]
#[serde(deny_unknown_fields)]
pub(crate) struct FlowParams {
    /// The partitions with the most waiting, at most this many (1 to 1,000; 100 if not
    /// given).
    partitions: Option<usize>,
}

/// How far back to read.
#[derive(Debug, Deserialize, utoipa::IntoParams)]
#[serde(deny_unknown_fields)]
pub(crate) struct HistoryParams {
    /// Seconds back from now (1 to 86,400; 3,600 if not given).
    seconds: Option<u64>,
}

/// A 404 when `name` names no queue of this application, with what lists them; `None`
/// when it does.
pub(crate) async fn unknown_queue(state: &State, name: &str) -> Option<Response> {
    match state.rt.is_queue(name).await {
        Ok(true) => None,
        Ok(false) => Some(problem(
            StatusCode::NOT_FOUND,
            &format!(
                "no queue of this application is named {:?}; GET api/queues lists them",
                crate::base::text::capped(name, 100)
            ),
        )),
        Err(error) => Some(failed(error)),
    }
}

/// Every queue of the application, with what it holds now and its verdict.
#[utoipa::path(get, path = "/api/queues",
    responses((status = 200, body = Vec<crate::QueueSummary>), (status = 401, body = Problem)),
    security(("session" = []), ("bearer" = [])))]
pub(crate) async fn list_queues(_caller: ApiWho, Shared(state): Shared<Arc<State>>) -> Response {
    match state.rt.queues_flow().await {
        Ok(queues) => Json(queues).into_response(),
        Err(error) => failed(error),
    }
}

/// A queue now: its limits in force, what runs, waits and starts in it, its lag, per
/// partition, and its verdict.
#[utoipa::path(get, path = "/api/queues/{name}/flow", params(("name" = String, Path, description = "The queue"), FlowParams),
    responses((status = 200, body = crate::QueueFlow), (status = 404, body = Problem), (status = 401, body = Problem)),
    security(("session" = []), ("bearer" = [])))]
pub(crate) async fn queue_flow(
    _caller: ApiWho,
    Shared(state): Shared<Arc<State>>,
    Path(name): Path<String>,
    Query(params): Query<FlowParams>,
) -> Response {
    if let Some(refused) = unknown_queue(&state, &name).await {
        return refused;
    }
    match state
        .rt
        .queue_flow(&name, params.partitions.unwrap_or(100))
        .await
    {
        Ok(flow) => Json(flow).into_response(),
        Err(error) => failed(error),
    }
}

/// A queue's saturation history, oldest sample first.
#[utoipa::path(get, path = "/api/queues/{name}/history", params(("name" = String, Path, description = "The queue"), HistoryParams),
    responses((status = 200, body = Vec<crate::FlowSample>), (status = 404, body = Problem), (status = 401, body = Problem)),
    security(("session" = []), ("bearer" = [])))]
pub(crate) async fn queue_history(
    _caller: ApiWho,
    Shared(state): Shared<Arc<State>>,
    Path(name): Path<String>,
    Query(params): Query<HistoryParams>,
) -> Response {
    if let Some(refused) = unknown_queue(&state, &name).await {
        return refused;
    }
    let seconds = params.seconds.unwrap_or(3600).clamp(1, MAX_SPAN_SECS);
    match state
        .rt
        .flow_history(&name, Duration::from_secs(seconds))
        .await
    {
        Ok(samples) => Json(samples).into_response(),
        Err(error) => failed(error),
    }
}

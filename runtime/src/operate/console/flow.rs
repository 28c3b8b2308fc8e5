//! `GET api/queues/{name}/flow`: a queue's limits in force, and what runs and waits in
//! it, per partition ([`Runtime::queue_flow`](crate::Runtime::queue_flow)).

use std::sync::Arc;

use axum::extract::{Path, Query, State as Shared};
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

/// How many partitions to list.
#[derive(Debug, Deserialize, utoipa::IntoParams)]
#[serde(deny_unknown_fields)]
pub(crate) struct FlowParams {
    /// The partitions with the most waiting, at most this many (1 to 1,000; 100 if not
    /// given).
    partitions: Option<usize>,
}

/// A queue now: its limits in force, what runs and waits in it, and per partition.
#[utoipa::path(get, path = "/api/queues/{name}/flow", params(("name" = String, Path, description = "The queue"), FlowParams),
    responses((status = 200, body = crate::QueueFlow), (status = 404, body = Problem), (status = 401, body = Problem)),
    security(("session" = []), ("bearer" = [])))]
pub(crate) async fn queue_flow(
    _caller: ApiWho,
    Shared(state): Shared<Arc<State>>,
    Path(name): Path<String>,
    Query(params): Query<FlowParams>,
) -> Response {
    let known = match state.rt.queue_policies().await {
        Ok(policies) => policies.iter().any(|p| p.queue == name),
        Err(error) => return failed(error),
    };
    if !known {
        return problem(
            axum::http::StatusCode::NOT_FOUND,
            &format!(
                "no queue of this application is named {:?}; GET api/policies lists them",
                crate::base::text::capped(&name, 100)
            ),
        );
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

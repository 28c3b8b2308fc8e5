//! `GET` and `POST api/queues/{name}/partitions`: the partitions of a queue with settings
//! of their own, and a change of one partition's (set, or cleared with `"settings":
//! null`), audited as the runtime's `set_partition` and `clear_partition` are. The
//! partition goes in the body, not the path: a tenant's name may hold any character.

use std::sync::Arc;

use axum::extract::{Path, Query, State as Shared};
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde::{Deserialize, Serialize};

use super::api_changes::{failed, may_act};
use super::auth::ApiWho;
use super::reads::Problem;
use super::State;
use crate::base::partition::PartitionSettings;

/// Which page of the list.
#[derive(Debug, Deserialize, utoipa::IntoParams)]
#[serde(deny_unknown_fields)]
pub(crate) struct ListParams {
    /// The last partition of the page before.
    after: Option<String>,
    /// At most this many (1 to 1,000; 100 if not given).
    limit: Option<usize>,
}

/// The partitions of a queue with settings of their own, by name.
#[utoipa::path(get, path = "/api/queues/{name}/partitions", params(("name" = String, Path, description = "The queue"), ListParams),
    responses((status = 200, body = [crate::PartitionEntry]), (status = 401, body = Problem), (status = 422, body = Problem)),
    security(("session" = []), ("bearer" = [])))]
pub(crate) async fn list_partitions(
    _caller: ApiWho,
    Shared(state): Shared<Arc<State>>,
    Path(name): Path<String>,
    Query(params): Query<ListParams>,
) -> Response {
    if let Err(error) = state.rt.known_queue(&name).await {
        return failed(error);
    }
    match state
        .rt
        .partition_settings(&name, params.after.as_deref(), params.limit.unwrap_or(100))
        .await
    {
        Ok(list) => Json(list).into_response(),
        Err(error) => failed(error),
    }
}

/// A change of one partition's settings.
#[derive(Debug, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct PartitionBody {
    /// The partition (1 to 255 characters without NUL).
    partition: String,
    /// Its settings, replacing what it had (`weight`, `concurrency`, `rate`: `{"starts":
    /// 5, "period": "second" | "minute" | "hour" | "day"}`); `null` clears them.
    settings: Option<PartitionSettings>,
}

/// What a change did.
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub(crate) struct PartitionChanged {
    partition: String,
    /// The settings now (`null`: the queue's).
    settings: Option<PartitionSettings>,
    /// Cleared settings only: whether it had any.
    cleared: Option<bool>,
}

/// Sets or clears one partition's settings on every instance (audited as `partition` or
/// `partition-clear`).
#[utoipa::path(post, path = "/api/queues/{name}/partitions", params(("name" = String, Path, description = "The queue")), request_body = PartitionBody,
    responses((status = 200, body = PartitionChanged), (status = 401, body = Problem), (status = 403, body = Problem), (status = 422, body = Problem)),
    security(("session" = []), ("bearer" = [])))]
pub(crate) async fn change_partition(
    caller: ApiWho,
    Shared(state): Shared<Arc<State>>,
    Path(name): Path<String>,
    Json(body): Json<PartitionBody>,
) -> Response {
    if let Some(refused) = may_act(&caller) {
        return refused;
    }
    let actor = caller.who.name.clone();
    let done = match body.settings {
        Some(settings) => state
            .rt
            .set_partition(&name, &body.partition, settings, &actor)
            .await
            .map(|()| None),
        None => state
            .rt
            .clear_partition(&name, &body.partition, &actor)
            .await
            .map(Some),
    };
    match done {
        Ok(cleared) => Json(PartitionChanged {
            partition: body.partition,
            settings: body.settings,
            cleared,
        })
        .into_response(),
        Err(error) => failed(error),
    }
}

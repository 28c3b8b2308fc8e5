//! What a page and its JSON twin both read: a page of the requests matching a filter, and
//! one request with its attempts. The handlers only render (HTML or JSON) and map a
//! [`Refused`] to their kind of error response.

use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde::Serialize;

use super::filter::{FilterForm, PageForm};
use super::State;
use crate::base::query::{Cursor, PageSpec};
use crate::base::record::{AttemptLog, Request, RequestId};

/// Why a read gave nothing to show: the status to answer with and what to say.
#[derive(Debug)]
pub(crate) struct Refused {
    pub(crate) status: StatusCode,
    pub(crate) message: String,
}

/// What a visitor is told when the database failed: the error itself (which may name
/// tables, hosts or the instance) goes to the log only.
pub(crate) const INTERNAL: &str =
    "the console could not read or change the records: the application's log says why; try again";

impl From<crate::Error> for Refused {
    fn from(error: crate::Error) -> Refused {
        let status = match error {
            crate::Error::InvalidFilter(_) => StatusCode::BAD_REQUEST,
            crate::Error::NotFound(_) => StatusCode::NOT_FOUND,
            crate::Error::InvalidState { .. } | crate::Error::MoreMatch { .. } => {
                StatusCode::CONFLICT
            }
            // A setting or policy out of range, named with its range.
            crate::Error::Config { .. } => StatusCode::UNPROCESSABLE_ENTITY,
            _ => StatusCode::INTERNAL_SERVER_ERROR,
        };
        if status != StatusCode::INTERNAL_SERVER_ERROR {
            return Refused {
                status,
                message: error.to_string(),
            };
        }
        // Debug formatting escapes newlines and control characters: no forged log lines.
        crate::log::warn!(error = ?error.to_string(), "console: a request failed");
        Refused {
            status,
            message: INTERNAL.to_string(),
        }
    }
}

fn bad_request(message: String) -> Refused {
    Refused {
        status: StatusCode::BAD_REQUEST,
        message,
    }
}

/// The query of `filter`, refused (403) when it names an application this console does
/// not serve: the runtime's own, and those of [`super::ConsoleConfig::applications`].
pub(crate) fn scoped_query(
    state: &State,
    filter: &FilterForm,
) -> Result<crate::RequestQuery, Refused> {
    let query = filter.to_query().map_err(bad_request)?;
    if let Some(application) = &query.application {
        let own = state.rt.application();
        if application != own && !state.config.applications.contains(application) {
            return Err(Refused {
                status: StatusCode::FORBIDDEN,
                message: format!(
                    "this console serves the application `{own}`{others}, not `{}`: \
                     name it in ConsoleConfig::applications to serve it here",
                    crate::base::text::capped(application, 100),
                    others = if state.config.applications.is_empty() {
                        String::new()
                    } else {
                        format!(" and {}", state.config.applications.join(", "))
                    }
                ),
            });
        }
    }
    Ok(query)
}

/// A keyset page of requests.
#[derive(Debug)]
pub(crate) struct RequestList {
    pub(crate) rows: Vec<Request>,
    /// The page asked for (order and size, for the next page's link).
    pub(crate) page: PageSpec,
    /// Where the next page starts; `None` on the last.
    pub(crate) next: Option<Cursor>,
    /// The requests looked at, when a text filter's search window ended the page before
    /// it filled (`next` continues the search).
    pub(crate) searched: Option<i64>,
}

/// The page of requests that `filter` and `paging` ask for.
pub(crate) async fn request_list(
    state: &State,
    filter: &FilterForm,
    paging: &PageForm,
) -> Result<RequestList, Refused> {
    let query = scoped_query(state, filter)?;
    let page = paging
        .to_page()
        .map_err(bad_request)?
        .search_window(state.config.search_window);
    let found = state.rt.list(&query, &page).await?;
    Ok(RequestList {
        rows: found.requests,
        page,
        next: found.next,
        searched: found.searched,
    })
}

/// A request of the application and every attempt logged for it, with their runs.
pub(crate) async fn request_with_attempts(
    state: &State,
    id: RequestId,
) -> Result<(Request, Vec<Attempt>), Refused> {
    let request = state.rt.get(id).await?.ok_or_else(|| Refused {
        status: StatusCode::NOT_FOUND,
        message: format!("no request {id}: it may have succeeded and been deleted"),
    })?;
    let attempts = with_runs(state.rt.attempts(id).await?);
    Ok((request, attempts))
}

/// One logged attempt with its place in the request's history.
#[derive(Debug, Clone, Serialize, utoipa::ToSchema)]
pub(crate) struct Attempt {
    /// Its place in the history, from 1, in the order `async_log` keeps.
    pub(crate) seq: u32,
    /// The run it belongs to, from 1. A replay (of a `dead`, `cancelled` or succeeded
    /// request) starts a new run, whose attempts are numbered from 1 again. Told from the
    /// log: an attempt numbered no higher than the one before starts a run (a run whose
    /// only attempt succeeded without `log_success` leaves no row, so it is not counted).
    pub(crate) run: u32,
    /// Whether it starts a run after the first: a replay.
    pub(crate) replayed: bool,
    /// The logged row (`attempt` is the number within the run).
    #[serde(flatten)]
    pub(crate) log: AttemptLog,
}

/// `logs` (in the order they were written) with their runs.
pub(crate) fn with_runs(logs: Vec<AttemptLog>) -> Vec<Attempt> {
    let mut run = 1;
    let mut previous: Option<i32> = None;
    logs.into_iter()
        .zip(1..)
        .map(|(log, seq)| {
            let replayed = previous.is_some_and(|p| log.attempt <= p);
            if replayed {
                run += 1;
            }
            previous = Some(log.attempt);
            Attempt {
                seq,
                run,
                replayed,
                log,
            }
        })
        .collect()
}

/// An error: what went wrong and what to do.
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub(crate) struct Problem {
    /// The message.
    error: String,
}

/// A JSON error response.
pub(crate) fn problem(status: StatusCode, message: &str) -> Response {
    (
        status,
        Json(Problem {
            error: message.to_string(),
        }),
    )
        .into_response()
}

/// Running and waiting requests by queue (and policy): a queue's executors (those this
/// binary links), an executor in no queue under its name, and `(all)` everything. What
/// the overview and the policies page show.
pub(crate) fn queue_load(
    state: &State,
    counts: &[crate::base::query::ExecutorCount],
) -> std::collections::BTreeMap<String, (i64, i64)> {
    let queue_of = |executor: &str| {
        state
            .rt
            .inner
            .registry
            .defs()
            .find(|d| d.name == executor)
            .map_or(executor.to_string(), |d| {
                d.queue.unwrap_or(d.name).to_string()
            })
    };
    let mut load: std::collections::BTreeMap<String, (i64, i64)> = Default::default();
    for c in counts {
        let (running, waiting) = match c.status {
            crate::Status::Running => (c.count, 0),
            crate::Status::Init | crate::Status::Failed => (0, c.count),
            _ => continue,
        };
        for name in [
            queue_of(&c.executor),
            crate::base::queue::GLOBAL_QUEUE.to_string(),
        ] {
            let entry = load.entry(name).or_default();
            entry.0 += running;
            entry.1 += waiting;
        }
    }
    load
}

#[cfg(test)]
mod tests {
    use super::*;

    fn log(attempt: i32) -> AttemptLog {
        AttemptLog {
            request_id: 1,
            attempt,
            worker: "w".into(),
            started: 0,
            finished: 0,
            outcome: "error".into(),
            error: None,
        }
    }

    #[test]
    fn a_replay_starts_a_run_and_attempts_keep_their_order() {
        let attempts = with_runs([1, 2, 3, 1, 1, 2].map(log).to_vec());
        let seen: Vec<(u32, u32, i32, bool)> = attempts
            .iter()
            .map(|a| (a.seq, a.run, a.log.attempt, a.replayed))
            .collect();
        assert_eq!(
            seen,
            [
                (1, 1, 1, false),
                (2, 1, 2, false),
                (3, 1, 3, false),
                (4, 2, 1, true),
                (5, 3, 1, true),
                (6, 3, 2, false),
            ]
        );
        assert!(with_runs(Vec::new()).is_empty());
    }
}

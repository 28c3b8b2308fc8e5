//! What a page and its JSON twin both read: a page of the requests matching a filter, and
//! one request with its attempts. The handlers only render (HTML or JSON) and map a
//! [`Refused`] to their kind of error response.

use axum::http::StatusCode;

use super::filter::{FilterForm, PageForm};
use super::State;
use crate::query::{Cursor, PageSpec};
use crate::record::{AttemptLog, Request, RequestId};

/// Why a read gave nothing to show: the status to answer with and what to say.
#[derive(Debug)]
pub(crate) struct Refused {
    pub(crate) status: StatusCode,
    pub(crate) message: String,
}

impl From<crate::Error> for Refused {
    fn from(error: crate::Error) -> Refused {
        let status = match error {
            crate::Error::InvalidFilter(_) => StatusCode::BAD_REQUEST,
            crate::Error::NotFound(_) => StatusCode::NOT_FOUND,
            _ => StatusCode::INTERNAL_SERVER_ERROR,
        };
        Refused {
            status,
            message: error.to_string(),
        }
    }
}

fn bad_request(message: String) -> Refused {
    Refused {
        status: StatusCode::BAD_REQUEST,
        message,
    }
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
    let query = filter.to_query().map_err(bad_request)?;
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

/// A request of the application and every attempt logged for it.
pub(crate) async fn request_with_attempts(
    state: &State,
    id: RequestId,
) -> Result<(Request, Vec<AttemptLog>), Refused> {
    let request = state.rt.get(id).await?.ok_or_else(|| Refused {
        status: StatusCode::NOT_FOUND,
        message: format!("no request {id}: it may have succeeded and been deleted"),
    })?;
    let attempts = state.rt.attempts(id).await?;
    Ok((request, attempts))
}

//! Operations on records from code: look, list, retry, cancel, delete.

use crate::error::{Error, Result};
use crate::record::{AttemptLog, Request, RequestId, Status};
use crate::runtime::Runtime;
use crate::store::RequestFilter;

/// The most requests one [`Runtime::list`] returns.
const MAX_LIST: i64 = 100_000;

impl Runtime {
    /// One request of this application, if it exists.
    pub async fn get(&self, id: RequestId) -> Result<Option<Request>> {
        self.inner.store.request_get(&self.inner.app, id).await
    }

    /// Requests of this application, newest first (oldest first when paging with `after_id`).
    ///
    /// ```no_run
    /// # async fn demo(rt: async_exec::Runtime) -> async_exec::Result<()> {
    /// use async_exec::{RequestFilter, Status};
    /// for dead in rt.list(RequestFilter::default().status(Status::Dead)).await? {
    ///     println!("{} {}: {:?}", dead.id, dead.executor, dead.last_error);
    /// }
    /// # Ok(()) }
    /// ```
    pub async fn list(&self, mut filter: RequestFilter) -> Result<Vec<Request>> {
        // Stored text has NUL replaced (PostgreSQL refuses it): look for what is stored.
        for text in [
            &mut filter.executor,
            &mut filter.key,
            &mut filter.remark_contains,
            &mut filter.error_contains,
        ]
        .into_iter()
        .flatten()
        {
            if text.contains('\0') {
                *text = crate::text::sanitized(text).into_owned();
            }
        }
        if let Some(limit) = filter.limit {
            if !(1..=MAX_LIST).contains(&limit) {
                return Err(Error::InvalidFilter(format!(
                    "`limit({limit})`: list 1 to {MAX_LIST} requests at a time, and page with `after_id`"
                )));
            }
        }
        self.inner
            .store
            .request_list(&self.inner.app, &filter)
            .await
    }

    /// How many requests of this application are in each status: every status, in the
    /// order of [`Status::ALL`], those with no request as 0.
    ///
    /// ```no_run
    /// # async fn demo(rt: async_exec::Runtime) -> async_exec::Result<()> {
    /// for (status, n) in rt.count_by_status().await? {
    ///     println!("{status}: {n}"); // init: 0, running: 2, ...
    /// }
    /// # Ok(()) }
    /// ```
    pub async fn count_by_status(&self) -> Result<Vec<(Status, i64)>> {
        let counted = self
            .inner
            .store
            .request_count_by_status(&self.inner.app)
            .await?;
        Ok(Status::ALL
            .into_iter()
            .map(|status| {
                let n = counted
                    .iter()
                    .filter(|(s, _)| *s == status)
                    .map(|(_, n)| n)
                    .sum();
                (status, n)
            })
            .collect())
    }

    /// The attempts logged for a request of this application, in the order they were
    /// written (the attempts of a replay follow those before it, though their numbers
    /// start again at 1).
    pub async fn attempts(&self, id: RequestId) -> Result<Vec<AttemptLog>> {
        self.inner.store.log_list(&self.inner.app, id).await
    }

    /// Runs a request again as soon as a worker is free: a `failed` one keeps its attempt
    /// count; a `dead` or `cancelled` one is replayed with fresh attempts. Refused for
    /// `init` and `running` requests, which will run anyway, and for a `success` (running a
    /// body that succeeded again is rarely meant: say so with [`Runtime::replay`]).
    pub async fn retry_now(&self, id: RequestId) -> Result<()> {
        self.retry(id, false).await
    }

    /// Runs a request again with fresh attempts, also one that succeeded (kept with
    /// `delete_on_success(false)`). Refused for `init` and `running` requests.
    ///
    /// ```no_run
    /// # async fn demo(rt: async_exec::Runtime, id: i64) -> async_exec::Result<()> {
    /// rt.replay(id).await?; // the mail that succeeded is sent again, on purpose
    /// # Ok(()) }
    /// ```
    pub async fn replay(&self, id: RequestId) -> Result<()> {
        self.retry(id, true).await
    }

    async fn retry(&self, id: RequestId, replay_success: bool) -> Result<()> {
        let status = self
            .inner
            .store
            .request_retry_now(&self.inner.app, id, self.inner.now_ms(), replay_success)
            .await?;
        match status {
            None => Err(Error::NotFound(id)),
            Some(status) if status.may_retry(replay_success) => Ok(()),
            Some(Status::Success) => Err(Error::InvalidState {
                id,
                status: "success".into(),
                reason: "it succeeded already; call `replay(id)` to run it again on purpose",
            }),
            Some(status) => Err(Error::InvalidState {
                id,
                status: status.to_string(),
                reason: "it is queued or running already",
            }),
        }
    }

    /// Cancels a request that has not succeeded and is not running (`init` or `failed`).
    pub async fn cancel(&self, id: RequestId) -> Result<()> {
        let status = self
            .inner
            .store
            .request_cancel(&self.inner.app, id, self.inner.now_ms())
            .await?;
        match status {
            None => Err(Error::NotFound(id)),
            Some(Status::Init | Status::Failed) => Ok(()),
            Some(other) => Err(Error::InvalidState {
                id,
                status: other.to_string(),
                reason: "only `init` and `failed` requests can be cancelled",
            }),
        }
    }

    /// Deletes a request and its attempt log. Refused while it is `running`.
    pub async fn delete(&self, id: RequestId) -> Result<()> {
        let status = self.inner.store.request_delete(&self.inner.app, id).await?;
        match status {
            None => Err(Error::NotFound(id)),
            Some(Status::Running) => Err(Error::InvalidState {
                id,
                status: "running".into(),
                reason: "wait for it to finish, or for its lease to expire",
            }),
            Some(_) => Ok(()),
        }
    }
}

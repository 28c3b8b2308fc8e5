//! Requests from code, the console and the command-line tool: one by id, pages of those
//! that match a [`RequestQuery`], counts, attempts; retry, cancel or delete one; an
//! action on every request that matches a query (written to the audit trail); purges of
//! finished requests.

use crate::base::error::{Error, Result};
use crate::base::query::{Action, AuditEntry, Page, PageSpec, RequestQuery};
use crate::base::record::{AttemptLog, Request, RequestId, Status};
use crate::runtime::Runtime;
use crate::store::Rerun;
use crate::sweeps::purge::{purge_all, Purge, PurgeReport};

/// The longest filter text accepted: longer ones are refused with a message.
const MAX_FILTER_TEXT: usize = 1024;

/// The most requests one confirmed action (`act_up_to`) reads the ids of.
const MAX_CONFIRMED: u64 = 1_000_000;

/// Refuses a query whose text is too long to be a filter.
pub(crate) fn check_query(query: &RequestQuery) -> Result<()> {
    let texts = [
        ("executor", &query.executor),
        ("application", &query.application),
        ("key", &query.key),
        ("remark", &query.remark),
        ("error", &query.error),
        ("tag", &query.tag),
    ];
    if let Some(Err(reason)) = query.arg_path() {
        return Err(Error::InvalidFilter(reason));
    }
    let arg_value = query.arg.as_ref().map(|(_, value)| value.clone());
    for (field, text) in texts.into_iter().chain([("arg", &arg_value)]) {
        if let Some(text) = text.as_deref().filter(|t| t.len() > MAX_FILTER_TEXT) {
            return Err(Error::InvalidFilter(format!(
                "`{field}` is {} bytes long: filter by at most {MAX_FILTER_TEXT} bytes of it",
                text.len()
            )));
        }
    }
    Ok(())
}

impl Runtime {
    fn application_of<'a>(&'a self, query: &'a RequestQuery) -> &'a str {
        query.application.as_deref().unwrap_or(&self.inner.app)
    }

    /// One request of this application, if it exists.
    pub async fn get(&self, id: RequestId) -> Result<Option<Request>> {
        self.inner.store.request_get(&self.inner.app, id).await
    }

    /// What the body of request `id` returned, when its record keeps it: the `Ok` value
    /// of a body returning `Result<T, E>` with `T: Serialize` (a [`Partial`](crate::Partial)
    /// for batch work), written with the record when it succeeded and is kept
    /// (`delete_on_success(false)`; a deleted record keeps nothing). `Ok(None)` while it
    /// has not succeeded, or when the body returned `()`; [`Error::NotFound`] without such
    /// a request; [`Error::ResultType`](crate::Error::ResultType) when the value does not
    /// decode into `T`.
    ///
    /// ```no_run
    /// use async_exec::{async_exec, Runtime};
    ///
    /// #[derive(serde::Serialize, serde::Deserialize)]
    /// struct Invoice { number: String, total_cents: i64 }
    ///
    /// #[async_exec(type = SaveAsync)]
    /// async fn make_invoice(order: i64) -> anyhow::Result<Invoice> {
    ///     Ok(Invoice { number: format!("INV-{order}"), total_cents: 4_200 })
    /// }
    ///
    /// # async fn demo(rt: Runtime) -> async_exec::Result<()> {
    /// let id = make_invoice(42).on(&rt).await?.id.unwrap();
    /// // ... later, once it ran:
    /// if let Some(invoice) = rt.result::<Invoice>(id).await? {
    ///     println!("{} for {} cents", invoice.number, invoice.total_cents);
    /// }
    /// # Ok(()) }
    /// ```
    pub async fn result<T: serde::de::DeserializeOwned>(&self, id: RequestId) -> Result<Option<T>> {
        let ops = self.inner.store.ops();
        match ops.request_result(&self.inner.app, id).await? {
            None => Err(Error::NotFound(id)),
            Some(None) => Ok(None),
            Some(Some(json)) => serde_json::from_str(&json)
                .map(Some)
                .map_err(|source| Error::ResultType { id, source }),
        }
    }

    /// A page of the requests that match `query` (of this application unless it names
    /// another), in id order (the order they were written in), newest first unless
    /// `page` says otherwise. Keyset paging: pass the page's [`Page::next`] to
    /// [`PageSpec::after`] for the next one. A time range is exact whatever order
    /// creation times are in, and read through ids (as fast as an unfiltered page, for a
    /// range of up to 100,000 records). With a text filter a page looks at no more than
    /// [`PageSpec::search_window`] requests ([`Page::searched`]). A limit or window out
    /// of range, or a filter text over 1,024 bytes, is an [`Error::InvalidFilter`] that
    /// says what to ask for.
    ///
    /// ```no_run
    /// # async fn demo(rt: async_exec::Runtime) -> async_exec::Result<()> {
    /// use async_exec::{PageSpec, RequestQuery, Status};
    /// let dead = RequestQuery::default().status(Status::Dead);
    /// for request in rt.list(&dead, &PageSpec::default()).await? {
    ///     println!("{} {}: {:?}", request.id, request.executor, request.last_error);
    /// }
    /// # Ok(()) }
    /// ```
    pub async fn list(&self, query: &RequestQuery, page: &PageSpec) -> Result<Page> {
        check_query(query)?;
        page.check()?;
        self.inner
            .store
            .ops()
            .request_page(self.application_of(query), query, page)
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
        self.retry(id, Rerun::default()).await
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
        let rerun = Rerun {
            replay_success: true,
            ..Rerun::default()
        };
        self.retry(id, rerun).await
    }

    /// [`replay`](Runtime::replay) from the start: the request's durable steps
    /// ([`Context::step`](crate::Context::step)) are forgotten in the same transaction, so
    /// that every step's work runs again (a replay keeps them: a step that finished is
    /// read back, not run). Refused as `replay` is, and then nothing is forgotten.
    ///
    /// ```no_run
    /// # async fn demo(rt: async_exec::Runtime, id: i64) -> async_exec::Result<()> {
    /// // The charge was refunded by hand: charge again, ship again, mail again.
    /// rt.replay_from_start(id).await?;
    /// # Ok(()) }
    /// ```
    pub async fn replay_from_start(&self, id: RequestId) -> Result<()> {
        let rerun = Rerun {
            replay_success: true,
            reset_steps: true,
        };
        self.retry(id, rerun).await
    }

    async fn retry(&self, id: RequestId, rerun: Rerun) -> Result<()> {
        let replay_success = rerun.replay_success;
        let status = self
            .inner
            .store
            .request_retry_now(&self.inner.app, id, self.inner.now_ms(), rerun)
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

    /// The durable steps request `id` has kept so far (see
    /// [`Context::step`](crate::Context::step)), in their order: each one's name and the
    /// JSON of its value. Empty for a request without steps, or one that is gone.
    ///
    /// ```no_run
    /// # async fn demo(rt: async_exec::Runtime) -> async_exec::Result<()> {
    /// for step in rt.steps(42).await? {
    ///     println!("{}. {} = {}", step.position + 1, step.name, step.value_json);
    /// }
    /// # Ok(()) }
    /// ```
    pub async fn steps(&self, id: RequestId) -> Result<Vec<StepInfo>> {
        use crate::store::steps::StepStore as _;
        let steps = self.inner.store.ops().steps_of(id).await?;
        Ok(steps
            .into_iter()
            .map(|s| StepInfo {
                position: s.position,
                name: s.name,
                value_json: s.value_json,
            })
            .collect())
    }

    /// How many requests match `query`.
    pub async fn count_matching(&self, query: &RequestQuery) -> Result<i64> {
        check_query(query)?;
        self.inner
            .store
            .ops()
            .request_count_matching(self.application_of(query), query, &[])
            .await
    }

    /// How many requests matching `query` `action` would change now: the count to show
    /// before an operator confirms it.
    pub async fn count_actionable(&self, action: Action, query: &RequestQuery) -> Result<i64> {
        check_query(query)?;
        self.inner
            .store
            .ops()
            .request_count_matching(self.application_of(query), query, action.applies_to())
            .await
    }

    /// Applies `action` to every request matching `query` that it applies to (see
    /// [`Action::applies_to`]), 500 requests to a transaction in id order (so that a large
    /// action does not hold the database's locks, or SQLite's one writer, for seconds; a
    /// failure part way leaves the batches before it done), and writes it to the audit
    /// trail as done by `actor`. Returns how many requests changed.
    ///
    /// ```no_run
    /// # async fn demo(rt: async_exec::Runtime) -> async_exec::Result<()> {
    /// use async_exec::{Action, RequestQuery, Status};
    /// let query = RequestQuery::default().executor("mail::send").status(Status::Dead);
    /// let replayed = rt.act(Action::ReplayDead, &query, "alice").await?;
    /// println!("{replayed} mails sent again");
    /// # Ok(()) }
    /// ```
    pub async fn act(&self, action: Action, query: &RequestQuery, actor: &str) -> Result<u64> {
        check_query(query)?;
        let application = self.application_of(query);
        let now = self.inner.now_ms();
        let ops = self.inner.store.ops();
        let changed = ops.request_act(application, query, action, now).await?;
        self.acted(application, action, query, actor, changed).await
    }

    /// [`act`](Runtime::act) confirmed for at most `up_to` requests, as an operator who
    /// was shown a count confirms it: the requests that match when it starts are read
    /// (their ids), and when more than `up_to` match nothing changes
    /// ([`Error::MoreMatch`]); otherwise the action applies to those requests only (each
    /// re-checked against the filter), never to one that came to match later. `up_to`
    /// is at most 1,000,000 ([`Error::InvalidFilter`] beyond: narrow the filter).
    ///
    /// ```no_run
    /// # async fn demo(rt: async_exec::Runtime) -> async_exec::Result<()> {
    /// use async_exec::{Action, RequestQuery, Status};
    /// let query = RequestQuery::default().executor("mail::send").status(Status::Dead);
    /// let shown = rt.count_actionable(Action::ReplayDead, &query).await?;
    /// // ... the operator confirms `shown` ...
    /// match rt.act_up_to(Action::ReplayDead, &query, shown as u64, "alice").await {
    ///     Ok(replayed) => println!("{replayed} mails sent again"),
    ///     Err(async_exec::Error::MoreMatch { matching, .. }) => {
    ///         println!("{matching} match now: count again and confirm")
    ///     }
    ///     Err(other) => return Err(other),
    /// }
    /// # Ok(()) }
    /// ```
    pub async fn act_up_to(
        &self,
        action: Action,
        query: &RequestQuery,
        up_to: u64,
        actor: &str,
    ) -> Result<u64> {
        check_query(query)?;
        if up_to > MAX_CONFIRMED {
            return Err(Error::InvalidFilter(format!(
                "an action is confirmed for at most {MAX_CONFIRMED} requests, not {up_to}: \
                 narrow the filter (an executor, a status, a time range)"
            )));
        }
        let application = self.application_of(query);
        let ops = self.inner.store.ops();
        let ids = ops
            .request_ids_actionable(application, query, action, up_to + 1)
            .await?;
        if ids.len() as u64 > up_to {
            let counted = ops
                .request_count_matching(application, query, action.applies_to())
                .await?;
            return Err(Error::MoreMatch {
                matching: (counted.max(0) as u64).max(ids.len() as u64),
                up_to,
            });
        }
        let now = self.inner.now_ms();
        let changed = ops
            .request_act_ids(application, query, action, now, &ids)
            .await?;
        self.acted(application, action, query, actor, changed).await
    }

    /// After an action: the audit entry, and a look in the store for requests made due.
    async fn acted(
        &self,
        application: &str,
        action: Action,
        query: &RequestQuery,
        actor: &str,
        changed: u64,
    ) -> Result<u64> {
        let target = serde_json::to_string(query).expect("a query serializes");
        self.audit(application, actor, action.as_str(), target, changed as i64)
            .await?;
        if changed > 0 && matches!(action, Action::Retry | Action::ReplayDead) {
            // Due now: the sweep of due records would find them within its interval.
            self.inner.dispatcher.store_waker().look_in_store();
        }
        Ok(changed)
    }

    /// Writes an operator's action to the audit trail.
    pub(crate) async fn audit(
        &self,
        application: &str,
        actor: &str,
        action: &str,
        target: String,
        affected: i64,
    ) -> Result<()> {
        let entry = AuditEntry {
            id: 0,
            application: application.to_string(),
            actor: actor.to_string(),
            action: action.to_string(),
            target,
            affected,
            create_time: self.inner.now_ms(),
        };
        self.inner.store.ops().audit_add(&entry).await
    }
}

impl Runtime {
    /// Deletes finished records and old attempt logs, `purge.batch` rows per transaction,
    /// until none is left; see [`Purge`]. The age is measured with the database's clock.
    pub async fn purge(&self, purge: Purge) -> Result<PurgeReport> {
        let inner = &self.inner;
        let report = purge_all(&*inner.store, &inner.app, inner.now_ms(), purge).await?;
        crate::log::info!(
            application = %crate::log::escaped(&inner.app),
            requests = report.requests,
            attempt_logs = report.attempt_logs,
            "purged finished requests"
        );
        Ok(report)
    }
}

/// A durable step a request kept ([`Runtime::steps`]).
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
#[non_exhaustive]
pub struct StepInfo {
    /// Where it is in the body's order, from 0.
    pub position: i64,
    /// Its name.
    pub name: String,
    /// The JSON of its value.
    pub value_json: String,
}

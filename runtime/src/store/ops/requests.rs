//! Pages, counts and actions on the requests that match a [`RequestQuery`]: what the console, the
//! JSON API and the CLI list and act on (retry, replay, cancel, delete), in batches of
//! [`ACT_BATCH`] to a transaction.

use async_trait::async_trait;

use crate::base::error::Result;
use crate::base::query::{Action, Page, PageSpec, RequestQuery};
use crate::base::record::Status;
use crate::store::sql::{Bind, Cells, Col, Dialect, Sql, SqlRunner, Txn};

/// The statements about the requests that match a query.
/// Every backend has them through its [`SqlRunner`].
#[async_trait]
pub(crate) trait RequestOps: SqlRunner {
    /// A page of the requests of `application` that match `query` (see
    /// [`super::page`]: finished and live records read apart, a time range turned into
    /// ids, a text search bounded by its window).
    async fn request_page(
        &self,
        application: &str,
        query: &RequestQuery,
        page: &PageSpec,
    ) -> Result<Page> {
        let mut page = crate::store::page::request_page(self, application, query, page).await?;
        crate::store::records::attach_tags(self, application, &mut page.requests).await?;
        Ok(page)
    }

    /// How many requests of `application` match `query` and are in one of `statuses`
    /// (all statuses when empty).
    async fn request_count_matching(
        &self,
        application: &str,
        query: &RequestQuery,
        statuses: &[Status],
    ) -> Result<i64> {
        let mut s = self.sql("SELECT COUNT(*) FROM async_req WHERE");
        s.filter(application, query).statuses(statuses);
        let counted = self.fetch_ints(&s).await?;
        Ok(counted.first().copied().flatten().unwrap_or(0))
    }

    /// Applies `action` to every request of `application` that matches `query` and that
    /// the action applies to, [`ACT_BATCH`] requests to a transaction in id order;
    /// returns how many changed.
    async fn request_act(
        &self,
        application: &str,
        query: &RequestQuery,
        action: Action,
        now: i64,
    ) -> Result<u64> {
        let dialect = self.dialect();
        let (mut changed, mut after) = (0, 0);
        loop {
            let ids = act_batch_ids(dialect, application, query, action, after);
            let change = |rows: &[Cells]| {
                let ids: Vec<i64> = rows.iter().filter_map(Cells::first_int).collect();
                act_batch(dialect, application, query, action, now, &ids)
            };
            let (rows, written) = self
                .read_then_write(Txn::Batch, Some((&ids, &[Col::Int])), &change)
                .await?;
            changed += written;
            let ids: Vec<i64> = rows.iter().filter_map(Cells::first_int).collect();
            match ids.last() {
                Some(&last) if ids.len() == ACT_BATCH => after = last,
                _ => return Ok(changed),
            }
        }
    }

    /// The ids of the first `limit` requests of `application` (in id order) that match
    /// `query` and that `action` applies to: what an action confirmed for at most a
    /// number of requests acts on.
    async fn request_ids_actionable(
        &self,
        application: &str,
        query: &RequestQuery,
        action: Action,
        limit: u64,
    ) -> Result<Vec<i64>> {
        let mut s = self.sql("SELECT id FROM async_req WHERE");
        s.filter(application, query).statuses(action.applies_to());
        s.push(&format!(" ORDER BY id LIMIT {limit}"));
        let rows = self.fetch_rows(&s, &[Col::Int]).await?;
        Ok(rows.iter().filter_map(Cells::first_int).collect())
    }

    /// Applies `action` to the requests of `ids` that still match `query` and are in a
    /// status it applies to, [`ACT_BATCH`] to a transaction; returns how many changed.
    async fn request_act_ids(
        &self,
        application: &str,
        query: &RequestQuery,
        action: Action,
        now: i64,
        ids: &[i64],
    ) -> Result<u64> {
        let dialect = self.dialect();
        let mut changed = 0;
        for batch in ids.chunks(ACT_BATCH) {
            let change = |_: &[Cells]| act_batch(dialect, application, query, action, now, batch);
            let (_, written) = self.read_then_write(Txn::Batch, None, &change).await?;
            changed += written;
        }
        Ok(changed)
    }
}

impl<S: SqlRunner> RequestOps for S {}

/// The `SET` clause of an action's `UPDATE` (none for `Delete`), with `now` bound where
/// the text says `{now}`: written for `Sql::push` and one bind.
fn action_set(action: Action) -> Option<&'static str> {
    match action {
        // Due now, as `init`, so that the producer's claim of waiting records (woken by
        // the action, and every poll interval on other instances) takes it at once rather
        // than the next retry sweep; a failed record keeps its attempts, others start over.
        // `exec_count` first: MySQL assigns left to right, reading the values it set.
        Action::Retry | Action::ReplayDead => Some(
            "exec_count = CASE WHEN status = 'failed' THEN exec_count ELSE 0 END, \
             status = 'init', lease_owner = NULL, lease_until = NULL, \
             run_at = {now}, update_time = {now}",
        ),
        Action::Cancel => Some("status = 'cancelled', update_time = {now}"),
        Action::Delete => None,
    }
}

/// Pushes an action's `SET` clause, binding `now` in its places.
fn push_set(sql: &mut Sql, set: &str, now: i64) {
    let mut parts = set.split("{now}").peekable();
    while let Some(part) = parts.next() {
        sql.push(part);
        if parts.peek().is_some() {
            sql.bind(Bind::Int(now));
        }
    }
}

/// How many records one transaction of an operator's action changes: an action on many
/// records goes in batches of this many, each committed on its own, so that it does not
/// hold SQLite's one writer (or PostgreSQL's and MariaDB's row locks on all of them) for
/// seconds.
const ACT_BATCH: usize = 500;

/// The ids of the next batch of an action: records of `application` that match `query`,
/// in a status the action applies to, with an id above `after`, in id order.
fn act_batch_ids(
    dialect: Dialect,
    application: &str,
    query: &RequestQuery,
    action: Action,
    after: i64,
) -> Sql {
    let mut s = Sql::new(dialect, "SELECT id FROM async_req WHERE");
    s.filter(application, query).statuses(action.applies_to());
    s.push(" AND id > ").bind(Bind::Int(after));
    s.push(&format!(" ORDER BY id LIMIT {ACT_BATCH}"));
    s
}

/// The change of one batch: the action on `ids`, re-checked against the query and the
/// statuses it applies to (a record may have moved since its id was read).
fn act_batch_change(
    dialect: Dialect,
    application: &str,
    query: &RequestQuery,
    action: Action,
    now: i64,
    ids: &[i64],
) -> Sql {
    let mut s = match action_set(action) {
        Some(set) => {
            let mut s = Sql::new(dialect, "UPDATE async_req SET ");
            push_set(&mut s, set, now);
            s.push(" WHERE");
            s
        }
        None => Sql::new(dialect, "DELETE FROM async_req WHERE"),
    };
    s.filter(application, query).statuses(action.applies_to());
    push_ids(&mut s, "id", ids);
    s
}

/// The statements of one batch of an action on `ids` (none when there are none): the
/// change, then for deletes the attempt logs of the records that went.
pub(crate) fn act_batch(
    dialect: Dialect,
    application: &str,
    query: &RequestQuery,
    action: Action,
    now: i64,
    ids: &[i64],
) -> Vec<Sql> {
    if ids.is_empty() {
        return Vec::new();
    }
    let mut statements = vec![act_batch_change(
        dialect,
        application,
        query,
        action,
        now,
        ids,
    )];
    if action_set(action).is_none() {
        statements.push(act_batch_logs(dialect, ids));
    }
    statements
}

/// The attempt logs of the records of `ids` that are gone (after a batch of deletes).
fn act_batch_logs(dialect: Dialect, ids: &[i64]) -> Sql {
    let mut s = Sql::new(dialect, "DELETE FROM async_log WHERE");
    push_ids(&mut s, "", ids);
    s.push(" AND NOT EXISTS (SELECT 1 FROM async_req r WHERE r.id = async_log.req_id)");
    s
}

/// Appends ` AND <column> IN (...)` (`req_id` when `column` is empty, with no `AND`).
fn push_ids(s: &mut Sql, column: &str, ids: &[i64]) {
    if column.is_empty() {
        s.push(" req_id IN (");
    } else {
        s.push(&format!(" AND {column} IN ("));
    }
    for (i, &id) in ids.iter().enumerate() {
        if i > 0 {
            s.push(", ");
        }
        s.bind(Bind::Int(id));
    }
    s.push(")");
}

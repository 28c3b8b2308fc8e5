//! The statements about many requests: filtered pages, counts and actions on every
//! request matching a [`RequestQuery`], statistics, pauses and the audit trail.
//! [`OpsStore`] is implemented once per backend (`sqlite/ops.rs`, `postgres/ops.rs`,
//! `mysql/ops.rs`), which runs what is built here: the SQL of a query and of a page,
//! written once, with the same meaning on every backend ([`Sql::filter`]).

use async_trait::async_trait;

use crate::base::error::Result;
use crate::base::query::{
    Action, AuditEntry, DepthSample, ExecutorCount, MinuteStat, Page, PageSpec, Pause, QueueCount,
    RequestQuery, StatDelta,
};
use crate::base::record::{Request, Status};
use crate::base::text::sanitized;

/// The operators' statements of one backend.
#[async_trait]
pub(crate) trait OpsStore: Send + Sync {
    /// The SQL dialect of this backend.
    fn dialect(&self) -> Dialect;

    /// The requests that `sql` selects (every column of [`super::REQUEST_COLUMNS`]), in
    /// its order.
    async fn fetch_requests(&self, sql: &Sql) -> Result<Vec<Request>>;

    /// The integers of the first row that `sql` selects (empty when it selects none);
    /// NULL is `None`.
    async fn fetch_ints(&self, sql: &Sql) -> Result<Vec<Option<i64>>>;

    /// A page of the requests of `application` that match `query` (see
    /// [`super::page`]: finished and live records read apart, a time range turned into
    /// ids, a text search bounded by its window).
    async fn request_page(
        &self,
        application: &str,
        query: &RequestQuery,
        page: &PageSpec,
    ) -> Result<Page> {
        super::page::request_page(self, application, query, page).await
    }

    /// How many requests of `application` match `query` and are in one of `statuses`
    /// (all statuses when empty).
    async fn request_count_matching(
        &self,
        application: &str,
        query: &RequestQuery,
        statuses: &[Status],
    ) -> Result<i64>;

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
            let change = |ids: &[i64]| {
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
            };
            let (ids, rows) = self.act_batch(&ids, &change).await?;
            changed += rows;
            match ids.last() {
                Some(&last) if ids.len() == ACT_BATCH => after = last,
                _ => return Ok(changed),
            }
        }
    }

    /// One batch of an action, in a transaction of its own: reads the ids `ids` selects,
    /// then (when there are any) runs the statements `change` makes of them. Returns the
    /// ids and the rows the first statement changed.
    async fn act_batch(
        &self,
        ids: &Sql,
        change: &(dyn for<'a> Fn(&'a [i64]) -> Vec<Sql> + Sync),
    ) -> Result<(Vec<i64>, u64)>;

    /// Requests of `application` by executor and status.
    async fn request_count_by_executor(&self, application: &str) -> Result<Vec<ExecutorCount>>;

    /// Running requests of `application` by the instance holding them.
    async fn request_count_running_by_owner(&self, application: &str)
        -> Result<Vec<(String, i64)>>;

    /// The due time of the longest-waiting due record (`init` or `failed`, due by `now`).
    async fn request_oldest_waiting(&self, application: &str, now: i64) -> Result<Option<i64>>;

    /// The durations (ms) of the last `limit` logged attempts of `executor` whose request
    /// is still kept.
    async fn log_durations(
        &self,
        application: &str,
        executor: &str,
        limit: i64,
    ) -> Result<Vec<i64>>;

    /// Adds finished counts to `async_stat`.
    async fn stat_add(&self, application: &str, deltas: &[StatDelta]) -> Result<()>;

    /// Finished counts per minute from `since_minute` (unix ms), all executors summed.
    async fn stat_series(&self, application: &str, since_minute: i64) -> Result<Vec<MinuteStat>>;

    /// Samples the queue depth of `application` into `async_depth` for `minute`.
    async fn depth_sample(&self, application: &str, minute: i64) -> Result<()>;

    /// Records of `application` that may still run (`init`, `running`, `failed`), by
    /// executor and status, with the earliest due time of those due by `now`: one
    /// statement, for the queue gauges.
    async fn queue_depth(&self, application: &str, now: i64) -> Result<Vec<QueueCount>>;

    /// Queue depth samples from `since_minute` (unix ms).
    async fn depth_series(&self, application: &str, since_minute: i64) -> Result<Vec<DepthSample>>;

    /// Removes statistics of minutes before `before_minute` (unix ms).
    async fn stat_prune(&self, before_minute: i64) -> Result<()>;

    /// Pauses claims of `executor` (again: keeps the first pause).
    async fn pause_set(&self, application: &str, executor: &str, by: &str, now: i64) -> Result<()>;

    /// Resumes claims of `executor`; whether it was paused.
    async fn pause_clear(&self, application: &str, executor: &str) -> Result<bool>;

    /// The paused executors of `application`.
    async fn pause_list(&self, application: &str) -> Result<Vec<Pause>>;

    /// Writes an audit entry.
    async fn audit_add(&self, entry: &AuditEntry) -> Result<()>;

    /// The last `limit` audit entries of `application`, newest first.
    async fn audit_list(&self, application: &str, limit: i64) -> Result<Vec<AuditEntry>>;
}

/// The SQL dialect of a backend: its placeholders, and how it finds a substring.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
// A build with some of the backends leaves the others' dialects unused.
#[cfg_attr(
    not(all(feature = "sqlite", feature = "postgres", feature = "mysql")),
    allow(dead_code)
)]
pub(crate) enum Dialect {
    /// `?`; `instr`.
    Sqlite,
    /// `$1`, `$2`, ...; `strpos`.
    Postgres,
    /// `?`; `LOCATE`.
    MySql,
}

/// A value to bind.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Bind {
    Int(i64),
    Text(String),
}

/// SQL text with its binds, in order.
#[derive(Debug, Clone)]
pub(crate) struct Sql {
    pub(crate) text: String,
    pub(crate) binds: Vec<Bind>,
    dialect: Dialect,
}

impl Sql {
    /// This statement behind `prefix` (`EXPLAIN`, for the tests of query plans), binds kept.
    #[cfg(test)]
    pub(crate) fn prefixed(&self, prefix: &str) -> Sql {
        Sql {
            text: format!("{prefix} {}", self.text),
            ..self.clone()
        }
    }

    pub(crate) fn new(dialect: Dialect, text: &str) -> Sql {
        Sql {
            text: text.to_string(),
            binds: Vec::new(),
            dialect,
        }
    }

    /// Appends SQL text.
    pub(crate) fn push(&mut self, text: &str) -> &mut Self {
        self.text.push_str(text);
        self
    }

    /// Appends a placeholder for `value`.
    pub(crate) fn bind(&mut self, value: Bind) -> &mut Self {
        self.binds.push(value);
        match self.dialect {
            Dialect::Sqlite | Dialect::MySql => self.text.push('?'),
            Dialect::Postgres => {
                let n = self.binds.len();
                self.text.push_str(&format!("${n}"));
            }
        }
        self
    }

    /// Appends the condition that a request of `application` matches `query`, the same
    /// on every backend: exact text is equal byte for byte (MySQL's `_bin` collations pad
    /// with spaces, so the length is compared too); substrings are found by `instr`,
    /// `strpos` or `LOCATE`, which are case-sensitive here (SQLite's `LIKE` is not, for
    /// ASCII) and have no wildcards; text is bound, never spliced. A NUL in a filter is
    /// replaced as it is in stored text ([`sanitized`]), so that it finds what was stored.
    pub(crate) fn filter(&mut self, application: &str, query: &RequestQuery) -> &mut Self {
        self.push(" ").exact("application_name", application);
        if let Some(status) = query.status {
            // A literal (a status name is one of a few constants), and for a finished
            // status also the predicate of the partial indexes word for word: SQLite uses
            // a partial index only when the query names its predicate, PostgreSQL only
            // when it can prove it at planning, which a bound value does not let it.
            if self.dialect == Dialect::MySql && !is_hot(status) {
                // The indexed virtual column (migration 20261202000002), NULL for the
                // statuses the list indexes leave out. Alone: beside `status = ...` the
                // optimizer took the lease index and sorted.
                self.push(&format!(" AND done_status = '{}'", status.as_str()));
            } else {
                self.push(&format!(" AND status = '{}'", status.as_str()));
                if !is_hot(status) {
                    let predicate = finished(self.dialect);
                    self.push(" AND ").push(predicate);
                }
            }
        }
        if let Some(executor) = &query.executor {
            self.push(" AND ").exact("executor", executor);
        }
        if let Some(key) = &query.key {
            // `IS NOT NULL` lets SQLite use the partial index of keyed records; MySQL's
            // key is `VARBINARY`, compared without padding.
            self.push(" AND idempotency_key IS NOT NULL AND idempotency_key = ")
                .bind(Bind::Text(sanitized(key).into_owned()));
        }
        if let Some(id) = query.id {
            self.push(" AND id = ").bind(Bind::Int(id));
        }
        if let Some(remark) = &query.remark {
            self.push(" AND ").contains("remark", remark);
        }
        if let Some(error) = &query.error {
            self.push(" AND last_error IS NOT NULL AND ")
                .contains("last_error", error);
        }
        if let Some(from) = query.created_from {
            self.push(" AND create_time >= ").bind(Bind::Int(from));
        }
        if let Some(to) = query.created_to {
            self.push(" AND create_time < ").bind(Bind::Int(to));
        }
        self
    }

    /// `column = value`, byte for byte.
    fn exact(&mut self, column: &str, value: &str) -> &mut Self {
        let value = sanitized(value).into_owned();
        let bytes = value.len() as i64;
        self.push(column).push(" = ").bind(Bind::Text(value));
        if self.dialect == Dialect::MySql {
            // `'a' = 'a '` holds in a PAD SPACE collation (`utf8mb4_bin`).
            self.push(&format!(" AND OCTET_LENGTH({column}) = "))
                .bind(Bind::Int(bytes));
        }
        self
    }

    /// `column` contains `needle`, case and every character as given.
    fn contains(&mut self, column: &str, needle: &str) -> &mut Self {
        let needle = Bind::Text(sanitized(needle).into_owned());
        match self.dialect {
            Dialect::Sqlite => self
                .push(&format!("instr({column}, "))
                .bind(needle)
                .push(") > 0"),
            Dialect::Postgres => self
                .push(&format!("strpos({column}, "))
                .bind(needle)
                .push(") > 0"),
            Dialect::MySql => self
                .push("LOCATE(")
                .bind(needle)
                .push(&format!(", {column}) > 0")),
        }
    }

    /// Appends ` AND status IN (...)` (nothing when `statuses` is empty).
    pub(crate) fn statuses(&mut self, statuses: &[Status]) -> &mut Self {
        if statuses.is_empty() {
            return self;
        }
        self.push(" AND status IN (");
        for (i, status) in statuses.iter().enumerate() {
            if i > 0 {
                self.push(", ");
            }
            self.bind(Bind::Text(status.as_str().into()));
        }
        self.push(")")
    }
}

/// The predicate of the list indexes (`async_req_done_*`, migration
/// `20261202000001_async_exec_list_indexes`), word for word as `dialect`'s migrations
/// write it: records neither waiting for their first run nor running. A request is
/// written `init`, claimed `running` and (by default) deleted on success, so on that path
/// nothing enters the indexes the list needs. SQLite's says it as two comparisons
/// (migration `20261203000002`): its `NOT IN` converts the status to a number on every
/// row written.
pub(crate) fn finished(dialect: Dialect) -> &'static str {
    match dialect {
        Dialect::Sqlite => "status <> 'running' AND status <> 'init'",
        Dialect::Postgres | Dialect::MySql => "status NOT IN ('init', 'running')",
    }
}

/// The records [`finished`] leaves out: waiting for their first run, or running.
pub(crate) const LIVE: &str = "status IN ('init', 'running')";

/// Whether `status` is one of the submit-claim-complete path's, which the list indexes
/// leave out.
pub(crate) fn is_hot(status: Status) -> bool {
    matches!(status, Status::Init | Status::Running)
}

/// The `SET` clause of an action's `UPDATE` (none for `Delete`), with `now` bound where
/// the text says `{now}`: written for `Sql::push` and one bind.
pub(crate) fn action_set(action: Action) -> Option<&'static str> {
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
pub(crate) fn push_set(sql: &mut Sql, set: &str, now: i64) {
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
pub(crate) const ACT_BATCH: usize = 500;

/// The ids of the next batch of an action: records of `application` that match `query`,
/// in a status the action applies to, with an id above `after`, in id order.
pub(crate) fn act_batch_ids(
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
pub(crate) fn act_batch_change(
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

/// The attempt logs of the records of `ids` that are gone (after a batch of deletes).
pub(crate) fn act_batch_logs(dialect: Dialect, ids: &[i64]) -> Sql {
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

/// The minute (its start, unix ms) that `ms` falls in.
pub(crate) fn minute_of(ms: i64) -> i64 {
    ms.div_euclid(60_000) * 60_000
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn numbered_marks_count_up() {
        let mut sql = Sql::new(Dialect::Postgres, "SELECT 1 FROM t WHERE");
        sql.filter("app", &RequestQuery::default().status(Status::Dead).id(4));
        assert_eq!(
            sql.text,
            "SELECT 1 FROM t WHERE application_name = $1 AND status = 'dead' \
             AND status NOT IN ('init', 'running') AND id = $2"
        );
        assert_eq!(sql.binds.len(), 2);
    }

    #[test]
    fn a_nul_in_a_filter_is_replaced_as_in_stored_text() {
        let mut sql = Sql::new(Dialect::Sqlite, "WHERE");
        sql.filter("a\0pp", &RequestQuery::default().remark_contains("a\0b"));
        assert_eq!(
            sql.text,
            "WHERE application_name = ? AND instr(remark, ?) > 0"
        );
        assert_eq!(
            sql.binds,
            [
                Bind::Text("a\u{FFFD}pp".into()),
                Bind::Text("a\u{FFFD}b".into())
            ]
        );
    }

    #[test]
    fn mysql_compares_exact_text_with_its_length() {
        let mut sql = Sql::new(Dialect::MySql, "WHERE");
        sql.filter("app", &RequestQuery::default().executor("é "));
        assert_eq!(
            sql.text,
            "WHERE application_name = ? AND OCTET_LENGTH(application_name) = ? \
             AND executor = ? AND OCTET_LENGTH(executor) = ?"
        );
        assert_eq!(sql.binds[3], Bind::Int(3));
    }
}

//! The operators' statements: filtered pages, actions on every request matching a filter,
//! statistics, pauses and the audit trail. [`OpsStore`] is implemented once per backend
//! (`sqlite/ops.rs`, `postgres/ops.rs`, `mysql/ops.rs`); the filter's SQL, the same in
//! every dialect but for its placeholders, is built here.

use async_trait::async_trait;

use crate::error::Result;
use crate::query::{
    Action, AuditEntry, Cursor, DepthSample, ExecutorCount, MinuteStat, Order, PageSpec, Pause,
    QueueCount, RequestQuery, StatDelta,
};
use crate::record::{Request, Status};

/// The operators' statements of one backend.
#[async_trait]
pub(crate) trait OpsStore: Send + Sync {
    /// A page of the requests of `application` that match `query`.
    async fn request_page(
        &self,
        application: &str,
        query: &RequestQuery,
        page: &PageSpec,
    ) -> Result<Vec<Request>>;

    /// How many requests of `application` match `query` and are in one of `statuses`
    /// (all statuses when empty).
    async fn request_count_matching(
        &self,
        application: &str,
        query: &RequestQuery,
        statuses: &[Status],
    ) -> Result<i64>;

    /// Applies `action` to every request of `application` that matches `query` and that
    /// the action applies to, in one transaction; returns how many changed.
    async fn request_act(
        &self,
        application: &str,
        query: &RequestQuery,
        action: Action,
        now: i64,
    ) -> Result<u64>;

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

/// The placeholder style of a dialect.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Marks {
    /// `?` (SQLite, MySQL).
    Question,
    /// `$1`, `$2`, ... (PostgreSQL).
    Numbered,
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
    marks: Marks,
}

impl Sql {
    pub(crate) fn new(marks: Marks, text: &str) -> Sql {
        Sql {
            text: text.to_string(),
            binds: Vec::new(),
            marks,
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
        match self.marks {
            Marks::Question => self.text.push('?'),
            Marks::Numbered => {
                let n = self.binds.len();
                self.text.push_str(&format!("${n}"));
            }
        }
        self
    }

    /// Appends ` AND <filter>` for `query` over the requests of `application`.
    pub(crate) fn filter(&mut self, application: &str, query: &RequestQuery) -> &mut Self {
        let texts = [
            &query.executor,
            &query.key,
            &query.remark,
            &query.error,
            &query.application,
        ];
        // No stored text holds a NUL (PostgreSQL cannot): such a filter matches nothing,
        // and is not sent (PostgreSQL refuses the bind).
        if application.contains('\0')
            || texts
                .iter()
                .any(|t| t.as_deref().is_some_and(|t| t.contains('\0')))
        {
            return self.push(" 1 = 0");
        }
        self.push(" application_name = ")
            .bind(Bind::Text(application.into()));
        if let Some(status) = query.status {
            // A literal (a status name is one of a few constants), and for a finished
            // status also the predicate of the partial indexes word for word: SQLite uses
            // a partial index only when the query names its predicate, PostgreSQL only
            // when it can prove it at planning, which a bound value does not let it.
            self.push(&format!(" AND status = '{}'", status.as_str()));
            if !is_hot(status) {
                self.push(" AND ").push(FINISHED);
            }
        }
        if let Some(executor) = &query.executor {
            self.push(" AND executor = ")
                .bind(Bind::Text(executor.clone()));
        }
        if let Some(key) = &query.key {
            // `IS NOT NULL` lets SQLite use the partial index of keyed records.
            self.push(" AND idempotency_key IS NOT NULL AND idempotency_key = ")
                .bind(Bind::Text(key.clone()));
        }
        if let Some(id) = query.id {
            self.push(" AND id = ").bind(Bind::Int(id));
        }
        if let Some(remark) = &query.remark {
            self.push(" AND remark LIKE ")
                .bind(Bind::Text(contains_pattern(remark)))
                .push(" ESCAPE '!'");
        }
        if let Some(error) = &query.error {
            self.push(" AND last_error LIKE ")
                .bind(Bind::Text(contains_pattern(error)))
                .push(" ESCAPE '!'");
        }
        if let Some(from) = query.created_from {
            self.push(" AND create_time >= ").bind(Bind::Int(from));
        }
        if let Some(to) = query.created_to {
            self.push(" AND create_time < ").bind(Bind::Int(to));
        }
        self
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

    /// Appends the keyset condition, order and limit of `page`.
    pub(crate) fn page(&mut self, page: &PageSpec) -> &mut Self {
        let (cmp, dir) = match page.order {
            Order::Newest => ("<", "DESC"),
            Order::Oldest => (">", "ASC"),
        };
        if let Some(Cursor { id }) = page.after {
            self.push(&format!(" AND id {cmp} ")).bind(Bind::Int(id));
        }
        self.push(&format!(" ORDER BY id {dir} LIMIT "))
            .bind(Bind::Int(page.limit.clamp(1, 1000)))
    }
}

/// The predicate of the list indexes (`async_req_done_*`, migration
/// `20261202000001_async_exec_list_indexes`): records neither waiting for their first
/// run nor running. A request is written `init`, claimed `running` and (by default)
/// deleted on success, so on that path nothing touches the indexes the list needs.
pub(crate) const FINISHED: &str = "status NOT IN ('init', 'running')";

/// The records [`FINISHED`] leaves out: waiting for their first run, or running.
const LIVE: &str = "status IN ('init', 'running')";

/// Whether `status` is one of the submit-claim-complete path's, which the list indexes
/// leave out.
fn is_hot(status: Status) -> bool {
    matches!(status, Status::Init | Status::Running)
}

/// `<select_from> WHERE …` for the page of `query` that `page` asks for, newest (or
/// oldest) id first. Without a status, id or key to narrow it, the page is read in two
/// parts, each from indexes that hold it in order: the finished records from the partial
/// list indexes, the waiting and running ones from the primary key (or the claim and
/// lease indexes), merged by id.
pub(crate) fn page_select(
    marks: Marks,
    select_from: &str,
    application: &str,
    query: &RequestQuery,
    page: &PageSpec,
) -> Sql {
    if query.status.is_some() || query.id.is_some() || query.key.is_some() {
        let mut s = Sql::new(marks, &format!("{select_from} WHERE"));
        s.filter(application, query).page(page);
        return s;
    }
    let dir = match page.order {
        Order::Newest => "DESC",
        Order::Oldest => "ASC",
    };
    let mut s = Sql::new(marks, &format!("SELECT * FROM ({select_from} WHERE"));
    s.filter(application, query)
        .push(" AND ")
        .push(FINISHED)
        .page(page)
        .push(&format!(
            ") finished UNION ALL SELECT * FROM ({select_from} WHERE"
        ))
        .filter(application, query)
        .push(" AND ")
        .push(LIVE)
        .page(page)
        .push(&format!(") live ORDER BY id {dir} LIMIT "))
        .bind(Bind::Int(page.limit.clamp(1, 1000)));
    s
}

/// A `LIKE` pattern (escape character `!`) that matches text containing `needle`, each
/// of its characters standing for itself.
pub(crate) fn contains_pattern(needle: &str) -> String {
    let mut pattern = String::with_capacity(needle.len() + 2);
    pattern.push('%');
    for c in needle.chars() {
        if matches!(c, '!' | '%' | '_') {
            pattern.push('!');
        }
        pattern.push(c);
    }
    pattern.push('%');
    pattern
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

/// The minute (its start, unix ms) that `ms` falls in.
pub(crate) fn minute_of(ms: i64) -> i64 {
    ms.div_euclid(60_000) * 60_000
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn like_metacharacters_stand_for_themselves() {
        assert_eq!(contains_pattern("50%_!x"), "%50!%!_!!x%");
    }

    #[test]
    fn numbered_marks_count_up() {
        let mut sql = Sql::new(Marks::Numbered, "SELECT 1 FROM t WHERE");
        sql.filter("app", &RequestQuery::default().status(Status::Dead).id(4));
        assert_eq!(
            sql.text,
            "SELECT 1 FROM t WHERE application_name = $1 AND status = 'dead' \
             AND status NOT IN ('init', 'running') AND id = $2"
        );
        assert_eq!(sql.binds.len(), 2);
    }

    #[test]
    fn a_nul_in_a_filter_matches_nothing() {
        let mut sql = Sql::new(Marks::Question, "WHERE");
        sql.filter("app", &RequestQuery::default().remark_contains("a\0b"));
        assert_eq!(sql.text, "WHERE 1 = 0");
        assert!(sql.binds.is_empty());
        let mut sql = Sql::new(Marks::Question, "WHERE");
        sql.filter("a\0pp", &RequestQuery::default());
        assert_eq!(sql.text, "WHERE 1 = 0", "the application too");
    }
}

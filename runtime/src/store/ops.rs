//! The statements about many requests: filtered pages, counts and actions on every
//! request matching a [`RequestQuery`], statistics, pauses and the audit trail.
//! [`OpsStore`] is implemented once per backend (`sqlite/ops.rs`, `postgres/ops.rs`,
//! `mysql/ops.rs`), which runs what is built here: the SQL of a query and of a page,
//! written once, with the same meaning on every backend ([`Sql::filter`]).

use async_trait::async_trait;

use crate::error::Result;
use crate::query::{
    Action, AuditEntry, Cursor, DepthSample, ExecutorCount, MinuteStat, Order, Page, PageSpec,
    Pause, QueueCount, RequestQuery, StatDelta,
};
use crate::record::{Request, Status};
use crate::store::REQUEST_COLUMNS;
use crate::text::sanitized;

/// The operators' statements of one backend.
#[async_trait]
pub(crate) trait OpsStore: Send + Sync {
    /// The SQL dialect of this backend.
    fn dialect(&self) -> Dialect;

    /// The requests that `sql` (begun by [`Sql::requests`]) selects, in its order.
    async fn fetch_requests(&self, sql: &Sql) -> Result<Vec<Request>>;

    /// The `(create_time, id)` of the one row that `sql` (begun by [`Sql::keys`])
    /// selects, if any.
    async fn fetch_cursor(&self, sql: &Sql) -> Result<Option<Cursor>>;

    /// A page of the requests of `application` that match `query`. With a text filter,
    /// it looks at no more than `page.search_window` requests (of those matching the
    /// other fields, in page order): first the last of them is found in an index (no row
    /// is read), then the page is read up to it.
    async fn request_page(
        &self,
        application: &str,
        query: &RequestQuery,
        page: &PageSpec,
    ) -> Result<Page> {
        let dialect = self.dialect();
        let edge = if query.remark.is_some() || query.error.is_some() {
            let mut others = query.clone();
            (others.remark, others.error) = (None, None);
            let mut sql = Sql::keys(dialect, &others);
            sql.filter(application, &others)
                .after(page)
                .order_by(page.order)
                .window_end(page.search_window);
            self.fetch_cursor(&sql).await?
        } else {
            None
        };
        let mut sql = Sql::requests(dialect, query);
        sql.filter(application, query).after(page);
        if let Some(edge) = edge {
            sql.up_to(edge, page.order);
        }
        sql.order_by(page.order).limit(page.limit);
        let requests = self.fetch_requests(&sql).await?;
        let full = requests.len() as i64 >= page.limit;
        Ok(match (requests.last(), edge) {
            (Some(last), _) if full => Page {
                next: Some(Cursor::of(last)),
                requests,
                searched: None,
            },
            // The window ended first: on from its last request, matched or not.
            (_, Some(edge)) => Page {
                requests,
                next: Some(edge),
                searched: Some(page.search_window),
            },
            _ => Page {
                requests,
                next: None,
                searched: None,
            },
        })
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

/// The SQL dialect of a backend: its placeholders, and how it finds a substring.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
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
    pub(crate) fn new(dialect: Dialect, text: &str) -> Sql {
        Sql {
            text: text.to_string(),
            binds: Vec::new(),
            dialect,
        }
    }

    /// `SELECT <the request's columns> FROM async_req WHERE`, for a page of `query`'s
    /// requests: go on with [`Sql::filter`], [`Sql::after`], [`Sql::order_by`] and
    /// [`Sql::limit`].
    pub(crate) fn requests(dialect: Dialect, query: &RequestQuery) -> Sql {
        // Unfiltered (but for text and time), MariaDB reads `async_req_created` from its
        // newest entry by the application alone, ignoring the cursor's bound, unless told
        // to use the index: a `range` of 51 rows instead of 720,000 at 90 % depth of
        // 1,000,000 (EXPLAIN ANALYZE `r_rows`). The filtered pages pick their index well.
        let hint = if dialect == Dialect::MySql && only_the_time_index(query) {
            " FORCE INDEX (async_req_created)"
        } else {
            ""
        };
        Sql::new(
            dialect,
            &format!("SELECT {REQUEST_COLUMNS} FROM async_req{hint} WHERE"),
        )
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

    /// `SELECT create_time, id FROM async_req WHERE`, for the keys of `query`'s requests
    /// (from the index that a page of them reads): go on as after [`Sql::requests`].
    pub(crate) fn keys(dialect: Dialect, query: &RequestQuery) -> Sql {
        let mut sql = Sql::requests(dialect, query);
        sql.text = sql.text.replacen(REQUEST_COLUMNS, "create_time, id", 1);
        sql
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
            self.push(" AND status = ")
                .bind(Bind::Text(status.as_str().into()));
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

    /// Appends the keyset condition of `page`: after its cursor, in its order.
    pub(crate) fn after(&mut self, page: &PageSpec) -> &mut Self {
        match (page.after, page.order) {
            (None, _) => self,
            (Some(cursor), Order::Newest) => self.keyset("<", ">=", cursor),
            (Some(cursor), Order::Oldest) => self.keyset(">", "<=", cursor),
        }
    }

    /// Appends the condition that a request comes no later than `edge` (included) in
    /// `order`: the end of a search window.
    pub(crate) fn up_to(&mut self, edge: Cursor, order: Order) -> &mut Self {
        match order {
            Order::Newest => self.keyset(">", "<", edge),
            Order::Oldest => self.keyset("<", ">", edge),
        }
    }

    /// ` AND create_time {time}= t AND NOT (create_time = t AND id {not_id} i)`: the
    /// `create_time` bound limits the index range on every backend (a row comparison
    /// would not, on MySQL), so a deep page reads as few index entries as the first; the
    /// rest settles the rows of the cursor's own time by id. Written as `NOT (...)`
    /// rather than `(create_time < t OR id < i)`, which PostgreSQL estimates to keep a
    /// fifth of the range: it then sorted the whole rest of the table for a search
    /// window's edge (41 ms at 90 % depth of 1,000,000) instead of reading 20,000 index
    /// entries backwards (28 ms; 3 ms once vacuumed).
    fn keyset(&mut self, time: &str, not_id: &str, at: Cursor) -> &mut Self {
        self.push(&format!(" AND create_time {time}= "))
            .bind(Bind::Int(at.create_time))
            .push(" AND NOT (create_time = ")
            .bind(Bind::Int(at.create_time))
            .push(&format!(" AND id {not_id} "))
            .bind(Bind::Int(at.id))
            .push(")")
    }

    /// Appends ` ORDER BY` creation time and id, in `order`.
    pub(crate) fn order_by(&mut self, order: Order) -> &mut Self {
        let dir = match order {
            Order::Newest => "DESC",
            Order::Oldest => "ASC",
        };
        self.push(&format!(" ORDER BY create_time {dir}, id {dir}"))
    }

    /// Appends ` LIMIT n` (1 to a page's most).
    pub(crate) fn limit(&mut self, n: i64) -> &mut Self {
        self.push(" LIMIT ")
            .bind(Bind::Int(n.clamp(1, PageSpec::MAX_LIMIT)))
    }

    /// Appends the limit that selects the `window`-th row: the last of a search window.
    pub(crate) fn window_end(&mut self, window: i64) -> &mut Self {
        let window = window.clamp(1, PageSpec::MAX_SEARCH_WINDOW);
        self.push(" LIMIT 1 OFFSET ").bind(Bind::Int(window - 1))
    }
}

/// Whether `query` leaves a page only the `(application_name, create_time, id)` index
/// (`async_req_created`) to read in order: no status, executor, key or id to look up.
/// MariaDB then reads that index by its first column alone from the newest entry (a
/// `ref` access that ignores the cursor's `create_time` bound: 720,000 rows read for a
/// page at 90 % depth of 1,000,000, 3.8 s) unless the query names the index.
pub(crate) fn only_the_time_index(query: &RequestQuery) -> bool {
    query.status.is_none() && query.executor.is_none() && query.key.is_none() && query.id.is_none()
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
    fn numbered_marks_count_up() {
        let mut sql = Sql::new(Dialect::Postgres, "SELECT 1 FROM t WHERE");
        sql.filter("app", &RequestQuery::default().status(Status::Dead).id(4));
        assert_eq!(
            sql.text,
            "SELECT 1 FROM t WHERE application_name = $1 AND status = $2 AND id = $3"
        );
        assert_eq!(sql.binds.len(), 3);
    }

    #[test]
    fn only_unindexed_filters_leave_the_time_index() {
        assert!(only_the_time_index(&RequestQuery::default()));
        assert!(only_the_time_index(
            &RequestQuery::default()
                .error_contains("x")
                .created_between(Some(1), None)
        ));
        assert!(!only_the_time_index(
            &RequestQuery::default().status(Status::Dead)
        ));
        assert!(!only_the_time_index(&RequestQuery::default().executor("e")));
        assert!(!only_the_time_index(&RequestQuery::default().key("k")));
        assert!(!only_the_time_index(&RequestQuery::default().id(1)));
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
    fn a_search_window_ends_at_a_key_of_the_index() {
        let query = RequestQuery::default().error_contains("x");
        let mut sql = Sql::keys(Dialect::Sqlite, &query);
        assert_eq!(sql.text, "SELECT create_time, id FROM async_req WHERE");
        sql.filter("a", &RequestQuery::default())
            .order_by(Order::Newest)
            .window_end(20_000);
        assert!(
            sql.text
                .ends_with(" ORDER BY create_time DESC, id DESC LIMIT 1 OFFSET ?"),
            "{}",
            sql.text
        );
        assert_eq!(sql.binds.last(), Some(&Bind::Int(19_999)));
        let mut sql = Sql::new(Dialect::Postgres, "WHERE id > 0");
        let edge = Cursor {
            create_time: 7,
            id: 3,
        };
        sql.up_to(edge, Order::Newest);
        assert_eq!(
            sql.text,
            "WHERE id > 0 AND create_time >= $1 AND NOT (create_time = $2 AND id < $3)"
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

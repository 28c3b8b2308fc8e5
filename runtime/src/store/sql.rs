//! SQL written once for every backend: a [`Dialect`] renders what differs between them
//! (placeholders, substring search, upserts, row locks, integer casts), [`Sql`] carries
//! text and binds, and [`SqlRunner`] is what a backend does with it: the few primitives
//! (fetch requests, logs, integers or rows of cells; execute; a transaction that reads,
//! then writes) on which the operators' statements ([`super::ops`]), pages
//! ([`super::page`]) and the per-record operator changes ([`super::records`]) are built
//! once. Hot-path statements (claims, inserts, completions, renewals) are not built here:
//! each backend keeps them as static text, prepared once by sqlx's statement cache.

use async_trait::async_trait;

use crate::base::error::{Error, Result};
use crate::base::query::RequestQuery;
use crate::base::record::{AttemptLog, Request, Status};
use crate::base::text::sanitized;

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

    /// The dialect its placeholders are written in.
    pub(crate) fn dialect(&self) -> Dialect {
        self.dialect
    }

    /// Appends SQL text.
    pub(crate) fn push(&mut self, text: &str) -> &mut Self {
        self.text.push_str(text);
        self
    }

    /// Appends a placeholder for the integer `n`.
    pub(crate) fn bind_int(&mut self, n: i64) -> &mut Self {
        self.bind(Bind::Int(n))
    }

    /// Appends a placeholder for `text`, as given.
    pub(crate) fn bind_text(&mut self, text: &str) -> &mut Self {
        self.bind(Bind::Text(text.to_owned()))
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
        if let Some(tag) = &query.tag {
            // Through the tag table's primary key (application, tag, request).
            self.push(" AND id IN (SELECT req_id FROM async_tag WHERE ")
                .exact("application_name", application)
                .push(" AND ")
                .exact("tag", tag)
                .push(")");
        }
        if let Some(remark) = &query.remark {
            self.push(" AND ")
                .contains("remark", remark, query.any_case);
        }
        if let Some(error) = &query.error {
            self.push(" AND last_error IS NOT NULL AND ").contains(
                "last_error",
                error,
                query.any_case,
            );
        }
        if let (Some((_, value)), Some(Ok(parts))) = (&query.arg, query.arg_path()) {
            self.push(" AND ").arg_is(&parts, value);
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

    /// The value at `path` (checked names) in the stored arguments, as text, is `value`.
    fn arg_is(&mut self, path: &[&str], value: &str) -> &mut Self {
        let value = Bind::Text(sanitized(value).into_owned());
        match self.dialect {
            // `json_extract` answers SQL values (42, not '42'): compared as text.
            Dialect::Sqlite => self
                .push("CAST(json_extract(param_json, ")
                .bind(Bind::Text(format!("$.{}", path.join("."))))
                .push(") AS TEXT) = ")
                .bind(value),
            Dialect::Postgres => self
                .push("(CASE WHEN param_json LIKE '{%' THEN param_json::jsonb #>> ")
                .bind(Bind::Text(format!("{{{}}}", path.join(","))))
                .push("::text[] END) = ")
                .bind(value),
            Dialect::MySql => self
                .push(
                    "(CASE WHEN JSON_VALID(param_json) THEN JSON_UNQUOTE(JSON_EXTRACT(param_json, ",
                )
                .bind(Bind::Text(format!("$.{}", path.join("."))))
                .push(")) END) = ")
                .bind(value),
        }
    }

    /// `column` contains `needle`, every character as given, in exact case unless
    /// `any_case` (then both lowered; SQLite lowers ASCII letters only).
    fn contains(&mut self, column: &str, needle: &str, any_case: bool) -> &mut Self {
        let lowered;
        let (column, needle) = if any_case {
            lowered = format!("LOWER({column})");
            (lowered.as_str(), needle.to_lowercase())
        } else {
            (column, needle.to_string())
        };
        let needle = Bind::Text(sanitized(&needle).into_owned());
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

impl Dialect {
    /// `ON CONFLICT (conflict) DO UPDATE SET ...` (`ON DUPLICATE KEY UPDATE ...` on MySQL),
    /// for an `INSERT INTO table`: each of `add` becomes the stored value plus the new
    /// one, each of `replace` the new one.
    pub(crate) fn upsert(
        self,
        table: &str,
        conflict: &str,
        add: &[&str],
        replace: &[&str],
    ) -> String {
        let sets: Vec<String> = match self {
            Dialect::MySql => add
                .iter()
                .map(|c| format!("{c} = {c} + VALUES({c})"))
                .chain(replace.iter().map(|c| format!("{c} = VALUES({c})")))
                .collect(),
            Dialect::Sqlite | Dialect::Postgres => add
                .iter()
                .map(|c| format!("{c} = {table}.{c} + excluded.{c}"))
                .chain(replace.iter().map(|c| format!("{c} = excluded.{c}")))
                .collect(),
        };
        match self {
            Dialect::MySql => format!(" ON DUPLICATE KEY UPDATE {}", sets.join(", ")),
            Dialect::Sqlite | Dialect::Postgres => {
                format!(
                    " ON CONFLICT ({conflict}) DO UPDATE SET {}",
                    sets.join(", ")
                )
            }
        }
    }

    /// The start of an `INSERT` that leaves an existing row (same unique key) alone, and
    /// what follows its `VALUES (...)`.
    pub(crate) fn insert_or_ignore(self) -> (&'static str, &'static str) {
        match self {
            Dialect::Sqlite => ("INSERT OR IGNORE INTO", ""),
            Dialect::Postgres => ("INSERT INTO", " ON CONFLICT DO NOTHING"),
            Dialect::MySql => ("INSERT IGNORE INTO", ""),
        }
    }

    /// What locks the rows a `SELECT` reads until the transaction ends (nothing on
    /// SQLite, whose one writer is the lock).
    pub(crate) fn lock_rows(self) -> &'static str {
        match self {
            Dialect::Sqlite => "",
            Dialect::Postgres | Dialect::MySql => " FOR UPDATE",
        }
    }

    /// `expr` as a 64-bit integer: PostgreSQL's `SUM` of a `BIGINT` is `NUMERIC`,
    /// MySQL's `DECIMAL`; SQLite's is an integer already.
    pub(crate) fn int64(self, expr: &str) -> String {
        match self {
            Dialect::Sqlite => expr.to_owned(),
            Dialect::Postgres => format!("CAST({expr} AS BIGINT)"),
            Dialect::MySql => format!("CAST({expr} AS SIGNED)"),
        }
    }
}

/// A statement written once with `?` placeholders, as text fixed at compile time, and
/// rendered for each dialect at most once (PostgreSQL's `$1`, `$2`, ...; the others take
/// it as written): a hot path's statement is the same `&'static str` on every call, so
/// sqlx's per-connection cache, keyed by the text, prepares it once.
#[derive(Debug)]
pub(crate) struct Statement {
    text: &'static str,
    numbered: std::sync::OnceLock<String>,
}

impl Statement {
    /// The statement `text`, with `?` for each placeholder (no `?` anywhere else).
    pub(crate) const fn new(text: &'static str) -> Self {
        Statement {
            text,
            numbered: std::sync::OnceLock::new(),
        }
    }

    /// The statement in `dialect`.
    pub(crate) fn text(&'static self, dialect: Dialect) -> &'static str {
        match dialect {
            Dialect::Sqlite | Dialect::MySql => self.text,
            Dialect::Postgres => self.numbered.get_or_init(|| {
                let mut out = String::with_capacity(self.text.len() + 16);
                for (n, part) in self.text.split('?').enumerate() {
                    if n > 0 {
                        out.push_str(&format!("${n}"));
                    }
                    out.push_str(part);
                }
                out
            }),
        }
    }
}

/// The dialect of a backend's sqlx database type.
pub(crate) trait HasDialect {
    /// Its dialect.
    const DIALECT: Dialect;
}

#[cfg(feature = "sqlite")]
impl HasDialect for sqlx::Sqlite {
    const DIALECT: Dialect = Dialect::Sqlite;
}

#[cfg(feature = "postgres")]
impl HasDialect for sqlx::Postgres {
    const DIALECT: Dialect = Dialect::Postgres;
}

#[cfg(feature = "mysql")]
impl HasDialect for sqlx::MySql {
    const DIALECT: Dialect = Dialect::MySql;
}

/// What a column of a row read by [`SqlRunner::fetch_rows`] holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Col {
    /// A 64-bit integer, or NULL.
    Int,
    /// Text, or NULL.
    Text,
}

/// One value of a row read by [`SqlRunner::fetch_rows`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Cell {
    Int(Option<i64>),
    Text(Option<String>),
}

/// A row read by [`SqlRunner::fetch_rows`], taken column by column in `SELECT` order.
#[derive(Debug)]
pub(crate) struct Cells {
    cells: Vec<Cell>,
    next: usize,
}

impl Cells {
    /// The row of these values.
    pub(crate) fn new(cells: Vec<Cell>) -> Self {
        Cells { cells, next: 0 }
    }

    /// The first column, when it is an integer and not NULL.
    pub(crate) fn first_int(&self) -> Option<i64> {
        match self.cells.first() {
            Some(Cell::Int(n)) => *n,
            _ => None,
        }
    }

    /// The first column, when it is text and not NULL.
    pub(crate) fn first_text(&self) -> Option<&str> {
        match self.cells.first() {
            Some(Cell::Text(t)) => t.as_deref(),
            _ => None,
        }
    }

    fn next_cell(&mut self) -> Result<Cell> {
        let cell = self
            .cells
            .get_mut(self.next)
            .ok_or_else(|| decode("a row has fewer columns than read"))?;
        self.next += 1;
        Ok(std::mem::replace(cell, Cell::Int(None)))
    }

    /// The next column, an integer that may be NULL.
    pub(crate) fn opt_int(&mut self) -> Result<Option<i64>> {
        match self.next_cell()? {
            Cell::Int(n) => Ok(n),
            Cell::Text(_) => Err(decode("text where an integer column was read")),
        }
    }

    /// The next column, an integer.
    pub(crate) fn int(&mut self) -> Result<i64> {
        self.opt_int()?
            .ok_or_else(|| decode("NULL where an integer was expected"))
    }

    /// The next column, text that may be NULL.
    pub(crate) fn opt_text(&mut self) -> Result<Option<String>> {
        match self.next_cell()? {
            Cell::Text(t) => Ok(t),
            Cell::Int(_) => Err(decode("an integer where a text column was read")),
        }
    }

    /// The next column, text.
    pub(crate) fn text(&mut self) -> Result<String> {
        self.opt_text()?
            .ok_or_else(|| decode("NULL where text was expected"))
    }

    /// The next column, a status name.
    pub(crate) fn status(&mut self) -> Result<Status> {
        let text = self.text()?;
        text.parse()
            .map_err(|e: Error| Error::Database(sqlx::Error::Decode(e.into())))
    }
}

/// A row that did not decode as the statement that read it expects.
fn decode(what: &str) -> Error {
    Error::Database(sqlx::Error::Decode(what.to_owned().into()))
}

/// Which transaction [`SqlRunner::read_then_write`] runs in, where the backends tell
/// them apart.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Txn {
    /// A batch of an action on many records, or a write of statistics: SQLite takes its
    /// write lock first (`BEGIN IMMEDIATE`); MySQL begins at its default isolation.
    Batch,
    /// A change of one record decided on its status, read locked: SQLite begins
    /// deferred; MySQL in `READ COMMITTED`, run again when it deadlocks.
    Record,
}

/// The statements that a read of [`SqlRunner::read_then_write`] makes: none to write
/// nothing.
pub(crate) type Change<'a> = dyn Fn(&[Cells]) -> Vec<Sql> + Sync + 'a;

/// What a backend does with [`Sql`]: everything the statements built once for every
/// backend need. Implemented in each backend's `ops.rs`.
#[async_trait]
pub(crate) trait SqlRunner: Send + Sync {
    /// The SQL dialect of this backend.
    fn dialect(&self) -> Dialect;

    /// `text` as a statement of this backend, nothing bound yet.
    fn sql(&self, text: &str) -> Sql {
        Sql::new(self.dialect(), text)
    }

    /// The requests that `sql` selects (every column of [`super::REQUEST_COLUMNS`]), in
    /// its order.
    async fn fetch_requests(&self, sql: &Sql) -> Result<Vec<Request>>;

    /// The attempt logs that `sql` selects (`req_id, attempt, worker, started, finished,
    /// outcome, error`), in its order.
    async fn fetch_logs(&self, sql: &Sql) -> Result<Vec<AttemptLog>>;

    /// The integers of the first row that `sql` selects (empty when it selects none);
    /// NULL is `None`.
    async fn fetch_ints(&self, sql: &Sql) -> Result<Vec<Option<i64>>>;

    /// The rows that `sql` selects, their columns read as `columns` say.
    async fn fetch_rows(&self, sql: &Sql, columns: &[Col]) -> Result<Vec<Cells>>;

    /// Runs `sql`; returns the rows it changed.
    async fn execute(&self, sql: &Sql) -> Result<u64>;

    /// In one transaction of its own: reads the rows `read` selects (none when `None`),
    /// then runs the statements `change` makes of them. Returns the rows read and the
    /// rows the first statement changed (0 when there was none).
    async fn read_then_write(
        &self,
        txn: Txn,
        read: Option<(&Sql, &[Col])>,
        change: &Change<'_>,
    ) -> Result<(Vec<Cells>, u64)>;
}

#[cfg(test)]
#[path = "sql_tests.rs"]
mod tests;

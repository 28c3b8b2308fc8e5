//! A page of requests, on every backend: the SQL is built here, the backend only runs it
//! ([`SqlRunner::fetch_ints`], [`SqlRunner::fetch_requests`]).
//!
//! Pages are in id order. Without a status, id or key to narrow it, a page is read in
//! two parts, each from indexes that hold it in id order, merged by id: the finished
//! records ([`finished`]) from the list indexes (partial on PostgreSQL and SQLite, so
//! the path every request takes never writes them), the waiting and running ones
//! ([`LIVE`], few) from the primary key and the claim and lease indexes.
//!
//! **A time range** is first turned into ids: the smallest and largest id of the records
//! created in it, read from the creation-time index (`async_req_done_created`: finished
//! records on PostgreSQL and SQLite, every record on MariaDB/MySQL, whose index is full).
//! The page then reads the id index between them, keeping the exact time condition.
//! Exact whatever order creation times and ids are in (a call in a transaction scope is
//! written at its commit, instances' clocks differ by milliseconds, an operator may
//! write rows by hand): the two ids are the minimum and maximum of the very records the
//! range holds, so none of them is outside. It costs a read of the range's index entries
//! (not of its rows: about 27,000 for a day of 1,000,000 records over 30 days); a range
//! of more than [`TIME_IDS_MOST`] records is not turned into ids (its records are dense
//! in id order, so the page finds them without).
//!
//! **A text search** (remark or last error) reads every row it looks at, so a page looks
//! at no more than [`PageSpec::search_window`] requests of those matching the other
//! fields, in page order: first the window's last id is found (from the same indexes,
//! with the same parts), then the page is read up to it.

use super::sql::{finished, Bind, Dialect, Sql, SqlRunner, LIVE};
use super::REQUEST_COLUMNS;
use crate::base::error::Result;
use crate::base::query::{Cursor, Order, Page, PageSpec, RequestQuery};
use crate::base::record::Status;

/// The most records of a time range whose ids are looked for (see the module doc).
pub(crate) const TIME_IDS_MOST: i64 = 100_000;

/// Ids from `min` to `max`, both included; either end open when `None`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct Ids {
    pub(crate) min: Option<i64>,
    pub(crate) max: Option<i64>,
}

impl Ids {
    /// No id.
    const NONE: Ids = Ids {
        min: Some(1),
        max: Some(0),
    };

    /// The ids in both.
    fn and(self, other: Ids) -> Ids {
        let pick = |a: Option<i64>, b: Option<i64>, f: fn(i64, i64) -> i64| match (a, b) {
            (Some(a), Some(b)) => Some(f(a, b)),
            (a, b) => a.or(b),
        };
        Ids {
            min: pick(self.min, other.min, i64::max),
            max: pick(self.max, other.max, i64::min),
        }
    }

    /// The ids after `cursor` in `order`.
    fn after(cursor: Option<Cursor>, order: Order) -> Ids {
        match (cursor, order) {
            (None, _) => Ids::default(),
            (Some(c), Order::Newest) => Ids {
                min: None,
                max: Some(c.id.saturating_sub(1)),
            },
            (Some(c), Order::Oldest) => Ids {
                min: Some(c.id.saturating_add(1)),
                max: None,
            },
        }
    }

    /// The ids up to `edge` (included) in `order`.
    fn up_to(edge: i64, order: Order) -> Ids {
        match order {
            Order::Newest => Ids {
                min: Some(edge),
                max: None,
            },
            Order::Oldest => Ids {
                min: None,
                max: Some(edge),
            },
        }
    }
}

/// Which records a part of a page reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Part {
    /// [`finished`] ones.
    Finished,
    /// [`LIVE`] ones.
    Live,
    /// Any (a page narrowed by id or key).
    Any,
}

/// The ids of the records of a time range.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct TimeIds {
    ids: Ids,
    /// Whether waiting and running records are counted (MariaDB/MySQL's index holds
    /// every record; the partial ones only finished records).
    live_too: bool,
}

/// `SELECT MIN(id), MAX(id), COUNT(*)` of the records `query`'s time range holds (at most
/// [`TIME_IDS_MOST`] + 1 counted), from the creation-time index; `None` without a range,
/// or when an id or key already narrows the page to a record or two.
pub(crate) fn time_ids_sql(dialect: Dialect, query: &RequestQuery) -> Option<Sql> {
    if (query.created_from.is_none() && query.created_to.is_none())
        || query.id.is_some()
        || query.key.is_some()
    {
        return None;
    }
    // Every record (MariaDB's index is full), or the finished ones: the predicate of the
    // partial index word for word, so that SQLite uses it. The `LIMIT` in a derived table
    // also keeps PostgreSQL from answering MIN and MAX by the primary key (reading it from
    // one end until a record of the range turns up: 600,000 rows for a day 12 days back).
    let (hint, finished_only) = match dialect {
        Dialect::MySql => (" FORCE INDEX (async_req_done_created)", String::new()),
        _ => ("", format!(" AND {}", finished(dialect))),
    };
    let mut sql = Sql::new(
        dialect,
        &format!(
            "SELECT MIN(id), MAX(id), COUNT(*) FROM (SELECT id FROM async_req{hint} WHERE 1 = 1"
        ),
    );
    if let Some(from) = query.created_from {
        sql.push(" AND create_time >= ").bind(Bind::Int(from));
    }
    if let Some(to) = query.created_to {
        sql.push(" AND create_time < ").bind(Bind::Int(to));
    }
    sql.push(&finished_only)
        .push(" LIMIT ")
        .bind(Bind::Int(TIME_IDS_MOST + 1))
        .push(") r");
    Some(sql)
}

/// What [`time_ids_sql`] answered: `None` when the range holds too many records to be
/// worth it.
fn time_ids(dialect: Dialect, row: &[Option<i64>]) -> Option<TimeIds> {
    let live_too = dialect == Dialect::MySql;
    match row {
        [_, _, Some(n)] if *n > TIME_IDS_MOST => None,
        [Some(min), Some(max), _] => Some(TimeIds {
            ids: Ids {
                min: Some(*min),
                max: Some(*max),
            },
            live_too,
        }),
        _ => Some(TimeIds {
            ids: Ids::NONE,
            live_too,
        }),
    }
}

/// The SQL of one page, or of the end of its search window.
#[derive(Debug, Clone, Copy)]
pub(crate) struct PageSql<'a> {
    dialect: Dialect,
    application: &'a str,
    query: &'a RequestQuery,
    order: Order,
    /// The ids every record of the page is among: after the cursor, up to a window's end.
    ids: Ids,
    time: Option<TimeIds>,
}

impl<'a> PageSql<'a> {
    fn new(
        dialect: Dialect,
        application: &'a str,
        query: &'a RequestQuery,
        page: &PageSpec,
    ) -> Self {
        PageSql {
            dialect,
            application,
            query,
            order: page.order,
            ids: Ids::after(page.after, page.order),
            time: None,
        }
    }

    /// The ids a part reads.
    fn ids_of(&self, part: Part) -> Ids {
        match self.time {
            Some(time) if part == Part::Finished || time.live_too => self.ids.and(time.ids),
            _ => self.ids,
        }
    }

    /// The part that a page narrowed by status, id or key reads; `None` for one read in
    /// two parts.
    fn single_part(&self) -> Option<Part> {
        match self.query.status {
            Some(Status::Init | Status::Running) => Some(Part::Live),
            Some(_) => Some(Part::Finished),
            None if self.query.id.is_some() || self.query.key.is_some() => Some(Part::Any),
            None => None,
        }
    }

    fn dir(&self) -> &'static str {
        match self.order {
            Order::Newest => "DESC",
            Order::Oldest => "ASC",
        }
    }

    /// `SELECT columns FROM async_req WHERE <a part's records> ORDER BY id LIMIT limit`.
    fn part(&self, sql: &mut Sql, columns: &str, part: Part, limit: i64) {
        sql.push(&format!("SELECT {columns} FROM async_req WHERE"))
            .filter(self.application, self.query);
        match part {
            // `filter` says it for a status.
            Part::Finished if self.query.status.is_none() => {
                sql.push(" AND ").push(finished(self.dialect));
            }
            Part::Live if self.query.status.is_none() => {
                sql.push(" AND ").push(LIVE);
            }
            _ => {}
        }
        let ids = self.ids_of(part);
        if let Some(min) = ids.min {
            sql.push(" AND id >= ").bind(Bind::Int(min));
        }
        if let Some(max) = ids.max {
            sql.push(" AND id <= ").bind(Bind::Int(max));
        }
        sql.push(&format!(" ORDER BY id {} LIMIT ", self.dir()))
            .bind(Bind::Int(limit));
    }

    /// The one part a statement that reads rows one by one in id order (a search, and the
    /// end of its window) reads: on MariaDB/MySQL, whose list indexes are full, every
    /// record in one, from the primary key; elsewhere as [`PageSql::single_part`] says.
    /// (The two parts cost MariaDB a sort of every waiting and running record: 44 to 95 ms
    /// for a window end at 1,000,000 records, 150,000 of them waiting; one part, 5 ms.)
    fn scanned_part(&self) -> Option<Part> {
        match self.dialect {
            Dialect::MySql => self.single_part().or(Some(Part::Any)),
            _ => self.single_part(),
        }
    }

    /// The page's `columns`, `limit` of them from `offset` on, in its order, from `part`
    /// (`None`: both parts, merged).
    fn select(&self, columns: &str, limit: i64, offset: i64, part: Option<Part>) -> Sql {
        let mut sql = Sql::new(self.dialect, "");
        let tail = |sql: &mut Sql| {
            if offset > 0 {
                sql.push(" OFFSET ").bind(Bind::Int(offset));
            }
        };
        if let Some(part) = part {
            self.part(&mut sql, columns, part, limit);
            tail(&mut sql);
            return sql;
        }
        // Each part no more than the whole answer; the merge keeps the first of both.
        let each = limit + offset;
        sql.push("SELECT * FROM (");
        self.part(&mut sql, columns, Part::Finished, each);
        sql.push(") finished UNION ALL SELECT * FROM (");
        self.part(&mut sql, columns, Part::Live, each);
        sql.push(&format!(") live ORDER BY id {} LIMIT ", self.dir()))
            .bind(Bind::Int(limit));
        tail(&mut sql);
        sql
    }

    /// The page of requests, `limit` of them.
    pub(crate) fn requests(&self, limit: i64) -> Sql {
        let part = match self.query.searches_text() {
            true => self.scanned_part(),
            false => self.single_part(),
        };
        self.select(
            REQUEST_COLUMNS,
            limit.clamp(1, PageSpec::MAX_LIMIT),
            0,
            part,
        )
    }

    /// The id of the last request of a search window of `window` requests.
    pub(crate) fn window_end(&self, window: i64) -> Sql {
        let window = window.clamp(1, PageSpec::MAX_SEARCH_WINDOW);
        self.select("id", 1, window - 1, self.scanned_part())
    }
}

#[cfg(test)]
impl<'a> PageSql<'a> {
    /// The plan of a page whose time range holds the records `time` (ids) names.
    pub(crate) fn for_test(
        dialect: Dialect,
        application: &'a str,
        query: &'a RequestQuery,
        page: &PageSpec,
        time: Option<(i64, i64)>,
    ) -> Self {
        let mut plan = PageSql::new(dialect, application, query, page);
        plan.time = time.map(|(min, max)| TimeIds {
            ids: Ids {
                min: Some(min),
                max: Some(max),
            },
            live_too: dialect == Dialect::MySql,
        });
        plan
    }
}

/// See [`super::ops::RequestOps::request_page`] and the module doc.
pub(crate) async fn request_page<S: SqlRunner + ?Sized>(
    store: &S,
    application: &str,
    query: &RequestQuery,
    page: &PageSpec,
) -> Result<Page> {
    let dialect = store.dialect();
    let mut plan = PageSql::new(dialect, application, query, page);
    if let Some(sql) = time_ids_sql(dialect, query) {
        plan.time = time_ids(dialect, &store.fetch_ints(&sql).await?);
    }
    let edge = if query.searches_text() {
        let mut others = query.clone();
        (others.remark, others.error) = (None, None);
        let window = PageSql {
            query: &others,
            ..plan
        };
        let row = store
            .fetch_ints(&window.window_end(page.search_window))
            .await?;
        row.first().copied().flatten()
    } else {
        None
    };
    if let Some(edge) = edge {
        plan.ids = plan.ids.and(Ids::up_to(edge, page.order));
    }
    let requests = store.fetch_requests(&plan.requests(page.limit)).await?;
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
            next: Some(Cursor { id: edge }),
            searched: Some(page.search_window),
        },
        _ => Page {
            requests,
            next: None,
            searched: None,
        },
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec() -> PageSpec {
        PageSpec::default().limit(3)
    }

    #[test]
    fn an_unfiltered_page_reads_finished_and_live_records_apart() {
        let query = RequestQuery::default();
        let plan = PageSql::new(
            Dialect::Sqlite,
            "a",
            &query,
            &spec().after(Cursor { id: 9 }),
        );
        let sql = plan.requests(3);
        assert!(
            sql.text.contains(
                "AND status <> 'running' AND status <> 'init' AND id <= ? ORDER BY id DESC LIMIT ?) \
                 finished UNION ALL"
            ),
            "{}",
            sql.text
        );
        assert!(
            sql.text.ends_with(") live ORDER BY id DESC LIMIT ?"),
            "{}",
            sql.text
        );
        assert_eq!(sql.binds.iter().filter(|b| **b == Bind::Int(8)).count(), 2);
    }

    #[test]
    fn a_search_window_ends_at_an_id_of_the_same_parts() {
        let query = RequestQuery::default().status(Status::Dead);
        let plan = PageSql::new(Dialect::Postgres, "a", &query, &spec().order(Order::Oldest));
        let sql = plan.window_end(20_000);
        assert!(
            sql.text.starts_with("SELECT id FROM async_req WHERE"),
            "{}",
            sql.text
        );
        assert!(
            sql.text.ends_with("ORDER BY id ASC LIMIT $2 OFFSET $3"),
            "{}",
            sql.text
        );
        assert_eq!(sql.binds[1..], [Bind::Int(1), Bind::Int(19_999)]);
        let unfiltered = RequestQuery::default();
        let plan = PageSql::new(Dialect::Sqlite, "a", &unfiltered, &spec());
        let sql = plan.window_end(5);
        assert!(
            sql.text.ends_with("live ORDER BY id DESC LIMIT ? OFFSET ?"),
            "{}",
            sql.text
        );
        // Each part may hold the whole window.
        assert_eq!(sql.binds.iter().filter(|b| **b == Bind::Int(5)).count(), 2);
    }

    #[test]
    fn a_time_range_bounds_the_parts_its_index_holds() {
        let query = RequestQuery::default().created_between(Some(10), Some(20));
        let sql = time_ids_sql(Dialect::Sqlite, &query).unwrap();
        assert_eq!(
            sql.text,
            "SELECT MIN(id), MAX(id), COUNT(*) FROM (SELECT id FROM async_req WHERE 1 = 1 \
             AND create_time >= ? AND create_time < ? AND status <> 'running' \
             AND status <> 'init' LIMIT ?) r"
        );
        let mysql = time_ids_sql(Dialect::MySql, &query).unwrap();
        assert!(mysql
            .text
            .contains("FORCE INDEX (async_req_done_created) WHERE 1 = 1 AND"));
        assert!(!mysql.text.contains("status"), "{}", mysql.text);
        assert!(time_ids_sql(Dialect::Sqlite, &query.clone().id(3)).is_none());
        assert!(time_ids_sql(Dialect::Sqlite, &RequestQuery::default()).is_none());

        let mut plan = PageSql::new(Dialect::Sqlite, "a", &query, &spec());
        plan.time = time_ids(Dialect::Sqlite, &[Some(100), Some(200), Some(7)]);
        assert_eq!(
            plan.ids_of(Part::Finished),
            Ids {
                min: Some(100),
                max: Some(200)
            }
        );
        assert_eq!(
            plan.ids_of(Part::Live),
            Ids::default(),
            "no index holds live times"
        );
        plan.time = time_ids(Dialect::MySql, &[Some(100), Some(200), Some(7)]);
        assert_eq!(
            plan.ids_of(Part::Live),
            Ids {
                min: Some(100),
                max: Some(200)
            }
        );
        plan.time = time_ids(Dialect::Sqlite, &[None, None, Some(0)]);
        assert_eq!(
            plan.ids_of(Part::Finished),
            Ids::NONE,
            "nothing finished in the range"
        );
        let too_many = Some(TIME_IDS_MOST + 1);
        assert_eq!(
            time_ids(Dialect::Sqlite, &[Some(1), Some(9), too_many]),
            None
        );
    }

    #[test]
    fn id_ranges_narrow() {
        let after = Ids::after(Some(Cursor { id: 50 }), Order::Newest);
        let both = after.and(Ids::up_to(20, Order::Newest));
        assert_eq!(
            both,
            Ids {
                min: Some(20),
                max: Some(49)
            }
        );
        let time = Ids {
            min: Some(30),
            max: Some(90),
        };
        assert_eq!(
            both.and(time),
            Ids {
                min: Some(30),
                max: Some(49)
            }
        );
        assert_eq!(
            Ids::after(Some(Cursor { id: 50 }), Order::Oldest),
            Ids {
                min: Some(51),
                max: None
            }
        );
    }

    #[test]
    fn a_search_reads_one_part_on_mysql_and_two_elsewhere() {
        let searched = RequestQuery::default().error_contains("timeout");
        let unfiltered = RequestQuery::default();
        for dialect in [Dialect::Sqlite, Dialect::Postgres, Dialect::MySql] {
            let search = PageSql::new(dialect, "a", &searched, &spec()).requests(3);
            let window = PageSql::new(dialect, "a", &unfiltered, &spec()).window_end(100);
            let list = PageSql::new(dialect, "a", &unfiltered, &spec()).requests(3);
            let one = dialect == Dialect::MySql;
            for sql in [&search, &window] {
                assert_eq!(
                    !sql.text.contains("UNION ALL"),
                    one,
                    "{dialect:?}: {}",
                    sql.text
                );
            }
            // A page without a search reads both parts everywhere.
            assert!(
                list.text.contains("UNION ALL"),
                "{dialect:?}: {}",
                list.text
            );
        }
    }
}

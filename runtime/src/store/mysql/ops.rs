//! The MySQL/MariaDB runner of the SQL written once for every backend ([`SqlRunner`]):
//! the operators' statements ([`crate::store::ops::OpsStore`]) run on it. Text columns
//! are binary here (`VARBINARY`, `_bin`): they decode unchecked.

use async_trait::async_trait;
use sqlx::mysql::{MySqlArguments, MySqlRow};
use sqlx::query::Query;
use sqlx::{MySql, Row};

use super::rows::{log_from_row, request_from_row};
use super::MySqlStore;
use crate::base::error::Result;
use crate::base::record::{AttemptLog, Request};
use crate::store::sql::{Bind, Cell, Cells, Change, Col, Dialect, Sql, SqlRunner, Txn};

pub(super) fn bound(sql: &Sql) -> Query<'_, MySql, MySqlArguments> {
    let mut query = sqlx::query(&sql.text);
    for bind in &sql.binds {
        query = match bind {
            Bind::Int(n) => query.bind(*n),
            Bind::Text(t) => query.bind(t.as_str()),
        };
    }
    query
}

/// `row`'s columns as `columns` say.
fn cells(row: &MySqlRow, columns: &[Col]) -> Result<Cells> {
    let cells = columns
        .iter()
        .enumerate()
        .map(|(i, column)| {
            Ok(match column {
                Col::Int => Cell::Int(row.try_get(i)?),
                Col::Text => Cell::Text(row.try_get_unchecked(i)?),
            })
        })
        .collect::<Result<_>>()?;
    Ok(Cells::new(cells))
}

#[async_trait]
impl SqlRunner for MySqlStore {
    fn dialect(&self) -> Dialect {
        Dialect::MySql
    }

    async fn fetch_requests(&self, sql: &Sql) -> Result<Vec<Request>> {
        let rows = bound(sql).fetch_all(&self.pool).await?;
        rows.iter().map(request_from_row).collect()
    }

    async fn fetch_logs(&self, sql: &Sql) -> Result<Vec<AttemptLog>> {
        let rows = bound(sql).fetch_all(&self.pool).await?;
        rows.iter().map(log_from_row).collect()
    }

    async fn fetch_ints(&self, sql: &Sql) -> Result<Vec<Option<i64>>> {
        let row = bound(sql).fetch_optional(&self.pool).await?;
        let Some(row) = row else {
            return Ok(Vec::new());
        };
        (0..row.len())
            .map(|i| Ok(row.try_get::<Option<i64>, _>(i)?))
            .collect()
    }

    async fn fetch_rows(&self, sql: &Sql, columns: &[Col]) -> Result<Vec<Cells>> {
        let rows = bound(sql).fetch_all(&self.pool).await?;
        rows.iter().map(|row| cells(row, columns)).collect()
    }

    async fn execute(&self, sql: &Sql) -> Result<u64> {
        Ok(bound(sql).execute(&self.pool).await?.rows_affected())
    }

    async fn read_then_write(
        &self,
        txn: Txn,
        read: Option<(&Sql, &[Col])>,
        change: &Change<'_>,
    ) -> Result<(Vec<Cells>, u64)> {
        match txn {
            Txn::Batch => self.read_then_write_once(txn, read, change).await,
            // A change of one record runs again when it deadlocks.
            Txn::Record => super::with_retry(|| self.read_then_write_once(txn, read, change)).await,
        }
    }
}

impl MySqlStore {
    async fn read_then_write_once(
        &self,
        txn: Txn,
        read: Option<(&Sql, &[Col])>,
        change: &Change<'_>,
    ) -> Result<(Vec<Cells>, u64)> {
        let mut tx = match txn {
            Txn::Batch => crate::store::begin::begin_whole(&self.pool, None).await?,
            Txn::Record => self.begin().await?,
        };
        let rows = match read {
            Some((sql, columns)) => bound(sql)
                .fetch_all(&mut *tx)
                .await?
                .iter()
                .map(|row| cells(row, columns))
                .collect::<Result<Vec<_>>>()?,
            None => Vec::new(),
        };
        let mut changed = None;
        for statement in change(&rows) {
            let done = bound(&statement).execute(&mut *tx).await?.rows_affected();
            changed.get_or_insert(done);
        }
        tx.commit().await?;
        Ok((rows, changed.unwrap_or(0)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::base::query::{PageSpec, RequestQuery};
    use crate::base::record::Status;
    use crate::store::mysql::plan_fixture;
    use crate::store::page::PageSql;

    /// A page of one finished status reads `async_req_done_status` on its indexed
    /// virtual column (migration 20261202000002), both columns of it, in id order: the
    /// index a claim no longer moves an entry of.
    #[tokio::test]
    #[cfg_attr(
        not(async_exec_test_mysql),
        ignore = "set ASYNC_EXEC_TEST_MYSQL_URL to run it"
    )]
    async fn a_status_page_reads_the_virtual_status_index() {
        let store = plan_fixture::store().await;
        let application = plan_fixture::seeded_application(&store, "status").await;
        let query = RequestQuery::default().status(Status::Dead);
        let page = PageSpec::default();
        let s = PageSql::for_test(Dialect::MySql, &application, &query, &page, None).requests(50);
        let explain = s.prefixed("EXPLAIN");
        let row = bound(&explain).fetch_one(&store.pool).await.unwrap();
        let plan = plan_fixture::Plan::of(&row);
        let said = format!("{plan:?}: {}", s.text);
        assert_eq!(plan.key.as_deref(), Some("async_req_done_status"), "{said}");
        assert!(!plan.extra.contains("filesort"), "{said}");
        assert_eq!(plan.reference.as_deref(), Some("const,const"), "{said}");
        plan_fixture::remove(&store, &application).await;
    }

    /// The end of a text search's window, unfiltered: one read of the table, not the union
    /// of the two parts, which sorted every waiting and running record (44 to 95 ms at
    /// 1,000,000 records with 150,000 waiting; one read of the primary key in id order,
    /// 5 ms). Which index the one read takes is the optimizer's: the primary key there, an
    /// index by application and a sort of its 5,000 entries here.
    #[tokio::test]
    #[cfg_attr(
        not(async_exec_test_mysql),
        ignore = "set ASYNC_EXEC_TEST_MYSQL_URL to run it"
    )]
    async fn a_search_window_ends_by_one_read_of_the_table() {
        let store = plan_fixture::store().await;
        let application = plan_fixture::seeded_application(&store, "window").await;
        let query = RequestQuery::default();
        let page = PageSpec::default();
        let s =
            PageSql::for_test(Dialect::MySql, &application, &query, &page, None).window_end(2_000);
        let explain = s.prefixed("EXPLAIN");
        let rows = bound(&explain).fetch_all(&store.pool).await.unwrap();
        let plans: Vec<plan_fixture::Plan> = rows.iter().map(plan_fixture::Plan::of).collect();
        let said = format!("{plans:?}: {}", s.text);
        assert_eq!(plans.len(), 1, "{said}");
        let end: Option<i64> = bound(&s)
            .fetch_optional(&store.pool)
            .await
            .unwrap()
            .map(|r| r.get(0));
        let expected: i64 = sqlx::query_scalar(
            "SELECT id FROM async_req WHERE application_name = ? ORDER BY id DESC LIMIT 1 OFFSET 1999",
        )
        .bind(&application)
        .fetch_one(&store.pool)
        .await
        .unwrap();
        assert_eq!(end, Some(expected), "{said}");
        plan_fixture::remove(&store, &application).await;
    }
}

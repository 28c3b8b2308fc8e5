//! The PostgreSQL runner of the SQL written once for every backend ([`SqlRunner`]):
//! the operators' statements ([`crate::store::ops::OpsStore`]) run on it.

use async_trait::async_trait;
use sqlx::postgres::{PgArguments, PgRow};
use sqlx::query::Query;
use sqlx::{Postgres, Row};

use super::PostgresStore;
use crate::base::error::Result;
use crate::base::record::{AttemptLog, Request};
use crate::store::rows::{log_from_row, request_from_row};
use crate::store::sql::{Bind, Cell, Cells, Change, Col, Dialect, Sql, SqlRunner, Txn};

pub(super) fn bound(sql: &Sql) -> Query<'_, Postgres, PgArguments> {
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
fn cells(row: &PgRow, columns: &[Col]) -> Result<Cells> {
    let cells = columns
        .iter()
        .enumerate()
        .map(|(i, column)| {
            Ok(match column {
                Col::Int => Cell::Int(row.try_get(i)?),
                Col::Text => Cell::Text(row.try_get(i)?),
            })
        })
        .collect::<Result<_>>()?;
    Ok(Cells::new(cells))
}

#[async_trait]
impl SqlRunner for PostgresStore {
    fn dialect(&self) -> Dialect {
        Dialect::Postgres
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
        self.read_then_write_once(txn, read, change).await
    }
}

impl PostgresStore {
    async fn read_then_write_once(
        &self,
        txn: Txn,
        read: Option<(&Sql, &[Col])>,
        change: &Change<'_>,
    ) -> Result<(Vec<Cells>, u64)> {
        let mut tx = match txn {
            Txn::Batch | Txn::Record => crate::store::begin::begin_whole(&self.pool, None).await?,
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

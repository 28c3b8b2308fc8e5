//! The SQLite runner of the SQL written once for every backend ([`SqlRunner`]): the
//! operators' statements ([`crate::store::ops::OpsStore`]) run on it.

use async_trait::async_trait;
use sqlx::query::Query;
use sqlx::sqlite::{SqliteArguments, SqliteRow};
use sqlx::{Row, Sqlite};

use super::SqliteStore;
use crate::base::error::Result;
use crate::base::record::{AttemptLog, Request};
use crate::store::rows::{log_from_row, request_from_row};
use crate::store::sql::{Bind, Cell, Cells, Change, Col, Dialect, Sql, SqlRunner, Txn};

pub(super) fn bound(sql: &Sql) -> Query<'_, Sqlite, SqliteArguments<'_>> {
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
fn cells(row: &SqliteRow, columns: &[Col]) -> Result<Cells> {
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
impl SqlRunner for SqliteStore {
    fn dialect(&self) -> Dialect {
        Dialect::Sqlite
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

impl SqliteStore {
    async fn read_then_write_once(
        &self,
        _txn: Txn,
        read: Option<(&Sql, &[Col])>,
        change: &Change<'_>,
    ) -> Result<(Vec<Cells>, u64)> {
        // It reads, then writes: IMMEDIATE takes the write lock first, for a batch and a
        // record alike. A deferred transaction fails with SQLITE_BUSY ("database is
        // locked", at once, whatever the busy timeout) when another connection commits
        // between its read and its write: seen in CI, `rt.retry_now` while a restarted
        // runtime wrote its presence.
        let mut tx = self.pool.begin_with("BEGIN IMMEDIATE").await?;
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
    use std::time::Duration;

    /// Another connection commits between a record change's read and its write: the
    /// change still succeeds (it failed with "database is locked" when a record's change
    /// began deferred; seen failing before the fix).
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_change_survives_a_commit_between_its_read_and_its_write() {
        let dir = tempfile::tempdir().unwrap();
        let store = crate::store::fixture::sqlite(&dir).await;
        let store = store.as_any().downcast_ref::<SqliteStore>().unwrap();
        let url = format!("sqlite:{}", dir.path().join("fixture.db").display());
        let read = store.sql("SELECT executor FROM async_pause");
        let other_writes = move || {
            let url = url.clone();
            // The other connection, on a thread of its own, while this change waits.
            std::thread::spawn(move || {
                tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .build()
                    .unwrap()
                    .block_on(async move {
                        use sqlx::ConnectOptions;
                        let options: sqlx::sqlite::SqliteConnectOptions = url.parse().unwrap();
                        let mut conn = options
                            .busy_timeout(Duration::from_millis(200))
                            .connect()
                            .await
                            .unwrap();
                        // Waits for the change's write lock, then gives up: fine.
                        let _ = sqlx::query(
                            "INSERT INTO async_pause VALUES ('app', 'other', 'test', 1)",
                        )
                        .execute(&mut conn)
                        .await;
                    })
            })
            .join()
            .unwrap();
        };
        let change = |_: &[Cells]| {
            tokio::task::block_in_place(&other_writes);
            let mut write = store.sql("INSERT INTO async_pause VALUES ('app', 'mine', 'test', ");
            write.bind_int(2).push(")");
            vec![write]
        };
        let (_, wrote) = store
            .read_then_write(Txn::Record, Some((&read, &[Col::Text])), &change)
            .await
            .expect("a commit by another connection between the read and the write");
        assert_eq!(wrote, 1);
    }
    use crate::base::query::{PageSpec, RequestQuery};
    use crate::base::record::Status;
    use crate::store::page::PageSql;
    use crate::store::Store;

    /// The plan SQLite picks for the page of `query`.
    async fn plan(store: &SqliteStore, query: &RequestQuery) -> String {
        let page = PageSpec::default().after(crate::base::query::Cursor { id: 1_000 });
        let time = query.created_from.map(|_| (10, 900));
        let s = PageSql::for_test(Dialect::Sqlite, "app", query, &page, time).requests(50);
        explain(store, &s).await
    }

    async fn explain(store: &SqliteStore, s: &Sql) -> String {
        let explain = s.prefixed("EXPLAIN QUERY PLAN");
        let rows = bound(&explain).fetch_all(&store.pool).await.unwrap();
        rows.iter()
            .map(|r| r.get::<String, _>("detail"))
            .collect::<Vec<_>>()
            .join(" | ")
    }

    /// A store on a new in-memory database, migrated.
    async fn migrated_memory_store() -> SqliteStore {
        let store = SqliteStore::connect(
            "sqlite::memory:",
            1,
            Default::default(),
            std::time::Duration::from_secs(10),
        )
        .await
        .unwrap();
        store.migrate().await.unwrap();
        store
    }

    /// Issue 30: the retention sweep's purge of orphaned tags reads the tags of one
    /// application written before a time through `async_tag_app` (migration
    /// `20261208000002`), not every tag of the application through the primary key (seen
    /// before the migration: `SEARCH async_tag USING INDEX sqlite_autoindex_async_tag_1
    /// (application_name=?)`).
    #[tokio::test]
    async fn the_tag_purge_reads_its_index() {
        let store = migrated_memory_store().await;
        let purge = crate::store::ops::orphan_purge(Dialect::Sqlite, "async_tag", "app", 10, 500);
        let plan = explain(&store, &purge).await;
        assert!(
            plan.contains(
                "async_tag USING INDEX async_tag_app (application_name=? AND create_time<?)"
            ),
            "{plan}"
        );
    }

    /// SQLite uses a partial index only when the query names its predicate: the list's
    /// pages must say it (`store::ops::finished`) exactly as the migrations do, or a page
    /// of dead requests scans the table. And no page sorts.
    #[tokio::test]
    async fn list_pages_read_the_partial_indexes_in_order() {
        let store = migrated_memory_store().await;
        let dead = plan(&store, &RequestQuery::default().status(Status::Dead)).await;
        assert!(dead.contains("async_req_done_status"), "{dead}");
        let by_executor = plan(&store, &RequestQuery::default().executor("mail")).await;
        assert!(
            by_executor.contains("async_req_done_executor"),
            "{by_executor}"
        );
        let everything = plan(&store, &RequestQuery::default()).await;
        assert!(!dead.contains("TEMP B-TREE"), "the page sorts: {dead}");
        for p in [&by_executor, &everything] {
            // Each part reads an index in order; only the merge sorts its two parts of at
            // most a page each.
            assert!(!p.contains("SCAN async_req"), "a part scans the table: {p}");
            assert_eq!(p.matches("TEMP B-TREE").count(), 2, "{p}");
            assert!(p.contains("SCAN finished | USE TEMP B-TREE"), "{p}");
            assert!(p.contains("SCAN live | USE TEMP B-TREE"), "{p}");
        }
        // A time range: its ids from the creation-time index, then the finished part from
        // the index by application and id between them, not the whole range sorted.
        let day = RequestQuery::default().created_between(Some(1), Some(2));
        let ids = crate::store::page::time_ids_sql(Dialect::Sqlite, &day).unwrap();
        let ids = explain(&store, &ids).await;
        assert!(ids.contains("USING INDEX async_req_done_created"), "{ids}");
        let in_range = plan(&store, &day).await;
        assert!(
            in_range.contains("USING INDEX async_req_done (application_name=? AND id>? AND id<?)"),
            "{in_range}"
        );
        assert_eq!(in_range.matches("TEMP B-TREE").count(), 2, "{in_range}");
    }

    /// Every record written, claimed and deleted evaluates the list indexes' predicates
    /// (SQLite checks a partial index's predicate on each row a write touches). Written
    /// `status NOT IN ('init', 'running')`, each check began with `status & status` (the
    /// NULL test of `NOT IN`), a conversion of the text to a number: about 90M of the 180M
    /// instructions the four indexes cost 20,000 records' inserts, claims and deletes
    /// (SQLite 3.46). The hot path's statements must do without it.
    #[tokio::test]
    async fn the_hot_path_checks_the_list_indexes_without_converting_the_status() {
        let store = migrated_memory_store().await;
        let statements = [
            "INSERT INTO async_req (application_name, executor, sign, strategy, status, \
             max_attempts, param_json, run_at, create_time, update_time) \
             VALUES ('a', 'e', 's', 'SaveAsync', 'init', 3, '{}', 1, 1, 1)",
            "UPDATE async_req SET status = 'running', lease_owner = 'o', \
             exec_count = exec_count + 1 WHERE id = 1 AND status = 'init'",
            "UPDATE async_req SET status = 'failed', lease_owner = NULL WHERE id = 1",
            "DELETE FROM async_req WHERE id = 1 AND status = 'running'",
        ];
        for statement in statements {
            // `EXPLAIN`'s second column is the opcode.
            let rows = sqlx::query(&format!("EXPLAIN {statement}"))
                .fetch_all(&store.pool)
                .await
                .unwrap_or_else(|e| panic!("{statement}: {e}"));
            let ops: Vec<String> = rows.iter().map(|r| r.get::<String, _>(1)).collect();
            assert!(ops
                .iter()
                .any(|op| op == "IdxInsert" || op == "IdxDelete" || op == "Delete"));
            assert!(
                !ops.iter().any(|op| op == "BitAnd"),
                "{statement}: {}",
                ops.join(" ")
            );
        }
    }
}

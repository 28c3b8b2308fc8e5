//! The rows of partitions with settings of their own (`async_partition`): set, cleared,
//! listed, read for a queue's flow. A queue's claims read them too (the backends'
//! `claims.rs`, through `store/partitions.rs`).

use async_trait::async_trait;

use crate::base::error::Result;
use crate::base::partition::PartitionSettings;
use crate::store::sql::{Col, SqlRunner};

/// A partition's settings as listed: the partition, its settings, who changed them and
/// when (unix ms).
pub(crate) type PartitionEntry = (String, PartitionSettings, Option<String>, Option<i64>);

/// The statements of partitions' own settings.
#[async_trait]
pub(crate) trait PartitionOps: SqlRunner {
    /// Writes the settings of `partition` of `queue` (all three columns: what is not set
    /// is the queue's). The rate's bucket is kept (a lower rate's holds no more than
    /// one period of it); a first rate starts full.
    async fn partition_set(
        &self,
        application: &str,
        queue: &str,
        partition: &str,
        settings: &PartitionSettings,
        by: &str,
        now: i64,
    ) -> Result<()> {
        let rate = settings.rate_limit();
        let mut s = self.sql(
            "INSERT INTO async_partition (application_name, queue_name, partition_key, weight, \
             concurrency, rate, rate_period_ms, tokens, refilled_at, changed_by, changed_at) \
             VALUES (",
        );
        s.bind_text(application)
            .push(", ")
            .bind_text(queue)
            .push(", ")
            .bind_text(partition);
        for value in [
            settings.weight_value().map(i64::from),
            settings.concurrency_limit().map(i64::from),
            rate.map(|r| i64::from(r.starts())),
            rate.map(|r| r.period().millis()),
        ] {
            s.push(", ");
            match value {
                Some(n) => s.bind_int(n),
                None => s.push("NULL"),
            };
        }
        s.push(", NULL, NULL, ")
            .bind_text(by)
            .push(", ")
            .bind_int(now)
            .push(")");
        s.push(&self.dialect().upsert(
            "async_partition",
            "application_name, queue_name, partition_key",
            &[],
            &[
                "weight",
                "concurrency",
                "rate",
                "rate_period_ms",
                "changed_by",
                "changed_at",
            ],
        ));
        self.execute(&s).await?;
        Ok(())
    }

    /// Deletes the settings of `partition` of `queue`; whether it had any.
    async fn partition_clear(
        &self,
        application: &str,
        queue: &str,
        partition: &str,
    ) -> Result<bool> {
        let mut s = self.sql("DELETE FROM async_partition WHERE application_name = ");
        s.bind_text(application)
            .push(" AND queue_name = ")
            .bind_text(queue)
            .push(" AND partition_key = ")
            .bind_text(partition);
        Ok(self.execute(&s).await? > 0)
    }

    /// The partitions of `queue` with settings, by name, at most `limit` from after
    /// `after` (a page).
    async fn partition_list(
        &self,
        application: &str,
        queue: &str,
        after: Option<&str>,
        limit: i64,
    ) -> Result<Vec<PartitionEntry>> {
        let mut s = self.sql(&format!(
            "SELECT partition_key, {}, {}, {}, rate_period_ms, changed_by, changed_at \
             FROM async_partition WHERE application_name = ",
            self.dialect().int64("weight"),
            self.dialect().int64("concurrency"),
            self.dialect().int64("rate"),
        ));
        s.bind_text(application)
            .push(" AND queue_name = ")
            .bind_text(queue);
        if let Some(after) = after {
            s.push(" AND partition_key > ").bind_text(after);
        }
        s.push(" ORDER BY partition_key LIMIT ").bind_int(limit);
        self.partition_rows(&s).await
    }

    /// The settings of these partitions of `queue` (those without any are left out).
    async fn partition_of(
        &self,
        application: &str,
        queue: &str,
        partitions: &[String],
    ) -> Result<Vec<PartitionEntry>> {
        if partitions.is_empty() {
            return Ok(Vec::new());
        }
        let mut s = self.sql(&format!(
            "SELECT partition_key, {}, {}, {}, rate_period_ms, changed_by, changed_at \
             FROM async_partition WHERE application_name = ",
            self.dialect().int64("weight"),
            self.dialect().int64("concurrency"),
            self.dialect().int64("rate"),
        ));
        s.bind_text(application)
            .push(" AND queue_name = ")
            .bind_text(queue)
            .push(" AND partition_key IN (");
        for (i, key) in partitions.iter().enumerate() {
            if i > 0 {
                s.push(", ");
            }
            s.bind_text(key);
        }
        s.push(")");
        self.partition_rows(&s).await
    }

    /// The rows a statement of [`partition_list`](Self::partition_list)'s columns reads.
    async fn partition_rows(&self, s: &crate::store::sql::Sql) -> Result<Vec<PartitionEntry>> {
        let rows = self
            .fetch_rows(
                s,
                &[
                    Col::Text,
                    Col::Int,
                    Col::Int,
                    Col::Int,
                    Col::Int,
                    Col::Text,
                    Col::Int,
                ],
            )
            .await?;
        rows.into_iter()
            .map(|mut row| {
                let key = row.text()?;
                let settings = PartitionSettings::from_columns(
                    row.opt_int()?,
                    row.opt_int()?,
                    row.opt_int()?,
                    row.opt_int()?,
                );
                Ok((key, settings, row.opt_text()?, row.opt_int()?))
            })
            .collect()
    }
}

impl<S: SqlRunner> PartitionOps for S {}

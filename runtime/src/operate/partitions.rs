//! A partition's own settings, changed while the service runs: weight, concurrency and
//! rate of one tenant of a queue, on every instance from the queue's next claim (claims
//! read them from `async_partition`), each change in the audit trail.

use serde::Serialize;

use crate::base::error::Result;
use crate::base::partition::PartitionSettings;
use crate::runtime::Runtime;

/// A partition with settings of its own, as [`Runtime::partition_settings`] lists it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[cfg_attr(feature = "console", derive(utoipa::ToSchema))]
#[non_exhaustive]
pub struct PartitionEntry {
    /// The partition.
    pub partition: String,
    /// Its settings (what is not set is the queue's).
    pub settings: PartitionSettings,
    /// Who set them last.
    pub changed_by: Option<String>,
    /// When (unix ms).
    pub changed_at: Option<i64>,
}

impl Runtime {
    /// Gives `partition` of `queue` settings of its own, on every instance from the
    /// queue's next claim: its weight in the queue's turns, its limit of running requests
    /// (in place of the queue's `per_partition`), its rate. Replaces the settings it had
    /// (what `settings` does not set is the queue's again). Written to the audit trail as
    /// `partition` by `actor`. Refused with [`Error::Config`](crate::Error::Config) for a
    /// queue no executor names, a partition name that no call could carry, settings with
    /// nothing set (use [`clear_partition`](Runtime::clear_partition)) and values out of
    /// bounds (weight 1 to 1,000; concurrency and rate 1 to 100,000).
    ///
    /// ```no_run
    /// # async fn demo(rt: async_exec::Runtime) -> async_exec::Result<()> {
    /// use async_exec::{PartitionSettings, Rate};
    /// // Tenant 7 pays for more: three turns for one of the others, 10 at once, 600 a
    /// // minute.
    /// let big = PartitionSettings::new().weight(3).concurrency(10).rate(Rate::per_minute(600));
    /// rt.set_partition("webhooks", "tenant-7", big, "alice").await?;
    /// // Back to the queue's defaults.
    /// rt.clear_partition("webhooks", "tenant-7", "alice").await?;
    /// # Ok(()) }
    /// ```
    pub async fn set_partition(
        &self,
        queue: &str,
        partition: &str,
        settings: PartitionSettings,
        actor: &str,
    ) -> Result<()> {
        crate::base::partition::check(queue, partition, &settings)?;
        self.known_queue(queue).await?;
        let now = self.inner.now_ms();
        self.inner
            .store
            .ops()
            .partition_set(&self.inner.app, queue, partition, &settings, actor, now)
            .await?;
        let target = serde_json::json!({
            "queue": queue,
            "partition": partition,
            "settings": settings,
        })
        .to_string();
        crate::log::info!(
            queue = %crate::log::escaped(queue),
            partition = %crate::log::escaped(partition),
            actor = %crate::log::escaped(actor),
            "a partition's settings were set"
        );
        self.audit(&self.inner.app, actor, "partition", target, 1)
            .await
    }

    /// Clears the settings of `partition` of `queue`: the queue's apply to it again from
    /// the next claim. Whether it had any; written to the audit trail as
    /// `partition-clear` by `actor`. Refused for a queue no executor names.
    pub async fn clear_partition(&self, queue: &str, partition: &str, actor: &str) -> Result<bool> {
        self.known_queue(queue).await?;
        let had = self
            .inner
            .store
            .ops()
            .partition_clear(&self.inner.app, queue, partition)
            .await?;
        let target = serde_json::json!({ "queue": queue, "partition": partition }).to_string();
        self.audit(
            &self.inner.app,
            actor,
            "partition-clear",
            target,
            i64::from(had),
        )
        .await?;
        Ok(had)
    }

    /// The partitions of `queue` with settings of their own, by name: at most `limit`
    /// (1 to 1,000) after the partition `after` (the last of the page before, for the
    /// next page).
    ///
    /// ```no_run
    /// # async fn demo(rt: async_exec::Runtime) -> async_exec::Result<()> {
    /// for p in rt.partition_settings("webhooks", None, 100).await? {
    ///     println!("{}: weight {:?}", p.partition, p.settings.weight_value());
    /// }
    /// # Ok(()) }
    /// ```
    pub async fn partition_settings(
        &self,
        queue: &str,
        after: Option<&str>,
        limit: usize,
    ) -> Result<Vec<PartitionEntry>> {
        let rows = self
            .inner
            .store
            .ops()
            .partition_list(&self.inner.app, queue, after, limit.clamp(1, 1_000) as i64)
            .await?;
        Ok(rows
            .into_iter()
            .map(
                |(partition, settings, changed_by, changed_at)| PartitionEntry {
                    partition,
                    settings,
                    changed_by,
                    changed_at,
                },
            )
            .collect())
    }
}

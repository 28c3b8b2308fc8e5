//! What the operators' tools ask beyond one application's requests: which applications
//! have records in the database ([`Runtime::applications`]), and writing a tool's own
//! actions to the audit trail ([`Runtime::audit_action`]).

use crate::base::error::Result;
use crate::runtime::Runtime;
use crate::store::sealed::BackendOps;

/// The same statement on every backend: no parameter, no dialect.
const BY_APPLICATION: &str = "SELECT application_name, COUNT(*) FROM async_req \
                              GROUP BY application_name ORDER BY application_name";

impl Runtime {
    /// Every application that has requests in this database (any status), by name, with
    /// how many: what to pass as `application_name` to look at another application's
    /// records (the command-line tool shows it when it is given an application with none).
    ///
    /// ```no_run
    /// # async fn demo(rt: async_exec::Runtime) -> async_exec::Result<()> {
    /// for (application, requests) in rt.applications().await? {
    ///     println!("{application}: {requests} requests");
    /// }
    /// # Ok(()) }
    /// ```
    pub async fn applications(&self) -> Result<Vec<(String, i64)>> {
        self.inner.check_open()?;
        let store = self.inner.store.as_any();
        macro_rules! on {
            ($db:ty, $name:ty, $text:expr) => {
                if let Some(begin) = <$db as BackendOps>::begin_on(store) {
                    let mut tx = begin.await?;
                    let rows: Vec<($name, i64)> =
                        sqlx::query_as(BY_APPLICATION).fetch_all(&mut *tx).await?;
                    tx.rollback().await?;
                    return Ok(rows.into_iter().map(|(n, c)| ($text(n), c)).collect());
                }
            };
        }
        #[cfg(feature = "sqlite")]
        on!(sqlx::Sqlite, String, |n: String| n);
        #[cfg(feature = "postgres")]
        on!(sqlx::Postgres, String, |n: String| n);
        // Names are bytes there (a binary column: compared as written).
        #[cfg(feature = "mysql")]
        on!(sqlx::MySql, Vec<u8>, |n: Vec<u8>| String::from_utf8_lossy(
            &n
        )
        .into_owned());
        unreachable!("the store is of a compiled backend")
    }

    /// Writes an action done on this application's requests by other means than
    /// [`act`](Runtime::act), [`pause_executor`](Runtime::pause_executor) and
    /// [`resume_executor`](Runtime::resume_executor) (which write their own) to the audit
    /// trail that the console shows: `actor` did `action` (`retry`, `cancel`, ...) on
    /// `target` (JSON, such as a serialized [`RequestQuery`](crate::RequestQuery)),
    /// changing `affected` requests. The command-line tool writes one per request it acts
    /// on, as `cli:<user>`.
    ///
    /// ```no_run
    /// # async fn demo(rt: async_exec::Runtime, id: i64) -> async_exec::Result<()> {
    /// rt.retry_now(id).await?;
    /// let target = serde_json::to_string(&async_exec::RequestQuery::default().id(id)).unwrap();
    /// rt.audit_action("script:nightly", "retry", &target, 1).await?;
    /// # Ok(()) }
    /// ```
    pub async fn audit_action(
        &self,
        actor: &str,
        action: &str,
        target: &str,
        affected: u64,
    ) -> Result<()> {
        self.inner.check_open()?;
        self.audit(
            &self.inner.app,
            actor,
            action,
            target.to_string(),
            i64::try_from(affected).unwrap_or(i64::MAX),
        )
        .await
    }
}

//! The audit trail (`async_audit`): who did what to which requests, newest first.

use async_trait::async_trait;

use crate::base::error::Result;
use crate::base::query::AuditEntry;
use crate::store::sql::{Col, SqlRunner};

/// The audit trail's statements.
/// Every backend has them through its [`SqlRunner`].
#[async_trait]
pub(crate) trait AuditOps: SqlRunner {
    /// Writes an audit entry.
    async fn audit_add(&self, e: &AuditEntry) -> Result<()> {
        let mut s = self.sql(
            "INSERT INTO async_audit (application_name, actor, action, target, affected, \
             create_time) VALUES (",
        );
        s.bind_text(&e.application)
            .push(", ")
            .bind_text(&e.actor)
            .push(", ")
            .bind_text(&e.action)
            .push(", ")
            .bind_text(&e.target)
            .push(", ")
            .bind_int(e.affected)
            .push(", ")
            .bind_int(e.create_time)
            .push(")");
        self.execute(&s).await?;
        Ok(())
    }

    /// The last `limit` audit entries of `application`, newest first.
    async fn audit_list(&self, application: &str, limit: i64) -> Result<Vec<AuditEntry>> {
        let mut s = self.sql(
            "SELECT id, application_name, actor, action, target, affected, create_time \
             FROM async_audit WHERE application_name = ",
        );
        s.bind_text(application)
            .push(" ORDER BY id DESC LIMIT ")
            .bind_int(limit);
        let columns = [
            Col::Int,
            Col::Text,
            Col::Text,
            Col::Text,
            Col::Text,
            Col::Int,
            Col::Int,
        ];
        let rows = self.fetch_rows(&s, &columns).await?;
        rows.into_iter()
            .map(|mut row| {
                Ok(AuditEntry {
                    id: row.int()?,
                    application: row.text()?,
                    actor: row.text()?,
                    action: row.text()?,
                    target: row.text()?,
                    affected: row.int()?,
                    create_time: row.int()?,
                })
            })
            .collect()
    }
}

impl<S: SqlRunner> AuditOps for S {}

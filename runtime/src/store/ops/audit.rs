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

    /// Deletes at most `limit` audit rows of `application` written before `before` (unix
    /// ms), oldest first; how many it deleted. Two statements at the server's default
    /// isolation, no lock held between them: the ids are read, then deleted by id, so
    /// instances pruning at once delete each row once (a row gone already counts for
    /// none).
    async fn audit_prune(&self, application: &str, before: i64, limit: i64) -> Result<u64> {
        let mut s = self.sql("SELECT id FROM async_audit WHERE application_name = ");
        s.bind_text(application)
            .push(" AND create_time < ")
            .bind_int(before)
            .push(" ORDER BY create_time, id LIMIT ")
            .bind_int(limit);
        let ids: Vec<i64> = self
            .fetch_rows(&s, &[Col::Int])
            .await?
            .into_iter()
            .map(|mut row| row.int())
            .collect::<Result<_>>()?;
        if ids.is_empty() {
            return Ok(0);
        }
        let mut s = self.sql("DELETE FROM async_audit WHERE id IN (");
        for (n, id) in ids.iter().enumerate() {
            if n > 0 {
                s.push(", ");
            }
            s.bind_int(*id);
        }
        s.push(")");
        self.execute(&s).await
    }
}

impl<S: SqlRunner> AuditOps for S {}

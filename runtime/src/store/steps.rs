//! Durable steps (`ctx.step`): the finished steps of a request, written once for every
//! backend over its [`SqlRunner`].

use async_trait::async_trait;

use super::sql::{Cells, Col, Dialect, SqlRunner};
use crate::base::error::Result;

/// A finished step of a request, as stored.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct StoredStep {
    pub(crate) position: i64,
    pub(crate) name: String,
    pub(crate) value_json: String,
}

/// One step to keep: the request, its attempt and owner (the fence), where the step is
/// in the body's order, its name and value.
#[derive(Debug, Clone, Copy)]
pub(crate) struct NewStep<'a> {
    pub(crate) application: &'a str,
    pub(crate) id: i64,
    pub(crate) owner: &'a str,
    pub(crate) attempt: i32,
    pub(crate) position: i64,
    pub(crate) name: &'a str,
    pub(crate) value_json: &'a str,
    pub(crate) now: i64,
}

/// The steps' statements; every [`SqlRunner`] has them.
#[async_trait]
pub(crate) trait StepStore: SqlRunner {
    /// The finished steps of request `id`, in their order.
    async fn steps_of(&self, id: i64) -> Result<Vec<StoredStep>> {
        // The INTEGER column read as a 64-bit integer, as the others.
        let position = self.dialect().int64("position");
        let mut s = self.sql(&format!(
            "SELECT {position}, name, value_json FROM async_step WHERE req_id = "
        ));
        s.bind_int(id).push(" ORDER BY position");
        let rows = self
            .fetch_rows(&s, &[Col::Int, Col::Text, Col::Text])
            .await?;
        rows.into_iter()
            .map(|mut row: Cells| {
                Ok(StoredStep {
                    position: row.int()?,
                    name: row.text()?,
                    value_json: row.text()?,
                })
            })
            .collect()
    }

    /// Keeps a finished step, if the record is still running under this owner and
    /// attempt (else `false`: the lease was lost, another attempt may run); a step kept
    /// at that position already is an error of the database (its key).
    async fn step_keep(&self, step: NewStep<'_>) -> Result<bool> {
        let mut s = self.sql(
            "INSERT INTO async_step (application_name, req_id, position, name, value_json, \
             attempt, create_time) SELECT ",
        );
        s.bind_text(step.application)
            .push(", ")
            .bind_int(step.id)
            .push(", ")
            .bind_int(step.position)
            .push(", ")
            .bind_text(step.name)
            .push(", ")
            .bind_text(step.value_json)
            .push(", ")
            .bind_int(i64::from(step.attempt))
            .push(", ")
            .bind_int(step.now);
        if self.dialect() == Dialect::MySql {
            // MySQL wants a table for a SELECT with a WHERE.
            s.push(" FROM DUAL");
        }
        s.push(" WHERE EXISTS (SELECT 1 FROM async_req WHERE id = ")
            .bind_int(step.id)
            .push(" AND status = 'running' AND lease_owner = ")
            .bind_text(step.owner)
            .push(" AND exec_count = ")
            .bind_int(i64::from(step.attempt))
            .push(")");
        Ok(self.execute(&s).await? > 0)
    }

    /// Deletes at most `limit` steps of `application` written before `before` whose
    /// request is gone; how many.
    async fn step_purge_orphans(&self, application: &str, before: i64, limit: i64) -> Result<u64> {
        let s = super::ops::orphan_purge(self.dialect(), "async_step", application, before, limit);
        self.execute(&s).await
    }
}

impl<T: SqlRunner + ?Sized> StepStore for T {}

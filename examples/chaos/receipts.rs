//! What callers were told, written to the history database (never through a proxy): the
//! receipts of calls (`chaos_receipts`, with the deadline a call was given) and the
//! answers to cancels (`chaos_cancels`). A failure to write one is the test's own and
//! stops the process.

use std::time::Duration;

use async_exec::{Outcome, Receipt};
use sqlx::AnyPool;

use super::{dialect, now_ms};

pub struct Receipts {
    pool: AnyPool,
    insert: String,
    cancel_insert: String,
    source: String,
}

/// A cancel and its answer.
pub struct CancelAnswer<'a> {
    pub request_id: i64,
    /// Unix ms before the cancel was asked, and after it was answered.
    pub asked: i64,
    pub answered: i64,
    /// `cancelled` (it was waiting), `stop_asked` (it was running), `not_found`
    /// (finished and deleted), `refused` (finished, kept), `error`.
    pub outcome: &'a str,
}

impl Receipts {
    pub fn new(pool: AnyPool, url: &str, source: &str) -> Receipts {
        Receipts {
            pool,
            insert: dialect(
                url,
                "INSERT INTO chaos_receipts (request_id, req_key, outcome, via, source, recorded, deadline_ms) \
                 VALUES ($1, $2, $3, $4, $5, $6, $7)",
            ),
            cancel_insert: dialect(
                url,
                "INSERT INTO chaos_cancels (request_id, asked, answered, outcome) VALUES ($1, $2, $3, $4)",
            ),
            source: source.to_string(),
        }
    }

    /// Runs an insert (built by `query`), trying again for about 2 s.
    async fn write<'q>(
        &self,
        what: &str,
        query: impl Fn() -> sqlx::query::Query<'q, sqlx::Any, sqlx::any::AnyArguments<'q>>,
    ) {
        let mut tries = 0;
        loop {
            match query().execute(&self.pool).await {
                Ok(_) => return,
                Err(error) if tries < 20 => {
                    tries += 1;
                    eprintln!("{what} not written ({error}); again");
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
                Err(error) => panic!("{what} could not be written: {error}"),
            }
        }
    }

    /// A call's outcome, given as text.
    pub async fn record(&self, id: Option<i64>, key: Option<&str>, outcome: &str, via: &str) {
        self.record_row(id, key, outcome, via, None).await
    }

    async fn record_row(
        &self,
        id: Option<i64>,
        key: Option<&str>,
        outcome: &str,
        via: &str,
        deadline_ms: Option<u64>,
    ) {
        let recorded = now_ms();
        let what = format!("receipt {id:?} {key:?} {outcome}");
        self.write(&what, || {
            sqlx::query(&self.insert)
                .bind(id)
                .bind(key)
                .bind(outcome)
                .bind(via)
                .bind(&self.source)
                .bind(recorded)
                .bind(deadline_ms.map(|ms| ms as i64))
        })
        .await
    }

    /// A receipt the runtime gave.
    pub async fn receipt(&self, receipt: &Receipt, key: Option<&str>, via: &str) {
        self.receipt_with_deadline(receipt, key, via, None).await
    }

    /// A receipt of a call made with `.deadline(deadline_ms)`: written after the call's
    /// transaction ended, so `recorded + deadline_ms` is at or after its deadline.
    pub async fn receipt_with_deadline(
        &self,
        receipt: &Receipt,
        key: Option<&str>,
        via: &str,
        deadline_ms: Option<u64>,
    ) {
        let outcome = match receipt.outcome {
            Outcome::Queued => "queued",
            Outcome::Existing => "existing",
            Outcome::Degraded { .. } => "degraded",
            _ => "other",
        };
        self.record_row(receipt.id, key, outcome, via, deadline_ms)
            .await;
    }

    /// A cancel's answer.
    pub async fn cancel(&self, answer: CancelAnswer<'_>) {
        let what = format!("cancel of {}", answer.request_id);
        self.write(&what, || {
            sqlx::query(&self.cancel_insert)
                .bind(answer.request_id)
                .bind(answer.asked)
                .bind(answer.answered)
                .bind(answer.outcome)
        })
        .await
    }
}

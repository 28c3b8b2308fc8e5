//! Lease renewals on PostgreSQL, on a connection of their own.

use std::time::Duration;

use async_trait::async_trait;
use sqlx::{PgConnection, Postgres};

use super::dedicated::DedicatedConnection;
use super::LeaseKeeper;
use crate::error::Result;
use crate::record::RequestId;

/// Renews leases on its own connection to the store's database.
#[derive(Debug)]
pub(crate) struct PostgresLeases {
    conn: DedicatedConnection<Postgres>,
}

impl PostgresLeases {
    pub(crate) fn new(pool: &sqlx::PgPool) -> Self {
        PostgresLeases {
            conn: DedicatedConnection::new((*pool.connect_options()).clone()),
        }
    }
}

#[async_trait]
impl LeaseKeeper for PostgresLeases {
    async fn renew(
        &self,
        owner: &str,
        ids: &[RequestId],
        lease_ms: i64,
        patience: Duration,
    ) -> Result<Vec<RequestId>> {
        if ids.is_empty() {
            return Ok(Vec::new());
        }
        // Owned, for the statement's future (which may outlive this call's borrows).
        let (owner, ids) = (owner.to_owned(), ids.to_vec());
        self.conn
            .run(patience, move |conn: &mut PgConnection| {
                Box::pin(async move {
                    // Rows locked by another statement are skipped, so that a renewal never
                    // waits while holding locks (no deadlock with an outcome being
                    // written). A skipped record is being finished or handed back.
                    let sql = format!(
                        "UPDATE async_req SET lease_until = {} + $1 \
                         WHERE status = 'running' AND lease_owner = $2 \
                         AND id IN (SELECT id FROM async_req WHERE id = ANY($3) \
                           AND status = 'running' AND lease_owner = $2 \
                           ORDER BY id FOR UPDATE SKIP LOCKED) \
                         RETURNING id",
                        super::postgres::DB_NOW
                    );
                    let renewed = sqlx::query_scalar(&sql)
                        .bind(lease_ms)
                        .bind(&owner)
                        .bind(&ids)
                        .fetch_all(&mut *conn)
                        .await?;
                    Ok(renewed)
                })
            })
            .await
    }
}

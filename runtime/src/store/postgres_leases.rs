//! Lease renewals on PostgreSQL, on a connection of their own.

use std::time::Duration;

use async_trait::async_trait;
use sqlx::{PgConnection, Postgres};

use super::dedicated::DedicatedConnection;
use super::{LeaseKeeper, Renewal};
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
    ) -> Result<Renewal> {
        if ids.is_empty() {
            return Ok(Renewal::default());
        }
        // Owned, for the statement's future (which may outlive this call's borrows).
        let (owner, ids) = (owner.to_owned(), ids.to_vec());
        self.conn
            .run(patience, move |conn: &mut PgConnection| {
                Box::pin(async move {
                    // Rows locked by another statement are skipped, so that a renewal never
                    // waits while holding locks (no deadlock with an outcome being
                    // written). A skipped record may still be this owner's: see below.
                    let sql = format!(
                        "UPDATE async_req SET lease_until = {} + $1 \
                         WHERE status = 'running' AND lease_owner = $2 \
                         AND id IN (SELECT id FROM async_req WHERE id = ANY($3) \
                           AND status = 'running' AND lease_owner = $2 \
                           ORDER BY id FOR UPDATE SKIP LOCKED) \
                         RETURNING id",
                        super::postgres::DB_NOW
                    );
                    let renewed: Vec<RequestId> = sqlx::query_scalar(&sql)
                        .bind(lease_ms)
                        .bind(&owner)
                        .bind(&ids)
                        .fetch_all(&mut *conn)
                        .await?;
                    if renewed.len() == ids.len() {
                        return Ok(Renewal::all(renewed));
                    }
                    // Skipped: taken over (lost), gone, or only locked for a moment by
                    // another statement (a claim's recheck, an operator's action). A plain
                    // read, which waits for no lock, tells which are still this owner's.
                    let held = sqlx::query_scalar(
                        "SELECT id FROM async_req WHERE id = ANY($1) AND status = 'running' \
                         AND lease_owner = $2 AND NOT (id = ANY($3)) ORDER BY id",
                    )
                    .bind(&ids)
                    .bind(&owner)
                    .bind(&renewed)
                    .fetch_all(&mut *conn)
                    .await?;
                    Ok(Renewal { renewed, held })
                })
            })
            .await
    }
}

//! Lease renewals on PostgreSQL, on a connection of their own.

use std::time::Duration;

use async_trait::async_trait;
use sqlx::{PgConnection, Postgres};

use crate::base::error::Result;
use crate::base::record::RequestId;
use crate::store::dedicated::DedicatedConnection;
use crate::store::{Held, LeaseKeeper, Renewal};

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
        held: &[Held],
        lease_ms: i64,
        patience: Duration,
    ) -> Result<Renewal> {
        if held.is_empty() {
            return Ok(Renewal::default());
        }
        // Owned, for the statement's future (which may outlive this call's borrows).
        let owner = owner.to_owned();
        let (ids, attempts): (Vec<RequestId>, Vec<i32>) = held.iter().copied().unzip();
        self.conn
            .run(patience, move |conn: &mut PgConnection| {
                Box::pin(async move {
                    // Rows locked by another statement are skipped, so that a renewal never
                    // waits while holding locks (no deadlock with an outcome being
                    // written). A skipped record may still be this owner's: see below.
                    // Only records held at the attempt claimed: a twin's later claim of
                    // one (the same name) is not renewed.
                    let sql = format!(
                        "UPDATE async_req SET lease_until = {} + $1 \
                         WHERE status = 'running' AND lease_owner = $2 \
                         AND (id, exec_count) IN \
                           (SELECT * FROM UNNEST($3::BIGINT[], $4::INTEGER[])) \
                         AND id IN (SELECT r.id FROM async_req r \
                           JOIN UNNEST($3::BIGINT[], $4::INTEGER[]) AS h(id, attempt) \
                             ON r.id = h.id AND r.exec_count = h.attempt \
                           WHERE r.status = 'running' AND r.lease_owner = $2 \
                           ORDER BY r.id FOR UPDATE OF r SKIP LOCKED) \
                         RETURNING id",
                        super::DB_NOW
                    );
                    let renewed: Vec<RequestId> = sqlx::query_scalar(&sql)
                        .bind(lease_ms)
                        .bind(&owner)
                        .bind(&ids)
                        .bind(&attempts)
                        .fetch_all(&mut *conn)
                        .await?;
                    if renewed.len() == ids.len() {
                        return Ok(Renewal::all(renewed));
                    }
                    // Skipped: taken over (lost), gone, or only locked for a moment by
                    // another statement (a claim's recheck, an operator's action). A plain
                    // read, which waits for no lock, tells which are still this owner's.
                    let held = sqlx::query_scalar(
                        "SELECT r.id FROM async_req r \
                         JOIN UNNEST($1::BIGINT[], $2::INTEGER[]) AS h(id, attempt) \
                           ON r.id = h.id AND r.exec_count = h.attempt \
                         WHERE r.status = 'running' AND r.lease_owner = $3 \
                         AND NOT (r.id = ANY($4)) ORDER BY r.id",
                    )
                    .bind(&ids)
                    .bind(&attempts)
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
/// The records of `application` that `owner` holds as running and that a claim made at
/// one of `claimed_at` took (their `update_time`), in id order (see
/// `Store::lease_claimed_at`). Found through the partial index of running records.
pub(super) async fn claimed_at(
    pool: &sqlx::PgPool,
    application: &str,
    owner: &str,
    claimed_at: &[i64],
) -> Result<Vec<Held>> {
    if claimed_at.is_empty() {
        return Ok(Vec::new());
    }
    let rows: Vec<(RequestId, i32)> = sqlx::query_as(
        "SELECT id, exec_count FROM async_req WHERE status = 'running' \
         AND application_name = $1 AND lease_owner = $2 AND update_time = ANY($3) ORDER BY id",
    )
    .bind(application)
    .bind(owner)
    .bind(claimed_at)
    .fetch_all(pool)
    .await?;
    Ok(rows)
}

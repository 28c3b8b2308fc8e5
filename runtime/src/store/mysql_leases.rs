//! Lease renewals on MySQL and MariaDB, on a connection of their own.

use std::time::Duration;

use async_trait::async_trait;
use sqlx::{MySql, MySqlConnection};

use super::dedicated::DedicatedConnection;
use super::{LeaseKeeper, Renewal};
use crate::error::Result;
use crate::record::RequestId;

/// Ids per statement (the `IN` lists stay well under the placeholder limit).
const CHUNK: usize = 1000;

/// Renews leases on its own connection to the store's database.
#[derive(Debug)]
pub(crate) struct MySqlLeases {
    conn: DedicatedConnection<MySql>,
}

impl MySqlLeases {
    pub(crate) fn new(pool: &sqlx::MySqlPool) -> Self {
        MySqlLeases {
            conn: DedicatedConnection::new((*pool.connect_options()).clone()),
        }
    }
}

fn marks(n: usize) -> String {
    vec!["?"; n].join(",")
}

#[async_trait]
impl LeaseKeeper for MySqlLeases {
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
            .run(patience, move |conn: &mut MySqlConnection| {
                Box::pin(async move {
                    // MariaDB has no UPDATE ... RETURNING: the renewed rows are those that
                    // carry this beat's `lease_until` under this owner afterwards. The
                    // lease is the database's time plus `lease_ms`, read first so that both
                    // statements name the same value (each in autocommit; a record taken
                    // over between the two is rightly not counted as renewed).
                    let until: i64 =
                        sqlx::query_scalar(&format!("SELECT {} + ?", super::mysql::DB_NOW))
                            .bind(lease_ms)
                            .fetch_one(&mut *conn)
                            .await?;
                    let mut renewed = Vec::with_capacity(ids.len());
                    for chunk in ids.chunks(CHUNK) {
                        let update = format!(
                            "UPDATE async_req SET lease_until = ? \
                             WHERE status = 'running' AND lease_owner = ? AND id IN ({})",
                            marks(chunk.len())
                        );
                        let mut query = sqlx::query(&update).bind(until).bind(&owner);
                        for id in chunk {
                            query = query.bind(id);
                        }
                        query.execute(&mut *conn).await?;
                        let select = format!(
                            "SELECT id FROM async_req WHERE status = 'running' \
                             AND lease_owner = ? AND lease_until = ? AND id IN ({})",
                            marks(chunk.len())
                        );
                        let mut query = sqlx::query_scalar::<_, RequestId>(&select)
                            .bind(&owner)
                            .bind(until);
                        for id in chunk {
                            query = query.bind(id);
                        }
                        renewed.extend(query.fetch_all(&mut *conn).await?);
                    }
                    // Locked rows are waited for (within the patience), never skipped.
                    Ok(Renewal::all(renewed))
                })
            })
            .await
    }
}

//! Lease renewals on MySQL and MariaDB, on a connection of their own.

use std::time::Duration;

use async_trait::async_trait;
use sqlx::{MySql, MySqlConnection, MySqlPool, Row};

use super::{bind_list, bind_pairs, with_retry, MAX_IN};
use crate::base::error::Result;
use crate::base::record::RequestId;
use crate::store::dedicated::DedicatedConnection;
use crate::store::{Held, LeaseKeeper, Renewal};

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

/// The `IN` list's length for `n` ids: the next power of two (up to [`CHUNK`]), so that a
/// few statement texts serve every beat and stay prepared on the connection (a new text
/// costs a round trip to prepare, which on a slow network is time a lease does not have).
fn padded(n: usize) -> usize {
    n.next_power_of_two().min(CHUNK)
}

/// `(?, ?), ...`: `len` pairs.
fn pair_marks(len: usize) -> String {
    vec!["(?, ?)"; len].join(",")
}

/// `held`, then its last pair again up to `len`.
fn held_padded(held: &[Held], len: usize) -> impl Iterator<Item = Held> + '_ {
    let last = held.last().copied().unwrap_or_default();
    held.iter()
        .copied()
        .chain(std::iter::repeat(last))
        .take(len.max(held.len()))
}

/// The records of `held` a statement touches: by id (the primary key), then only those
/// at the attempt claimed (a twin's later claim of one, under the same name, is not
/// this instance's).
fn held_at(len: usize) -> String {
    format!(
        "id IN ({}) AND (id, exec_count) IN ({})",
        marks(len),
        pair_marks(len)
    )
}

/// Extends the leases of `held` (distinct ids, at most [`CHUNK`]) held by `owner` to the
/// database's time plus `lease_ms`; whether every one of them was.
async fn renew_all(
    conn: &mut MySqlConnection,
    owner: &str,
    held: &[Held],
    lease_ms: i64,
) -> Result<bool> {
    let len = padded(held.len());
    let update = format!(
        "UPDATE async_req SET lease_until = {} + ? \
         WHERE status = 'running' AND lease_owner = ? AND {}",
        super::DB_NOW,
        held_at(len)
    );
    let mut query = sqlx::query(&update).bind(lease_ms).bind(owner);
    for (id, _) in held_padded(held, len) {
        query = query.bind(id);
    }
    for (id, attempt) in held_padded(held, len) {
        query = query.bind(id).bind(attempt);
    }
    let done = query.execute(&mut *conn).await?;
    Ok(done.rows_affected() == held.len() as u64)
}

/// Extends the leases of `held` held by `owner` and says which were: the renewed rows are
/// those that carry this renewal's `lease_until` under this owner afterwards (MariaDB has
/// no `UPDATE ... RETURNING`). The lease end is read first, so that both statements name
/// the same value (each in autocommit; a record taken over between the two is rightly not
/// counted as renewed).
async fn renew_noting(
    conn: &mut MySqlConnection,
    owner: &str,
    held: &[Held],
    lease_ms: i64,
) -> Result<Vec<RequestId>> {
    let until: i64 = sqlx::query_scalar(&format!("SELECT {} + ?", super::DB_NOW))
        .bind(lease_ms)
        .fetch_one(&mut *conn)
        .await?;
    let len = padded(held.len());
    let update = format!(
        "UPDATE async_req SET lease_until = ? \
         WHERE status = 'running' AND lease_owner = ? AND {}",
        held_at(len)
    );
    let mut query = sqlx::query(&update).bind(until).bind(owner);
    for (id, _) in held_padded(held, len) {
        query = query.bind(id);
    }
    for (id, attempt) in held_padded(held, len) {
        query = query.bind(id).bind(attempt);
    }
    query.execute(&mut *conn).await?;
    let select = format!(
        "SELECT id FROM async_req WHERE status = 'running' \
         AND lease_owner = ? AND lease_until = ? AND {}",
        held_at(len)
    );
    let mut query = sqlx::query_scalar::<_, RequestId>(&select)
        .bind(owner)
        .bind(until);
    for (id, _) in held_padded(held, len) {
        query = query.bind(id);
    }
    for (id, attempt) in held_padded(held, len) {
        query = query.bind(id).bind(attempt);
    }
    Ok(query.fetch_all(&mut *conn).await?)
}

#[async_trait]
impl LeaseKeeper for MySqlLeases {
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
        let (owner, held) = (owner.to_owned(), held.to_vec());
        self.conn
            .run(patience, move |conn: &mut MySqlConnection| {
                Box::pin(async move {
                    let mut renewed = Vec::with_capacity(held.len());
                    for chunk in held.chunks(CHUNK) {
                        // Usually one round trip: every lease of the chunk renewed (sqlx
                        // asks for FOUND_ROWS: the rows matched are counted, changed or
                        // not). Only when some were not (taken over, gone) is it found
                        // out which, in three more.
                        if renew_all(conn, &owner, chunk, lease_ms).await? {
                            renewed.extend(chunk.iter().map(|&(id, _)| id));
                        } else {
                            renewed.extend(renew_noting(conn, &owner, chunk, lease_ms).await?);
                        }
                    }
                    // Locked rows are waited for (within the patience), never skipped.
                    Ok(Renewal::all(renewed))
                })
            })
            .await
    }
}

/// Hands records back to the queue without counting the attempt, while `owner` holds
/// them at their attempt (see `Store::lease_release`).
pub(super) async fn release(pool: &MySqlPool, owner: &str, held: &[Held], now: i64) -> Result<u64> {
    let mut released = 0;
    for chunk in held.chunks(MAX_IN) {
        // By id (the primary key), then only at the attempt claimed.
        // Asked to stop while it waited to start (a cancel of a running request): ended
        // `cancelled`, not put back to wait.
        let sql = format!(
            "UPDATE async_req SET status = CASE WHEN cancel_requested IS NOT NULL \
             THEN 'cancelled' ELSE 'init' END, exec_count = exec_count - 1, run_at = ?, \
             lease_owner = NULL, lease_until = NULL, update_time = ? \
             WHERE status = 'running' AND lease_owner = ? AND id IN ({}) \
             AND (id, exec_count) IN ({})",
            super::marks(chunk.len()),
            super::pair_marks(chunk.len())
        );
        let ids: Vec<RequestId> = chunk.iter().map(|&(id, _)| id).collect();
        let done = with_retry(|| async {
            let query = sqlx::query(&sql).bind(now.max(1)).bind(now).bind(owner);
            Ok(bind_pairs(bind_list(query, &ids), chunk)
                .execute(pool)
                .await?)
        })
        .await?;
        released += done.rows_affected();
    }
    Ok(released)
}

/// The records of `application` that `owner` holds as running and that a claim made at
/// one of `claimed_at` took (their `update_time`), in id order (see
/// `Store::lease_claimed_at`). Found through the claim index's range of running records.
pub(super) async fn claimed_at(
    pool: &MySqlPool,
    application: &str,
    owner: &str,
    claimed_at: &[i64],
) -> Result<Vec<Held>> {
    let mut held = Vec::new();
    for chunk in claimed_at.chunks(MAX_IN) {
        let sql = format!(
            "SELECT id, exec_count FROM async_req WHERE application_name = ? \
             AND status = 'running' AND lease_owner = ? AND update_time IN ({})",
            super::marks(chunk.len())
        );
        let query = sqlx::query(&sql).bind(application).bind(owner);
        for row in bind_list(query, chunk).fetch_all(pool).await? {
            held.push((row.try_get(0)?, row.try_get(1)?));
        }
    }
    held.sort_unstable();
    held.dedup();
    Ok(held)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::mysql::MySqlStore;
    use crate::store::Store;

    /// Of three running records, one taken over by another instance: the one statement
    /// matches two, so the renewal finds out which, and renews and reports only those.
    #[tokio::test]
    #[cfg_attr(
        not(async_exec_test_mysql),
        ignore = "set ASYNC_EXEC_TEST_MYSQL_URL to run it"
    )]
    async fn a_renewal_reports_only_the_leases_still_held() {
        let url = std::env::var("ASYNC_EXEC_TEST_MYSQL_URL").expect("ASYNC_EXEC_TEST_MYSQL_URL");
        let store = MySqlStore::connect(&url, 2).await.unwrap();
        store.migrate().await.unwrap();
        let application = format!("renew-test-{}", crate::base::record::now_ms());
        let mut ids = Vec::new();
        for owner in ["me", "thief", "me"] {
            let done = sqlx::query(
                "INSERT INTO async_req (application_name, executor, sign, strategy, status, \
                   max_attempts, param_json, remark, run_at, lease_owner, lease_until, \
                   create_time, update_time) \
                 VALUES (?, 'e', 's', 'SaveAsync', 'running', 3, '{}', '', 1, ?, 1, 1, 1)",
            )
            .bind(&application)
            .bind(owner)
            .execute(store.pool())
            .await
            .unwrap();
            ids.push(done.last_insert_id() as RequestId);
        }
        let keeper = MySqlLeases::new(store.pool());
        let renewal = keeper
            .renew(
                "me",
                &ids.iter().map(|&id| (id, 0)).collect::<Vec<Held>>(),
                60_000,
                Duration::from_secs(10),
            )
            .await
            .unwrap();
        assert_eq!(renewal.renewed, [ids[0], ids[2]]);
        // The owner as bytes: the `_bin` collation makes the column `VARBINARY` to sqlx.
        let leases: Vec<(Vec<u8>, i64)> = sqlx::query_as(
            "SELECT lease_owner, lease_until FROM async_req WHERE application_name = ? ORDER BY id",
        )
        .bind(&application)
        .fetch_all(store.pool())
        .await
        .unwrap();
        assert!(leases[0].1 > 1 && leases[2].1 > 1, "{leases:?}");
        assert_eq!(
            leases[1],
            (b"thief".to_vec(), 1),
            "another's lease is left alone"
        );
        sqlx::query("DELETE FROM async_req WHERE application_name = ?")
            .bind(&application)
            .execute(store.pool())
            .await
            .unwrap();
    }

    #[test]
    fn in_lists_come_in_a_few_lengths() {
        assert_eq!(padded(1), 1);
        assert_eq!(padded(3), 4);
        assert_eq!(padded(600), CHUNK);
        assert_eq!(padded(CHUNK), CHUNK);
        let held: Vec<Held> = held_padded(&[(7, 1), (9, 2), (12, 1)], 4).collect();
        assert_eq!(held, [(7, 1), (9, 2), (12, 1), (12, 1)]);
    }
}

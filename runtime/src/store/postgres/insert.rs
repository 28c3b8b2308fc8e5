//! Writing request records on PostgreSQL: one, many (multi-row `INSERT ... SELECT FROM
//! UNNEST`), and their attempt logs; an idempotency key is claimed first, in the same
//! transaction.

use sqlx::PgConnection;

use super::{keys, Wake, CHANNEL};
use crate::base::error::Result;
use crate::base::record::{AttemptLog, Inserted, NewRequest};
use crate::store::KeyClaim;

pub(super) async fn insert_request(conn: &mut PgConnection, r: &NewRequest) -> Result<Inserted> {
    // A key is claimed first, in the same transaction: a concurrent transaction holding
    // the same key makes the claim wait for its outcome (see `keys::claim`).
    if r.idempotency_key.is_some() {
        if let KeyClaim::Taken(id) = keys::claim(&mut *conn, r).await? {
            return Ok(Inserted::Existing(id));
        }
    }
    // The NOTIFY rides in the same statement (one round trip) and, like the row, is
    // delivered only on commit.
    const INSERT: &str = "INSERT INTO async_req (application_name, executor, sign, strategy, status, exec_count, \
         max_attempts, param_json, remark, idempotency_key, priority, run_at, last_error, trace_json, \
         create_time, update_time, deadline_at) \
         VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15, $15, $16) \
         RETURNING id";
    let payload = r.notify.as_ref().map(|owner| {
        serde_json::to_string(&Wake {
            app: &r.application_name,
            owner,
        })
        .expect("two strings serialize")
    });
    let sql = match payload {
        Some(_) => format!(
            "WITH inserted AS ({INSERT}) SELECT id FROM inserted \
             CROSS JOIN LATERAL (SELECT pg_notify($17, $18)) AS notified"
        ),
        None => INSERT.to_string(),
    };
    let mut query = sqlx::query_as::<_, (i64,)>(&sql)
        .bind(&*r.application_name)
        .bind(r.executor)
        .bind(r.sign)
        .bind(r.strategy)
        .bind(r.status.as_str())
        .bind(r.exec_count)
        .bind(r.max_attempts)
        .bind(&*r.param_json)
        .bind(r.remark)
        .bind(&r.idempotency_key)
        .bind(r.priority)
        .bind(r.run_at)
        .bind(&r.last_error)
        .bind(&r.trace_json)
        .bind(r.now)
        .bind(r.deadline_at);
    if let Some(payload) = payload {
        query = query.bind(CHANNEL).bind(payload);
    }
    let (id,) = query.fetch_one(&mut *conn).await?;
    if r.idempotency_key.is_some() {
        crate::store::shared::key_assign::<sqlx::Postgres>(&mut *conn, r, Some(id)).await?;
    }
    if !r.tags.is_empty() {
        crate::store::shared::tags_insert::<sqlx::Postgres>(&mut *conn, r, id).await?;
    }
    if let Some(log) = &r.log {
        let log = AttemptLog {
            request_id: id,
            ..log.clone()
        };
        crate::store::shared::log_insert::<sqlx::Postgres>(conn, &log).await?;
    }
    Ok(Inserted::New(id))
}

/// Inserts many requests: those without an idempotency key or a logged attempt with one
/// multi-row statement over arrays (one round trip), the others one by one; one NOTIFY for
/// the lot. Ids come back in input order.
pub(super) async fn insert_many(
    conn: &mut PgConnection,
    requests: &[NewRequest],
) -> Result<Vec<Inserted>> {
    let mut inserted = vec![Inserted::New(0); requests.len()];
    let (plain, special): (Vec<usize>, Vec<usize>) = (0..requests.len()).partition(|&i| {
        requests[i].idempotency_key.is_none()
            && requests[i].log.is_none()
            && requests[i].tags.is_empty()
    });
    if !plain.is_empty() {
        let rows: Vec<&NewRequest> = plain.iter().map(|&i| &requests[i]).collect();
        let column = |f: fn(&NewRequest) -> &str| rows.iter().map(|r| f(r)).collect::<Vec<&str>>();
        let mut ids: Vec<(i64,)> = sqlx::query_as(
            "INSERT INTO async_req (application_name, executor, sign, strategy, status, exec_count, \
             max_attempts, param_json, remark, priority, run_at, trace_json, create_time, update_time, \
             deadline_at) \
             SELECT a, e, s, st, stat, c, m, p, rem, pri, run, tr, now, now, dl FROM UNNEST( \
               $1::text[], $2::text[], $3::text[], $4::text[], $5::text[], $6::int[], $7::int[], \
               $8::text[], $9::text[], $10::int[], $11::bigint[], $12::text[], $13::bigint[], \
               $14::bigint[]) \
             AS u(a, e, s, st, stat, c, m, p, rem, pri, run, tr, now, dl) RETURNING id",
        )
        .bind(column(|r| &r.application_name))
        .bind(column(|r| r.executor))
        .bind(column(|r| r.sign))
        .bind(column(|r| r.strategy))
        .bind(column(|r| r.status.as_str()))
        .bind(rows.iter().map(|r| r.exec_count).collect::<Vec<i32>>())
        .bind(rows.iter().map(|r| r.max_attempts).collect::<Vec<i32>>())
        .bind(column(|r| &r.param_json))
        .bind(column(|r| r.remark))
        .bind(rows.iter().map(|r| r.priority).collect::<Vec<i32>>())
        .bind(rows.iter().map(|r| r.run_at).collect::<Vec<i64>>())
        .bind(rows.iter().map(|r| r.trace_json.as_deref()).collect::<Vec<Option<&str>>>())
        .bind(rows.iter().map(|r| r.now).collect::<Vec<i64>>())
        .bind(rows.iter().map(|r| r.deadline_at).collect::<Vec<Option<i64>>>())
        .fetch_all(&mut *conn)
        .await?;
        // Ids are drawn in row order; RETURNING's own order is unspecified.
        ids.sort_unstable();
        for (&i, (id,)) in plain.iter().zip(ids) {
            inserted[i] = Inserted::New(id);
        }
        if let Some(r) = rows.iter().find(|r| r.notify.is_some()) {
            let owner = r.notify.as_deref().unwrap_or_default();
            let payload = serde_json::to_string(&Wake {
                app: &r.application_name,
                owner,
            })
            .expect("two strings serialize");
            sqlx::query("SELECT pg_notify($1, $2)")
                .bind(CHANNEL)
                .bind(payload)
                .execute(&mut *conn)
                .await?;
        }
    }
    for i in special {
        inserted[i] = insert_request(&mut *conn, &requests[i]).await?;
    }
    Ok(inserted)
}

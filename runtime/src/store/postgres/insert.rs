//! Writing request records on PostgreSQL: one, many (multi-row `INSERT ... SELECT FROM
//! UNNEST`), and their attempt logs; an idempotency key is claimed first, in the same
//! transaction.

use sqlx::postgres::PgArguments;
use sqlx::{Arguments as _, PgConnection};

use super::{keys, Wake, CHANNEL};
use crate::base::error::Result;
use crate::base::record::{AttemptLog, Inserted, NewRequest};
use crate::store::{singleton, KeyClaim};

pub(super) async fn insert_request(conn: &mut PgConnection, r: &NewRequest) -> Result<Inserted> {
    // A key is claimed first, in the same transaction: a concurrent transaction holding
    // the same key makes the claim wait for its outcome (see `keys::claim`).
    if r.idempotency_key.is_some() {
        if let KeyClaim::Taken(id) = keys::claim(&mut *conn, r).await? {
            return Ok(Inserted::Existing(id));
        }
    }
    // The NOTIFY rides in the same statement (one round trip) and, like the row, is
    // delivered only on commit. A singleton's request is written unless a live one holds
    // its key (nothing is returned then, and nothing notified).
    let conflict = singleton::on_conflict(r);
    let insert = format!(
        "INSERT INTO async_req (application_name, executor, sign, strategy, status, exec_count, \
         max_attempts, param_json, remark, idempotency_key, priority, run_at, last_error, trace_json, \
         create_time, update_time, deadline_at, queue_name, partition_key, singleton_key, \
         debounce_key) \
         VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15, $15, $16, \
         $17, $18, $19, $20){conflict} RETURNING id, merged"
    );
    let payload = r.notify.as_ref().map(|owner| {
        serde_json::to_string(&Wake {
            app: &r.application_name,
            owner,
        })
        .expect("two strings serialize")
    });
    let sql = match payload {
        Some(_) => format!(
            "WITH inserted AS ({insert}) SELECT id, merged FROM inserted \
             CROSS JOIN LATERAL (SELECT pg_notify($21, $22)) AS notified"
        ),
        None => insert,
    };
    let mut tries = 0;
    let id = loop {
        let mut query = sqlx::query_as::<_, (i64, i64)>(&sql)
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
            .bind(r.deadline_at)
            .bind(r.queue)
            .bind(r.partition.as_deref().unwrap_or(""))
            .bind(&r.singleton)
            .bind(&r.debounce);
        if let Some(payload) = &payload {
            query = query.bind(CHANNEL).bind(payload);
        }
        match query.fetch_optional(&mut *conn).await? {
            Some((id, 0)) => break id,
            Some((id, _)) => {
                let merged = Inserted::Merged(id);
                return singleton::joined::<sqlx::Postgres>(conn, r, merged).await;
            }
            None => {}
        }
        // A new statement: in READ COMMITTED it sees the holder the insert met.
        if let Some(id) = singleton::holder::<sqlx::Postgres>(&mut *conn, r).await? {
            let live = Inserted::Live(id);
            return singleton::joined::<sqlx::Postgres>(conn, r, live).await;
        }
        tries += 1;
        if tries == singleton::TRIES {
            return Err(singleton::contended(r));
        }
    };
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

/// A column of the multi-row insert: its name, its type in the statement, its value.
struct Column {
    name: &'static str,
    /// `text` or `bigint` (integers are bound as `bigint`, and the insert stores them as
    /// the column's type).
    ty: &'static str,
    value: for<'a> fn(&'a NewRequest) -> Value<'a>,
}

/// One value of a row, as bound.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Value<'a> {
    Text(Option<&'a str>),
    Int(Option<i64>),
}

impl Value<'_> {
    fn bind(self, arguments: &mut PgArguments) -> Result<()> {
        let added = match self {
            Value::Text(text) => arguments.add(text),
            Value::Int(int) => arguments.add(int),
        };
        added.map_err(|cause| crate::Error::Database(sqlx::Error::Encode(cause)))
    }
}

/// Binds one array of `column`'s values in `rows`.
fn bind_array(column: &Column, rows: &[&NewRequest], arguments: &mut PgArguments) -> Result<()> {
    let added = match column.ty {
        "text" => arguments.add(
            rows.iter()
                .map(|&r| match (column.value)(r) {
                    Value::Text(text) => text,
                    Value::Int(_) => unreachable!("a column has one type"),
                })
                .collect::<Vec<Option<&str>>>(),
        ),
        _ => arguments.add(
            rows.iter()
                .map(|&r| match (column.value)(r) {
                    Value::Int(int) => int,
                    Value::Text(_) => unreachable!("a column has one type"),
                })
                .collect::<Vec<Option<i64>>>(),
        ),
    };
    added.map_err(|cause| crate::Error::Database(sqlx::Error::Encode(cause)))
}

/// The columns a request without a key, tags or logged attempt writes.
const COLUMNS: [Column; 17] = [
    Column {
        name: "application_name",
        ty: "text",
        value: |r| Value::Text(Some(&r.application_name)),
    },
    Column {
        name: "executor",
        ty: "text",
        value: |r| Value::Text(Some(r.executor)),
    },
    Column {
        name: "sign",
        ty: "text",
        value: |r| Value::Text(Some(r.sign)),
    },
    Column {
        name: "strategy",
        ty: "text",
        value: |r| Value::Text(Some(r.strategy)),
    },
    Column {
        name: "status",
        ty: "text",
        value: |r| Value::Text(Some(r.status.as_str())),
    },
    Column {
        name: "exec_count",
        ty: "bigint",
        value: |r| Value::Int(Some(r.exec_count.into())),
    },
    Column {
        name: "max_attempts",
        ty: "bigint",
        value: |r| Value::Int(Some(r.max_attempts.into())),
    },
    Column {
        name: "param_json",
        ty: "text",
        value: |r| Value::Text(Some(&r.param_json)),
    },
    Column {
        name: "remark",
        ty: "text",
        value: |r| Value::Text(Some(r.remark)),
    },
    Column {
        name: "priority",
        ty: "bigint",
        value: |r| Value::Int(Some(r.priority.into())),
    },
    Column {
        name: "run_at",
        ty: "bigint",
        value: |r| Value::Int(Some(r.run_at)),
    },
    Column {
        name: "trace_json",
        ty: "text",
        value: |r| Value::Text(r.trace_json.as_deref()),
    },
    Column {
        name: "create_time",
        ty: "bigint",
        value: |r| Value::Int(Some(r.now)),
    },
    Column {
        name: "update_time",
        ty: "bigint",
        value: |r| Value::Int(Some(r.now)),
    },
    Column {
        name: "deadline_at",
        ty: "bigint",
        value: |r| Value::Int(r.deadline_at),
    },
    Column {
        name: "queue_name",
        ty: "text",
        value: |r| Value::Text(Some(r.queue)),
    },
    Column {
        name: "partition_key",
        ty: "text",
        value: |r| Value::Text(Some(r.partition.as_deref().unwrap_or(""))),
    },
];

/// One multi-row INSERT of `rows` over arrays (`UNNEST`), one round trip: a column whose
/// value is the same in every row is bound once, as a scalar; the others as arrays. A
/// batch of one executor's calls sends one array (its arguments) instead of fourteen,
/// which the server no longer parses and unnests.
fn multi_row_insert(rows: &[&NewRequest]) -> Result<(String, PgArguments)> {
    let mut arguments = PgArguments::default();
    let mut select = Vec::with_capacity(COLUMNS.len());
    let mut arrays = Vec::new();
    let mut aliases = Vec::new();
    for (c, column) in COLUMNS.iter().enumerate() {
        let first = (column.value)(rows[0]);
        if rows.iter().all(|r| (column.value)(r) == first) {
            first.bind(&mut arguments)?;
            select.push(format!("${}::{}", arguments.len(), column.ty));
        } else {
            bind_array(column, rows, &mut arguments)?;
            arrays.push(format!("${}::{}[]", arguments.len(), column.ty));
            aliases.push(format!("c{c}"));
            select.push(format!("u.c{c}"));
        }
    }
    let from = if arrays.is_empty() {
        Value::Int(Some(rows.len() as i64)).bind(&mut arguments)?;
        format!("generate_series(1, ${}::bigint) AS u", arguments.len())
    } else {
        format!("UNNEST({}) AS u({})", arrays.join(", "), aliases.join(", "))
    };
    let names: Vec<&str> = COLUMNS.iter().map(|column| column.name).collect();
    let sql = format!(
        "INSERT INTO async_req ({}) SELECT {} FROM {from} RETURNING id",
        names.join(", "),
        select.join(", ")
    );
    Ok((sql, arguments))
}

/// Inserts many requests: those without an idempotency key, tags, a logged attempt, a
/// singleton or a debounce with one multi-row statement over arrays (one round trip), the others one by
/// one; one NOTIFY for the lot. Ids come back in input order.
pub(super) async fn insert_many(
    conn: &mut PgConnection,
    requests: &[NewRequest],
) -> Result<Vec<Inserted>> {
    let mut inserted = vec![Inserted::New(0); requests.len()];
    let (plain, special): (Vec<usize>, Vec<usize>) = (0..requests.len()).partition(|&i| {
        requests[i].idempotency_key.is_none()
            && requests[i].log.is_none()
            && requests[i].tags.is_empty()
            && requests[i].singleton.is_none()
            && requests[i].debounce.is_none()
    });
    if !plain.is_empty() {
        let rows: Vec<&NewRequest> = plain.iter().map(|&i| &requests[i]).collect();
        let (mut sql, mut arguments) = multi_row_insert(&rows)?;
        // One NOTIFY for the lot, in the same statement (one round trip; delivered on
        // commit): a CTE calling a volatile function is evaluated once, when referenced.
        if let Some(r) = rows.iter().find(|r| r.notify.is_some()) {
            let owner = r.notify.as_deref().unwrap_or_default();
            let payload = serde_json::to_string(&Wake {
                app: &r.application_name,
                owner,
            })
            .expect("two strings serialize");
            Value::Text(Some(CHANNEL)).bind(&mut arguments)?;
            Value::Text(Some(&payload)).bind(&mut arguments)?;
            let n = arguments.len();
            sql = format!(
                "WITH inserted AS ({sql}), notified AS (SELECT pg_notify(${}, ${n})) \
                 SELECT id FROM inserted CROSS JOIN notified",
                n - 1
            );
        }
        let mut ids: Vec<(i64,)> = sqlx::query_as_with(&sql, arguments)
            .fetch_all(&mut *conn)
            .await?;
        // Ids are drawn in row order; RETURNING's own order is unspecified.
        ids.sort_unstable();
        for (&i, (id,)) in plain.iter().zip(ids) {
            inserted[i] = Inserted::New(id);
        }
    }
    for i in special {
        inserted[i] = insert_request(&mut *conn, &requests[i]).await?;
    }
    Ok(inserted)
}

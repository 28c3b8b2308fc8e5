//! The wishes service ("Lamp & Genie"): its routes, its table, and the genie that grants
//! wishes after the commit. `examples/wishes.rs` serves it; `tests/wishes.rs` includes this
//! file with `#[path]` and sends it HTTP requests.
//!
//! A wish is stored in the service's own table `wishes` in the same transaction as the
//! call that grants it (`.within(&mut tx)`, with the client's `requestId` as the call's
//! idempotency key): either both are committed, and the genie runs after the commit, or
//! neither is.

use std::time::Duration;

use async_exec::{async_exec, Context, Final, Request, Runtime, Status, Tx};
use axum::body::Bytes;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use metrics_exporter_prometheus::PrometheusHandle;
use serde_json::{json, Value};

/// A wish that asks for this (any case) is refused for good: it ends `FAILED`.
pub const FORBIDDEN_WISH: &str = "more wishes";
/// The longest `requestId`, in characters.
pub const MAX_REQUEST_ID: usize = 100;
/// The longest wish, in characters.
pub const MAX_WISH: usize = 500;

/// Whether the genie fails the first attempt at this wish (one wish in three, decided by
/// the `requestId`, so that a run can be repeated): the retry grants it.
pub fn first_attempt_fails(request_id: &str) -> bool {
    // FNV-1a: stable across builds and platforms, unlike `DefaultHasher`.
    let hash = request_id.bytes().fold(0xcbf2_9ce4_8422_2325_u64, |h, b| {
        (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)
    });
    hash % 3 == 0
}

/// Grants a wish. Fails the first attempt at one wish in three ([`first_attempt_fails`]),
/// which the retry overcomes, and refuses for good a wish for [`FORBIDDEN_WISH`].
#[async_exec(type = SaveAsync, name = "wishes::grant", remark = "the genie grants a wish", max_attempts = 3)]
async fn grant_wish(request_id: String, wish: String, ctx: Context) -> anyhow::Result<()> {
    if wish.to_lowercase().contains(FORBIDDEN_WISH) {
        metrics::counter!("wishes_refused_total").increment(1);
        return Err(Final::new(format!(
            "wish {request_id}: a genie never grants {FORBIDDEN_WISH}"
        ))
        .into());
    }
    if ctx.attempt() == 1 && first_attempt_fails(&request_id) {
        metrics::counter!("wishes_attempts_failed_total").increment(1);
        anyhow::bail!("wish {request_id}: the lamp is still cold, rub it again (attempt 1)");
    }
    tokio::time::sleep(Duration::from_millis(50)).await; // the genie at work
    metrics::counter!("wishes_granted_total").increment(1);
    tracing::info!(request_id, wish, attempt = ctx.attempt(), "wish granted");
    Ok(())
}

/// Which database the service runs on, from its URL.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Backend {
    /// `sqlite:`
    Sqlite,
    /// `postgres:` or `postgresql:`
    Postgres,
    /// `mysql:` or `mariadb:`
    MySql,
}

impl Backend {
    /// The backend of a database URL.
    pub fn of_url(url: &str) -> anyhow::Result<Backend> {
        let scheme = url.split(':').next().unwrap_or_default();
        match scheme {
            "sqlite" => Ok(Backend::Sqlite),
            "postgres" | "postgresql" => Ok(Backend::Postgres),
            "mysql" | "mariadb" => Ok(Backend::MySql),
            _ => anyhow::bail!(
                "database URL `{scheme}:...`: write sqlite:..., postgres://... or mysql://..."
            ),
        }
    }

    /// `sql` with its `?` placeholders as this backend writes them.
    fn sql(self, sql: &str) -> String {
        if self != Backend::Postgres {
            return sql.to_string();
        }
        let mut out = String::with_capacity(sql.len() + 8);
        let mut n = 0;
        for c in sql.chars() {
            if c == '?' {
                n += 1;
                out.push_str(&format!("${n}"));
            } else {
                out.push(c);
            }
        }
        out
    }
}

/// Runs `$body` with `$db` naming the sqlx backend type of `$backend`.
macro_rules! per_backend {
    ($backend:expr, $db:ident => $body:block) => {
        match $backend {
            Backend::Sqlite => {
                #[cfg(feature = "sqlite")]
                {
                    type $db = async_exec::Sqlite;
                    $body
                }
                #[cfg(not(feature = "sqlite"))]
                anyhow::bail!("built without SQLite: add --features sqlite")
            }
            Backend::Postgres => {
                #[cfg(feature = "postgres")]
                {
                    type $db = async_exec::Postgres;
                    $body
                }
                #[cfg(not(feature = "postgres"))]
                anyhow::bail!("built without PostgreSQL: add --features postgres")
            }
            Backend::MySql => {
                #[cfg(feature = "mysql")]
                {
                    type $db = async_exec::MySql;
                    $body
                }
                #[cfg(not(feature = "mysql"))]
                anyhow::bail!("built without MySQL/MariaDB: add --features mysql")
            }
        }
    };
}

/// What the handlers share.
#[derive(Clone)]
pub struct Service {
    rt: Runtime,
    backend: Backend,
    metrics: PrometheusHandle,
}

impl Service {
    /// The service on a started runtime; creates its table if it is missing.
    pub async fn new(
        rt: Runtime,
        backend: Backend,
        metrics: PrometheusHandle,
    ) -> anyhow::Result<Service> {
        // One statement for every backend.
        let ddl = "CREATE TABLE IF NOT EXISTS wishes (request_id VARCHAR(100) PRIMARY KEY, \
                   wish TEXT NOT NULL, async_id BIGINT NOT NULL, created_at BIGINT NOT NULL)";
        per_backend!(backend, DB => {
            let mut tx: Tx<DB> = rt.begin().await?;
            sqlx::query(ddl).execute(tx.conn()).await?;
            tx.commit().await?;
        });
        Ok(Service {
            rt,
            backend,
            metrics,
        })
    }

    /// The REST routes and `/metrics` (mount the console next to them).
    pub fn router(self) -> Router {
        Router::new()
            .route("/api/wishes", post(create))
            .route("/api/wishes/{request_id}", get(show))
            .route("/api/wishes/{request_id}/retry", post(retry))
            .route("/metrics", get(metrics_text))
            .with_state(self)
    }

    /// The stored wish of a `requestId`: (wish, request id of its call).
    async fn find(&self, request_id: &str) -> anyhow::Result<Option<(String, i64)>> {
        let sql = self
            .backend
            .sql("SELECT wish, async_id FROM wishes WHERE request_id = ?");
        per_backend!(self.backend, DB => {
            let mut tx: Tx<DB> = self.rt.begin().await?;
            let found: Option<(String, i64)> = sqlx::query_as(&sql)
                .bind(request_id)
                .fetch_optional(tx.conn())
                .await?;
            tx.commit().await?;
            Ok(found)
        })
    }

    /// Stores a new wish and the call that grants it, in one transaction. `None` when the
    /// `requestId` was stored meanwhile (by a concurrent repeat).
    async fn store(&self, request_id: &str, wish: &str) -> anyhow::Result<Option<i64>> {
        let insert = self
            .backend
            .sql("INSERT INTO wishes (request_id, wish, async_id, created_at) VALUES (?, ?, ?, ?)");
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)?
            .as_millis() as i64;
        per_backend!(self.backend, DB => {
            let mut tx: Tx<DB> = self.rt.begin().await?;
            let receipt = grant_wish(request_id.to_string(), wish.to_string())
                .key(format!("wish:{request_id}"))
                .on(&self.rt)
                .within(&mut tx)
                .await?;
            let Some(async_id) = receipt.id else {
                anyhow::bail!("the call for wish {request_id} has no request id: {:?}", receipt.outcome);
            };
            let inserted = sqlx::query(&insert)
                .bind(request_id)
                .bind(wish)
                .bind(async_id)
                .bind(now)
                .execute(tx.conn())
                .await;
            match inserted {
                Ok(_) => {}
                Err(sqlx::Error::Database(e)) if e.is_unique_violation() => return Ok(None),
                Err(e) => return Err(e.into()),
            }
            tx.commit().await?; // the genie is called after this, never before
            Ok(Some(async_id))
        })
    }

    /// The wish as the API shows it.
    async fn view(&self, request_id: &str, wish: &str, async_id: i64) -> anyhow::Result<Value> {
        let request = self.rt.get(async_id).await?;
        let attempts = self.rt.attempts(async_id).await?;
        let history: Vec<Value> = attempts
            .iter()
            .map(|a| {
                json!({
                    "attempt": a.attempt,
                    "outcome": a.outcome,
                    "error": a.error,
                    "startedAt": a.started,
                    "finishedAt": a.finished,
                })
            })
            .collect();
        let status = request.as_ref().map_or("SUCCESS", wish_status);
        // A granted wish has no error to show (its failed attempts are in the history).
        let last_error = match status {
            "SUCCESS" => None,
            _ => request.as_ref().and_then(|r| r.last_error.clone()),
        };
        Ok(json!({
            "requestId": request_id,
            "wish": wish,
            "status": status,
            "attempts": attempts.len(),
            "lastError": last_error,
            "history": history,
        }))
    }
}

/// The status a client sees: waiting (`PENDING`, also between a failed attempt and its
/// retry), a genie at work (`PROCESSING`), granted (`SUCCESS`), refused for good
/// (`FAILED`: out of attempts, refused, or cancelled by an operator).
fn wish_status(request: &Request) -> &'static str {
    match request.status {
        Status::Init | Status::Failed => "PENDING",
        Status::Running => "PROCESSING",
        Status::Success => "SUCCESS",
        _ => "FAILED",
    }
}

/// An error as JSON: `{"error": "...", "field": "..."}` (the field when one is to blame).
fn error(status: StatusCode, message: impl Into<String>, field: Option<&str>) -> Response {
    let mut body = json!({ "error": message.into() });
    if let Some(field) = field {
        body["field"] = json!(field);
    }
    (status, Json(body)).into_response()
}

fn internal(e: anyhow::Error) -> Response {
    tracing::error!(error = %e, "wishes: internal error");
    error(StatusCode::INTERNAL_SERVER_ERROR, format!("{e:#}"), None)
}

/// A request refused before it reaches the database: 400 naming the field to blame.
struct Invalid {
    message: String,
    field: &'static str,
}

impl Invalid {
    fn new(field: &'static str, message: impl Into<String>) -> Invalid {
        Invalid {
            message: message.into(),
            field,
        }
    }
}

impl IntoResponse for Invalid {
    fn into_response(self) -> Response {
        error(StatusCode::BAD_REQUEST, self.message, Some(self.field))
    }
}

/// Checks a `requestId`: 1 to 100 letters, digits, `-`, `_`, `.`.
fn check_request_id(id: &str) -> Result<(), Invalid> {
    let fine = !id.is_empty()
        && id.chars().count() <= MAX_REQUEST_ID
        && id
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'));
    if fine {
        Ok(())
    } else {
        Err(Invalid::new(
            "requestId",
            format!("requestId must be 1 to {MAX_REQUEST_ID} letters, digits, '-', '_' or '.'"),
        ))
    }
}

/// The body of `POST /api/wishes`, checked: (requestId, wish).
fn parse_new_wish(body: &[u8]) -> Result<(String, String), Invalid> {
    let value: Value = serde_json::from_slice(body).map_err(|e| {
        Invalid::new(
            "body",
            format!(
                "the body is not JSON ({e}): send {{\"requestId\": \"...\", \"wish\": \"...\"}}"
            ),
        )
    })?;
    let text = |field: &'static str| match value.get(field) {
        Some(Value::String(s)) => Ok(s.clone()),
        Some(_) => Err(Invalid::new(field, format!("{field} must be a string"))),
        None => Err(Invalid::new(field, format!("{field} is missing"))),
    };
    let request_id = text("requestId")?;
    check_request_id(&request_id)?;
    let wish = text("wish")?;
    if wish.trim().is_empty() || wish.chars().count() > MAX_WISH {
        return Err(Invalid::new(
            "wish",
            format!("wish must be 1 to {MAX_WISH} characters, not only spaces"),
        ));
    }
    Ok((request_id, wish))
}

/// `POST /api/wishes`: 202 with the new wish; 200 with the stored one for a `requestId`
/// seen before with the same wish; 409 when it came with another wish.
async fn create(State(service): State<Service>, body: Bytes) -> Response {
    let (request_id, wish) = match parse_new_wish(&body) {
        Ok(parsed) => parsed,
        Err(invalid) => return invalid.into_response(),
    };
    let repeat = |stored_wish: String, async_id: i64| {
        let service = service.clone();
        let (request_id, wish) = (request_id.clone(), wish.clone());
        async move {
            if stored_wish != wish {
                return error(
                    StatusCode::CONFLICT,
                    format!(
                        "requestId {request_id} was used for another wish: use a new requestId"
                    ),
                    Some("requestId"),
                );
            }
            metrics::counter!("wishes_repeated_total").increment(1);
            match service.view(&request_id, &stored_wish, async_id).await {
                Ok(view) => (StatusCode::OK, Json(view)).into_response(),
                Err(e) => internal(e),
            }
        }
    };
    match service.find(&request_id).await {
        Ok(Some((stored_wish, async_id))) => return repeat(stored_wish, async_id).await,
        Ok(None) => {}
        Err(e) => return internal(e),
    }
    match service.store(&request_id, &wish).await {
        Ok(Some(async_id)) => {
            metrics::counter!("wishes_submitted_total").increment(1);
            match service.view(&request_id, &wish, async_id).await {
                Ok(view) => (StatusCode::ACCEPTED, Json(view)).into_response(),
                Err(e) => internal(e),
            }
        }
        Ok(None) => match service.find(&request_id).await {
            Ok(Some((stored_wish, async_id))) => repeat(stored_wish, async_id).await,
            Ok(None) => internal(anyhow::anyhow!("wish {request_id} vanished")),
            Err(e) => internal(e),
        },
        Err(e) => internal(e),
    }
}

fn not_found(request_id: &str) -> Response {
    error(
        StatusCode::NOT_FOUND,
        format!("no wish with requestId {request_id}: POST /api/wishes first"),
        None,
    )
}

/// `GET /api/wishes/{requestId}`.
async fn show(State(service): State<Service>, Path(request_id): Path<String>) -> Response {
    if let Err(invalid) = check_request_id(&request_id) {
        return invalid.into_response();
    }
    match service.find(&request_id).await {
        Ok(Some((wish, async_id))) => match service.view(&request_id, &wish, async_id).await {
            Ok(view) => Json(view).into_response(),
            Err(e) => internal(e),
        },
        Ok(None) => not_found(&request_id),
        Err(e) => internal(e),
    }
}

/// `POST /api/wishes/{requestId}/retry`: 202 for a `FAILED` wish, 409 for any other.
async fn retry(State(service): State<Service>, Path(request_id): Path<String>) -> Response {
    if let Err(invalid) = check_request_id(&request_id) {
        return invalid.into_response();
    }
    let (wish, async_id) = match service.find(&request_id).await {
        Ok(Some(found)) => found,
        Ok(None) => return not_found(&request_id),
        Err(e) => return internal(e),
    };
    let status = match service.rt.get(async_id).await {
        Ok(request) => request.as_ref().map_or("SUCCESS", wish_status),
        Err(e) => return internal(e.into()),
    };
    if status != "FAILED" {
        return error(
            StatusCode::CONFLICT,
            format!("wish {request_id} is {status}: only a FAILED wish can be retried"),
            None,
        );
    }
    if let Err(e) = service.rt.retry_now(async_id).await {
        // Another retry won the race: the wish is no longer FAILED.
        return error(
            StatusCode::CONFLICT,
            format!("wish {request_id}: {e}"),
            None,
        );
    }
    metrics::counter!("wishes_retried_total").increment(1);
    match service.view(&request_id, &wish, async_id).await {
        Ok(view) => (StatusCode::ACCEPTED, Json(view)).into_response(),
        Err(e) => internal(e),
    }
}

/// `GET /metrics`: Prometheus text.
async fn metrics_text(State(service): State<Service>) -> Response {
    (
        [("content-type", "text/plain; version=0.0.4")],
        service.metrics.render(),
    )
        .into_response()
}

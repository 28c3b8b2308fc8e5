//! A billing service on PostgreSQL and axum, shaped like an application: one backend,
//! the application's own pool, a handler that writes a business row and calls an
//! `#[async_exec]` method of a service (`Mailer`) in the same transaction, the console,
//! `/health`, `/metrics`, and a graceful shutdown on Ctrl-C and SIGTERM.
//!
//!     DATABASE_URL=postgres://postgres@127.0.0.1:5432/test \
//!         cargo run --example service --features postgres,console,prometheus
//!     curl -s -XPOST localhost:3000/invoices -H 'content-type: application/json' \
//!         -d '{"email":"ada@example.com","cents":4200}'
//!
//! With `--self-check` it serves on a free port, calls itself over HTTP, waits until the
//! invoice was mailed, checks `/health`, `/metrics` and the console, sends itself SIGTERM, and exits 0
//! after a clean shutdown (CI runs it so: `tests/service.rs`).

use std::net::SocketAddr;
use std::sync::Arc;

use async_exec::{async_exec, console, http, Postgres, Runtime, Tx};
use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::routing::{get, post};
use axum::{Json, Router};
use serde::Deserialize;
use serde_json::{json, Value};
use sqlx::PgPool;

#[path = "service/self_check.rs"]
mod self_check;

// --- The service ------------------------------------------------------------------

/// Mails invoices. Its `#[async_exec]` methods run after the transaction that called
/// them commits, retried until they succeed, on the instance given to the runtime.
struct Mailer {
    db: PgPool,
}

#[async_exec]
impl Mailer {
    #[async_exec(type = SaveAsync, remark = "mail the invoice")]
    async fn mail_invoice(&self, invoice_id: i64, email: String) -> anyhow::Result<()> {
        println!("mailing invoice {invoice_id} to {email}"); // a mail API call, in real life
        sqlx::query("UPDATE invoices SET mailed = true WHERE id = $1")
            .bind(invoice_id)
            .execute(&self.db)
            .await?;
        Ok(())
    }
}

#[derive(Clone)]
struct AppState {
    db: PgPool,
    rt: Runtime,
    mailer: Arc<Mailer>,
}

#[derive(Deserialize)]
struct NewInvoice {
    email: String,
    cents: i64,
}

/// `POST /invoices`: the invoice row and the call to mail it, in one transaction: both
/// are written, or neither.
async fn create_invoice(
    State(app): State<AppState>,
    Json(new): Json<NewInvoice>,
) -> Result<(StatusCode, Json<Value>), AppError> {
    let mut tx: Tx<Postgres> = app.rt.wrap(app.db.begin().await?);
    let id: i64 =
        sqlx::query_scalar("INSERT INTO invoices (email, cents) VALUES ($1, $2) RETURNING id")
            .bind(&new.email)
            .bind(new.cents)
            .fetch_one(tx.conn())
            .await?;
    app.mailer
        .mail_invoice(id, new.email)
        .within(&mut tx)
        .await?;
    tx.commit().await?; // then the mail goes out
    Ok((StatusCode::CREATED, Json(json!({ "id": id }))))
}

/// `GET /invoices/{id}`: the invoice, and whether it was mailed.
async fn get_invoice(
    State(app): State<AppState>,
    Path(id): Path<i64>,
) -> Result<Json<Value>, AppError> {
    let (email, cents, mailed): (String, i64, bool) =
        sqlx::query_as("SELECT email, cents, mailed FROM invoices WHERE id = $1")
            .bind(id)
            .fetch_one(&app.db)
            .await?;
    Ok(Json(
        json!({ "id": id, "email": email, "cents": cents, "mailed": mailed }),
    ))
}

/// The service (public: `tests/service.rs` runs it in self-check mode).
#[tokio::main]
pub async fn main() -> anyhow::Result<()> {
    let self_check = self_check::asked();
    let url = std::env::var("DATABASE_URL")
        .unwrap_or_else(|_| "postgres://postgres@127.0.0.1:5432/test".into());
    let addr: SocketAddr = if self_check {
        "127.0.0.1:0"
    } else {
        "127.0.0.1:3000"
    }
    .parse()?;

    // Metrics first, so that the runtime's are recorded from its start.
    let metrics = http::metrics_router()?;
    let db = PgPool::connect(&url).await?;
    sqlx::query(
        "CREATE TABLE IF NOT EXISTS invoices (id BIGSERIAL PRIMARY KEY, email TEXT NOT NULL, \
         cents BIGINT NOT NULL, mailed BOOLEAN NOT NULL DEFAULT false)",
    )
    .execute(&db)
    .await?;
    let mailer = Arc::new(Mailer { db: db.clone() });
    let rt = Runtime::builder()
        .postgres_pool(db.clone()) // the application's pool; the tables are migrated
        .application_name("billing")
        .service(mailer.clone()) // runs `Mailer`'s methods
        .start()
        .await?;

    // Users from ASYNC_EXEC_CONSOLE_USERS; on a loopback address it may run without.
    let console = console::router(&rt, console::ConsoleConfig::new().listen(addr).from_env())?;
    let app = Router::new()
        .route("/invoices", post(create_invoice))
        .route("/invoices/{id}", get(get_invoice))
        .with_state(AppState {
            db,
            rt: rt.clone(),
            mailer,
        })
        .merge(console::mount("/console", console)) // and /console/ redirects there
        .merge(http::health_router(&rt)) // GET /health: 200 when ready, 503 when not
        .merge(metrics); // GET /metrics: Prometheus text

    let listener = tokio::net::TcpListener::bind(addr).await?;
    let addr = listener.local_addr()?;
    println!("billing on http://{addr} (/invoices, /console, /health, /metrics)");
    let check = self_check.then(|| tokio::spawn(self_check::run(addr)));
    axum::serve(
        listener,
        app.into_make_service_with_connect_info::<SocketAddr>(),
    )
    .with_graceful_shutdown(async_exec::shutdown_signal()) // Ctrl-C or SIGTERM
    .await?;
    // No new requests: hand over what the last ones called, let running bodies finish.
    let report = rt.shutdown().await?;
    println!("shut down: {report:?}");

    if let Some(check) = check {
        check.await??;
        self_check::clean(&report)?;
        println!("self-check passed");
    }
    Ok(())
}

// --- Errors as HTTP answers ---------------------------------------------------------

/// Any error of a handler, answered `500` with its message.
struct AppError(anyhow::Error);

impl<E: Into<anyhow::Error>> From<E> for AppError {
    fn from(error: E) -> Self {
        AppError(error.into())
    }
}

impl axum::response::IntoResponse for AppError {
    fn into_response(self) -> axum::response::Response {
        let body = Json(json!({ "error": format!("{:#}", self.0) }));
        (StatusCode::INTERNAL_SERVER_ERROR, body).into_response()
    }
}

//! The quickstart: a method of a service and two functions, calls in and outside a
//! transaction, a rollback, a retry and a dead request, all on a SQLite file. No server,
//! no configuration.
//!
//!     cargo run --example quickstart

use std::sync::Arc;
use std::time::Duration;

use async_exec::{async_exec, Context, Runtime, Sqlite, Status, Tx};

/// The mail service. Its `#[async_exec]` methods run on the instance given to the
/// runtime (`.service(..)`), whichever instance the call was made through.
struct Mailer {
    from: &'static str,
}

#[async_exec]
impl Mailer {
    /// Sends the welcome mail. Runs once, after the commit.
    #[async_exec(type = SaveAsync, remark = "send the welcome mail")]
    async fn send_welcome(&self, user_id: i64, email: String) {
        println!(
            "  ran      send_welcome for user {user_id} <{email}>, from {}",
            self.from
        );
    }
}

/// Calls a flaky partner API: the first attempt fails, the retry succeeds.
#[async_exec(type = SaveAsync, remark = "notify the CRM")]
async fn notify_crm(user_id: i64, ctx: Context) -> anyhow::Result<()> {
    if ctx.attempt() == 1 {
        println!("  failed   notify_crm for user {user_id} (attempt 1): CRM answered 503");
        anyhow::bail!("CRM answered 503 Service Unavailable");
    }
    println!(
        "  ran      notify_crm for user {user_id} (attempt {})",
        ctx.attempt()
    );
    Ok(())
}

/// Exports to a bucket that does not exist: every attempt fails, then it goes dead.
#[async_exec(type = SaveAsync, remark = "export the report", max_attempts = 3)]
async fn export_report(report: String, ctx: Context) -> anyhow::Result<()> {
    println!(
        "  failed   export_report {report:?} (attempt {} of 3)",
        ctx.attempt()
    );
    anyhow::bail!("bucket `reports-archive` does not exist")
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let path =
        std::env::temp_dir().join(format!("async-exec-quickstart-{}.db", std::process::id()));
    let mailer = Arc::new(Mailer {
        from: "hello@shop.example",
    });
    let rt = Runtime::builder()
        .database_url(format!("sqlite:{}", path.display()))
        .application_name("quickstart")
        .service(mailer.clone()) // runs `Mailer`'s methods
        // Quick retries so that the demo finishes in a few seconds.
        .retry_base_delay(Duration::from_millis(200))
        .retry_interval(Duration::from_millis(100))
        .start()
        .await?;
    println!("async-exec quickstart: records in {}\n", path.display());

    // 1. A business write and two calls in one transaction: nothing runs before the commit.
    let mut tx: Tx<Sqlite> = rt.begin().await?;
    sqlx::query("CREATE TABLE users (id INTEGER PRIMARY KEY, email TEXT)")
        .execute(tx.conn())
        .await?;
    sqlx::query("INSERT INTO users VALUES (1, 'ada@example.com')")
        .execute(tx.conn())
        .await?;
    let welcome = mailer
        .send_welcome(1, "ada@example.com".into())
        .within(&mut tx)
        .await?;
    let crm = notify_crm(1)
        .within(&mut tx)
        .await?
        .id
        .expect("SaveAsync writes a record");
    println!(
        "in a transaction: user 1 inserted, send_welcome and notify_crm recorded (request {:?})",
        welcome.id
    );
    tx.commit().await?;
    println!("committed: both run now\n");
    rt.wait_idle().await;

    // 2. A transaction that rolls back: its call is discarded with it.
    let mut tx: Tx<Sqlite> = rt.begin().await?;
    sqlx::query("INSERT INTO users VALUES (2, 'bob@example.com')")
        .execute(tx.conn())
        .await?;
    mailer
        .send_welcome(2, "bob@example.com".into())
        .within(&mut tx)
        .await?;
    tx.rollback().await?;
    println!("rolled back: user 2 and its send_welcome were discarded; nothing runs for them\n");

    // 3. A call outside any transaction: written, then run at once.
    export_report("2026-Q4".into()).await?;
    println!("outside a transaction: export_report recorded and dispatched\n");

    // Wait until the retry sweep has finished its work.
    loop {
        let counts = rt.count_by_status().await?;
        let pending = counts
            .iter()
            .filter(|(status, _)| matches!(status, Status::Init | Status::Running | Status::Failed))
            .map(|(_, n)| n)
            .sum::<i64>();
        if pending == 0 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    rt.wait_idle().await;

    println!("\nwhat happened:");
    let mut tx: Tx<Sqlite> = rt.begin().await?;
    let users: Vec<(i64,)> = sqlx::query_as("SELECT id FROM users")
        .fetch_all(tx.conn())
        .await?;
    tx.rollback().await?;
    println!(
        "  users in the table: {:?} (user 2 was rolled back)",
        users.iter().map(|u| u.0).collect::<Vec<_>>()
    );
    let crm_attempts = rt.attempts(crm).await?;
    println!(
        "  notify_crm (request {crm}) was retried: {} failed attempt logged ({}), then it succeeded",
        crm_attempts.len(),
        crm_attempts[0].error.as_deref().unwrap_or("-")
    );
    println!("  succeeded requests are deleted (delete_on_success); what is left:");
    for request in rt.list(&Default::default(), &Default::default()).await? {
        println!(
            "  request {} {} is {} after {} attempts: {}",
            request.id,
            request.executor,
            request.status,
            request.exec_count,
            request.last_error.as_deref().unwrap_or("-")
        );
        for attempt in rt.attempts(request.id).await? {
            println!(
                "    attempt {} by {}: {} ({} ms): {}",
                attempt.attempt,
                attempt.worker,
                attempt.outcome,
                attempt.finished - attempt.started,
                attempt.error.as_deref().unwrap_or("-")
            );
        }
    }
    println!("\nreplay a dead request with rt.retry_now(id) once the bucket exists.");
    rt.shutdown().await?;
    for suffix in ["", "-wal", "-shm"] {
        let _ = std::fs::remove_file(format!("{}{suffix}", path.display()));
    }
    Ok(())
}

//! The operations console, standalone, for any async-exec database:
//!
//!     cargo run --features console --example console -- --url sqlite:async_exec.db --demo
//!     cargo run --all-features --example console -- --url postgres://postgres@127.0.0.1/test \
//!         --app orders --listen 0.0.0.0:8080 --user 'alice:operator:$argon2id$v=19$...'
//!
//! Users come from `--user name:role:argon2-hash` (repeatable) and from
//! `ASYNC_EXEC_CONSOLE_USERS` (the same entries, separated by whitespace or `;`); API tokens
//! from `ASYNC_EXEC_CONSOLE_TOKENS` (`name:role:sha256-hex`). Make a hash with
//! `echo -n 'the password' | cargo run --features console --example console -- --hash-password`.
//! On a loopback address without users, every visitor is an operator; on any other
//! address the console refuses to start without users.
//!
//! `--demo` runs workers for three demo executors and submits requests to look at: some
//! succeed, some fail and are retried, and `demo::charge` goes dead on its first run and
//! succeeds when replayed from the console.

use std::collections::HashSet;
use std::io::Read;
use std::net::SocketAddr;
use std::sync::Mutex;
use std::time::Duration;

use async_exec::console::{self, ConsoleConfig, Role};
use async_exec::{async_exec, Context, Data, Final, Runtime};
use clap::Parser;

#[derive(Parser, Debug)]
struct Args {
    /// Database URL (`sqlite:`, `postgres:`, `mysql:`).
    #[arg(long, default_value = "sqlite:async_exec.db")]
    url: String,
    /// The application whose requests to show (its `application_name`).
    #[arg(long, default_value = "default")]
    app: String,
    /// Address to serve on.
    #[arg(long, default_value = "127.0.0.1:8080")]
    listen: SocketAddr,
    /// Where to mount the console.
    #[arg(long, default_value = "/console")]
    mount: String,
    /// A user, `name:role:argon2-hash` (role `operator` or `viewer`); repeatable.
    #[arg(long = "user")]
    users: Vec<String>,
    /// Mark the session cookie `Secure` (served over TLS, e.g. behind a proxy).
    #[arg(long)]
    secure_cookie: bool,
    /// Run demo executors and submit demo requests.
    #[arg(long)]
    demo: bool,
    /// Read a password from standard input, print its argon2 hash, and exit.
    #[arg(long)]
    hash_password: bool,
}

/// Request ids that `demo::charge` has seen fail once.
#[derive(Default)]
struct Seen(Mutex<HashSet<i64>>);

#[async_exec(type = SaveAsync, name = "demo::send_mail", remark = "demo: always succeeds")]
async fn send_mail(to: String) -> anyhow::Result<()> {
    tokio::time::sleep(Duration::from_millis(20 + to.len() as u64)).await;
    Ok(())
}

#[async_exec(type = SaveAsync, name = "demo::sync_crm", remark = "demo: fails twice, then succeeds", max_attempts = 5)]
async fn sync_crm(customer: i64, ctx: Context) -> anyhow::Result<()> {
    if ctx.attempt() < 3 {
        anyhow::bail!(
            "CRM for customer {customer} answered 503 (attempt {})",
            ctx.attempt()
        );
    }
    Ok(())
}

#[async_exec(type = SaveAsync, name = "demo::charge", remark = "demo: dead on its first run; replay it", max_attempts = 1)]
async fn charge(order: String, cents: i64, ctx: Context, seen: Data<Seen>) -> anyhow::Result<()> {
    let first = seen.0.lock().unwrap().insert(ctx.request_id().unwrap_or(0));
    if first {
        return Err(Final::new(format!("card declined for order {order} ({cents} cents)")).into());
    }
    Ok(())
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| "info".into()),
        )
        .init();
    let args = Args::parse();
    if args.hash_password {
        let mut password = String::new();
        std::io::stdin().read_to_string(&mut password)?;
        println!(
            "{}",
            console::hash_password(password.trim_end_matches(['\r', '\n']))?
        );
        return Ok(());
    }
    let rt = Runtime::builder()
        .database_url(&args.url)
        .application_name(&args.app)
        .run_workers(args.demo)
        .delete_on_success(!args.demo)
        .log_success(args.demo)
        .retry_base_delay(Duration::from_millis(500))
        .data(Seen::default())
        .start()
        .await?;
    if args.demo {
        submit_demo(&rt).await?;
    }
    let mut config = ConsoleConfig::new()
        .listen(args.listen)
        .secure_cookie(args.secure_cookie);
    for user in &args.users {
        let parts: Vec<&str> = user.splitn(3, ':').collect();
        let [name, role, hash] = parts[..] else {
            anyhow::bail!("--user {user}: write name:role:argon2-hash");
        };
        let role = Role::parse(role).ok_or_else(|| {
            anyhow::anyhow!("--user {name}: role `{role}` is not viewer or operator")
        })?;
        config = config.user(name, role, hash);
    }
    let config = config.from_env();
    let app = axum::Router::new().nest(&args.mount, console::router(&rt, config)?);
    let listener = tokio::net::TcpListener::bind(args.listen).await?;
    tracing::info!("console on http://{}{}", args.listen, args.mount);
    axum::serve(
        listener,
        app.into_make_service_with_connect_info::<SocketAddr>(),
    )
    .with_graceful_shutdown(async {
        let _ = tokio::signal::ctrl_c().await;
    })
    .await?;
    rt.shutdown().await?;
    Ok(())
}

async fn submit_demo(rt: &Runtime) -> anyhow::Result<()> {
    for i in 0..20 {
        send_mail(format!("user{i}@example.com")).on(rt).await?;
    }
    for customer in 1..=3 {
        sync_crm(customer).on(rt).await?;
    }
    for order in ["A-1001", "A-1002"] {
        charge(order.into(), 4_200)
            .key(format!("charge-{order}"))
            .on(rt)
            .await?;
    }
    Ok(())
}

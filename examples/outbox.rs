//! The transactional outbox: an order and the mail about it are written in one
//! transaction. Either both are committed, and the mail is sent after the commit, or
//! neither is.
//!
//!     cargo run --example outbox

use async_exec::{async_exec, Data, Runtime, Sqlite, Tx};
use serde::{Deserialize, Serialize};

/// A mail gateway, registered once on the runtime and injected into bodies.
struct Mailer {
    from: String,
}

/// Arguments are any serde types.
#[derive(Debug, Serialize, Deserialize)]
struct Order {
    id: i64,
    email: String,
    total_cents: i64,
}

#[async_exec(type = SaveAsync, remark = "confirm the order by mail")]
async fn confirm_order(order: Order, mailer: Data<Mailer>) -> anyhow::Result<()> {
    println!(
        "mail from {} to {}: order {} confirmed, total {}.{:02}",
        mailer.from,
        order.email,
        order.id,
        order.total_cents / 100,
        order.total_cents % 100
    );
    Ok(())
}

async fn place_order(rt: &Runtime, order: Order) -> anyhow::Result<()> {
    let mut tx: Tx<Sqlite> = rt.begin().await?;
    sqlx::query("INSERT INTO orders (id, email, total_cents) VALUES (?, ?, ?)")
        .bind(order.id)
        .bind(&order.email)
        .bind(order.total_cents)
        .execute(tx.conn())
        .await?;
    // Written in the same transaction as the order.
    confirm_order(order).within(&mut tx).await?;
    tx.commit().await?; // the mail goes out after this, never before
    Ok(())
}

/// The same with an ambient transaction: inside `rt.transaction`, a call without
/// `.within` joins the transaction (written just before its COMMIT).
async fn place_order_in_scope(rt: &Runtime, order: Order) -> anyhow::Result<()> {
    rt.transaction(|tx: &mut Tx<Sqlite>| {
        Box::pin(async move {
            sqlx::query("INSERT INTO orders (id, email, total_cents) VALUES (?, ?, ?)")
                .bind(order.id)
                .bind(&order.email)
                .bind(order.total_cents)
                .execute(tx.conn())
                .await?;
            confirm_order(order).await?; // joins the transaction
            Ok(())
        })
    })
    .await
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let path = std::env::temp_dir().join(format!("async-exec-outbox-{}.db", std::process::id()));
    let rt = Runtime::builder()
        .database_url(format!("sqlite:{}", path.display()))
        .data(Mailer {
            from: "shop@example.com".into(),
        })
        .start()
        .await?;
    let mut tx: Tx<Sqlite> = rt.begin().await?;
    sqlx::query("CREATE TABLE orders (id INTEGER PRIMARY KEY, email TEXT NOT NULL, total_cents INTEGER NOT NULL)")
        .execute(tx.conn())
        .await?;
    tx.commit().await?;

    place_order(
        &rt,
        Order {
            id: 1,
            email: "ada@example.com".into(),
            total_cents: 4_200,
        },
    )
    .await?;
    rt.wait_idle().await;
    // A duplicate order id violates the primary key: the transaction fails, and the mail
    // recorded in it is rolled back with the order.
    let duplicate = place_order(
        &rt,
        Order {
            id: 1,
            email: "eve@example.com".into(),
            total_cents: 1,
        },
    )
    .await;
    println!(
        "second order with id 1: {}",
        match duplicate {
            Ok(()) => "accepted?!".to_string(),
            Err(error) => format!("refused ({error}); no mail is sent for it"),
        }
    );

    place_order_in_scope(
        &rt,
        Order {
            id: 2,
            email: "grace@example.com".into(),
            total_cents: 1_999,
        },
    )
    .await?;

    rt.wait_idle().await;
    rt.shutdown().await?;
    for suffix in ["", "-wal", "-shm"] {
        let _ = std::fs::remove_file(format!("{}{suffix}", path.display()));
    }
    Ok(())
}

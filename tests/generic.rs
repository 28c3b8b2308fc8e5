//! One handler for any backend (issue 9): a function generic over `DB: Backend` runs its
//! own statements (one without binds, one with a bound value) and a call `.within(tx)`,
//! with no higher-ranked bound written by hand; the same function runs on SQLite,
//! PostgreSQL and MariaDB.

#[macro_use]
mod common;

use async_exec::{async_exec, Backend, Status, Tx, Value};

#[async_exec(type = SaveAsync)]
async fn ship_order(order_id: i64) -> Result<(), String> {
    let _ = order_id;
    Ok(())
}

/// The application's handler: generic over the backend, bounds from the library only.
async fn place_order<DB: Backend>(tx: &mut Tx<DB>, order_id: i64) -> async_exec::Result<()>
where
    i64: Value<DB>,
{
    sqlx::query("UPDATE orders SET placed = 1 WHERE id = 7")
        .execute(tx.conn())
        .await?;
    let sql = if DB::NAME == "PostgreSQL" {
        "INSERT INTO orders (id, placed) VALUES ($1, 0)"
    } else {
        "INSERT INTO orders (id, placed) VALUES (?, 0)"
    };
    sqlx::query(sql).bind(order_id).execute(tx.conn()).await?;
    ship_order(order_id).within(tx).await?;
    Ok(())
}

async fn a_generic_handler_runs_its_statements_and_a_call_in_the_transaction<DB: Backend>(
    db: common::TestDb,
) where
    i64: Value<DB>,
{
    let rt = db.builder().delete_on_success(false).start().await.unwrap();
    db.exec("CREATE TABLE orders (id BIGINT PRIMARY KEY, placed INT NOT NULL)")
        .await;
    db.exec("INSERT INTO orders (id, placed) VALUES (7, 0)")
        .await;

    // Rolled back: neither its statements nor its call stay.
    let mut tx = rt.begin::<DB>().await.unwrap();
    place_order(&mut tx, 8).await.unwrap();
    tx.rollback().await.unwrap();
    assert_eq!(db.count("orders WHERE placed = 1").await, 0);
    assert_eq!(db.count("async_req").await, 0);

    // Committed: both statements and the call, which then runs.
    let mut tx = rt.begin::<DB>().await.unwrap();
    place_order(&mut tx, 9).await.unwrap();
    tx.commit().await.unwrap();
    assert_eq!(db.count("orders WHERE id = 7 AND placed = 1").await, 1);
    assert_eq!(db.count("orders WHERE id = 9").await, 1);
    rt.wait_idle().await;
    let requests = rt
        .list(&Default::default(), &Default::default())
        .await
        .unwrap()
        .requests;
    assert_eq!(requests.len(), 1, "{requests:?}");
    assert_eq!(requests[0].executor, "generic::ship_order");
    assert_eq!(requests[0].param_json, r#"{"order_id":9}"#);
    common::wait_for(|| {
        let rt = rt.clone();
        let id = requests[0].id;
        async move { rt.get(id).await.unwrap().unwrap().status == Status::Success }
    })
    .await;
    rt.shutdown().await.unwrap();
}

backend_suite!(a_generic_handler_runs_its_statements_and_a_call_in_the_transaction);

//! Issue 20: `ctx.progress(done, total)` is written to the running request's record (at
//! most once a second, the last report always) and shown by `rt.get`.
#![allow(clippy::extra_unused_type_parameters)] // every test takes the backend, used or not

#[macro_use]
mod common;

use std::time::Duration;

use async_exec::{async_exec, Backend, Context, Progress, Status};
use common::TestDb;

/// Reports 1 of 3 and waits, reports 2 of 3 at once (throttled, not written), waits a
/// while and reports 2 of 3 again (written, 1.6 s after the first), then 3 of 3 (the last: always written).
#[async_exec(type = SaveAsync)]
async fn export(rows: u64, ctx: Context) {
    ctx.progress(1, rows).await;
    tokio::time::sleep(Duration::from_millis(400)).await;
    ctx.progress(2, rows).await; // within a second of the last write
    tokio::time::sleep(Duration::from_millis(1_200)).await;
    ctx.progress(2, rows).await;
    tokio::time::sleep(Duration::from_millis(400)).await;
    ctx.progress(rows, rows).await;
}

async fn progress_is_written_while_running<DB: Backend>(db: TestDb) {
    let rt = db.builder().delete_on_success(false).start().await.unwrap();
    let id = export(3).on(&rt).await.unwrap().id.unwrap();
    let progress = || async { rt.get(id).await.unwrap().unwrap().progress };
    common::wait_for(|| async { progress().await.is_some() }).await;
    assert_eq!(progress().await, Some(Progress { done: 1, total: 3 }));
    tokio::time::sleep(Duration::from_millis(600)).await; // 2 of 3 reported, not written
    assert_eq!(progress().await, Some(Progress { done: 1, total: 3 }));
    common::wait_for(|| async { progress().await == Some(Progress { done: 2, total: 3 }) }).await;
    common::wait_for(|| async { rt.get(id).await.unwrap().unwrap().status == Status::Success })
        .await;
    assert_eq!(progress().await, Some(Progress { done: 3, total: 3 }));
    rt.shutdown().await.unwrap();
}

backend_suite!(progress_is_written_while_running);

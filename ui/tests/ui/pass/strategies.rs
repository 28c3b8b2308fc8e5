#![deny(warnings)]
use async_exec::*;

#[async_exec(type = SaveAsync)]
async fn save_async(id: i64) {
    let _ = id;
}

#[async_exec(type = SyncSave)]
async fn sync_save(id: i64) {
    let _ = id;
}

#[async_exec(type = AsyncSave)]
async fn async_save(id: i64) {
    let _ = id;
}

#[async_exec(type = Async)]
async fn fire_and_forget(id: i64) {
    let _ = id;
}

#[async_exec(type = Thread)]
async fn thread(id: i64) {
    let _ = id;
}

fn main() {
    let _calls: [Call; 5] = [
        save_async(1),
        sync_save(2),
        async_save(3),
        fire_and_forget(4),
        thread(5),
    ];
}

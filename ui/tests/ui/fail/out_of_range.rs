use async_exec::*;

#[async_exec(type = SaveAsync, max_attempts = 3000000000)]
async fn too_many_attempts(id: i64) {
    let _ = id;
}

#[async_exec(type = SaveAsync, timeout = "9000h")]
async fn too_long(id: i64) {
    let _ = id;
}

#[async_exec(
    type = SaveAsync,
    name = "a.very.long.name.aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa"
)]
async fn long_name(id: i64) {
    let _ = id;
}

fn main() {
    let _calls: [Call; 3] = [too_many_attempts(1), too_long(2), long_name(3)];
}

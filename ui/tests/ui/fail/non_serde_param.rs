use async_exec::*;

struct NotSerde {
    id: i64,
}

#[async_exec(type = SaveAsync)]
async fn send(id: i64, value: NotSerde) {
    let _ = (id, value.id);
}

fn main() {
    let _call: Call = send(1, NotSerde { id: 2 });
}

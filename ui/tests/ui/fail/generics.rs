use async_exec::*;

#[async_exec(type = SaveAsync)]
async fn send<T: serde::Serialize>(value: T) {
    let _ = value;
}

#[async_exec(type = SaveAsync)]
async fn bounded(value: Vec<u8>)
where
    Vec<u8>: Clone,
{
    let _ = value;
}

fn main() {
    let _ = send(1);
    let _ = bounded(vec![]);
}

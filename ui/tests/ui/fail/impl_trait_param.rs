use async_exec::*;

#[async_exec(type = SaveAsync)]
async fn send(message: impl std::fmt::Display) {
    let _ = message.to_string();
}

fn main() {
    let _ = send("hi");
}

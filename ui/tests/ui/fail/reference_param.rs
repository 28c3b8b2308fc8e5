use async_exec::*;

#[async_exec(type = SaveAsync)]
async fn send(email: &str, tags: Vec<&'static str>) {
    let _ = (email, tags);
}

fn main() {
    let _ = send("a@b.c", vec![]);
}

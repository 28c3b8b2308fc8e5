use async_exec::async_exec;

// A deadline is kept by the request's record: an in-memory strategy has none to keep it.
#[async_exec(type = Thread, deadline = "10m")]
async fn export(report: i64) {
    let _ = report;
}

fn main() {}

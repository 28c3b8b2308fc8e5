//! Issue 9: a database that cannot be reached at start is reported with where it is (no
//! password) and the cause, at once, not as a bare pool timeout after 30 s.

use std::time::{Duration, Instant};

use async_exec::{Error, Runtime};

/// A TCP port on 127.0.0.1 that nothing listens on: bound, then closed.
fn closed_port() -> u16 {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    let port = listener.local_addr().unwrap().port();
    drop(listener);
    port
}

async fn start_error(url: &str) -> (Error, Duration) {
    let started = Instant::now();
    let error = Runtime::builder()
        .database_url(url)
        .install_global(false)
        .run_workers(false)
        .start()
        .await
        .expect_err("nothing listens there");
    (error, started.elapsed())
}

fn assert_names_the_place_and_cause(error: &Error, elapsed: Duration, backend: &str, port: u16) {
    let message = error.to_string();
    assert!(
        matches!(error, Error::Unreachable { .. }),
        "{error:?}: not Error::Unreachable"
    );
    assert!(message.contains(backend), "{message}");
    assert!(message.contains(&format!("127.0.0.1:{port}")), "{message}");
    assert!(message.contains("onnection refused"), "no cause: {message}");
    assert!(!message.contains("s3cret"), "the password shows: {message}");
    assert!(
        elapsed < Duration::from_secs(10),
        "took {elapsed:?}: {message}"
    );
}

#[cfg(feature = "postgres")]
#[tokio::test]
async fn an_unreachable_postgres_is_named_with_its_cause() {
    let port = closed_port();
    let (error, elapsed) =
        start_error(&format!("postgres://ops:s3cret@127.0.0.1:{port}/shop")).await;
    assert_names_the_place_and_cause(&error, elapsed, "PostgreSQL", port);
    assert!(error.to_string().contains("ops@127.0.0.1"), "{error}");
    assert!(error.to_string().contains("/shop"), "{error}");
}

#[cfg(feature = "mysql")]
#[tokio::test]
async fn an_unreachable_mysql_is_named_with_its_cause() {
    let port = closed_port();
    let (error, elapsed) = start_error(&format!("mysql://ops:s3cret@127.0.0.1:{port}/shop")).await;
    assert_names_the_place_and_cause(&error, elapsed, "MySQL", port);
}

#[cfg(feature = "sqlite")]
#[tokio::test]
async fn a_sqlite_file_that_cannot_be_opened_is_named() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("no-such-dir").join("app.db");
    let (error, _) = start_error(&format!("sqlite:{}", path.display())).await;
    let message = error.to_string();
    assert!(matches!(error, Error::Unreachable { .. }), "{error:?}");
    assert!(message.contains(&path.display().to_string()), "{message}");
    assert!(message.contains("unable to open"), "{message}");
    assert!(message.contains("directory exists"), "{message}");
}

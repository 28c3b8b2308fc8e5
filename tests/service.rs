//! `examples/service.rs --self-check` against PostgreSQL, in a process of its own: this
//! test binary runs itself again as a child whose one test runs the example's `main` in
//! self-check mode (it serves on a free port, calls its own handler, waits until the
//! call's body ran, checks `/health`, `/metrics` and `/console`, sends itself SIGTERM and
//! returns after a clean shutdown). The parent gives it a fresh database and checks that
//! it exited 0 and said so.
#![cfg(all(
    unix,
    feature = "postgres",
    feature = "console",
    feature = "prometheus"
))]

#[macro_use]
#[allow(unused_macros)]
mod common;

#[path = "../examples/service.rs"]
mod service;

/// Set in the child's environment: the example reads it as `--self-check`.
const CHILD_VAR: &str = "SERVICE_SELF_CHECK";

/// Run by [`postgres::self_check_passes`] in a child process.
#[test]
#[ignore = "run as a child process by the self-check test of this file"]
fn child_runs_the_service() {
    assert_eq!(
        std::env::var(CHILD_VAR).as_deref(),
        Ok("1"),
        "run by the other test of tests/service.rs"
    );
    service::main().expect("the self-check failed");
}

#[cfg(async_exec_test_postgres)]
mod postgres {
    use std::time::Duration;

    use super::common::{Kind, TestDb};

    #[tokio::test]
    async fn self_check_passes() {
        let db = TestDb::new(Kind::Postgres).await;
        let child = tokio::process::Command::new(std::env::current_exe().unwrap())
            .args([
                "child_runs_the_service",
                "--exact",
                "--ignored",
                "--nocapture",
                "--test-threads=1",
            ])
            .env(super::CHILD_VAR, "1")
            .env("DATABASE_URL", &db.url)
            .kill_on_drop(true)
            .output();
        let out = tokio::time::timeout(Duration::from_secs(120), child)
            .await
            .expect("the service did not exit within 120 s")
            .unwrap();
        let stdout = String::from_utf8_lossy(&out.stdout);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(
            out.status.success(),
            "{:?}\nstdout:\n{stdout}\nstderr:\n{stderr}",
            out.status
        );
        for said in [
            "self-check: invoice 1 mailed",
            "self-check: SIGTERM sent",
            "self-check passed",
        ] {
            assert!(stdout.contains(said), "no `{said}` in:\n{stdout}");
        }
    }
}

#[cfg(not(async_exec_test_postgres))]
mod postgres {
    #[test]
    #[ignore = "the service's self-check needs PostgreSQL: set ASYNC_EXEC_TEST_POSTGRES_URL=postgres://postgres@127.0.0.1:5432/test"]
    fn self_check_passes() {}
}

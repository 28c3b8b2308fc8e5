//! Tells the store tests which database servers to run against. A backend's test runs
//! only when its URL is set; otherwise a plain `cargo test` reports it as ignored (with
//! the variable to set), never as passed.
fn main() {
    println!("cargo::rustc-check-cfg=cfg(async_exec_test_postgres)");
    println!("cargo::rustc-check-cfg=cfg(async_exec_test_mysql)");
    // `sqlx::migrate!` embeds the files it finds; a migration added or removed changes no
    // source file, so the crate is built again when the directory changes.
    println!("cargo::rerun-if-changed=../migrations");
    for (var, cfg) in [
        ("ASYNC_EXEC_TEST_POSTGRES_URL", "async_exec_test_postgres"),
        ("ASYNC_EXEC_TEST_MYSQL_URL", "async_exec_test_mysql"),
    ] {
        println!("cargo::rerun-if-env-changed={var}");
        if std::env::var_os(var).is_some_and(|v| !v.is_empty()) {
            println!("cargo::rustc-cfg={cfg}");
        }
    }
}

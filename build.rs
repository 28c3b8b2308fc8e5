//! Tells the integration tests which database servers to run the behaviour suite against.
//! Each backend's suite is compiled in only when its URL is set, so that a plain
//! `cargo test` reports it as ignored (with the variable to set), never as passed; the
//! browser test likewise needs the path of chromedriver.
fn main() {
    println!("cargo::rustc-check-cfg=cfg(async_exec_test_postgres)");
    println!("cargo::rustc-check-cfg=cfg(async_exec_test_mysql)");
    println!("cargo::rustc-check-cfg=cfg(async_exec_test_browser)");
    for (var, cfg) in [
        ("ASYNC_EXEC_TEST_POSTGRES_URL", "async_exec_test_postgres"),
        ("ASYNC_EXEC_TEST_MYSQL_URL", "async_exec_test_mysql"),
        // tests/browser.rs: the chromedriver that drives headless Chromium.
        ("ASYNC_EXEC_TEST_CHROMEDRIVER", "async_exec_test_browser"),
    ] {
        println!("cargo::rerun-if-env-changed={var}");
        if std::env::var_os(var).is_some_and(|v| !v.is_empty()) {
            println!("cargo::rustc-cfg={cfg}");
        }
    }
}

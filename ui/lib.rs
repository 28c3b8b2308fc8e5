//! Nothing: this crate holds the compile-time tests of `#[async_exec]` (`tests/ui.rs`).
//! Run them with `cargo test -p async-exec-ui-tests`; regenerate the `.stderr` files with
//! `TRYBUILD=overwrite cargo test -p async-exec-ui-tests`, then read them.

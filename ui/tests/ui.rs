//! Compile-time behaviour of `#[async_exec]`: what compiles, and the errors
//! (with their spans) for what does not. Regenerate the `.stderr` files with
//! `TRYBUILD=overwrite cargo test -p async-exec-ui-tests`, then read them. A crate of
//! their own: trybuild builds the dev-dependencies of the crate it tests, and the
//! facade has many that the attribute does not need.

#[rustversion::stable]
#[test]
fn ui() {
    let t = trybuild::TestCases::new();
    t.pass("tests/ui/pass/*.rs");
    t.compile_fail("tests/ui/fail/*.rs");
}

//! Compile-time behaviour of `#[async_exec]`: what compiles, and the errors
//! (with their spans) for what does not. Regenerate the `.stderr` files with
//! `TRYBUILD=overwrite cargo test --test ui`, then read them.

#[rustversion::stable]
#[test]
fn ui() {
    let t = trybuild::TestCases::new();
    t.pass("tests/ui/pass/*.rs");
    t.compile_fail("tests/ui/fail/*.rs");
}

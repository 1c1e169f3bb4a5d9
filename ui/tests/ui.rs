//! Compile-time checks of `#[distributed_lock]`: every mistake in `fail/` must be rejected
//! with the message checked in beside it. (Every supported shape in `pass/` is a test program
//! of this package's own, which `cargo test` builds with the other targets and runs: trybuild
//! then only checks its cases, and compiles nothing the workspace's build already has.)
//!
//! Regenerate the expected messages with `TRYBUILD=overwrite cargo test -p rlock-ui --test ui`
//! and read the diff before committing it. Some messages name the runtime's support module,
//! whose name carries the version's major and minor numbers (`__private_0_1`): a release that
//! changes them renames it there too.

#[test]
fn ui() {
    let cases = trybuild::TestCases::new();
    cases.compile_fail("fail/*.rs");
}

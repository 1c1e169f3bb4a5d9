//! Compile-time checks of `#[distributed_lock]`: every mistake in `fail/` must be rejected
//! with the message checked in beside it, and every supported shape in `pass/` must compile
//! and run.
//!
//! Regenerate the expected messages with `TRYBUILD=overwrite cargo test -p rlock-ui --test ui`
//! and read the diff before committing it. Some messages name the runtime's support module,
//! whose name carries the version's major and minor numbers (`__private_0_1`): a release that
//! changes them renames it there too.

#[test]
fn ui() {
    let cases = trybuild::TestCases::new();
    cases.compile_fail("fail/*.rs");
    cases.pass("pass/*.rs");
}

//! The README's tour is `examples/examples/tour.rs`, and its idempotent-requests block is the
//! web example's router, which the workspace compiles (and clippy checks): these tests keep
//! them the same, so what a user pastes compiles.

#[test]
fn the_readme_tour_is_the_tour_example() {
    let readme = include_str!("../../README.md");
    let start = readme
        .find("```rust,no_run\n")
        .expect("the README has a tour")
        + "```rust,no_run\n".len();
    let end = start + readme[start..].find("```").expect("the tour block ends");
    let example = include_str!("../examples/tour.rs");
    assert_eq!(
        &readme[start..end],
        example,
        "README.md's tour and examples/examples/tour.rs differ: copy one onto the other"
    );
}

#[test]
fn the_readme_idempotency_block_is_the_web_examples_router() {
    let readme = include_str!("../../README.md");
    let section = &readme[readme.find("## Idempotent requests").expect("the section")..];
    let start = section.find("```rust,ignore\n").expect("its block") + "```rust,ignore\n".len();
    let end = start + section[start..].find("```").expect("the block ends");
    let web = include_str!("../src/web.rs");
    assert!(
        web.contains(&section[start..end]),
        "README.md's idempotency block is not examples/src/web.rs's router: copy one onto the other"
    );
}

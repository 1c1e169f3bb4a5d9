//! The README's tour is `examples/examples/tour.rs`, which the workspace compiles (and clippy
//! checks): this test keeps the two the same, so the tour a user pastes compiles.

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

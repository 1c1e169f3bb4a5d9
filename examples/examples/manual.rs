//! The manual API in thirty lines: connect (or fall back to memory), lock, re-enter, release.
#![allow(clippy::unwrap_used)]

fn main() {}

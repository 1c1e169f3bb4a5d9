//! The compile-time checks of rlock's attributes: every mistake in `fail/` must be rejected
//! with the message checked in beside it, and every supported shape in `pass/` must compile
//! and run (`tests/ui.rs`, and a test program per case, declared in `Cargo.toml`). Nothing
//! else lives here.

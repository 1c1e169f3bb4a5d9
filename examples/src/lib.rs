//! Shared helpers for the rlock examples.

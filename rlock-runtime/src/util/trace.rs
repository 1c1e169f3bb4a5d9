//! `tracing` events when the `tracing` feature is on (the default), nothing otherwise.
//!
//! Errors go in as `&dyn Error` values, not `%` (Display): a `LockError` leaves its cause to
//! `source()`, and subscribers print an error value's sources.

macro_rules! debug_event {
    ($($arg:tt)*) => {
        #[cfg(feature = "tracing")]
        {
            ::tracing::debug!(target: "rlock", $($arg)*);
        }
    };
}

macro_rules! warn_event {
    ($($arg:tt)*) => {
        #[cfg(feature = "tracing")]
        {
            ::tracing::warn!(target: "rlock", $($arg)*);
        }
    };
}

pub(crate) use {debug_event, warn_event};

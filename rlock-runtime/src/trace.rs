//! `tracing` events when the `tracing` feature is on (the default), nothing otherwise.

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

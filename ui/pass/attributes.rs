//! Attributes, docs, visibility and `#[must_use]` are kept, and so are the body's inner
//! attributes; `crate = "…"` points at a re-export.

#![deny(warnings)]
// A caller's program: it may unwrap what it set up itself.
#![allow(clippy::unwrap_used)]
#![deny(unused_must_use)]

mod locks {
    pub use ::rlock_runtime as rt;
}

mod service {
    use rlock_runtime::{LockError, distributed_lock};

    /// Documented, crate-visible, with extra attributes.
    #[must_use = "the order id tells which order was made"]
    #[inline]
    #[allow(clippy::needless_pass_by_value)]
    #[distributed_lock(key = "order:<user_id>", crate = "crate::locks::rt")]
    pub(crate) async fn create_order(user_id: u64) -> Result<u64, LockError> {
        Ok(user_id)
    }

    /// Waiters served in arrival order.
    #[distributed_lock(key = "ticket:<event>", wait = "5s", fair = true)]
    pub async fn book(event: u64) -> Result<u64, LockError> {
        Ok(event)
    }

    /// The body's inner attributes apply to the whole function.
    #[distributed_lock(key = "note:<id>")]
    pub async fn note(id: u64) -> Result<u64, LockError> {
        #![allow(unused_variables)]
        let unused = id;
        Ok(id)
    }

    #[cfg(any())]
    #[distributed_lock(key = "never:<compiled>")]
    pub async fn compiled_out(compiled: u64) -> Result<u64, LockError> {
        Ok(compiled)
    }
}

fn main() {
    let _future = service::create_order(1);
    let _booked = service::book(2);
    let _noted = service::note(3);
}

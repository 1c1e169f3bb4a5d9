//! What a worker holds: a lease's guard or a leadership, behind one set of calls, so that
//! a hold and a soak section treat a leader's term as they treat a lock.

use rlock_runtime::{Leadership, LockError, LockGuard};

/// A lease's guard (a lock, a reader's or the writer's lease, a permit), or a leadership.
#[derive(Debug)]
pub enum Holding {
    /// A lease of any kind.
    Guard(LockGuard),
    /// A leader's seat: its lease is a fenced lock's, its term the fence.
    Leader(Leadership),
}

impl Holding {
    /// The owner token.
    pub fn token(&self) -> &str {
        match self {
            Self::Guard(guard) => guard.token(),
            Self::Leader(lead) => lead.token(),
        }
    }

    /// The fence: a fenced lease's, or the leader's term.
    pub fn fence(&self) -> Option<u64> {
        match self {
            Self::Guard(guard) => guard.fence().map(|f| f.get()),
            Self::Leader(lead) => Some(lead.term()),
        }
    }

    /// Whether the lease is known lost.
    pub fn is_lost(&self) -> bool {
        match self {
            Self::Guard(guard) => guard.is_lost(),
            Self::Leader(lead) => lead.is_lost(),
        }
    }

    /// Resolves once the lease is known lost.
    pub async fn lost(&self) {
        match self {
            Self::Guard(guard) => guard.lost().await,
            Self::Leader(lead) => lead.lost().await,
        }
    }

    /// Releases the lease, or resigns.
    ///
    /// # Errors
    ///
    /// The release's: [`LockError::Lost`] when the lease was lost before it.
    pub async fn release(self) -> Result<(), LockError> {
        match self {
            Self::Guard(guard) => guard.release().await,
            Self::Leader(lead) => lead.resign().await,
        }
    }
}

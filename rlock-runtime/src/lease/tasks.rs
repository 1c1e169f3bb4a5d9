//! The read-write leases each tokio task holds, whichever API took them (a builder, the
//! closure form or an attribute): a task that holds a key's read lock is refused its write
//! lock at once (it would wait for itself), and a task that holds the write lock may read
//! beside it (a downgrade). Locked scopes ([`scope`](crate::api::scope)) cannot tell, as a
//! builder's guard lives outside any scope.
//!
//! A future that is no task (the one `Runtime::block_on` runs, such as `#[tokio::main]`'s
//! and `#[tokio::test]`'s body) counts as a task of its thread: it never leaves it.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard, Weak};

use std::thread::ThreadId;

use super::Hold;
use crate::backend::Kind;

/// Every task's read-write holds of a client, by task and key.
#[derive(Debug, Default)]
pub(crate) struct TaskLeases {
    held: Mutex<Held>,
}

#[derive(Debug, Default)]
struct Held {
    by_task: HashMap<(Task, String), Vec<Weak<Hold>>>,
    /// Entries after the last sweep of ended holds; the next waits until they double.
    swept_at: usize,
}

/// Who runs the current code: a tokio task, or the thread of a future that is no task.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
enum Task {
    Task(tokio::task::Id),
    Thread(ThreadId),
}

impl Task {
    fn current() -> Self {
        match tokio::task::try_id() {
            Some(id) => Self::Task(id),
            None => Self::Thread(std::thread::current().id()),
        }
    }
}

/// A hold still held: a guard alive, and its lease not lost.
fn current(hold: &Weak<Hold>) -> Option<Arc<Hold>> {
    let hold = hold.upgrade()?;
    (hold.guard_count() > 0 && !hold.is_lost()).then_some(hold)
}

impl TaskLeases {
    fn held(&self) -> MutexGuard<'_, Held> {
        // Inserts and removals only: a poisoned map is intact.
        self.held.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Notes that the current task holds `hold` (a read-write lease; other kinds are not
    /// noted).
    pub(crate) fn add(&self, hold: &Arc<Hold>) {
        // First, and cheapest: every lock's and permit's acquisition passes here.
        if !hold.kind().is_read_write() {
            return;
        }
        let task = Task::current();
        let mut held = self.held();
        if held.by_task.len() > 2 * held.swept_at.max(64) {
            held.by_task
                .retain(|_, holds| holds.iter().any(|h| current(h).is_some()));
            held.swept_at = held.by_task.len();
        }
        let holds = held
            .by_task
            .entry((task, hold.redis_key().to_owned()))
            .or_default();
        holds.retain(|h| current(h).is_some());
        holds.push(Arc::downgrade(hold));
    }

    /// The current task's hold of `redis_key` as `kind`, if it holds one.
    pub(crate) fn find(&self, redis_key: &str, kind: Kind) -> Option<Arc<Hold>> {
        let task = Task::current();
        let held = self.held();
        held.by_task
            .get(&(task, redis_key.to_owned()))?
            .iter()
            .filter_map(current)
            .find(|hold| hold.kind() == kind)
    }
}

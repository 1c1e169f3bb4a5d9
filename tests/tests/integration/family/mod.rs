//! Each kind of lease keeps its contract against a real `redis-server` (and the in-process
//! backend where it keeps the same rules), one module per topic:
//!
//! - [`semantics`]: the lock's contract on every backend;
//! - [`semaphore`] and [`read_write`]: the semaphore's and the read-write lock's;
//! - [`weighted`]: several permits of a semaphore at once;
//! - [`counts`]: a semaphore's count changed at run time;
//! - [`redisson_semaphore`]: Redisson's own semaphore cases, transcribed;
//! - [`upgradeable`]: the upgradeable read lock and its upgrade;
//! - [`kinds`]: one name, one kind, every pair of kinds meeting on one name;
//! - [`multi_key`]: `lock_all`, all of several keys or none;
//! - [`admin`]: inspection and force-unlock;
//! - [`hand_over`]: a hold handed to another process;
//! - [`redis_holes`]: each hole of the naive Redis lock recipes, shown closed;
//! - [`scripts`]: every key a script touches is one it declared.

mod admin;
mod counts;
mod hand_over;
mod kinds;
mod multi_key;
mod read_write;
mod redis_holes;
mod redisson_semaphore;
mod scripts;
mod semantics;
mod semaphore;
mod upgradeable;
mod weighted;

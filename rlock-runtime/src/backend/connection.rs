//! A command connection that heals: one multiplexed connection (or one cluster connection),
//! replaced when it stops answering (a cluster's replaces its node connections itself).
//!
//! redis-rs reconnects after a connection *drops*, but a TCP flow that goes silent (a NAT or
//! firewall that lost it, a load balancer that blackholes it) never drops: every command would
//! time out for as long as the kernel retransmits, a quarter of an hour. So here a command that
//! times out, or fails with a connection-level error, condemns the connection it used, and the
//! next command opens a fresh one: a silently dead flow costs about two command timeouts.
//! Reconnection is single-flight: concurrent callers share one attempt. On a plain TCP or
//! Unix socket, which rlock opens itself, the bound is kept by one [`Watch`] per connection
//! rather than a timer per command, and so on a cluster, by one per node connection
//! (`cluster_conn.rs`); TLS connections, whose sockets the driver opens, keep a timer per
//! command.
//!
//! Where the task that reads a connection's replies lives matters twice over. It must not live on a
//! runtime that can end under the connection's other users (a per-test runtime sharing an installed
//! client): their commands would fail with it. And a hop between runtimes on every reply costs a
//! thread wake-up, about a fifth of the client's CPU per lock. So each multi-thread runtime that
//! calls gets a connection of its own, opened on it and used only by its tasks; its workers read
//! the replies whatever its tasks do, and when it ends, so does every user of that connection.
//! rlock's own tasks, and callers on a current-thread runtime (which runs its tasks only inside
//! `block_on`), share one opened on the background runtime. The price: a runtime whose workers are
//! all stalled past the command timeout (blocking calls in async code) finds its commands timed out
//! and its connection replaced, where replies read on the background runtime would have been
//! waiting for it; its own tasks stall all the same, and a grant that comes back too late is never
//! handed out.

use std::future::Future;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use redis::{ErrorKind, RedisError, ServerErrorKind};
use tokio::runtime::{Handle, RuntimeFlavor};

use super::topology::{Opened, Reading, Topology};
use super::watch::{Ended, Watch};
use crate::error::{LockError, Operation};

#[derive(Clone)]
struct Live<C> {
    /// Which connection this is, so that only the one that failed is condemned.
    generation: u64,
    /// The topology's master switches when it was opened.
    switches: u64,
    conn: C,
    bound: Bound,
}

/// What bounds a connection's calls.
#[derive(Clone)]
enum Bound {
    /// Its deadline keeper.
    Watch(Arc<Watch>),
    /// A timer per call.
    Timer,
    /// The connection itself ([`Reading::Parts`]): a failure is its part's, not its own.
    Parts,
}

impl Bound {
    fn watch(&self) -> Option<&Watch> {
        match self {
            Bound::Watch(watch) => Some(watch),
            Bound::Timer | Bound::Parts => None,
        }
    }
}

/// The runtime a connection's replies are read on, and whose tasks use it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Home {
    /// The background runtime: rlock's own tasks, callers on a current-thread runtime, or outside
    /// one.
    Background,
    /// A caller's multi-thread runtime.
    Caller(tokio::runtime::Id),
}

impl Home {
    /// Where the calling task's commands go.
    fn current() -> Self {
        match Handle::try_current() {
            Ok(runtime)
                if runtime.runtime_flavor() == RuntimeFlavor::MultiThread
                    && !crate::util::background::is(&runtime) =>
            {
                Home::Caller(runtime.id())
            }
            _ => Home::Background,
        }
    }

    /// The runtime to open this home's connection on.
    fn runtime(self) -> Option<Handle> {
        match self {
            Home::Background => crate::util::background::handle().cloned(),
            Home::Caller(_) => Handle::try_current().ok(),
        }
    }
}

tokio::task_local! {
    /// The home whose connection a clean-up sends on, on behalf of a caller (see
    /// [`CallerConnection`]).
    static ON_BEHALF_OF: Home;
}

/// The connection a calling task's commands go through, kept for a command sent later on its
/// behalf from rlock's own runtime (a cancelled call's withdrawal or release): sent on the
/// same connection, it runs in Redis after every command the caller sent, never before one
/// still on its way (a check in that could take the lock again after it). A clean-up is sent
/// on rlock's own connection at once as well, since the caller's may be busy (a `WAIT`
/// blocks it for up to half the command timeout) or gone (its runtime ended).
#[derive(Debug, Clone, Copy)]
pub(crate) struct CallerConnection(Home);

impl CallerConnection {
    /// The calling task's, when it is not rlock's own.
    pub(crate) fn current() -> Option<Self> {
        match Home::current() {
            Home::Background => None,
            caller => Some(Self(caller)),
        }
    }

    /// Runs `work` with its commands sent on this connection while it is open.
    async fn send<F: Future>(self, work: F) -> F::Output {
        ON_BEHALF_OF.scope(self.0, work).await
    }

    /// Spawns `work` on rlock's own runtime with its commands sent behind the calling task's,
    /// on its connection; nothing when the caller is rlock's own (its commands go there
    /// anyway). A clean-up calls this beside its send on rlock's own connection.
    pub(crate) fn spawn_behind_caller<F>(work: F)
    where
        F: Future<Output = ()> + Send + 'static,
    {
        if let Some(caller) = Self::current() {
            crate::util::background::spawn(caller.send(work));
        }
    }
}

/// One live connection and where it lives.
struct Homed<C> {
    home: Home,
    live: Live<C>,
    /// Set when the task that opened it was dropped: its runtime ended, and the task reading
    /// the connection's replies with it.
    ended: Arc<AtomicBool>,
    /// Dropping it (with the entry) ends that task.
    _keep: tokio::sync::oneshot::Sender<()>,
}

/// The connections, one per home.
struct Homes<C> {
    /// The last generation handed out.
    generations: u64,
    connections: Vec<Homed<C>>,
}

/// Sets its flag when dropped.
struct SetOnDrop(Arc<AtomicBool>);

impl Drop for SetOnDrop {
    fn drop(&mut self) {
        self.0.store(true, Ordering::Release);
    }
}

pub(crate) struct Connection<D: Topology> {
    topology: D,
    timeout: Duration,
    homes: Mutex<Homes<D::Conn>>,
    /// Held while a new connection is being opened.
    opening: tokio::sync::Mutex<()>,
}

impl<D: Topology> std::fmt::Debug for Connection<D> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Connection")
            .field("timeout", &self.timeout)
            .finish_non_exhaustive()
    }
}

impl<D: Topology> Connection<D> {
    /// A connection opened on first use; every command is bounded by `timeout`.
    pub(crate) fn lazy(topology: D, timeout: Duration) -> Self {
        Self {
            topology,
            timeout,
            homes: Mutex::new(Homes {
                generations: 0,
                connections: Vec::new(),
            }),
            opening: tokio::sync::Mutex::new(()),
        }
    }

    pub(crate) fn timeout(&self) -> Duration {
        self.timeout
    }

    fn homes(&self) -> MutexGuard<'_, Homes<D::Conn>> {
        // Only whole values are stored: a poisoned list is intact.
        self.homes.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// `home`'s live connection, if its runtime still runs and it still goes to the current
    /// master.
    fn usable(&self, home: Home) -> Option<Live<D::Conn>> {
        let homes = self.homes();
        let live = homes
            .connections
            .iter()
            .find(|s| s.home == home && !s.ended.load(Ordering::Acquire))?
            .live
            .clone();
        drop(homes);
        if live.switches == self.topology.master_switches() {
            return Some(live);
        }
        self.condemn(live.generation);
        None
    }

    /// `home`'s live connection, opening one if there is none (unless a concurrent caller
    /// just did).
    async fn current(&self, home: Home) -> Result<Live<D::Conn>, LockError> {
        if let Some(live) = self.usable(home) {
            return Ok(live);
        }
        let _opening = self.opening.lock().await;
        if let Some(live) = self.usable(home) {
            return Ok(live);
        }
        // Read before opening: a switch heard meanwhile condemns the new connection too.
        let switches = self.topology.master_switches();
        let Opening {
            conn,
            bound,
            ended,
            keep,
        } = tokio::time::timeout(self.timeout, self.open(home))
            .await
            .map_err(|_| LockError::Timeout {
                operation: Operation::Connect,
                timeout: self.timeout,
            })??;
        let mut homes = self.homes();
        // Connections of runtimes that ended are forgotten here, off the commands' path.
        homes
            .connections
            .retain(|homed| !homed.ended.load(Ordering::Acquire));
        homes.generations += 1;
        let live = Live {
            generation: homes.generations,
            switches,
            conn,
            bound,
        };
        homes.connections.push(Homed {
            home,
            live: live.clone(),
            ended,
            _keep: keep,
        });
        Ok(live)
    }

    /// Opens a connection on `home`'s runtime, from a task spawned there, so that the task
    /// reading its replies lives there too: the driver's own, or, when the topology hands the
    /// reader over, one this task spawns, while it keeps the calls' deadlines itself
    /// ([`Watch`]). The task stays until the runtime ends (which sets the flag returned),
    /// or the connection is given up (the sender returned dropped) and its last call has
    /// ended, or its watch cuts it; a reader it spawned stops with it.
    async fn open(&self, home: Home) -> Result<Opening<D::Conn>, LockError> {
        let Some(runtime) = home.runtime() else {
            let source = match home {
                Home::Background => "rlock's background thread could not start",
                Home::Caller(_) => "the calling task is no longer on a Tokio runtime",
            };
            return Err(LockError::Unavailable {
                operation: Operation::Connect,
                source: source.into(),
            });
        };
        let (topology, timeout) = (self.topology.clone(), self.timeout);
        let (tx, rx) = tokio::sync::oneshot::channel();
        let (keep, kept) = tokio::sync::oneshot::channel::<()>();
        let ended = Arc::new(AtomicBool::new(false));
        let on_end = SetOnDrop(ended.clone());
        runtime.spawn(async move {
            let _on_end = on_end;
            let Opened { conn, reading } = match topology.open(timeout).await {
                Ok(opened) => opened,
                Err(e) => {
                    let _ = tx.send(Err(e));
                    return;
                }
            };
            let (bound, watched) = match reading {
                Reading::Ours(reader) => {
                    let watch = Arc::new(Watch::new(timeout));
                    (Bound::Watch(watch.clone()), Some((reader, watch)))
                }
                Reading::Driver => (Bound::Timer, None),
                Reading::Parts => (Bound::Parts, None),
            };
            if tx.send(Ok((conn, bound))).is_err() {
                return;
            }
            let retire = async {
                let _ = kept.await;
            };
            match watched {
                Some((reader, watch)) => {
                    let _: Ended = watch.run_reader(reader, retire).await;
                }
                None => retire.await,
            }
        });
        match rx.await {
            Ok(Ok((conn, bound))) => Ok(Opening {
                conn,
                bound,
                ended,
                keep,
            }),
            Ok(Err(e)) => Err(failure(Operation::Connect, timeout, e)),
            Err(_) => Err(LockError::Timeout {
                operation: Operation::Connect,
                timeout,
            }),
        }
    }

    /// Forgets connection `generation` (if it is still a live one): the next call from its
    /// runtime opens a new one.
    fn condemn(&self, generation: u64) {
        let mut homes = self.homes();
        let before = homes.connections.len();
        homes
            .connections
            .retain(|homed| homed.live.generation != generation);
        if homes.connections.len() < before {
            crate::util::trace::warn_event!(
                "rlock: Redis connection stopped answering; replacing it"
            );
        }
    }

    /// Runs `command` on the live connection within `limit` (at most the command timeout).
    /// A timeout or a connection-level failure condemns the connection it ran on.
    ///
    /// A call on a watched connection for the whole command timeout (nearly every call) is
    /// bounded by the connection's [`Watch`] and needs no timer; any other call (a shorter
    /// limit, a connection to open first, one the driver reads) runs under a timer of its own.
    pub(crate) async fn call<T, F, Fut>(
        &self,
        operation: Operation,
        limit: Duration,
        command: F,
    ) -> Result<T, LockError>
    where
        F: FnOnce(D::Conn) -> Fut,
        Fut: Future<Output = Result<T, RedisError>>,
    {
        let limit = limit.min(self.timeout);
        let home = Home::current();
        // A caller's connection that is still open, for a command sent on its behalf.
        let behalf = ON_BEHALF_OF
            .try_with(|caller| *caller)
            .ok()
            .filter(|caller| *caller != home)
            .and_then(|caller| self.usable(caller));
        let ready = match behalf {
            Some(live) => Some(live),
            None if limit == self.timeout => self.usable(home),
            None => None,
        };
        // A watch bounds a call by the whole command timeout, and so does a connection that
        // bounds its calls itself: a shorter limit needs a timer.
        if limit == self.timeout
            && let Some(Live {
                generation,
                conn,
                bound: bound @ (Bound::Watch(_) | Bound::Parts),
                ..
            }) = ready
        {
            let pending = bound.watch().map(Watch::start);
            let outcome = command(conn).await;
            drop(pending);
            return outcome.map_err(|e| self.failed(operation, limit, generation, &bound, e));
        }
        // Boxed: this path is rare on a plain socket, and its timer and reconnection would
        // otherwise make every call's future (and every lock's) several hundred bytes larger.
        Box::pin(self.timed(operation, limit, home, ready, command)).await
    }

    /// [`call`](Self::call) under a timer of its own: `ready` when the connection to use is
    /// known already, else `home`'s is found or opened first, within the same `limit`.
    async fn timed<T, F, Fut>(
        &self,
        operation: Operation,
        limit: Duration,
        home: Home,
        ready: Option<Live<D::Conn>>,
        command: F,
    ) -> Result<T, LockError>
    where
        F: FnOnce(D::Conn) -> Fut,
        Fut: Future<Output = Result<T, RedisError>>,
    {
        let mut used = None;
        let outcome = tokio::time::timeout(limit, async {
            let live = match ready {
                Some(live) => live,
                // A reconnection that fails is reported as the caller's operation failing.
                None => self.current(home).await.map_err(|e| during(operation, e))?,
            };
            // A connection that bounds its calls itself is not condemned for one.
            used = (!matches!(live.bound, Bound::Parts)).then_some(live.generation);
            let _pending = live.bound.watch().map(Watch::start);
            command(live.conn)
                .await
                .map_err(|e| self.failed(operation, limit, live.generation, &live.bound, e))
        })
        .await;
        match outcome {
            Ok(result) => result,
            Err(_elapsed) => {
                if let Some(generation) = used {
                    self.condemn(generation);
                }
                Err(LockError::Timeout {
                    operation,
                    timeout: limit,
                })
            }
        }
    }

    /// The error of a command that failed on connection `generation` (bounded by `bound`),
    /// which is condemned when the failure is the connection's.
    fn failed(
        &self,
        operation: Operation,
        limit: Duration,
        generation: u64,
        bound: &Bound,
        e: RedisError,
    ) -> LockError {
        if matches!(bound, Bound::Parts) {
            return failure(operation, limit, e);
        }
        if bound.watch().is_some_and(Watch::was_cut) {
            self.condemn(generation);
            return LockError::Timeout {
                operation,
                timeout: self.timeout,
            };
        }
        if is_connection_failure(&e) || is_demoted(&e) {
            self.condemn(generation);
        }
        failure(operation, limit, e)
    }
}

/// A connection opened by [`Connection::open`].
struct Opening<C> {
    conn: C,
    bound: Bound,
    /// Set when its task ends.
    ended: Arc<AtomicBool>,
    /// Dropping it gives the connection up.
    keep: tokio::sync::oneshot::Sender<()>,
}

/// `e`, reported as a failure of `operation`.
fn during(operation: Operation, e: LockError) -> LockError {
    match e {
        LockError::Timeout { timeout, .. } => LockError::Timeout { operation, timeout },
        LockError::Unavailable { source, .. } => LockError::Unavailable { operation, source },
        other => other,
    }
}

/// Whether the connection itself failed (as opposed to Redis answering with an error).
pub(crate) fn is_connection_failure(e: &RedisError) -> bool {
    e.is_timeout() || e.is_connection_dropped() || e.is_io_error() || e.is_unrecoverable_error()
}

/// Whether an error says that this server is not the master any more (a failover demoted it),
/// so its connection must be replaced like a dead one.
pub(crate) fn is_demoted(e: &RedisError) -> bool {
    matches!(
        e.kind(),
        ErrorKind::Server(ServerErrorKind::ReadOnly | ServerErrorKind::MasterDown)
    )
}

/// A driver error as a [`LockError`].
pub(crate) fn failure(operation: Operation, timeout: Duration, e: RedisError) -> LockError {
    if e.code() == Some("CROSSSLOT") {
        // Not an outage: a command whose keys span slots is refused however often it comes.
        return LockError::InvalidConfig(format!(
            "Redis Cluster refused `{operation}` because its keys are in different slots \
             ({e}); every key of a lock must share its slot (see `LockKey::new`)"
        ));
    }
    if let Some(why) = refusal(&e) {
        // Not an outage either: refused now, refused on every try.
        return LockError::InvalidConfig(format!("Redis refused `{operation}` ({e}): {why}"));
    }
    if e.is_timeout() {
        LockError::Timeout { operation, timeout }
    } else {
        LockError::Unavailable {
            operation,
            source: Box::new(e),
        }
    }
}

/// What rlock needs that a refusal (`NOPERM`: the user's ACL; `unknown command`: the server,
/// or a managed service that took it away) says is missing, in a sentence; `None` for any
/// other error.
fn refusal(e: &RedisError) -> Option<&'static str> {
    let text = e.to_string().to_ascii_lowercase();
    let refused = e.code() == Some("NOPERM") || text.contains("noperm");
    let missing = text.contains("unknown command") || text.contains("scripting is disabled");
    if !refused && !missing {
        return None;
    }
    let scripts = ["evalsha", "'eval'", "script", "lua"]
        .iter()
        .any(|word| text.contains(word));
    Some(match (scripts, refused) {
        (true, _) => {
            "rlock runs every acquire, release and renewal as a Lua script (`SCRIPT LOAD`, \
             `EVALSHA`, `EVAL`), so it needs a server and a user that allow scripts"
        }
        (false, true) => {
            "this client's Redis user lacks a command, key or channel rlock needs; the \
             README's \"A least-privilege Redis user\" lists them, and `rlock doctor URL` \
             tries each"
        }
        (false, false) => "this server lacks a command rlock needs; `rlock doctor URL` says which",
    })
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::failure;
    use crate::error::{LockError, Operation};

    /// A command refused for keys in different slots is a configuration error, however
    /// often it comes, never "Redis is unavailable".
    #[test]
    fn a_crossslot_refusal_is_not_an_outage() {
        let reply =
            redis::parse_redis_value(b"-CROSSSLOT Keys in request don't hash to the same slot\r\n")
                .unwrap_or(redis::Value::Nil);
        let Err(e) = reply.extract_error() else {
            panic!("no error read");
        };
        let err = failure(Operation::Acquire, Duration::from_secs(1), e);
        assert!(
            matches!(&err, LockError::InvalidConfig(m) if m.contains("different slots")),
            "{err:?}"
        );
    }

    fn server_error(reply: &[u8]) -> redis::RedisError {
        let reply = redis::parse_redis_value(reply).unwrap_or(redis::Value::Nil);
        match reply.extract_error() {
            Err(e) => e,
            Ok(_) => panic!("no error read"),
        }
    }

    /// A refusal, of the user's ACL or of the server, says what rlock needs, never "Redis is
    /// unavailable", and names scripts when scripts were refused.
    #[test]
    fn a_refusal_names_what_rlock_needs() {
        let scripts = failure(
            Operation::Connect,
            Duration::from_secs(1),
            server_error(
                b"-NOPERM User rlock has no permissions to run the 'script|load' command\r\n",
            ),
        );
        assert!(
            matches!(&scripts, LockError::InvalidConfig(m) if m.contains("Lua script")),
            "{scripts:?}"
        );
        let wait = failure(
            Operation::ConfirmReplicas,
            Duration::from_secs(1),
            server_error(b"-NOPERM User rlock has no permissions to run the 'wait' command\r\n"),
        );
        assert!(
            matches!(&wait, LockError::InvalidConfig(m) if m.contains("least-privilege")),
            "{wait:?}"
        );
        let missing = failure(
            Operation::Connect,
            Duration::from_secs(1),
            server_error(b"-ERR unknown command 'EVALSHA', with args beginning with: \r\n"),
        );
        assert!(
            matches!(&missing, LockError::InvalidConfig(m) if m.contains("allow scripts")),
            "{missing:?}"
        );
    }
}

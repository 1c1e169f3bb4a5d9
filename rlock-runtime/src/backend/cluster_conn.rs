//! A cluster's command connection of rlock's own: one watched connection per master, the
//! slot table, and `MOVED` followed.
//!
//! The `redis` crate's cluster connection hands every command to one task of its own (a hop
//! between tasks per command) and keeps two timers per command, under the call's own. Here
//! each master gets a plain multiplexed connection whose reply reader rlock runs under a
//! [`Watch`], as for one server: a call reaches its node's socket from the calling task and
//! pays a clock read and two atomic additions for its bound.
//!
//! Routing. A command goes to the master of its key's slot (a script's first key; another
//! command's first argument), a pipeline to that of its first command with a key, a keyless
//! command to any master, and `SCRIPT` to every master, as the driver sends it. The slot
//! table is read with `CLUSTER SLOTS` (from the masters known, then the seeds) on opening,
//! and again in the background, one reading at a time and at most every [`REFRESH_PAUSE`],
//! after a `MOVED` or a node's connection failing. A `MOVED` is followed at once to the node
//! it names, at most [`MOST_MOVES`] times per command. `ASK`, `TRYAGAIN` and `CLUSTERDOWN`
//! go back to the caller: the scripted store follows an `ASK` itself
//! ([`ClusterConn::asked`]) and splits a batch on `TRYAGAIN`.
//!
//! Bounds. A call is bounded by the command timeout from its first command, as on one
//! server. That first command, sent on a node's open connection, is bounded by the node's
//! watch; anything else (a node to connect to first, a `MOVED` followed, a script sent again
//! after `NOSCRIPT`) runs under a timer to the call's deadline. A node whose connection was
//! cut or failed is forgotten, and the next command for it connects afresh: one node that
//! goes silent costs only the calls on it.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError, Weak};
use std::time::Duration;

use redis::aio::{ConnectionLike, MultiplexedConnection};
use redis::{
    Arg, Cmd, ConnectionAddr, ConnectionInfo, ErrorKind, IntoConnectionInfo, Pipeline, RedisError,
    RedisFuture, RedisResult, ServerErrorKind, Value,
};
use tokio::runtime::Handle;
use tokio::time::Instant;

use super::connection::is_connection_failure;
use super::single::open_own;
use super::watch::{Ended, Watch};
use crate::util::slot::{SLOTS, slot_of};

/// Most `MOVED` redirects followed for one command: a slot moves once per resharding step,
/// so more means the nodes disagree, and the caller's retry reads the table again.
const MOST_MOVES: u32 = 3;
/// Least time between two readings of the slot table, so that the failures of a node being
/// failed over do not read it on every command.
const REFRESH_PAUSE: Duration = Duration::from_millis(100);
/// Most nodes one reading of the slot table asks, in turn.
const MOST_ASKED: usize = 16;
/// A slot no master serves in the last table read.
const UNSERVED: u16 = u16::MAX;

/// A node's address, `host:port`, as `CLUSTER SLOTS` and redirects name it.
type Address = Arc<str>;

/// Which master serves each slot.
#[derive(Clone)]
struct SlotTable {
    /// Each slot's master, as an index into `masters`, or [`UNSERVED`].
    owners: Box<[u16]>,
    masters: Vec<Address>,
}

impl SlotTable {
    fn empty() -> Self {
        Self {
            owners: vec![UNSERVED; usize::from(SLOTS)].into_boxed_slice(),
            masters: Vec::new(),
        }
    }

    fn master(&self, slot: u16) -> Option<&Address> {
        let owner = *self.owners.get(usize::from(slot))?;
        self.masters.get(usize::from(owner))
    }

    /// Records that `address` serves `slots` (a `CLUSTER SLOTS` range, or a `MOVED`).
    fn serves(&mut self, slots: std::ops::RangeInclusive<u16>, address: &str) {
        let owner = match self.masters.iter().position(|m| &**m == address) {
            Some(owner) => owner,
            None => {
                self.masters.push(address.into());
                self.masters.len() - 1
            }
        };
        let range = usize::from(*slots.start())..=usize::from(*slots.end());
        if let (Some(entries), Ok(owner)) = (self.owners.get_mut(range), u16::try_from(owner)) {
            entries.fill(owner);
        }
    }

    /// The table a `CLUSTER SLOTS` reply describes, asked of a node at `asked_host` (a
    /// master listed without a host is that node). `None` for a reply not of that shape.
    fn from_reply(reply: &Value, asked_host: &str) -> Option<Self> {
        let Value::Array(ranges) = reply else {
            return None;
        };
        let mut table = Self::empty();
        for range in ranges {
            let Value::Array(fields) = range else {
                return None;
            };
            let [
                Value::Int(first),
                Value::Int(last),
                Value::Array(master),
                ..,
            ] = fields.as_slice()
            else {
                return None;
            };
            let [host, Value::Int(port), ..] = master.as_slice() else {
                return None;
            };
            let host: String = redis::from_redis_value_ref(host).ok()?;
            let host = if host.is_empty() || host == "?" {
                asked_host
            } else {
                &host
            };
            let address = format!("{host}:{port}");
            let (Ok(first), Ok(last)) = (u16::try_from(*first), u16::try_from(*last)) else {
                return None;
            };
            table.serves(first..=last.min(SLOTS - 1), &address);
        }
        Some(table)
    }
}

/// A node's open connection, with its deadline keeper.
struct Node {
    link: Link,
    /// Dropping it (with the node) gives the connection up: its task ends with its last call.
    _keep: tokio::sync::oneshot::Sender<()>,
}

/// What one command takes of a node's connection.
#[derive(Clone)]
struct Link {
    address: Address,
    conn: MultiplexedConnection,
    watch: Arc<Watch>,
    /// Which connection to this node it is, so that only the one that failed is forgotten.
    generation: u64,
}

/// The slot table and the nodes' open connections, under one lock: a command finds both at
/// once.
struct Routes {
    table: Arc<SlotTable>,
    nodes: HashMap<Address, Node>,
}

impl Routes {
    /// The address `target` names now (the first master for [`Target::Any`]).
    fn address<'a>(&'a self, target: &'a Target) -> Option<&'a Address> {
        match target {
            Target::Slot(slot) => self.table.master(*slot),
            Target::Any | Target::Every => self.table.masters.first(),
            Target::Node(address) => Some(address),
        }
    }
}

/// Where a request goes.
#[derive(Clone)]
enum Target {
    /// The master of this slot.
    Slot(u16),
    /// Any master.
    Any,
    /// Every master (`SCRIPT`).
    Every,
    /// The node at this address (a redirect, a scan page).
    Node(Address),
}

/// A command or a pipeline's commands, as sent.
#[derive(Clone, Copy)]
enum Request<'a> {
    One(&'a Cmd),
    Many(&'a Pipeline, usize, usize),
}

enum Reply {
    One(Value),
    Many(Vec<Value>),
}

impl Request<'_> {
    /// Sent on `link`, counted by its watch while outstanding.
    async fn send(self, link: &mut Link) -> RedisResult<Reply> {
        let _pending = link.watch.start();
        match self {
            Request::One(cmd) => link.conn.send_packed_command(cmd).await.map(Reply::One),
            Request::Many(pipeline, offset, count) => link
                .conn
                .send_packed_commands(pipeline, offset, count)
                .await
                .map(Reply::Many),
        }
    }
}

/// Where `cmd` goes: see the module's docs.
fn target_of(cmd: &Cmd) -> Target {
    let mut args = cmd.args_iter().filter_map(|arg| match arg {
        Arg::Simple(bytes) => Some(bytes),
        _ => None,
    });
    let Some(name) = args.next() else {
        return Target::Any;
    };
    let is = |word: &str| name.eq_ignore_ascii_case(word.as_bytes());
    // Script calls first: nearly every command is one.
    if [
        "EVALSHA",
        "EVAL",
        "EVALSHA_RO",
        "EVAL_RO",
        "FCALL",
        "FCALL_RO",
    ]
    .iter()
    .any(|word| is(word))
    {
        let _script = args.next();
        let keys = args
            .next()
            .and_then(|n| std::str::from_utf8(n).ok()?.parse::<u64>().ok());
        return match args.next() {
            Some(key) if keys.unwrap_or(0) > 0 => Target::Slot(slot_of(key)),
            _ => Target::Any,
        };
    }
    if is("SCRIPT") {
        return Target::Every;
    }
    // A shard channel's subscribers are counted on the master of its slot.
    if is("PUBSUB") {
        let shard = args
            .next()
            .is_some_and(|sub| sub.eq_ignore_ascii_case(b"SHARDNUMSUB"));
        return match args.next() {
            Some(channel) if shard => Target::Slot(slot_of(channel)),
            _ => Target::Any,
        };
    }
    const KEYLESS: [&str; 14] = [
        "PING", "INFO", "SCAN", "WAIT", "CLUSTER", "HELLO", "TIME", "ROLE", "CLIENT", "CONFIG",
        "ASKING", "DBSIZE", "PUBLISH", "FUNCTION",
    ];
    if KEYLESS.iter().any(|word| is(word)) {
        return Target::Any;
    }
    args.next()
        .map_or(Target::Any, |key| Target::Slot(slot_of(key)))
}

/// Where a pipeline goes: where its first command with a key goes.
fn pipeline_target(pipeline: &Pipeline) -> Target {
    pipeline
        .cmd_iter()
        .map(target_of)
        .find(|target| matches!(target, Target::Slot(_)))
        .unwrap_or(Target::Any)
}

/// The node and slot a `MOVED` in `reply` names: the error of a command, or of any command
/// of a pipeline.
fn moved_to(reply: &RedisResult<Reply>) -> Option<(Address, u16)> {
    let named = |e: &RedisError| {
        if e.kind() != ErrorKind::Server(ServerErrorKind::Moved) {
            return None;
        }
        let (address, slot) = e.redirect_node()?;
        Some((Address::from(address), slot))
    };
    // A server's error may come as an error or as a reply (`Value::ServerError`).
    let in_value = |value: &Value| match value {
        Value::ServerError(e) => named(&RedisError::from(e.clone())),
        _ => None,
    };
    match reply {
        Err(e) => named(e),
        Ok(Reply::One(value)) => in_value(value),
        Ok(Reply::Many(values)) => values.iter().find_map(in_value),
    }
}

fn timed_out() -> RedisError {
    RedisError::from(std::io::Error::from(std::io::ErrorKind::TimedOut))
}

/// When the slot table was last read, and whether a reading runs.
#[derive(Default)]
struct Refreshing {
    running: bool,
    last: Option<Instant>,
}

/// What every copy of one cluster connection shares.
struct Shared {
    /// The first seed's settings (user, password, protocol): a node's are these at its
    /// address.
    settings: ConnectionInfo,
    seeds: Vec<Address>,
    timeout: Duration,
    /// The runtime the nodes' reply readers run on: the connection's home.
    runtime: Handle,
    routes: Mutex<Routes>,
    /// One connecting at a time per node.
    connecting: Mutex<HashMap<Address, Arc<tokio::sync::Mutex<()>>>>,
    refreshing: Mutex<Refreshing>,
    /// Held while the table is read.
    reading: tokio::sync::Mutex<()>,
    generations: AtomicU64,
}

fn locked<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    // Only whole values are stored: a poisoned map is intact.
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}

impl Shared {
    fn routes(&self) -> MutexGuard<'_, Routes> {
        locked(&self.routes)
    }

    fn table(&self) -> Arc<SlotTable> {
        self.routes().table.clone()
    }

    /// The address `target` names now (the first master for [`Target::Any`]).
    fn address(&self, target: &Target) -> Option<Address> {
        self.routes().address(target).cloned()
    }

    /// The open connection of the node `target` names, if it has one.
    fn open_link(&self, target: &Target) -> Option<Link> {
        let routes = self.routes();
        let address = routes.address(target)?;
        Some(routes.nodes.get(address)?.link.clone())
    }

    /// Forgets `link`'s connection, if it is still its node's open one.
    fn forget(&self, link: &Link) {
        let mut routes = self.routes();
        let open = routes.nodes.get(&link.address);
        if open.is_some_and(|node| node.link.generation == link.generation) {
            routes.nodes.remove(&link.address);
        }
    }

    /// `address`'s connection, opened if it has none (unless a concurrent caller just did).
    async fn node(self: &Arc<Self>, address: &Address) -> RedisResult<Link> {
        let target = Target::Node(address.clone());
        if let Some(link) = self.open_link(&target) {
            return Ok(link);
        }
        let gate = locked(&self.connecting)
            .entry(address.clone())
            .or_default()
            .clone();
        let _connecting = gate.lock().await;
        if let Some(link) = self.open_link(&target) {
            return Ok(link);
        }
        let node = self.connect(address).await?;
        let link = node.link.clone();
        self.routes().nodes.insert(address.clone(), node);
        Ok(link)
    }

    /// Opens a connection to `address`, its reply reader and watch in a task on the home
    /// runtime; the task forgets the node when the connection ends other than given up.
    async fn connect(self: &Arc<Self>, address: &Address) -> RedisResult<Node> {
        let (host, port) = address
            .rsplit_once(':')
            .and_then(|(host, port)| Some((host, port.parse::<u16>().ok()?)))
            .ok_or_else(|| {
                RedisError::from((
                    ErrorKind::Client,
                    "a cluster node's address is not host:port",
                    address.to_string(),
                ))
            })?;
        let info = self
            .settings
            .clone()
            .set_addr(ConnectionAddr::Tcp(host.to_owned(), port));
        let Some((conn, reader)) = open_own(&info, self.timeout).await? else {
            return Err(RedisError::from((
                ErrorKind::Client,
                "a cluster node's address is not a plain TCP one",
            )));
        };
        let link = Link {
            address: address.clone(),
            conn,
            watch: Arc::new(Watch::new(self.timeout)),
            generation: self.generations.fetch_add(1, Ordering::Relaxed),
        };
        let (keep, kept) = tokio::sync::oneshot::channel::<()>();
        let (shared, watched) = (Arc::downgrade(self), link.clone());
        self.runtime.spawn(async move {
            let retire = async {
                let _ = kept.await;
            };
            let ended = watched.watch.run_reader(reader, retire).await;
            if ended != Ended::Retired
                && let Some(shared) = Weak::upgrade(&shared)
            {
                shared.forget(&watched);
                shared.refresh_soon();
            }
        });
        Ok(Node { link, _keep: keep })
    }

    /// Reads the slot table again in the background, unless a reading runs or one ended
    /// less than [`REFRESH_PAUSE`] ago.
    fn refresh_soon(self: &Arc<Self>) {
        {
            let mut refreshing = locked(&self.refreshing);
            let recent = refreshing
                .last
                .is_some_and(|last| last.elapsed() < REFRESH_PAUSE);
            if refreshing.running || recent {
                return;
            }
            refreshing.running = true;
        }
        let (shared, seen) = (self.clone(), self.table());
        self.runtime.spawn(async move {
            let _ = shared.refresh_after(&seen).await;
            let mut refreshing = locked(&shared.refreshing);
            refreshing.running = false;
            refreshing.last = Some(Instant::now());
        });
    }

    /// Reads the slot table again, unless it was read (or changed) since it was `seen`.
    async fn refresh_after(self: &Arc<Self>, seen: &Arc<SlotTable>) -> RedisResult<()> {
        let _reading = self.reading.lock().await;
        if !Arc::ptr_eq(seen, &self.table()) {
            return Ok(());
        }
        self.refresh().await
    }

    /// Reads the slot table from the first node that answers `CLUSTER SLOTS`: the masters
    /// known, then the seeds, each within the command timeout.
    async fn refresh(self: &Arc<Self>) -> RedisResult<()> {
        let mut asked: Vec<Address> = self.table().masters.clone();
        for seed in &self.seeds {
            if !asked.contains(seed) {
                asked.push(seed.clone());
            }
        }
        let mut last_error = None;
        for address in asked.iter().take(MOST_ASKED) {
            let host = address.rsplit_once(':').map_or("", |(host, _)| host);
            let read = tokio::time::timeout(self.timeout, async {
                let mut link = self.node(address).await?;
                let reply = redis::cmd("CLUSTER")
                    .arg("SLOTS")
                    .query_async::<Value>(&mut link.conn)
                    .await;
                if reply.as_ref().is_err_and(is_connection_failure) {
                    self.forget(&link);
                }
                reply
            })
            .await
            .unwrap_or_else(|_| Err(timed_out()));
            match read.map(|reply| SlotTable::from_reply(&reply, host)) {
                Ok(Some(table)) if !table.masters.is_empty() => {
                    self.routes().table = Arc::new(table);
                    return Ok(());
                }
                Ok(_) => {
                    last_error = Some(RedisError::from((
                        ErrorKind::Client,
                        "CLUSTER SLOTS named no master",
                    )));
                }
                Err(e) => last_error = Some(e),
            }
        }
        Err(last_error.unwrap_or_else(|| {
            RedisError::from((ErrorKind::Client, "no cluster node to ask for its slots"))
        }))
    }

    /// Records a `MOVED` to `address` for `slot`, and reads the whole table again soon.
    fn moved(self: &Arc<Self>, slot: u16, address: &str) {
        Arc::make_mut(&mut self.routes().table).serves(slot..=slot, address);
        self.refresh_soon();
    }

    /// What `reply`, on `link`, means for its node: a connection cut by its watch or failed
    /// is forgotten (its call then fails with a timeout, or its own error).
    fn judge(self: &Arc<Self>, link: &Link, reply: RedisResult<Reply>) -> RedisResult<Reply> {
        let Err(e) = reply else {
            return reply;
        };
        let cut = link.watch.was_cut();
        if cut || is_connection_failure(&e) {
            self.forget(link);
            self.refresh_soon();
        }
        Err(if cut { timed_out() } else { e })
    }
}

/// A cluster connection of rlock's own; see the module's docs. A clone serves one call: its
/// first command sets the call's deadline.
#[derive(Clone)]
pub(crate) struct ClusterConn {
    shared: Arc<Shared>,
    /// When the call this copy serves must end, from its first command on.
    deadline: Option<Instant>,
}

impl ClusterConn {
    /// Reads the slot table from the `seeds` (`redis://` URLs) and opens nodes' connections
    /// as they are needed, each bounded by `timeout`. The nodes' reply readers run on the
    /// calling task's runtime.
    pub(crate) async fn open(seeds: &[String], timeout: Duration) -> RedisResult<Self> {
        let mut settings = None;
        let mut addresses = Vec::new();
        for seed in seeds {
            let info = seed.as_str().into_connection_info()?;
            if let ConnectionAddr::Tcp(host, port) = info.addr() {
                addresses.push(Address::from(format!("{host}:{port}")));
            }
            settings.get_or_insert(info);
        }
        let Some(settings) = settings else {
            return Err(RedisError::from((ErrorKind::Client, "no cluster seed")));
        };
        let shared = Arc::new(Shared {
            settings,
            seeds: addresses,
            timeout,
            runtime: Handle::current(),
            routes: Mutex::new(Routes {
                table: Arc::new(SlotTable::empty()),
                nodes: HashMap::new(),
            }),
            connecting: Mutex::new(HashMap::new()),
            refreshing: Mutex::new(Refreshing::default()),
            reading: tokio::sync::Mutex::new(()),
            generations: AtomicU64::new(0),
        });
        shared.refresh().await?;
        Ok(Self {
            shared,
            deadline: None,
        })
    }

    /// Sends `request` to `target`, following `MOVED`; see the module's docs for its bound.
    async fn request(&mut self, target: Target, request: Request<'_>) -> RedisResult<Reply> {
        let first = self.deadline.is_none();
        let deadline = *self
            .deadline
            .get_or_insert_with(|| Instant::now() + self.shared.timeout);
        let mut target = target;
        if first
            && !matches!(target, Target::Every)
            && let Some(mut link) = self.shared.open_link(&target)
        {
            let reply = request.send(&mut link).await;
            match moved_to(&reply) {
                None => return self.shared.judge(&link, reply),
                Some((to, slot)) => {
                    self.shared.moved(slot, &to);
                    target = Target::Node(to);
                }
            }
        }
        // Boxed: this way is rare (a node to connect to, a redirect, a second command), and
        // inline its futures would make every command's several times larger.
        let shared = self.shared.clone();
        Box::pin(tokio::time::timeout_at(
            deadline,
            shared.redirected(target, request),
        ))
        .await
        .unwrap_or_else(|_| Err(timed_out()))
    }

    /// `ASKING` and `cmd` in one write to the node the `ASK` redirect `ask` names, and
    /// `cmd`'s reply.
    pub(crate) async fn asked(&mut self, cmd: &Cmd, ask: &RedisError) -> RedisResult<Value> {
        let Some((address, _slot)) = ask.redirect_node() else {
            return Err(ask.clone());
        };
        let mut asking = redis::pipe();
        asking.cmd("ASKING").add_command(cmd.clone());
        let target = Target::Node(address.into());
        match self.request(target, Request::Many(&asking, 0, 2)).await? {
            Reply::Many(mut replies) => match replies.pop() {
                Some(Value::ServerError(e)) => Err(e.into()),
                Some(reply) => Ok(reply),
                None => Err(ask.clone()),
            },
            Reply::One(_) => Err(ask.clone()),
        }
    }

    /// `cmd`'s reply from the master of `slot`.
    pub(crate) async fn on_slot(&mut self, slot: u16, cmd: &Cmd) -> RedisResult<Value> {
        self.one(Target::Slot(slot), cmd).await
    }

    /// `cmd`'s reply from the node at `host:port`.
    pub(crate) async fn on_node(&mut self, host: &str, port: u16, cmd: &Cmd) -> RedisResult<Value> {
        let target = Target::Node(format!("{host}:{port}").into());
        self.one(target, cmd).await
    }

    /// `cmd`'s reply from any master.
    pub(crate) async fn on_any(&mut self, cmd: &Cmd) -> RedisResult<Value> {
        self.one(Target::Any, cmd).await
    }

    async fn one(&mut self, target: Target, cmd: &Cmd) -> RedisResult<Value> {
        match self.request(target, Request::One(cmd)).await? {
            Reply::One(value) => Ok(value),
            Reply::Many(_) => Err(RedisError::from((ErrorKind::Client, "one reply expected"))),
        }
    }
}

impl Shared {
    /// [`ClusterConn::request`]'s slower way, under its caller's timer: the node connected
    /// first if need be, the table read first if it names no master for the slot, and each
    /// `MOVED` followed.
    async fn redirected(
        self: Arc<Self>,
        target: Target,
        request: Request<'_>,
    ) -> RedisResult<Reply> {
        if let Target::Every = target {
            return self.everywhere(request).await;
        }
        let mut target = target;
        for _ in 0..=MOST_MOVES {
            let seen = self.table();
            let address = match self.address(&target) {
                Some(address) => address,
                None => {
                    self.refresh_after(&seen).await?;
                    self.address(&target).ok_or_else(|| {
                        RedisError::from((
                            ErrorKind::Server(ServerErrorKind::ClusterDown),
                            "no master serves the slot",
                        ))
                    })?
                }
            };
            let mut link = match self.node(&address).await {
                Ok(link) => link,
                // Nothing was sent: a master that cannot be reached may have been failed
                // over, and its slot is tried again on the master the table names now.
                Err(e) => {
                    let _ = self.refresh_after(&seen).await;
                    if !matches!(target, Target::Node(_)) && self.address(&target) != Some(address)
                    {
                        continue;
                    }
                    return Err(e);
                }
            };
            let reply = request.send(&mut link).await;
            match moved_to(&reply) {
                None => return self.judge(&link, reply),
                Some((to, slot)) => {
                    self.moved(slot, &to);
                    target = Target::Node(to);
                }
            }
        }
        Err(RedisError::from((
            ErrorKind::Server(ServerErrorKind::Moved),
            "the cluster's nodes redirected the command too many times",
        )))
    }

    /// `request` on every master in turn: the first error, else the first master's reply.
    async fn everywhere(self: Arc<Self>, request: Request<'_>) -> RedisResult<Reply> {
        let masters = self.table().masters.clone();
        let mut first = None;
        for address in &masters {
            let mut link = self.node(address).await?;
            let reply = request.send(&mut link).await;
            let reply = self.judge(&link, reply)?;
            first.get_or_insert(reply);
        }
        first.ok_or_else(|| RedisError::from((ErrorKind::Client, "no cluster master known")))
    }
}

impl ConnectionLike for ClusterConn {
    fn req_packed_command<'a>(&'a mut self, cmd: &'a Cmd) -> RedisFuture<'a, Value> {
        Box::pin(self.one(target_of(cmd), cmd))
    }

    fn req_packed_commands<'a>(
        &'a mut self,
        pipeline: &'a Pipeline,
        offset: usize,
        count: usize,
    ) -> RedisFuture<'a, Vec<Value>> {
        let target = pipeline_target(pipeline);
        Box::pin(async move {
            let request = Request::Many(pipeline, offset, count);
            match self.request(target, request).await? {
                Reply::Many(values) => Ok(values),
                Reply::One(_) => Err(RedisError::from((ErrorKind::Client, "replies expected"))),
            }
        })
    }

    fn get_db(&self) -> i64 {
        0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn bulk(s: &str) -> Value {
        Value::BulkString(s.as_bytes().to_vec())
    }

    #[test]
    fn commands_go_to_their_key_s_slot() {
        let mut evalsha = redis::cmd("EVALSHA");
        evalsha.arg("abc").arg(2).arg("{u}:k").arg("{u}:q").arg("x");
        assert!(matches!(target_of(&evalsha), Target::Slot(s) if s == slot_of(b"u")));
        let mut keyless_script = redis::cmd("EVAL");
        keyless_script.arg("return 1").arg(0);
        assert!(matches!(target_of(&keyless_script), Target::Any));
        let mut get = redis::cmd("GET");
        get.arg("foo");
        assert!(matches!(target_of(&get), Target::Slot(12182)));
        let mut info = redis::cmd("INFO");
        info.arg("server");
        assert!(matches!(target_of(&info), Target::Any));
        let mut load = redis::cmd("SCRIPT");
        load.arg("LOAD").arg("return 1");
        assert!(matches!(target_of(&load), Target::Every));
        let mut shard = redis::cmd("PUBSUB");
        shard.arg("SHARDNUMSUB").arg("foo");
        assert!(matches!(target_of(&shard), Target::Slot(12182)));
        let mut plain = redis::cmd("PUBSUB");
        plain.arg("NUMSUB").arg("foo");
        assert!(matches!(target_of(&plain), Target::Any));
        let mut pipe = redis::pipe();
        pipe.cmd("ASKING").cmd("GET").arg("foo");
        assert!(matches!(pipeline_target(&pipe), Target::Slot(12182)));
    }

    #[test]
    fn a_slot_table_reads_from_cluster_slots() {
        let range = |first: i64, last: i64, host: &str, port: i64| {
            Value::Array(vec![
                Value::Int(first),
                Value::Int(last),
                Value::Array(vec![bulk(host), Value::Int(port), bulk("id")]),
                Value::Array(vec![bulk("10.0.0.9"), Value::Int(7003), bulk("replica")]),
            ])
        };
        let reply = Value::Array(vec![
            range(0, 8191, "", 7000),
            range(8192, 16383, "10.0.0.2", 7001),
        ]);
        let table = SlotTable::from_reply(&reply, "10.0.0.1").unwrap();
        assert_eq!(table.master(0).map(|a| &**a), Some("10.0.0.1:7000"));
        assert_eq!(table.master(8192).map(|a| &**a), Some("10.0.0.2:7001"));
        assert_eq!(table.master(16383).map(|a| &**a), Some("10.0.0.2:7001"));
        assert_eq!(table.masters.len(), 2);
        let partial = Value::Array(vec![range(0, 10, "h", 1)]);
        let partial = SlotTable::from_reply(&partial, "x").unwrap();
        assert!(partial.master(11).is_none());
        assert!(SlotTable::from_reply(&Value::Nil, "x").is_none());
    }

    #[test]
    fn a_moved_slot_names_its_new_master() {
        let mut table = SlotTable::empty();
        table.serves(5..=5, "a:1");
        table.serves(6..=6, "b:2");
        table.serves(5..=5, "b:2");
        assert_eq!(table.master(5).map(|a| &**a), Some("b:2"));
        assert_eq!(table.masters.len(), 2);
        let reply: RedisResult<Reply> = Err(RedisError::from((
            ErrorKind::Server(ServerErrorKind::Moved),
            "An error was signalled by the server",
            "3999 127.0.0.1:6381".to_owned(),
        )));
        let moved = moved_to(&reply).map(|(a, s)| (a.to_string(), s));
        assert_eq!(moved, Some(("127.0.0.1:6381".to_owned(), 3999)));
    }
}

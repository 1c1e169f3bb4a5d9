//! The calls of the lease scripts (each kind's set is in `kind.rs`): built straight into an
//! `EVALSHA`, sent as `EVAL` to a server that lacks the script, and following a cluster's
//! `ASK` redirect. The store that decides what to call is `scripted.rs`.

use std::io::Write as _;

use redis::aio::ConnectionLike;
use redis::{
    Cmd, ErrorKind, FromRedisValue, RedisResult, RedisWrite, Script, ServerErrorKind, ToRedisArgs,
};

use super::topology::Topology;
use crate::key::Companion;

/// A lease script, hashed once. Calls go out as `EVALSHA`, and as `EVAL` (which also caches
/// it) on a server that lacks it: one that restarted, or a replica just promoted.
pub(crate) struct Lua {
    script: Script,
    source: &'static str,
}

impl Lua {
    pub(super) fn new(source: &'static str) -> Self {
        Self {
            script: Script::new(source),
            source,
        }
    }

    /// Loads it into the server's script cache (`SCRIPT LOAD`).
    pub(super) async fn load<C: ConnectionLike>(&'static self, conn: &mut C) -> RedisResult<()> {
        self.script.load_async(conn).await.map(drop)
    }

    /// Its source, as the scripts' files give it.
    #[cfg(test)]
    pub(super) fn source(&self) -> &'static str {
        self.source
    }

    /// A call with `keys`; its arguments follow.
    pub(super) fn call(&'static self, keys: &[&str]) -> ScriptCall {
        let mut call = self.start(keys.len(), keys.iter().map(|k| k.len()).sum());
        for key in keys {
            call.arg(*key);
        }
        call
    }

    /// A call of `keys` keys (of `key_bytes` in all), which follow, then its arguments.
    pub(super) fn start(&'static self, keys: usize, key_bytes: usize) -> ScriptCall {
        // Room for the longest call (the acquire script's 13 arguments) up front: growing
        // the buffers argument by argument costs reallocations on every lock.
        let mut cmd = Cmd::with_capacity(20, 128 + key_bytes * 2);
        cmd.arg("EVALSHA");
        cmd.arg(self.script.get_hash()).arg(keys);
        ScriptCall { lua: self, cmd }
    }
}

impl ToRedisArgs for Companion<'_> {
    fn write_redis_args<W: ?Sized + RedisWrite>(&self, out: &mut W) {
        let mut arg = out.writer_for_next_arg();
        for piece in self.pieces() {
            // Into the command's own buffer: writing there cannot fail.
            let _ = arg.write_all(piece.as_bytes());
        }
    }
}

/// One call of a lease script, built straight into its `EVALSHA` command.
pub(super) struct ScriptCall {
    lua: &'static Lua,
    cmd: Cmd,
}

impl ScriptCall {
    pub(super) fn arg(&mut self, arg: impl ToRedisArgs) -> &mut Self {
        self.cmd.arg(arg);
        self
    }

    /// The call as the store sends it: `EVALSHA`.
    pub(super) fn evalsha(&self) -> Cmd {
        self.cmd.clone()
    }

    /// Loads its script into a server's cache (`SCRIPT LOAD`), so that `EVALSHA` finds it.
    pub(super) fn load(&self) -> Cmd {
        let mut cmd = redis::cmd("SCRIPT");
        cmd.arg("LOAD").arg(self.lua.source);
        cmd
    }

    /// The same call as `EVAL`, carrying the script's source.
    pub(super) fn eval(&self) -> Cmd {
        let mut cmd = redis::cmd("EVAL");
        cmd.arg(self.lua.source);
        // After `EVALSHA <hash>`: the key count, the keys and the arguments.
        for arg in self.cmd.args_iter().skip(2) {
            if let redis::Arg::Simple(bytes) = arg {
                cmd.arg(bytes);
            }
        }
        cmd
    }

    pub(super) async fn run<D: Topology, T: FromRedisValue>(
        &self,
        conn: D::Conn,
    ) -> RedisResult<T> {
        match query::<D, T>(conn.clone(), &self.cmd).await {
            Err(e) if e.kind() == ErrorKind::Server(ServerErrorKind::NoScript) => {
                // Boxed: a server without the script is rare (a restart, a failover), and a
                // second command's state inline would ride in every call's future.
                Box::pin(query::<D, T>(conn, &self.eval())).await
            }
            other => other,
        }
    }
}

/// `cmd` on `conn`. On a cluster, an `ASK` redirect (the key's slot is migrating) is followed
/// by [`Topology::asked`], which sends `ASKING` and the command in one write: sent apart on a
/// shared connection, another task's command can slip in between and use up the `ASKING`.
pub(super) async fn query<D: Topology, T: FromRedisValue>(
    mut conn: D::Conn,
    cmd: &Cmd,
) -> RedisResult<T> {
    match cmd.query_async(&mut conn).await {
        Err(e) if D::redirects(&e) => {
            // Boxed: a redirect is rare, and its future (a cluster pipeline) would otherwise
            // make every command's future, and every lock's, kilobytes larger.
            let reply = Box::pin(D::asked(conn, cmd, &e)).await?;
            Ok(T::from_redis_value(reply.extract_error()?)?)
        }
        other => other,
    }
}

/// How a script's caller keeps its waiters (the scripts' mode argument).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Waiters {
    /// In the lock's queue in Redis; a release hands the lock to its first live entry.
    Queued,
    /// Redlock: the key is marked awaited, and a release announces itself to everyone.
    Marked,
}

impl Waiters {
    /// As the scripts read it.
    pub(super) fn arg(self) -> &'static str {
        match self {
            Self::Queued => "q",
            Self::Marked => "m",
        }
    }
}

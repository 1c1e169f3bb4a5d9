#!/usr/bin/env python3
"""Server CPU of a lock's release, taken apart: the floor's compare-and-delete script against
rlock's release script (as the runtime assembles it: the kind's line, protocol.lua, then the
files `rlock-runtime/src/backend/kind.rs` lists for the lock's release), and variants that
add to the floor one of what rlock's release does besides (its arguments, its calling
convention, the look at the queue) or take the look at the queue out of rlock's; and rlock's
bare release, the token alone, which the runtime sends for a lease taken without waiting.

Each variant runs N cycles of `SET key token NX PX` then the release by `EVALSHA`, pipelined,
on fresh keys, three times, on one `redis-server` started here: as a plain server, then as a
one-node cluster holding every slot (a cluster master checks every key a script touches).
Prints, per variant and run, the release's own time (`INFO commandstats`, `usec_per_call` of
`EVALSHA`) and the server's whole CPU per cycle (`INFO cpu`, parsing and replies included).

    bench/scripts/release-cost.py [N]      (default 100000 cycles per variant and run)
"""
import os
import re
import socket
import subprocess
import sys
import tempfile
import time

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SCRIPTS = os.path.join(REPO, "rlock-runtime", "scripts")


def read(name):
    with open(os.path.join(SCRIPTS, name)) as f:
        return f.read()


def lock_release():
    """The lock's release script, as `kind.rs` assembles it."""
    with open(os.path.join(REPO, "rlock-runtime", "src", "backend", "kind.rs")) as f:
        kinds = f.read()
    lock = kinds[kinds.index("static LOCK:"):]
    files = re.findall(r'"([\w/]+\.lua)"', lock[lock.index("release:"):lock.index("renew:")])
    return "local ME, SERVED = 'l', 'l'\n" + read("protocol.lua") + "".join(map(read, files))


FLOOR = """if redis.call("GET", KEYS[1]) == ARGV[1] then
  return redis.call("DEL", KEYS[1])
else
  return 0
end"""
FLOOR_LOOKING = FLOOR.replace('  return redis.call("DEL"', '  redis.pcall("LPOP", KEYS[2])\n  return redis.call("DEL"')
RELEASE = lock_release()
NOT_LOOKING = RELEASE.replace("head = redis.pcall('LPOP', queue)", "head = nil", 1)
assert NOT_LOOKING != RELEASE, "the release no longer looks at its queue with LPOP"
CONVENTION = "local ME, SERVED = 'l', 'l'\n" + read("protocol.lua") + read("calls/release.lua")

# (name, script, whether it is sent rlock's arguments: channel and publish command after the token)
VARIANTS = [
    ("floor", FLOOR, False),
    ("floor, rlock's arguments", FLOOR, True),
    ("floor, rlock's calling convention", CONVENTION + FLOOR, False),
    ("floor, looking at the queue", FLOOR_LOOKING, False),
    ("rlock's release, not looking at the queue", NOT_LOOKING, True),
    ("rlock's release", RELEASE, True),
    ("rlock's bare release (the token alone)", RELEASE, False),
]


def encode(*args):
    out = [b"*%d\r\n" % len(args)]
    for a in args:
        a = a if isinstance(a, bytes) else str(a).encode()
        out.append(b"$%d\r\n%s\r\n" % (len(a), a))
    return b"".join(out)


class Conn:
    def __init__(self, port):
        self.sock = socket.create_connection(("127.0.0.1", port))
        self.file = self.sock.makefile("rb")

    def reply(self):
        line = self.file.readline()
        kind, rest = line[:1], line[1:-2]
        if kind == b"-":
            raise RuntimeError(rest.decode())
        if kind == b"$":
            n = int(rest)
            return self.file.read(n + 2)[:-2] if n >= 0 else None
        if kind == b"*":
            return [self.reply() for _ in range(max(int(rest), 0))]
        return rest

    def call(self, *args):
        self.sock.sendall(encode(*args))
        return self.reply()

    def pipeline(self, commands):
        self.sock.sendall(b"".join(commands))
        for _ in commands:
            self.reply()


def cpu(conn):
    info = conn.call("INFO", "cpu").decode()
    return sum(float(re.search(r"%s:([\d.]+)" % f, info).group(1)) for f in ("used_cpu_sys", "used_cpu_user"))


def measure(conn, cluster, cycles):
    shas = [conn.call("SCRIPT", "LOAD", script).decode() for _, script, _ in VARIANTS]
    for run in range(3):
        for (name, _, rlock_args), sha in zip(VARIANTS, shas):
            conn.call("CONFIG", "RESETSTAT")
            before = cpu(conn)
            batch = []
            for i in range(cycles):
                key = "bench:%d:%s:%d" % (run, sha[:8], i)
                token = "%032x:%d" % (0xC0FFEE, i)
                batch.append(encode("SET", key, token, "NX", "PX", 10000))
                args = [token]
                if rlock_args:
                    args += ["rlock:released:{%s}" % key, "SPUBLISH"] if cluster else ["rlock:released:", "PUBLISH"]
                batch.append(encode("EVALSHA", sha, 2, key, "{%s}:waiters" % key, *args))
                if len(batch) >= 2000:
                    conn.pipeline(batch)
                    batch = []
            if batch:
                conn.pipeline(batch)
            whole = (cpu(conn) - before) / cycles * 1e6
            stats = conn.call("INFO", "commandstats").decode()
            release = float(re.search(r"cmdstat_evalsha:calls=\d+,usec=\d+,usec_per_call=([\d.]+)", stats).group(1))
            print("  run %d  %-42s release %.2f us   server CPU per cycle %.2f us" % (run + 1, name, release, whole))


def main():
    cycles = int(sys.argv[1]) if len(sys.argv) > 1 else 100000
    for cluster in (False, True):
        with tempfile.TemporaryDirectory() as scratch:
            probe = socket.socket()
            probe.bind(("127.0.0.1", 0))
            port = probe.getsockname()[1]
            probe.close()
            args = ["redis-server", "--port", str(port), "--bind", "127.0.0.1", "--save", "",
                    "--appendonly", "no", "--dir", scratch]
            if cluster:
                args += ["--cluster-enabled", "yes", "--cluster-config-file", "nodes.conf"]
            server = subprocess.Popen(args, stdout=subprocess.DEVNULL)
            try:
                for _ in range(50):
                    try:
                        conn = Conn(port)
                        break
                    except OSError:
                        time.sleep(0.1)
                if cluster:
                    conn.call("CLUSTER", "ADDSLOTSRANGE", 0, 16383)
                    for _ in range(50):
                        if b"cluster_state:ok" in conn.call("CLUSTER", "INFO"):
                            break
                        time.sleep(0.1)
                print("one-node cluster" if cluster else "one server")
                measure(conn, cluster, cycles)
            finally:
                server.terminate()
                server.wait()


if __name__ == "__main__":
    main()

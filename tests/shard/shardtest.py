"""shardtest.py - three `walrus serve` shards behind twemproxy (nutcracker),
for the shard suite and scripts/bench_twemproxy.py.

Why a module of its own: the shards must keep their port across a SIGKILL
and restart (the proxy's ring names host:port), so unlike tests/server's
servers (--port 0) they listen on ports chosen before the start, below the
kernel's ephemeral range so that no outgoing connection takes one while its
shard is down.  Everything lives under one temporary directory; on any exit
every process whose command line names it (shards, their instances and
backends, nutcracker with its config there) is killed and waited for.
"""
import os
import random
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "server"))
from srvtest import (Client, RespError, Server, TestFailure, check, eq, kill_all,  # noqa: E402,F401 (re-exported)
                     run_cases, wait_no_pids)

# The node names the ring hashes (not host:port: a shard can move to another
# address without moving its keys); the same as examples/twemproxy.
NAMES = ["shard0", "shard1", "shard2"]


def names(n):
    return NAMES[:n] + [f"shard{i}" for i in range(len(NAMES), n)]


def nutcracker():
    """Debian installs it in /usr/sbin, which a user's PATH may lack."""
    return shutil.which("nutcracker") or shutil.which("nutcracker", path="/usr/sbin:/sbin")


def ephemeral_low():
    try:
        with open("/proc/sys/net/ipv4/ip_local_port_range") as f:
            return int(f.read().split()[0])
    except (OSError, ValueError, IndexError):
        return 32768


def free_ports(n):
    """@n distinct ports that nothing listens on, below the ephemeral range."""
    hi = ephemeral_low()
    ports = []
    while len(ports) < n:
        p = random.randrange(10000, hi)
        if p in ports:
            continue
        s = socket.socket()
        try:
            s.bind(("127.0.0.1", p))
            ports.append(p)
        except OSError:
            pass
        finally:
            s.close()
    return ports


class Shard(Server):
    """walrus serve on a fixed port, durable commits."""

    def __init__(self, walrus, port, base, sync="on", backends=None):
        args = ["--unix", "none"] + ([] if backends is None else ["--backends", str(backends)])
        super().__init__(walrus, args=args, opts=[f"synchronous_commit={sync}"], base=base,
                         allow_sigkill=True)
        self.fixed_port = port

    def cmdline(self):
        argv = super().cmdline()
        argv[argv.index("--port") + 1] = str(self.fixed_port)
        return argv

    def kill(self):
        """SIGKILL of walrus serve and of everything of its instance."""
        kill_all(self.base)
        wait_no_pids(self.base, 30)
        self.proc.wait(30)
        self.proc = None


EXAMPLE = os.path.join(HERE, "..", "..", "examples", "twemproxy", "nutcracker.yml")


def proxy_conf(listen_port, shard_ports):
    """The shipped examples/twemproxy/nutcracker.yml with its ports replaced:
    the tests run the configuration users are given.  Shards past the
    example's three (a resized ring) are added to its servers, the last key."""
    with open(EXAMPLE) as f:
        text = f.read()
    text, n = re.subn(r"(?m)^(\s+listen: 127\.0\.0\.1:)\d+$", rf"\g<1>{listen_port}", text)
    check(n == 1, f"{EXAMPLE}: one listen line expected")
    for port, name in zip(shard_ports, NAMES):
        text, n = re.subn(rf"(?m)^(\s+- 127\.0\.0\.1:)\d+(:1 {name})$", rf"\g<1>{port}\2", text)
        check(n == 1, f"{EXAMPLE}: one server named {name} expected")
    extra = zip(shard_ports[len(NAMES):], names(len(shard_ports))[len(NAMES):])
    return text.rstrip("\n") + "\n" + "".join(f"    - 127.0.0.1:{p}:1 {n}\n" for p, n in extra)


class Proxy:
    """nutcracker in the foreground (a pid we own), its config and log in @dirpath."""

    def __init__(self, dirpath, port, stats_port, shard_ports):
        self.dir, self.port, self.stats_port = dirpath, port, stats_port
        os.makedirs(dirpath, mode=0o700, exist_ok=True)
        self.conf = os.path.join(dirpath, "nutcracker.yml")
        self.log = os.path.join(dirpath, "nutcracker.log")
        with open(self.conf, "w") as f:
            f.write(proxy_conf(port, shard_ports))
        self.proc = None

    def start(self):
        argv = [nutcracker(), "-c", self.conf, "-s", str(self.stats_port), "-a", "127.0.0.1",
                "-o", self.log, "-p", os.path.join(self.dir, "nutcracker.pid")]
        self.proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                     stderr=subprocess.DEVNULL)
        # Ready when it answers PING on its port (it answers PING itself).
        deadline = time.time() + 30
        while True:
            if self.proc.poll() is not None:
                raise TestFailure(f"nutcracker exited ({self.proc.returncode}): {self.log_text()}")
            try:
                with Client(port=self.port, timeout=10) as c:
                    if c.call("PING") == "PONG":
                        return
            except OSError:
                pass
            check(time.time() < deadline, f"nutcracker not answering: {self.log_text()}")
            time.sleep(0.05)

    def log_text(self):
        try:
            with open(self.log) as f:
                return f.read()[-4000:]
        except OSError:
            return ""

    def stop(self):
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)
        self.proc = None


class Cluster:
    """Three shards and the proxy in front, under one temporary directory."""

    def __init__(self, walrus, sync="on", backends=None, base=None, nshards=len(NAMES)):
        self.root = tempfile.mkdtemp(prefix="walrus-shard-", dir=base)
        os.chmod(self.root, 0o700)
        ports = free_ports(nshards + 2)
        for n in names(nshards):
            os.makedirs(os.path.join(self.root, n), mode=0o700)
        self.shards = [Shard(walrus, ports[i], os.path.join(self.root, n), sync, backends)
                       for i, n in enumerate(names(nshards))]
        self.proxy = Proxy(os.path.join(self.root, "proxy"), ports[-2], ports[-1],
                           ports[:nshards])

    def __enter__(self):
        try:
            for s in self.shards:
                s.start()
            self.proxy.start()
        except BaseException:
            self.cleanup()
            raise
        return self

    def __exit__(self, etype, *exc):
        try:
            self.proxy.stop()
            if etype is None:
                for s in self.shards:
                    if s.proc is not None:
                        check(s.stop() == 0, f"{s.base}: walrus serve exit code after SIGTERM")
        finally:
            self.cleanup()
        return False

    def cleanup(self):
        try:
            self.proxy.stop()
            for s in self.shards:
                if s.proc is not None and s.proc.poll() is None:
                    s.proc.kill()
                    s.proc.wait(10)
        finally:
            kill_all(self.root)
            shutil.rmtree(self.root, ignore_errors=True)

    def client(self, timeout=60):
        return Client(port=self.proxy.port, timeout=timeout)

    def owners(self, keys):
        """Which shard holds each key, asked of every shard directly: {key: [shard index...]}."""
        out = {k: [] for k in keys}
        for i, s in enumerate(self.shards):
            with s.client(timeout=60) as c:
                for j in range(0, len(keys), 200):
                    part = keys[j:j + 200]
                    for k, v in zip(part, c.call("MGET", *part)):
                        if v is not None:
                            out[k].append(i)
        return out

#!/usr/bin/env python3
"""test_twemproxy.py - three `walrus serve` shards behind twemproxy
(nutcracker, ketama over murmur, auto_eject_hosts false), as
docs/scale-out.md sets them up.  One case per meson test:

  placement  keys SET through the proxy with redis-cli are each on exactly
             one shard (asked of every shard directly) with their value, every
             shard holds a share, and MGET through the proxy returns them all
  refused    what docs/scale-out.md says the proxy refuses (MULTI, SCAN, KEYS,
             INFO, FLUSHALL, DBSIZE, CONFIG, CHECKPOINT, ECHO, SELECT) is
             refused: the proxy closes the connection
  benchmark  redis-benchmark SET/GET through the proxy, -P 1 and -P 16,
             completes without an error and spreads keys over every shard
  kill       a writer goes through the proxy over keys of every shard; one
             shard is killed (SIGKILL of walrus serve and its instance): only
             its keys fail, the others' keep being written and read; its
             restart brings them back, and every write acknowledged (durable
             commits) before, during and after reads back
  resize     three shards copied to a new ring of four fresh ones through its
             proxy (examples/twemproxy/copy_keys.py): every key on exactly
             one new shard, every new shard holds some, all read back

usage: test_twemproxy.py --walrus build/tools/walrus [case ...]
"""
import os
import shutil
import subprocess
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from shardtest import Cluster, RespError, check, eq, nutcracker, run_cases  # noqa: E402


def keys_of(n, prefix="user:"):
    return [f"{prefix}{i}" for i in range(n)]


def case_placement(walrus):
    keys = keys_of(600)
    with Cluster(walrus) as cl:
        cmds = "".join(f"SET {k} val-{k}\n" for k in keys).encode()
        r = subprocess.run(["redis-cli", "-p", str(cl.proxy.port)], input=cmds,
                           capture_output=True, timeout=120)
        eq(r.returncode, 0, f"redis-cli through the proxy: {r.stderr.decode()}")
        eq(r.stdout.decode().split(), ["OK"] * len(keys), "replies to the SETs")
        owners = cl.owners(keys)
        for k, where in owners.items():
            eq(len(where), 1, f"shards holding {k}")
        counts = [sum(1 for w in owners.values() if w == [i]) for i in range(len(cl.shards))]
        print(f"keys per shard: {counts}", flush=True)
        for i, n in enumerate(counts):
            # ketama over node names: the split is fixed by the names (191/214/195 here)
            check(n >= len(keys) // 10, f"shard {i} got {n} of {len(keys)} keys: {counts}")
        for i, s in enumerate(cl.shards):
            with s.client() as c:
                eq(c.call("DBSIZE"), counts[i], f"DBSIZE of shard {i} (nothing else written)")
                for k in [k for k, w in owners.items() if w == [i]][:50]:
                    eq(c.call("GET", k), f"val-{k}".encode(), f"{k} on shard {i}")
        with cl.client() as c:  # the proxy splits an MGET over the shards and joins the replies
            eq(c.call("MGET", *keys), [f"val-{k}".encode() for k in keys], "MGET through the proxy")


def case_refused(walrus):
    with Cluster(walrus) as cl:
        for cmd in (["MULTI"], ["SCAN", "0"], ["KEYS", "*"], ["INFO"], ["FLUSHALL"], ["DBSIZE"],
                    ["CONFIG", "GET", "port"], ["CHECKPOINT"], ["ECHO", "x"], ["SELECT", "0"]):
            r = subprocess.run(["redis-cli", "-p", str(cl.proxy.port)] + cmd,
                               capture_output=True, timeout=60)
            err = r.stderr.decode()
            check(r.returncode != 0 and "Server closed the connection" in err,
                  f"{cmd} through the proxy: exit {r.returncode}, {r.stdout!r} {err!r}")
        with cl.client() as c:  # the proxy goes on for other connections
            eq(c.call("SET", "a", "1"), "OK", "SET after the refusals")


def case_benchmark(walrus):
    with Cluster(walrus) as cl:
        for pipeline in ("1", "16"):
            argv = ["redis-benchmark", "-p", str(cl.proxy.port), "-t", "set,get", "-n", "20000",
                    "-c", "20", "-r", "100000", "-P", pipeline, "--csv"]
            r = subprocess.run(argv, capture_output=True, text=True, timeout=600)
            # redis-benchmark exits at the first error reply ("Error from server")
            eq(r.returncode, 0, f"{' '.join(argv)}: {r.stdout}{r.stderr}")
            check("Error" not in r.stdout + r.stderr.replace("Could not fetch server CONFIG", ""),
                  f"redis-benchmark reported an error: {r.stdout}{r.stderr}")
            rows = {line.split(",")[0].strip('"'): line for line in r.stdout.splitlines()}
            check("SET" in rows and "GET" in rows, f"SET and GET results: {r.stdout}")
            print(f"-P {pipeline}: {rows['SET']} / {rows['GET']}", flush=True)
        for i, s in enumerate(cl.shards):
            with s.client() as c:
                n = c.call("DBSIZE")
            check(isinstance(n, int) and n > 0, f"shard {i} holds no key of the benchmark: {n}")


class Writer(threading.Thread):
    """SETs through the proxy over every key in turn, one at a time; each
    result is filed under the phase it was sent in and the key's shard."""

    def __init__(self, cl, keys, owner):
        super().__init__(daemon=True)
        self.cl, self.keys, self.owner = cl, keys, owner
        # set by the main thread: "before", "killing", "down", "restarting", "back"
        # (in "killing" and "restarting" either outcome is right for the victim)
        self.phase = "before"
        self.acked = {}  # key -> the number of the write acknowledged last
        self.oks = {}  # (phase, shard) -> acknowledged SETs
        self.errs = {}  # (phase, shard) -> error replies
        self.last_err = {}
        self.stop = threading.Event()
        self.failure = None

    def count(self, phase, shard, errs=False):
        return (self.errs if errs else self.oks).get((phase, shard), 0)

    def run(self):
        try:
            with self.cl.client() as c:
                j = 0
                while not self.stop.is_set():
                    key = self.keys[j % len(self.keys)]
                    phase, shard = self.phase, self.owner[key]
                    r = c.call("SET", key, str(j))
                    if r == "OK":
                        self.acked[key] = j
                        self.oks[(phase, shard)] = self.count(phase, shard) + 1
                    elif isinstance(r, RespError):
                        self.errs[(phase, shard)] = self.count(phase, shard, True) + 1
                        self.last_err[(phase, shard)] = str(r)
                    else:
                        raise AssertionError(f"unexpected reply {r!r}")
                    j += 1
        except Exception as e:  # reported by the main thread
            self.failure = e


def wait_for(cond, timeout, what, detail=lambda: ""):
    deadline = time.time() + timeout
    while not cond():
        check(time.time() < deadline, f"{what} (not within {timeout:.0f} s) {detail()}")
        time.sleep(0.02)


def check_acked(cl, w, keys, what):
    """Every key reads back (through the proxy) the write acknowledged last, or
    a later one (a write under way when it stopped may have been applied)."""
    acked = dict(w.acked)
    with cl.client() as c:
        for k in keys:
            v = c.call("GET", k)
            check(isinstance(v, bytes), f"{what}: GET {k} (shard {w.owner[k]}): {v!r}")
            check(int(v) >= acked[k], f"{what}: {k} went back from {acked[k]} to {int(v)}")


def case_kill(walrus):
    keys = keys_of(300, "k:")
    victim = 1
    with Cluster(walrus) as cl:
        with cl.client() as c:
            for k in keys:
                eq(c.call("SET", k, "-1"), "OK", f"first SET of {k}")
        owner = {k: w[0] for k, w in cl.owners(keys).items()}
        mine = [k for k in keys if owner[k] == victim]
        others = [k for k in keys if owner[k] != victim]
        check(mine and others, "the victim and the others hold keys")
        w = Writer(cl, keys, owner)

        def state():
            return (f"oks {w.oks}, errors {w.errs}, last errors {w.last_err}, "
                    f"failure {w.failure!r}")
        w.start()
        try:
            # the writer has gone round every key twice: writes under way on every shard
            wait_for(lambda: w.failure or sum(w.oks.values()) >= 2 * len(keys), 60,
                     "writes acknowledged before the kill", state)
            w.phase = "killing"
            cl.shards[victim].kill()
            w.phase = "down"
            print(f"killed shard {victim} ({len(mine)} of {len(keys)} keys) after "
                  f"{sum(w.oks.values())} acknowledged writes", flush=True)
            # an acknowledgement from the dead shard's keys ends the wait too (and fails
            # below): with auto_eject_hosts true they go to the other shards
            wait_for(lambda: w.failure or w.count("down", victim) > 0 or
                     all(w.count("down", s, s == victim) >= 20 for s in range(len(cl.shards))),
                     60,
                     "the writer goes on over every shard while one is down", state)
            eq(w.count("down", victim), 0, "writes acknowledged by the dead shard")
            for s in range(len(cl.shards)):
                if s != victim:
                    eq(w.count("down", s, True), 0,
                       f"errors on shard {s} while shard {victim} is down")
            with cl.client() as c:  # reads: the others' keys answer, the victim's fail
                for k in mine:
                    r = c.call("GET", k)
                    check(isinstance(r, RespError), f"GET {k} of the dead shard: {r!r}")
            check_acked(cl, w, others, "the other shards' keys while one is down")
            w.phase = "restarting"
            cl.shards[victim].start()
            w.phase = "back"
            wait_for(lambda: w.failure or w.count("back", victim) >= 20, 60,
                     "writes to the restarted shard are acknowledged", state)
            for s in range(len(cl.shards)):
                eq(w.count("back", s, True), 0, f"errors on shard {s} after the restart")
            for s in range(len(cl.shards)):
                if s != victim:  # the others never failed, whatever the phase
                    eq(sum(n for (_, sh), n in w.errs.items() if sh == s), 0,
                       f"errors on shard {s}")
        finally:
            w.stop.set()
            w.join(60)
        check(not w.is_alive(), "the writer hangs")
        check(w.failure is None, f"the writer failed: {w.failure!r}")
        print(f"acknowledged: {state()}", flush=True)
        check_acked(cl, w, keys, "after the restart")


def case_resize(walrus):
    """docs/scale-out.md's resizing: a new ring of four fresh shards, every key
    of the three old ones copied through its proxy by examples/twemproxy/copy_keys.py."""
    keys = keys_of(600, "item:")
    copier = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "examples",
                          "twemproxy", "copy_keys.py")
    with Cluster(walrus) as old, Cluster(walrus, nshards=4) as new:
        with old.client() as c:
            eq(c.call("MSET", *[x for k in keys for x in (k, f"v-{k}")]), "OK", "MSET")
        argv = [sys.executable, copier, "--to", f"127.0.0.1:{new.proxy.port}"]
        argv += [f"127.0.0.1:{s.port}" for s in old.shards]
        r = subprocess.run(argv, capture_output=True, text=True, timeout=300)
        eq(r.returncode, 0, f"copy_keys.py: {r.stdout}{r.stderr}")
        check(f"{len(keys)} keys copied" in r.stdout, f"copy_keys.py: {r.stdout}")
        owners = new.owners(keys)
        for k, where in owners.items():
            eq(len(where), 1, f"new shards holding {k}")
        counts = [sum(1 for w in owners.values() if w == [i]) for i in range(4)]
        print(f"keys per new shard: {counts}", flush=True)
        check(all(n > 0 for n in counts), f"every new shard holds keys: {counts}")
        with new.client() as c:
            eq(c.call("MGET", *keys), [f"v-{k}".encode() for k in keys], "MGET on the new ring")


CASES = {"placement": case_placement, "refused": case_refused, "benchmark": case_benchmark,
         "kill": case_kill, "resize": case_resize}

if __name__ == "__main__":
    missing = [t for t in ("redis-cli", "redis-benchmark") if not shutil.which(t)]
    missing += [] if nutcracker() else ["nutcracker"]
    if missing:
        print(f"missing {missing} (sh scripts/deps.sh installs nutcracker and redis-tools)")
        sys.exit(1)
    sys.exit(run_cases(CASES, sys.argv[1:]))

#!/usr/bin/env python3
"""test_server.py - the RESP server (`walrus serve --port P`) driven by the
real redis-cli and by a raw RESP client (exact bytes).

Cases (all by default, or name them): commands, scan, cli, multi, watch,
databases, pipeline, group, protocol, auth, limits, preauth, authtimeout, silenttimeout, querylimit,
password, readiness, shutdown, pool, mappedeio.  Each starts its
own server on a free port and a private data directory; whatever happens,
every process of that directory is gone at the end (srvtest.Server).
--backends N runs them against that process model (0: one backend per
connection; default: the server's default, a pool); the pool case sets its
own.

usage: test_server.py --walrus build/tools/walrus [--backends N] [CASE ...]
"""
import os
import shutil
import signal
import socket
import stat
import subprocess
import sys
import tempfile
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from srvtest import (MAX_KEY, PAGE_SIZE, Client, Closed, RespError, Server,  # noqa: E402
                     backend_pid, check, eq, is_err, kill_all, run_cases)


def case_commands(walrus):
    with Server(walrus) as s, s.client() as c:
        eq(c.call("PING"), "PONG", "PING")
        eq(c.call("ping", "hi"), b"hi", "PING msg")
        eq(c.call("ECHO", "x y"), b"x y", "ECHO")
        eq(c.call("GET", "k"), None, "GET missing")
        eq(c.call("SET", "k", "v1"), "OK", "SET")
        eq(c.call("GET", "k"), b"v1", "GET")
        eq(c.call("SET", "k", "v2", "NX"), None, "SET NX on existing")
        eq(c.call("GET", "k"), b"v1", "NX kept the value")
        eq(c.call("SET", "n", "v", "XX"), None, "SET XX on missing")
        eq(c.call("EXISTS", "n"), 0, "XX did not create")
        eq(c.call("SET", "n", "v", "NX"), "OK", "SET NX on missing")
        eq(c.call("SET", "k", "v3", "XX"), "OK", "SET XX on existing")
        eq(c.call("SET", "k", "v4", "GET"), b"v3", "SET GET")
        eq(c.call("SET", "g", "1", "GET"), None, "SET GET on missing")
        eq(c.call("SET", "k", "v5", "KEEPTTL"), "OK", "KEEPTTL accepted")
        check(is_err(c.call("SET", "k", "v", "EX", "10"), "ERR walrus keys do not expire"),
              "SET EX refused")
        check(is_err(c.call("SET", "k", "v", "PX", "10"), "ERR"), "SET PX refused")
        check(is_err(c.call("SET", "k", "v", "NX", "XX"), "ERR syntax error"), "NX+XX")
        check(is_err(c.call("SET", "k", "v", "BOGUS"), "ERR syntax error"), "bad option")
        eq(c.call("GET", "k"), b"v5", "failed SETs changed nothing")
        eq(c.call("MSET", "a", "1", "b", "2", "c", "3"), "OK", "MSET")
        check(is_err(c.call("MSET", "a", "1", "b"), "ERR wrong number of arguments for 'mset'"),
              "MSET odd")
        eq(c.call("MGET", "a", "nope", "c"), [b"1", None, b"3"], "MGET")
        eq(c.call("EXISTS", "a", "a", "nope", "b"), 3, "EXISTS counts each argument")
        eq(c.call("DEL", "a", "a", "nope", "b"), 2, "DEL counts each key once")
        eq(c.call("EXISTS", "a", "b", "c"), 1, "DEL deleted")
        eq(c.call("DBSIZE"), 4, "DBSIZE (k n g c)")
        # errors: unknown, arity, keys
        r = c.call("NOSUCH", "x")
        check(is_err(r, "ERR unknown command 'NOSUCH'"), f"unknown command: {r}")
        r = c.call("GET")
        eq(str(r), "ERR wrong number of arguments for 'get' command", "arity")
        check(is_err(c.call("GET", "a", "b"), "ERR wrong number"), "arity, too many")
        check(is_err(c.call("SET", "", "v"), "ERR key must not be empty"), "empty key")
        check(is_err(c.call("GET", ""), "ERR key must not be empty"), "empty key GET")
        check(is_err(c.call("SET", "x" * (MAX_KEY + 1), "v"),
                     f"ERR key of {MAX_KEY + 1} bytes is over the limit of {MAX_KEY} bytes"),
              "long key")
        eq(c.call("SET", "x" * MAX_KEY, "v"), "OK", f"{MAX_KEY}-byte key")
        eq(c.call("SELECT", "0"), "OK", "SELECT 0")
        check(is_err(c.call("SELECT", "16"), "ERR DB index"), "SELECT 16")
        # binary-safe keys and values, empty and large values
        blob = bytes(range(256)) * 4 + b"\r\n$3\r\n*1\r\n\x00"
        eq(c.call("SET", b"\x00\xff\r\nkey", blob), "OK", "binary SET")
        eq(c.call("GET", b"\x00\xff\r\nkey"), blob, "binary GET")
        eq(c.call("SET", "empty", b""), "OK", "empty value")
        eq(c.call("GET", "empty"), b"", "empty value back")
        eq(c.call("EXISTS", "empty"), 1, "an empty value exists")
        big = os.urandom(3 << 20)
        eq(c.call("SET", "big", big), "OK", "3 MiB value")
        eq(c.call("GET", "big"), big, "3 MiB value back")
        # admin
        info = c.call("INFO").decode()
        for want in ("# Server", "# Clients", "connected_clients:", "# Checkpoints",
                     "checkpoints_last_lsn:", "# Wal", "wal_flush_lsn:", "kv_keys:", "db0:keys="):
            check(want in info, f"INFO lacks {want!r}")
        before = int(info.split("checkpoints_completed:")[1].split()[0])
        eq(c.call("CHECKPOINT"), "OK", "CHECKPOINT")
        info = c.call("INFO", "checkpoints").decode()
        check("# Server" not in info, "INFO section filter")
        after = int(info.split("checkpoints_completed:")[1].split()[0])
        check(after > before, f"CHECKPOINT counted ({before} -> {after})")
        cfg = c.call("CONFIG", "GET", "shared_buffers")
        eq(cfg, [b"shared_buffers", b"128MB"], "CONFIG GET")
        cfg = c.call("CONFIG", "GET", "synchronous_commit")
        eq(cfg, [b"synchronous_commit", b"on"], "CONFIG GET session option")
        cfg = c.call("CONFIG", "GET", "max*")
        check(b"max_connections" in cfg and b"maxclients" in cfg, f"CONFIG GET glob: {cfg}")
        check(is_err(c.call("CONFIG", "SET", "x", "y"), "ERR CONFIG SET"), "CONFIG SET")
        # RESP3
        h = c.call("HELLO", "3")
        check(isinstance(h, dict) and h[b"proto"] == 3, f"HELLO 3: {h}")
        eq(c.call("GET", "nope"), None, "RESP3 null")
        c.send_raw(b"*2\r\n$3\r\nGET\r\n$4\r\nnope\r\n")
        eq(c._line(), b"_", "RESP3 null is '_'")
        check(is_err(c.call("HELLO", "4"), "NOPROTO"), "HELLO 4")
        h = c.call("HELLO", "2")
        check(isinstance(h, list) and b"proto" in h, "HELLO 2")
        eq(c.call("QUIT"), "OK", "QUIT")
        check(c.closed(), "QUIT closes the connection")
        eq(s.stop(), 0, "exit code after SIGTERM")


def case_scan(walrus):
    with Server(walrus) as s, s.client() as c:
        keys = [f"user:{i:03d}" for i in range(50)] + [f"item:{i:03d}" for i in range(30)]
        keys += ["a", "z", b"\xff\xfe"]
        for k in keys:
            eq(c.call("SET", k, "v"), "OK", "SET")
        want = sorted(k.encode() if isinstance(k, str) else k for k in keys)

        def scan_all(*opts):
            cur, got, calls = b"0", [], 0
            while True:
                cur, batch = c.call("SCAN", cur, *opts)
                got += batch
                calls += 1
                if cur == b"0":
                    return got, calls
                check(cur.isdigit(), f"cursor is a decimal number: {cur}")

        got, calls = scan_all("COUNT", "7")
        eq(got, want, "SCAN returns every key once, in order")
        check(calls >= len(keys) // 7, f"COUNT bounds a call ({calls} calls)")
        got, _ = scan_all("MATCH", "user:*", "COUNT", "9")
        eq(got, [k for k in want if k.startswith(b"user:")], "MATCH prefix*")
        got, _ = scan_all("MATCH", "*:01?")
        eq(got, [k for k in want if k.endswith((b":010", b":011", b":012", b":013", b":014",
                                                 b":015", b":016", b":017", b":018", b":019"))],
           "MATCH glob")
        check(is_err(c.call("SCAN", "xyz"), "ERR invalid or expired cursor"), "bad cursor")
        check(is_err(c.call("SCAN", "12345"), "ERR invalid or expired cursor"), "unknown cursor")
        # a cursor works on another connection of the same server
        cur, first = c.call("SCAN", "0", "COUNT", "5")
        with s.client() as c2:
            cur2, second = c2.call("SCAN", cur, "COUNT", "5")
        eq(first + second, want[:10], "cursor taken by another backend")
        check(is_err(c.call("SCAN", "0", "COUNT", "0"), "ERR syntax error"), "COUNT 0")
        # redis-cli's own iteration
        out = s.cli("--scan", "--pattern", "item:*").split()
        eq(out, [k for k in want if k.startswith(b"item:")], "redis-cli --scan")


def case_cli(walrus):
    """Every command once through the real redis-cli."""
    with Server(walrus) as s:
        eq(s.cli("PING"), b"PONG\n", "PING")
        eq(s.cli("SET", "k", "hello"), b"OK\n", "SET")
        eq(s.cli("GET", "k"), b"hello\n", "GET")
        eq(s.cli("SET", "k", "x", "NX"), b"\n", "SET NX (nil)")
        eq(s.cli("MSET", "a", "1", "b", "2"), b"OK\n", "MSET")
        eq(s.cli("MGET", "a", "b", "zz"), b"1\n2\n\n", "MGET")
        eq(s.cli("EXISTS", "a", "zz"), b"1\n", "EXISTS")
        eq(s.cli("DEL", "a", "zz"), b"1\n", "DEL")
        eq(s.cli("DBSIZE"), b"2\n", "DBSIZE")
        eq(s.cli("ECHO", "hi there"), b"hi there\n", "ECHO")
        eq(s.cli("SCAN", "0"), b"0\nb\nk\n", "SCAN")
        check(b"checkpoints_last_lsn:" in s.cli("INFO"), "INFO")
        eq(s.cli("CONFIG", "GET", "wal_sync_method"), b"wal_sync_method\nfdatasync\n", "CONFIG")
        eq(s.cli("CHECKPOINT"), b"OK\n", "CHECKPOINT")
        check(s.cli("FOO").startswith(b"ERR unknown command 'FOO'"), "unknown command")
        out = s.cli(stdin=b"MULTI\nSET t1 a\nDEL k\nEXEC\n")
        eq(out, b"OK\nQUEUED\nQUEUED\nOK\n1\n", "MULTI/EXEC from stdin")
        # -x: the last argument from stdin, binary
        blob = bytes(range(256)) * 8
        eq(s.cli("-x", "SET", "bin", stdin=blob), b"OK\n", "SET -x")
        with s.client() as c:
            eq(c.call("GET", "bin"), blob, "binary value set by redis-cli -x")
        # the Unix socket, and its mode
        st = os.stat(s.unix)
        check(stat.S_ISSOCK(st.st_mode) and stat.S_IMODE(st.st_mode) == 0o600,
              f"socket mode {oct(st.st_mode)}")
        check(stat.S_IMODE(os.stat(os.path.dirname(s.unix)).st_mode) == 0o700, "0700 directory")
        r = s.cli("-s", s.unix, "GET", "t1")
        eq(r, b"a\n", "over the Unix socket")
        eq(s.stop(signal.SIGINT), 0, "exit code after SIGINT (fast shutdown)")
        check(not os.path.exists(s.unix), "the socket file is removed")


def case_multi(walrus):
    with Server(walrus) as s, s.client() as c:
        check(is_err(c.call("EXEC"), "ERR EXEC without MULTI"), "EXEC alone")
        check(is_err(c.call("DISCARD"), "ERR DISCARD without MULTI"), "DISCARD alone")
        eq(c.call("MULTI"), "OK", "MULTI")
        check(is_err(c.call("MULTI"), "ERR MULTI calls can not be nested"), "nested")
        eq(c.call("SET", "a", "1"), "QUEUED", "queued")
        eq(c.call("DISCARD"), "OK", "DISCARD")
        eq(c.call("EXISTS", "a"), 0, "discarded")
        eq(c.call("SET", "x", "old"), "OK", "")
        eq(c.call("MULTI"), "OK", "")
        for cmd in (("SET", "a", "1"), ("SET", "a", "2", "NX"), ("SET", "b", "1", "XX"),
                    ("DEL", "a", "a", "x", "nope"), ("SET", "a", "3", "NX"),
                    ("MSET", "m1", "1", "m2", "2")):
            eq(c.call(*cmd), "QUEUED", f"queue {cmd}")
        eq(c.call("EXEC"), ["OK", None, None, 2, "OK", "OK"], "EXEC sees its own writes")
        eq(c.call("MGET", "a", "b", "x", "m1", "m2"), [b"3", None, None, b"1", b"2"], "applied")
        # reads inside MULTI see the transaction's own writes
        eq(c.call("MULTI"), "OK", "")
        for cmd in (("GET", "a"), ("SET", "a", "4"), ("GET", "a"), ("MGET", "a", "m1", "zz"),
                    ("EXISTS", "a", "zz"), ("INCR", "n"), ("INCRBY", "n", "10"), ("GET", "n")):
            eq(c.call(*cmd), "QUEUED", f"queue {cmd}")
        eq(c.call("EXEC"), [b"3", "OK", b"4", [b"4", b"1", None], 1, 1, 11, b"11"],
           "EXEC with reads")
        # an error while queueing aborts the transaction
        eq(c.call("MULTI"), "OK", "")
        eq(c.call("SET", "q", "1"), "QUEUED", "")
        check(is_err(c.call("SCAN", "0"), "ERR scan inside MULTI"), "SCAN refused")
        check(is_err(c.call("NOSUCH"), "ERR unknown command"), "unknown inside MULTI")
        check(is_err(c.call("EXEC"), "EXECABORT"), "EXECABORT")
        eq(c.call("EXISTS", "q"), 0, "nothing applied")
        # all or nothing for a concurrent reader
        stop = threading.Event()
        seen = {"bad": None, "reads": 0}

        def reader():
            with s.client() as r:
                while not stop.is_set():
                    v = r.call("MGET", "t1", "t2", "t3")
                    seen["reads"] += 1
                    if len(set(v)) != 1:
                        seen["bad"] = v
                        return

        eq(c.call("MSET", "t1", "0", "t2", "0", "t3", "0"), "OK", "")
        th = threading.Thread(target=reader)
        th.start()
        try:
            # 300 transactions, and on until the reader has run: a loaded
            # machine may not schedule its thread during the first 300
            i = 0
            while i < 300 or (seen["reads"] <= 10 and i < 100000 and th.is_alive()):
                i += 1
                c.send_raw(c.encode("MULTI") + c.encode("SET", "t1", i) + c.encode("SET", "t2", i)
                           + c.encode("SET", "t3", i) + c.encode("EXEC"))
                replies = [c.read() for _ in range(5)]
                eq(replies[4], ["OK", "OK", "OK"], "EXEC")
        finally:
            stop.set()
            th.join(30)
        check(seen["bad"] is None, f"a reader saw a partial transaction: {seen['bad']}")
        check(seen["reads"] > 10, f"the reader ran ({seen['reads']} reads)")


def case_watch(walrus):
    """WATCH/UNWATCH and the read-modify-write commands, on engine transactions."""
    with Server(walrus) as s, s.client() as c, s.client() as other:
        eq(c.call("INCR", "c"), 1, "INCR of a new key")
        eq(c.call("INCRBY", "c", "10"), 11, "INCRBY")
        eq(c.call("DECR", "c"), 10, "DECR")
        eq(c.call("DECRBY", "c", "4"), 6, "DECRBY")
        eq(c.call("SET", "s", "abc"), "OK", "")
        check(is_err(c.call("INCR", "s"), "ERR value is not an integer"), "INCR of a string")
        eq(c.call("GET", "s"), b"abc", "a failed INCR changes nothing")
        check(is_err(c.call("INCRBY", "c", "x"), "ERR value is not an integer"), "bad delta")
        eq(c.call("SET", "big", str(2**63 - 1)), "OK", "")
        check(is_err(c.call("INCR", "big"), "ERR increment or decrement would overflow"),
              "overflow")
        eq(c.call("APPEND", "s", "def"), 6, "APPEND")
        eq(c.call("APPEND", "new", "x"), 1, "APPEND to a new key")
        eq(c.call("GETSET", "s", "z"), b"abcdef", "GETSET")
        eq(c.call("GETSET", "nope", "z"), None, "GETSET of a new key")
        eq(c.call("GETDEL", "s"), b"z", "GETDEL")
        eq(c.call("GETDEL", "s"), None, "GETDEL of a gone key")
        eq(c.call("SETNX", "nx", "1"), 1, "SETNX")
        eq(c.call("SETNX", "nx", "2"), 0, "SETNX of an existing key")
        eq(c.call("GET", "nx"), b"1", "")
        check(is_err(c.call("INCR"), "ERR wrong number of arguments"), "arity")
        # WATCH: a change by another client after it makes EXEC answer null
        eq(c.call("WATCH", "w"), "OK", "WATCH")
        eq(other.call("SET", "w", "theirs"), "OK", "")
        eq(c.call("MULTI"), "OK", "")
        eq(c.call("SET", "w", "mine"), "QUEUED", "")
        eq(c.call("EXEC"), None, "EXEC after a watched key changed")
        eq(c.call("GET", "w"), b"theirs", "nothing applied")
        # unchanged: applied; UNWATCH forgets
        eq(c.call("WATCH", "w", "w2"), "OK", "")
        eq(c.call("MULTI"), "OK", "")
        eq(c.call("SET", "w", "mine"), "QUEUED", "")
        eq(c.call("EXEC"), ["OK"], "EXEC with the watched keys unchanged")
        eq(c.call("WATCH", "w"), "OK", "")
        eq(other.call("SET", "w", "again"), "OK", "")
        eq(c.call("UNWATCH"), "OK", "UNWATCH")
        eq(c.call("MULTI"), "OK", "")
        eq(c.call("INCR", "c"), "QUEUED", "")
        eq(c.call("EXEC"), [7], "EXEC after UNWATCH")
        eq(c.call("MULTI"), "OK", "")
        check(is_err(c.call("WATCH", "w"), "ERR WATCH inside MULTI is not allowed"),
              "WATCH inside MULTI")
        eq(c.call("DISCARD"), "OK", "")
        # INCR from 8 redis clients at once: no increment lost
        r = subprocess.run(["redis-benchmark", "-p", str(s.port), "-t", "incr", "-n", "8000",
                            "-c", "8", "-q"], capture_output=True, timeout=120)
        check(r.returncode == 0, f"redis-benchmark: {r.stderr.decode()}")
        eq(c.call("GET", "counter:__rand_int__"), b"8000", "8 clients x INCR")


def spaces(s):
    """The key spaces of the served directory (`walrus space list`, attached beside it)."""
    r = subprocess.run([s.walrus, "-D", s.dir, "space", "list"], capture_output=True, timeout=60)
    check(r.returncode == 0, f"walrus space list: {r.stderr.decode()}")
    return r.stdout.decode().split()


def case_databases(walrus):
    """SELECT n: database n > 0 is the key space "dbN", made by its first write;
    every key command, MULTI/EXEC and WATCH work in the session's database."""
    with Server(walrus) as s, s.client() as c, s.client() as other:
        eq(c.call("SET", "k", "zero"), "OK", "SET in db 0")
        eq(c.call("SELECT", "1"), "OK", "SELECT 1")
        eq(c.call("GET", "k"), None, "db 1 does not see db 0's key")
        eq(spaces(s), [], "a read makes no key space")
        eq(c.call("SET", "k", "one"), "OK", "SET in db 1")
        eq(spaces(s), ["db1"], "the first write made db1")
        eq(c.call("GET", "k"), b"one", "GET in db 1")
        eq(other.call("GET", "k"), b"zero", "another session stays in db 0")
        eq(s.cli("-n", "1", "GET", "k"), b"one\n", "redis-cli -n 1")
        eq(s.cli("GET", "k"), b"zero\n", "redis-cli in db 0")
        eq(c.call("MSET", "a", "1", "b", "2"), "OK", "MSET in db 1")
        eq(c.call("MGET", "a", "b", "k", "z"), [b"1", b"2", b"one", None], "MGET in db 1")
        eq(other.call("MGET", "a", "b"), [None, None], "db 0 has no a, b")
        eq(c.call("EXISTS", "a", "k", "z"), 2, "EXISTS in db 1")
        eq(c.call("DBSIZE"), 3, "DBSIZE of db 1")
        eq(other.call("DBSIZE"), 1, "DBSIZE of db 0")
        eq(c.call("SCAN", "0"), [b"0", [b"a", b"b", b"k"]], "SCAN in db 1")
        eq(c.call("DEL", "a", "k"), 2, "DEL in db 1")
        eq(other.call("GET", "k"), b"zero", "db 0's k stays")
        eq(c.call("INCRBY", "n", "5"), 5, "INCRBY in db 1")
        eq(c.call("APPEND", "b", "x"), 2, "APPEND in db 1")
        eq(c.call("GETSET", "b", "y"), b"2x", "GETSET in db 1")
        eq(c.call("SETNX", "b", "z"), 0, "SETNX in db 1")
        eq(c.call("GETDEL", "b"), b"y", "GETDEL in db 1")
        eq(other.call("EXISTS", "n", "b"), 0, "db 0 has none of them")
        # a database nobody wrote reads empty, and reading it makes nothing
        eq(c.call("SELECT", "7"), "OK", "SELECT 7")
        eq([c.call("GET", "k"), c.call("EXISTS", "k"), c.call("MGET", "k", "a"),
            c.call("DBSIZE"), c.call("SCAN", "0"), c.call("DEL", "k"), c.call("GETDEL", "k")],
           [None, 0, [None, None], 0, [b"0", []], 0, None], "db 7 reads empty")
        eq(spaces(s), ["db1"], "reads and deletes of nothing made no db7")
        # out of range, and a failed SELECT keeps the database
        for bad in ("16", "-1", "999999999999"):
            r = c.call("SELECT", bad)
            check(is_err(r, "ERR DB index is out of range"), f"SELECT {bad}: {r}")
        check(is_err(c.call("SELECT", "x"), "ERR value is not an integer"), "SELECT x")
        eq(c.call("SELECT", "15"), "OK", "SELECT 15: the last of 16")
        eq(c.call("SELECT", "1"), "OK", "")
        eq(c.call("GET", "n"), b"5", "back in db 1")
        r = subprocess.run(["redis-cli", "-p", str(s.port), "-n", "16", "PING"],
                           capture_output=True, timeout=60)
        check(b"DB index is out of range" in r.stderr, f"redis-cli -n 16: {r.stderr!r}")
        check(is_err(c.call("MOVE", "n", "0"), "ERR MOVE is not supported"), "MOVE")
        check(is_err(c.call("SWAPDB", "0", "1"), "ERR SWAPDB is not supported"), "SWAPDB")
        eq(c.call("CONFIG", "GET", "databases"), [b"databases", b"16"], "CONFIG GET databases")
        # pipelined SETs (one group) around a SELECT: each in its database
        c.send_raw(c.encode("SET", "p", "1") + c.encode("SET", "q", "1") + c.encode("SELECT", "0")
                   + c.encode("SET", "p", "0") + c.encode("SELECT", "1"))
        eq([c.read() for _ in range(5)], ["OK"] * 5, "pipelined SETs and SELECTs")
        eq(c.call("MGET", "p", "q"), [b"1", b"1"], "the group went to db 1")
        eq(other.call("MGET", "p", "q"), [b"0", None], "the SET after SELECT 0 went to db 0")
        # MULTI/EXEC in db 1
        eq(c.call("MULTI"), "OK", "")
        for cmd in (("SET", "t", "1"), ("INCR", "t"), ("GET", "t"), ("DEL", "p"),
                    ("MGET", "t", "p", "q")):
            eq(c.call(*cmd), "QUEUED", f"queue {cmd}")
        eq(c.call("EXEC"), ["OK", 2, b"2", 1, [b"2", None, b"1"]], "EXEC in db 1")
        eq(other.call("MGET", "t", "p"), [None, b"0"], "EXEC wrote nothing in db 0")
        # WATCH in a database nobody wrote yet (db 3): another client's write fails EXEC
        eq(c.call("SELECT", "3"), "OK", "")
        eq(other.call("SELECT", "3"), "OK", "")
        eq(c.call("WATCH", "w"), "OK", "WATCH in db 3")
        eq(other.call("SET", "w", "theirs"), "OK", "")
        eq(c.call("MULTI"), "OK", "")
        eq(c.call("SET", "w", "mine"), "QUEUED", "")
        eq(c.call("EXEC"), None, "EXEC after the watched key changed in db 3")
        eq(c.call("GET", "w"), b"theirs", "")
        # ... and a write of the same key in another database does not
        eq(c.call("WATCH", "w"), "OK", "")
        eq(other.call("SELECT", "0"), "OK", "")
        eq(other.call("SET", "w", "db0"), "OK", "")
        eq(c.call("MULTI"), "OK", "")
        eq(c.call("SET", "w", "mine"), "QUEUED", "")
        eq(c.call("EXEC"), ["OK"], "a change of w in db 0 is not one of db 3's w")
        eq(c.call("GET", "w"), b"mine", "")
        eq(other.call("GET", "w"), b"db0", "")
        # INCR from several clients at once in db 2: none lost
        r = subprocess.run(["redis-benchmark", "-p", str(s.port), "-t", "incr", "-n", "4000",
                            "-c", "8", "-q", "--dbnum", "2"], capture_output=True, timeout=120)
        check(r.returncode == 0, f"redis-benchmark: {r.stderr.decode()}")
        eq(s.cli("-n", "2", "GET", "counter:__rand_int__"), b"4000\n", "8 clients x INCR in db 2")
        eq(other.call("EXISTS", "counter:__rand_int__"), 0, "no counter in db 0")
        eq(spaces(s), ["db1", "db2", "db3"], "the databases written")
        # INFO keyspace: each database with keys, as DBSIZE counts them; key
        # spaces that are not a SELECTable "dbN" are not databases
        for name in ("db01", "db16", "dbx"):
            r = subprocess.run([walrus, "-D", s.dir, "space", "create", name],
                               capture_output=True, timeout=60)
            check(r.returncode == 0, f"walrus space create {name}: {r.stderr.decode()}")
        info = c.call("INFO", "keyspace").decode()
        got = dict(line.split(":", 1) for line in info.splitlines()
                   if line and not line.startswith("#"))
        want = {}
        for n in range(4):
            eq(c.call("SELECT", str(n)), "OK", "")
            want[f"db{n}"] = f"keys={c.call('DBSIZE')},expires=0,avg_ttl=0"
        eq(got, want, "INFO keyspace")
        # a key space dropped under the server: reads find nothing, a write makes it again
        r = subprocess.run([walrus, "-D", s.dir, "space", "drop", "db1"], capture_output=True,
                           timeout=60)
        check(r.returncode == 0, f"walrus space drop db1: {r.stderr.decode()}")
        eq(c.call("SELECT", "1"), "OK", "")
        eq(c.call("GET", "n"), None, "db 1 dropped: empty")
        eq(c.call("SET", "n", "again"), "OK", "a write makes db1 again")
        eq(c.call("DBSIZE"), 1, "the new db 1")
        eq(s.stop(), 0, "exit code after SIGTERM")
    # --databases N
    with Server(walrus, args=["--databases", "4"]) as s, s.client() as c:
        eq(c.call("SELECT", "3"), "OK", "SELECT 3 of 4")
        check(is_err(c.call("SELECT", "4"), "ERR DB index is out of range"), "SELECT 4 of 4")
        eq(c.call("CONFIG", "GET", "databases"), [b"databases", b"4"], "CONFIG GET databases")


def case_pipeline(walrus):
    with Server(walrus) as s, s.client() as c:
        n = 2000
        c.send_raw(b"".join(c.encode("SET", f"p{i}", f"v{i}") for i in range(n))
                   + b"".join(c.encode("GET", f"p{i}") for i in range(n)))
        for i in range(n):
            eq(c.read(), "OK", f"SET #{i}")
        for i in range(n):
            eq(c.read(), f"v{i}".encode(), f"GET #{i} in order")
        # SETs in a row are applied as one batch: later requests see them, a
        # bad one answers for itself
        c.send_raw(c.encode("SET", "g", "1") + c.encode("SET", "g", "2") + c.encode("GET", "g")
                   + c.encode("SET", "g", "3") + c.encode("SET", "", "x")
                   + c.encode("SET", "h", "4") + c.encode("MGET", "g", "h"))
        r = [c.read() for _ in range(7)]
        eq(r[:4], ["OK", "OK", b"2", "OK"], "group then GET")
        check(is_err(r[4], "ERR key must not be empty"), f"bad SET in a group: {r[4]}")
        eq(r[5:], ["OK", [b"3", b"4"]], "after the bad one")
        # one byte at a time
        msg = c.encode("SET", "slow", "x" * 100) + c.encode("GET", "slow")
        for b in msg:
            c.send_raw(bytes([b]))
        eq(c.read(), "OK", "SET sent byte by byte")
        eq(c.read(), b"x" * 100, "GET sent byte by byte")
        # inline commands, as telnet sends them
        c.send_raw(b"SET inl \"a b\\x41\\n\"\r\nGET inl\nPING\r\n\r\n")
        eq(c.read(), "OK", "inline SET")
        eq(c.read(), b"a bA\n", "inline quoted value")
        eq(c.read(), "PONG", "inline PING")
        # a write pipelined with a conditional one that does not write: the
        # barrier still makes the first durable before its reply
        c.send_raw(c.encode("SET", "d1", "x") + c.encode("SET", "d1", "y", "NX"))
        eq([c.read(), c.read()], ["OK", None], "SET then SET NX")
        info = c.call("INFO", "wal").decode()
        f = dict(line.split(":", 1) for line in info.split("\r\n") if ":" in line)
        check(f["wal_flush_lsn"] == f["wal_insert_lsn"], f"durable before the reply: {f}")


def case_group_fallback(walrus):
    """A group of SETs too big for one batch (pinned pages over a quarter of a
    small shared_buffers) falls back to one SET at a time, every reply +OK."""
    with Server(walrus, opts=["shared_buffers=1MB"]) as s, s.client() as c:
        vals = {f"fb{i:03d}": os.urandom(3000) for i in range(64)}
        c.send_raw(b"".join(c.encode("SET", k, v) for k, v in vals.items()))
        eq([c.read() for _ in vals], ["OK"] * len(vals), "every SET acknowledged")
        eq(c.call("MGET", *vals), list(vals.values()), "every value there")
        eq(c.call("DBSIZE"), len(vals), "")


def case_protocol(walrus):
    # shared_buffers: a 64 MiB value must fit in a quarter of the pool
    with Server(walrus, opts=["shared_buffers=320MB"]) as s:
        bystander = s.client()
        eq(bystander.call("SET", "by", "1"), "OK", "")
        bad = [
            (b"*abc\r\n", "invalid multibulk length"),
            (b"*2000000\r\n", "invalid multibulk length"),
            (b"*1\r\n*1\r\n$1\r\na\r\n", "expected '$', got '*'"),
            (b"*1\r\n$-5\r\n", "invalid bulk length"),
            (b"*1\r\n$600000000\r\n", "invalid bulk length"),
            (b"*1\r\n$3\r\nGETxx", "expected CRLF"),
            (b"SET a \"unbalanced\r\n", "unbalanced quotes"),
            (b"x" * 70000, "too big inline request"),
            (b"*1\r\n$" + b"1" * 70000, "too big bulk count string"),
        ]
        for data, why in bad:
            with s.client() as c:
                eq(c.call("PING"), "PONG", "before")
                c.send_raw(data)
                r = c.read()
                check(is_err(r, "ERR Protocol error: " + why), f"{data[:20]!r}: {r}")
                check(c.closed(), f"{data[:20]!r} closes the connection")
        eq(bystander.call("GET", "by"), b"1", "other connections unaffected")
        # an argument over walrus's value limit is read and discarded, the
        # connection stays usable
        with s.client() as c:
            n = (64 << 20) + 100
            c.send_raw(b"*3\r\n$3\r\nSET\r\n$3\r\nhug\r\n$%d\r\n" % n)
            chunk = b"z" * (1 << 20)
            left = n
            while left > 0:
                c.send_raw(chunk[:min(left, len(chunk))])
                left -= min(left, len(chunk))
            c.send_raw(b"\r\n")
            r = c.read()
            check(is_err(r, "ERR argument too long"), f"too long: {r}")
            eq(c.call("EXISTS", "hug"), 0, "nothing written")
            eq(c.call("PING"), "PONG", "still usable")
            # the largest value walrus takes goes through
            v = b"y" * (64 << 20)
            eq(c.call("SET", "max", v), "OK", "a 64 MiB value")
            eq(c.call("GET", "max") == v, True, "64 MiB back")
        # empty requests are ignored
        with s.client() as c:
            c.send_raw(b"*0\r\n*-1\r\n")
            eq(c.call("PING"), "PONG", "after empty arrays")
        bystander.close()


def case_auth(walrus):
    with Server(walrus, args=["--requirepass", "s3cret"]) as s:
        with s.client() as c:
            eq(str(c.call("PING")), "NOAUTH Authentication required.", "PING without AUTH")
            r = c.call("GET", "k")
            eq(str(r), "NOAUTH Authentication required.", "NOAUTH")
            check(is_err(c.call("SET", "k", "v"), "NOAUTH"), "NOAUTH SET")
            check(is_err(c.call("AUTH", "wrong"), "WRONGPASS"), "wrong password")
            check(is_err(c.call("AUTH", "bob", "s3cret"), "WRONGPASS"), "wrong user")
            check(is_err(c.call("HELLO", "3"), "NOAUTH"), "HELLO without AUTH")
            eq(c.call("AUTH", "s3cret"), "OK", "AUTH pw")
            eq(c.call("SET", "k", "v"), "OK", "after AUTH")
            eq(c.call("PING"), "PONG", "PING after AUTH")
            eq(c.call("CONFIG", "GET", "requirepass"), [b"requirepass", b"********"],
               "CONFIG GET masks the password")
        with s.client() as c:
            eq(c.call("AUTH", "default", "s3cret"), "OK", "AUTH default pw")
            eq(c.call("GET", "k"), b"v", "")
        with s.client() as c:
            h = c.call("HELLO", "3", "AUTH", "default", "s3cret")
            check(isinstance(h, dict), "HELLO 3 AUTH")
            eq(c.call("GET", "k"), b"v", "")
        eq(s.cli("-a", "s3cret", "--no-auth-warning", "GET", "k"), b"v\n", "redis-cli -a")
        check(s.cli("GET", "k").startswith(b"NOAUTH"), "redis-cli without -a")
    with Server(walrus) as s, s.client() as c:
        check(is_err(c.call("AUTH", "x"), "ERR AUTH <password> called without"), "no password")


PASSWORD = "pw of 'the' test"
CONF = "requirepass = 'pw of ''the'' test'\n"
ATTACKERS = 8


def announce_and_stall(data):
    """An unauthenticated client that sends @data (as much as the server takes)
    and then stalls; returns it, still open on our side."""
    c = Client(port=ATTACK_PORT[0], timeout=60)
    try:
        c.send_raw(data)
    except (BrokenPipeError, ConnectionResetError):
        pass  # the server closed it: what it should do
    return c


ATTACK_PORT = [None]


def per_process_kib(walrus):
    """What a process serving only rejected requests may hold beyond an
    authenticated backend: 8 MB, or 24 MB in a build under AddressSanitizer,
    whose fresh processes copy and touch shadow memory and keep freed blocks
    in quarantine (either way below the 30 to 60 MB the attacks cost)."""
    r = subprocess.run(["ldd", walrus], capture_output=True, text=True)
    return (24 if "libasan" in r.stdout else 8) * 1024


def case_preauth(walrus):
    """Clients that never authenticate cannot make the backends hold memory:
    8 connections announcing 60 MB values, 8 sending a 1M-element array,
    the server's anonymous memory stays within a few MB, they are refused and
    closed, an authenticated client is served meanwhile, verify passes."""
    s = Server(walrus)
    s.write_conf(CONF)
    with s:
        ATTACK_PORT[0] = s.port
        legit = s.client()
        eq(legit.call("AUTH", PASSWORD), "OK", "AUTH")
        eq(legit.call("SET", "before", "1"), "OK", "")
        # Per process: with a backend per connection (--backends 0) every
        # attacker has a process of its own, whose bare footprint (several MB
        # under ASan, its allocator's quarantine) is not memory the attack
        # made it hold; a new process is charged from the footprint of the
        # authenticated client's backend, and no process may hold 8 MB more
        # (the attack is 60 MB a connection), the ones there before 16 MB in all.
        base = s.anon_by_pid()
        backend_base = max((v for p, v in base.items() if p != s.proc.pid), default=0)
        value = 60 << 20
        chunk = b"v" * value
        bulk = b"*3\r\n$3\r\nSET\r\n$1\r\nk\r\n$%d\r\n" % value + chunk
        args = b"*1000000\r\n" + b"$1\r\na\r\n" * 999999
        attackers = []
        for i in range(ATTACKERS):
            attackers.append(announce_and_stall(bulk))
            attackers.append(announce_and_stall(args))
            eq(legit.call("SET", f"during{i}", i), "OK", "an authenticated client meanwhile")
        after = s.anon_by_pid()
        each = {p: v - base.get(p, backend_base) for p, v in after.items()}
        grown = sum(g for p, g in each.items() if p in base)
        check(grown < 16 * 1024,
              f"unauthenticated clients made the server hold {grown} KiB more")
        check(max(each.values()) < per_process_kib(walrus),
              f"unauthenticated clients made a process hold more: {each} KiB")
        for a in attackers:
            check(a.closed(timeout=60), "an unauthenticated oversized request is closed")
            a.close()
        # the refusal names the rule (a header alone: nothing unread to reset it)
        for data, why in ((b"*3\r\n$3\r\nSET\r\n$1\r\nk\r\n$62915584\r\n",
                           "unauthenticated bulk length"),
                          (b"*1000000\r\n", "unauthenticated multibulk length"),
                          (b"*11\r\n", "unauthenticated multibulk length"),
                          (b"x" * 20000, "too big inline request")):
            with s.client() as c:
                c.send_raw(data)
                r = c.read()
                check(is_err(r, "ERR Protocol error: " + why), f"{data[:20]!r}: {r}")
                check(c.closed(), "closed after the error")
        # replies before AUTH are sent a few KiB at a time, in order
        with s.client() as c:
            n = 5000
            c.send_raw(c.encode("GET", "before") * n + c.encode("AUTH", PASSWORD))
            for i in range(n):
                eq(str(c.read()), "NOAUTH Authentication required.", f"pipelined #{i}")
            eq(c.read(), "OK", "AUTH after the pipeline")
        # small requests before AUTH still work, and AUTH lifts the limit
        with s.client() as c:
            eq(str(c.call("GET", "before")), "NOAUTH Authentication required.", "")
            eq(c.call("AUTH", "default", PASSWORD), "OK", "")
            eq(c.call("SET", "big", b"b" * 100000), "OK", "a large value after AUTH")
        eq(legit.call("MGET", "before", "during0"), [b"1", b"0"], "")
        legit.close()
        eq(s.stop(), 0, "")
        s.verify()


def wait_until(cond, timeout):
    """Whether @cond became true within @timeout seconds (polled every 20 ms)."""
    deadline = time.time() + timeout
    while not cond():
        if time.time() > deadline:
            return False
        time.sleep(0.02)
    return True


def case_authtimeout(walrus):
    """Connections that do not authenticate within authentication_timeout are
    closed, whether silent or dribbling bytes; authenticated ones stay, and
    the slots come back.  --idle-timeout is left at 0 (never)."""
    s = Server(walrus, opts=["authentication_timeout=1s", "max_connections=6"])
    s.write_conf(CONF)
    with s:
        legit = s.client()
        eq(legit.call("AUTH", PASSWORD), "OK", "")
        idle = [s.client() for _ in range(4)]  # every other slot
        with s.client() as extra:
            check(is_err(extra.read(), "ERR max number of clients reached"), "slots all taken")
        for c in idle:
            check(c.closed(timeout=60), "an idle unauthenticated connection is closed")
            c.close()
        # a client that keeps sending bytes, never a whole request
        with s.client() as dribbler:
            deadline = time.time() + 60
            closed = False
            while not closed and time.time() < deadline:
                try:
                    dribbler.send_raw(b"x")
                except (BrokenPipeError, ConnectionResetError):
                    closed = True
                    break
                closed = dribbler.closed(timeout=0.2)
            check(closed, "a dribbling unauthenticated connection is closed")
        # A closed connection's slot is free once its backend has gone (with a
        # backend per connection that is a process exit, slow under ASan).
        check(wait_until(lambda: s.connected_clients(legit) == 1, 60),
              "the closed connections still count as clients")
        with s.client() as c:
            eq(c.call("AUTH", PASSWORD), "OK", "a slot is free again")
            eq(c.call("SET", "k", "v"), "OK", "")
        eq(legit.call("GET", "k"), b"v", "the authenticated connection outlived the timeout")
        legit.close()
        eq(s.stop(), 0, "")
        s.verify()


def case_silenttimeout(walrus):
    """Without a password, connections that send no command within
    authentication_timeout are closed (the issue's 99 idle sockets locked
    every client out); one that spoke stays past it.  --idle-timeout is 0."""
    s = Server(walrus, opts=["authentication_timeout=1s", "max_connections=6"])
    with s:
        legit = s.client()
        eq(legit.call("PING"), "PONG", "")
        idle = [s.client() for _ in range(4)]  # every other slot
        with s.client() as extra:
            check(is_err(extra.read(), "ERR max number of clients reached"), "slots all taken")
        for c in idle:
            check(c.closed(timeout=60), "a connection that never sent a command is closed")
            c.close()
        check(wait_until(lambda: s.connected_clients(legit) == 1, 60),
              "the closed connections still count as clients")
        with s.client() as c:
            eq(c.call("SET", "k", "v"), "OK", "a slot is free again")
        eq(legit.call("GET", "k"), b"v", "the connection that spoke outlived the timeout")
        legit.close()
        eq(s.stop(), 0, "")
        s.verify()


def case_querylimit(walrus):
    """client_query_buffer_limit bounds a connection's unparsed input, and is
    range-checked."""
    with Server(walrus, opts=["client_query_buffer_limit=1MB"]) as s:
        with s.client() as c:
            eq(c.call("SET", "fits", b"f" * 900000), "OK", "under the limit")
            c.send_raw(b"*3\r\n$3\r\nSET\r\n$3\r\nbig\r\n$2000000\r\n")
            r = c.read()
            check(is_err(r, "ERR Protocol error: query buffer limit reached"), f"{r}")
            check(c.closed(), "closed after the error")
        with s.client() as c:
            eq(c.call("CONFIG", "GET", "client_query_buffer_limit"),
               [b"client_query_buffer_limit", b"1MB"], "")
            eq(c.call("EXISTS", "big", "fits"), 1, "")
    for bad in ("100kB", "32GB", "x"):
        s = Server(walrus, opts=[f"client_query_buffer_limit={bad}"])
        try:
            r = subprocess.run(s.cmdline(), capture_output=True, timeout=60)
            check(r.returncode != 0 and b"client_query_buffer_limit" in r.stderr,
                  f"client_query_buffer_limit={bad}: {r.returncode} {r.stderr.decode()}")
        finally:
            kill_all(s.base)
            shutil.rmtree(s.base, ignore_errors=True)


def no_password_in(s, pw, what):
    for pid in s.pids():
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                cmd = f.read()
        except OSError:
            continue
        check(pw.encode() not in cmd, f"{what}: the password is in /proc/{pid}/cmdline")


def serve_fails(walrus, conf=None, mode=0o600, args=(), want=""):
    """walrus serve refuses to start; its stderr says @want."""
    s = Server(walrus, args=args)
    try:
        if conf is not None:
            s.write_conf(conf, mode)
        r = subprocess.run(s.cmdline(), capture_output=True, timeout=60)
        err = r.stderr.decode()
        check(r.returncode != 0, f"walrus serve {args} started: {err}")
        check(want in err, f"walrus serve {args}: {err!r} lacks {want!r}")
        check(b"ready" not in r.stdout, "no readiness line")
    finally:
        kill_all(s.base)
        shutil.rmtree(s.base, ignore_errors=True)


def case_password(walrus):
    """The password from walrus.conf or --requirepass-file: never in ps, in
    `walrus config`, the settings, the log; files readable by others and
    empty passwords refused; --requirepass warns."""
    s = Server(walrus)
    s.write_conf(CONF + "shared_buffers = 16MB\n")
    with s:
        no_password_in(s, PASSWORD, "walrus.conf")
        with s.client() as c:
            eq(str(c.call("PING")), "NOAUTH Authentication required.", "PING before AUTH")
            eq(c.call("AUTH", PASSWORD), "OK", "the password of walrus.conf")
            for what in (c.call("CONFIG", "GET", "*"), c.call("INFO", "everything")):
                check(PASSWORD.encode() not in repr(what).encode(), f"password in {what}")
        eq(s.cli("-a", PASSWORD, "--no-auth-warning", "PING"), b"PONG\n", "redis-cli -a")
        tool = [walrus, "-D", s.dir]
        got = subprocess.run(tool + ["config", "get", "requirepass"], capture_output=True,
                             timeout=60)
        eq(got.stdout, b"********\n", "config get masks it")
        listed = subprocess.run(tool + ["config", "list"], capture_output=True, timeout=60)
        check(listed.returncode == 0 and PASSWORD.encode() not in listed.stdout, "config list")
        r = subprocess.run(tool + ["config", "set", "requirepass", "other"],
                           capture_output=True, timeout=60)
        check(r.returncode != 0 and b"ps" in r.stderr, f"config set requirepass: {r.stderr}")
        eq(s.stop(), 0, "")
        for name in ("walrus.settings", "log/walrus.log", "walrus.conf"):
            path = os.path.join(s.dir, name)
            if os.path.exists(path) and name != "walrus.conf":
                with open(path, "rb") as f:
                    check(PASSWORD.encode() not in f.read(), f"the password is in {name}")
        eq(stat.S_IMODE(os.stat(os.path.join(s.dir, "walrus.conf")).st_mode), 0o600,
           "walrus.conf stays 0600")
    # --requirepass-file
    pwdir = tempfile.mkdtemp(prefix="walrus-pw-")
    try:
        pwfile = os.path.join(pwdir, "pw")
        with open(pwfile, "w") as f:
            f.write("file secret\n")
        os.chmod(pwfile, 0o600)
        with Server(walrus, args=["--requirepass-file", pwfile]) as s:
            no_password_in(s, "file secret", "--requirepass-file")
            with s.client() as c:
                eq(c.call("AUTH", "file secret"), "OK", "the password of the file")
        os.chmod(pwfile, 0o640)
        serve_fails(walrus, args=["--requirepass-file", pwfile], want="readable by its group")
    finally:
        shutil.rmtree(pwdir, ignore_errors=True)
    serve_fails(walrus, conf=CONF, mode=0o644, want="readable by its group and others")
    serve_fails(walrus, conf=CONF, mode=0o604, want="readable by others")
    serve_fails(walrus, conf="requirepass = ''\n", want="empty")
    serve_fails(walrus, args=["--requirepass", ""], want="empty")
    with Server(walrus, args=["--requirepass", "flagpw"]) as s:
        with s.client() as c:
            eq(c.call("AUTH", "flagpw"), "OK", "--requirepass still works")
        eq(s.stop(), 0, "")
        check("WARNING: --requirepass shows the password" in s.err, f"no warning: {s.err}")


def case_fence(walrus):
    """`walrus stop` of a directory a RESP server serves stops the server too,
    in every mode: nothing of the directory keeps running, and no backend
    starts a new instance (an operator fences an old primary this way)."""
    from srvtest import TestFailure, wait_no_pids
    for mode in ("fast", "smart", "immediate"):
        with Server(walrus) as s:
            with s.client() as c:
                eq(c.call("SET", "k", "v"), "OK", "")
            r = subprocess.run([walrus, "-D", s.dir, "stop", "--mode", mode, "--wait"],
                               capture_output=True, timeout=120)
            check(r.returncode == 0, f"stop --mode {mode}: {r.stderr.decode()}")
            try:
                code = s.proc.wait(60)
            except subprocess.TimeoutExpired:
                raise TestFailure(f"walrus serve still runs after stop --mode {mode}")
            s.out += s.proc.stdout.read().decode().splitlines(True)
            s.err = s.proc.stderr.read().decode()
            eq(code, 0, f"walrus serve's exit after stop --mode {mode}")
            check("the instance is being stopped" in s.err and "reattaching" not in s.err,
                  f"stop --mode {mode}: {s.err}")
            wait_no_pids(s.base, 30)
            s.proc = None
            check(not os.path.exists(os.path.join(s.dir, "walrus.sock")),
                  f"an instance serves the directory after stop --mode {mode}")


def case_readiness(walrus):
    """A second server of the same directory fails without saying it serves."""
    with Server(walrus) as s:
        r = subprocess.run(s.cmdline(), capture_output=True, timeout=60)
        check(r.returncode != 0, "a second server of the directory started")
        check(b"another server listens" in r.stderr, r.stderr.decode())
        eq(r.stdout.decode(), "", "the second server printed readiness lines")
        eq(s.client().call("PING"), "PONG", "the first one goes on")


def case_limits(walrus):
    # max_connections=4: the server holds one attachment, 3 clients fit
    with Server(walrus, args=["--idle-timeout", "2"], opts=["max_connections=4"]) as s:
        cs = [s.client() for _ in range(3)]
        for c in cs:
            eq(c.call("PING"), "PONG", "within the limit")
        extra = s.client()
        r = extra.read()
        eq(str(r), "ERR max number of clients reached", "refused")
        check(extra.closed(), "the refused connection is closed")
        info = cs[0].call("INFO", "clients", "stats").decode()
        check("connected_clients:3" in info and "rejected_connections:1" in info, info)
        cs.pop().close()
        deadline = time.time() + 10
        while True:
            with s.client() as c:
                try:
                    if c.call("PING") == "PONG":
                        break
                except Closed:
                    pass
            check(time.time() < deadline, "a slot did not free up")
            time.sleep(0.1)
        # idle timeout: a silent connection is closed, an active one is not
        active = cs[0]
        for _ in range(6):
            eq(active.call("PING"), "PONG", "active")
            time.sleep(0.5)
        check(cs[1].closed(timeout=5), "idle connection closed")
        for c in cs:
            c.close()


def case_shutdown(walrus):
    """SIGTERM lets a request under way finish; the instance then stops."""
    with Server(walrus) as s:
        c = s.client()
        eq(c.call("SET", "a", "1"), "OK", "")
        n = 500
        c.send_raw(b"".join(c.encode("SET", f"s{i}", "v" * 1000) for i in range(n)))
        eq(c.read(), "OK", "the first request")  # requests under way now
        s.proc.send_signal(signal.SIGTERM)
        got = 1
        try:
            for _ in range(n - 1):
                r = c.read()
                if r != "OK":
                    break
                got += 1
        except (Closed, ConnectionResetError):
            pass
        check(c.closed(), "connection closed by the shutdown")
        eq(s.proc.wait(60), 0, "exit code")
        s.proc = None
        from srvtest import wait_no_pids
        wait_no_pids(s.base, 30)
        # everything acknowledged is there after a restart
        s.start()
        with s.client() as c2:
            eq(c2.call("GET", "a"), b"1", "")
            vals = c2.call("MGET", *[f"s{i}" for i in range(got)]) if got else []
            check(all(v == b"v" * 1000 for v in vals), "acknowledged writes survived")
        eq(s.stop(), 0, "")


def case_pool(walrus):
    """The pool: connections spread over its processes with their own state; a
    client that does not read its replies stalls nobody else; a pool backend
    killed takes only its own connections and is replaced."""
    with Server(walrus, args=["--backends", "2"], allow_sigkill=True) as s:
        pool = s.wait_backends(2)
        cs = [s.client() for _ in range(6)]
        pids = [backend_pid(c) for c in cs]
        eq(sorted(set(pids)), sorted(pool), "the connections use both pool backends")
        eq(sorted(pids.count(p) for p in pool), [3, 3], "3 connections each")
        ids = [c.call("CLIENT", "ID") for c in cs]
        eq(len(set(ids)), len(cs), f"CLIENT ID is per connection: {ids}")
        info = cs[0].call("INFO", "clients").decode()
        check("connected_clients:6" in info, info)
        # per connection state in one process: MULTI on one, plain writes on another
        a, b = [c for c, p in zip(cs, pids) if p == pids[0]][:2]
        eq(a.call("MULTI"), "OK", "")
        eq(a.call("SET", "tx", "1"), "QUEUED", "")
        eq(b.call("SET", "tx", "0"), "OK", "another connection of the same process")
        eq(b.call("GET", "tx"), b"0", "not in a's transaction")
        eq(a.call("EXEC"), ["OK"], "")
        eq(b.call("GET", "tx"), b"1", "")
        # a slow reader: 48 MiB of replies it does not read; its neighbour goes on
        big = b"b" * (1 << 20)
        eq(a.call("SET", "big", big), "OK", "")
        n = 48
        a.send_raw(b"".join(a.encode("GET", "big") for _ in range(n)))
        a.wait_replies()  # its backend is answering it, 48 MiB that cannot all be sent
        # a stalled neighbour would wait for a's reads, which come only
        # after: its socket timeout (30 s) fails the call, no clock needed
        for i in range(50):
            eq(b.call("SET", f"nb{i}", i), "OK", "the neighbour writes")
        for i in range(n):
            eq(a.read(), big, f"slow reader's reply {i}")
        eq(a.call("PING"), "PONG", "the slow reader goes on")
        # SIGKILL of one pool backend: its connections drop, the others' go on
        victim = pool[0]
        os.kill(victim, signal.SIGKILL)
        for c, p in zip(cs, pids):
            if p == victim:
                check(c.closed(timeout=10), "a connection of the killed backend is closed")
        others = [c for c, p in zip(cs, pids) if p != victim]
        # the kill restarts the instance: a survivor's call may be answered
        # before or after that restart, so wait for its end first (the log);
        # then each survivor's next call may fail once, and the one after works
        log = os.path.join(s.dir, "log", "walrus.log")
        check(wait_until(lambda: "instance is ready (generation 1)" in open(log).read(), 60),
              "the instance did not restart after the backend's kill")
        for c in others:
            r = c.call("SET", "after", "1")  # may answer that the instance restarted
            check(r == "OK" or is_err(r, "ERR the walrus instance restarted") or
                  is_err(r, "ERR the write may not be durable"), f"after the kill: {r}")
            eq(c.call("SET", "after", "2"), "OK", "the connection goes on")
        pool2 = s.wait_backends(2)
        check(victim not in pool2, f"the killed backend was replaced: {pool2}")
        with s.client() as c:
            eq(c.call("GET", "after"), b"2", "a new connection")
        for c in cs:
            c.close()
        # a clean shutdown is not held up by a client that never reads: its
        # replies get their grace (5 s), then the connection goes
        slow = s.client()
        slow.send_raw(b"".join(slow.encode("GET", "big") for _ in range(n)))
        slow.wait_replies()
        # held up, the stop would wait for a reader that never reads: the
        # bound detects that hang (the grace is 5 s), it measures nothing
        eq(s.stop(timeout=30), 0, "clean stop with a slow reader")
        slow.close()


def case_mappedeio(walrus):
    """mmap_reads=on: the data file cut short under a running server (as a
    disk read error under the mapping: a SIGBUS in the backend that reads
    it).  The GETs of keys whose leaves are gone answer an error naming the
    read; the backend lives on, and the log says why."""
    n = 4000
    with Server(walrus, args=["--backends", "1"],
                opts=("mmap_reads=on", "shared_buffers=256kB")) as s, s.client() as c:
        for i in range(0, n, 20):
            kv = []
            for j in range(i, i + 20):
                kv += [f"k{j:06d}", f"v{j:06d}" + "x" * 200]
            eq(c.call("MSET", *kv), "OK", "MSET")
        eq(c.call("CHECKPOINT"), "OK", "CHECKPOINT")
        pid = backend_pid(c)
        vals = c.call("MGET", *[f"k{j:06d}" for j in range(n)])
        check(all(v.startswith(f"v{j:06d}".encode()) for j, v in enumerate(vals)),
              "every value read back")
        data = os.path.join(s.dir, "base", "1")
        # at a page boundary: the pages past it are gone whole
        os.truncate(data, os.path.getsize(data) // 2 // PAGE_SIZE * PAGE_SIZE)
        errors = []
        for j in range(n):
            r = c.call("GET", f"k{j:06d}")
            if isinstance(r, RespError):
                errors.append(str(r))
        check(errors, "some leaves were in the cut half")
        check(all("could not read block" in e and f"read only 0 of {PAGE_SIZE} bytes" in e
                  for e in errors), f"the errors name the read: {errors[:3]}")
        eq(c.call("PING"), "PONG", "the connection lives on")
        eq(backend_pid(c), pid, "the same backend")
        log = open(os.path.join(s.dir, "log", "walrus.log")).read()
        check("through its mapping (SIGBUS" in log, "the WARNING is in the log")
        check("signal 7" not in log, "no process died of SIGBUS")


CASES = {
    "commands": case_commands,
    "scan": case_scan,
    "cli": case_cli,
    "multi": case_multi,
    "watch": case_watch,
    "databases": case_databases,
    "pipeline": case_pipeline,
    "protocol": case_protocol,
    "group": case_group_fallback,
    "auth": case_auth,
    "limits": case_limits,
    "preauth": case_preauth,
    "authtimeout": case_authtimeout,
    "silenttimeout": case_silenttimeout,
    "querylimit": case_querylimit,
    "password": case_password,
    "readiness": case_readiness,
    "fence": case_fence,
    "shutdown": case_shutdown,
    "pool": case_pool,
    "mappedeio": case_mappedeio,
}

if __name__ == "__main__":
    sys.exit(run_cases(CASES, sys.argv[1:]))

#!/usr/bin/env python3
"""test_kill.py - a backend killed with SIGKILL in the middle of requests.

Several clients write (SET, synchronous_commit=on) as fast as they can,
each remembering what was acknowledged with +OK.  Round after round, the
backend process of one client is killed with SIGKILL: the instance
crash-restarts from its WAL exactly once per kill (its restart counter, in
INFO), the other backends answer a request under way with an error and
reattach by themselves (the next request on the same connection works:
every error reply is followed by +OK, never by a second error), the killed
client reconnects, and every writer writes again.  At the end every
acknowledged write must be there, on a new connection and again after the
server restarted; new connections must work throughout.

With one backend per connection (--backends 0) a surviving backend learns
of the restart from its next call: every writer but the victim gets an
error reply and then +OK in every round.  With a pool (--backends N > 0)
the killed process serves several writers: all of them lose their
connection and reconnect, and the server forks a new pool backend in its
place (checked after every round); a surviving pool backend reopens its
handle before it runs the next requests, so only a request under way
during the restart gets an error.

usage: test_kill.py --walrus build/tools/walrus [--rounds N] [--backends N]
"""
import argparse
import os
import signal
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from srvtest import Closed, RespError, Server, backend_pid, check, eq  # noqa: E402


class Writer(threading.Thread):
    def __init__(self, server, n):
        super().__init__(daemon=True)
        self.server, self.n = server, n
        self.acked = {}  # key -> value acknowledged last
        self.errors = []  # error replies (instance restarts)
        self.reconnects = 0
        self.after_error_ok = 0  # +OK on the same connection right after an error
        self.oks = 0
        self.oks_at_connect = 0  # oks when the current connection was made
        self.failure = None
        self.stop = threading.Event()
        self.pid = None
        self.connected = threading.Event()

    def connect(self):
        # a connection handed to a pool backend in the instant it is killed
        # is dropped with it: connect again (as a client library would)
        for attempt in range(50):
            self.c = self.server.client(timeout=60)
            try:
                self.pid = backend_pid(self.c)
                break
            except (Closed, ConnectionResetError, BrokenPipeError):
                self.c.close()
                check(attempt < 49, "could not connect again")
                time.sleep(0.1)
        self.oks_at_connect = self.oks
        self.connected.set()

    def run(self):
        try:
            self.connect()
            j, last_err = 0, False
            while not self.stop.is_set():
                key, val = f"w{self.n}:{j % 500}", f"v{j}"
                try:
                    r = self.c.call("SET", key, val)
                except (Closed, ConnectionResetError, BrokenPipeError):
                    self.reconnects += 1
                    last_err = False  # "the same connection" is gone
                    self.connected.clear()
                    self.c.close()
                    self.connect()
                    continue
                if r == "OK":
                    self.acked[key] = val
                    self.oks += 1
                    self.after_error_ok += last_err
                    last_err = False
                elif isinstance(r, RespError):
                    check(not last_err, f"writer {self.n}: a second error in a row: {r}")
                    self.errors.append(str(r))
                    last_err = True
                else:
                    raise AssertionError(f"unexpected reply {r!r}")
                j += 1
            self.c.close()
        except Exception as e:  # reported by the main thread
            self.failure = e


def verify(server, writers, what):
    with server.client(timeout=60) as c:
        for w in writers:
            keys = list(w.acked)
            for i in range(0, len(keys), 200):
                part = keys[i:i + 200]
                got = c.call("MGET", *part)
                for k, v in zip(part, got):
                    # a later unacknowledged write may have replaced it: only
                    # a value this writer wrote at or after the ack is fine
                    check(v is not None, f"{what}: acknowledged key {k} is missing")
                    check(int(v[1:]) >= int(w.acked[k][1:]),
                          f"{what}: {k} went back from {w.acked[k]} to {v}")


def crash_restarts(server, during_kill=False):
    """The instance's crash restarts (INFO).  @during_kill: a connection made
    as a pool backend is killed may be handed to it and dropped with it
    (None then: ask again)."""
    try:
        with server.client(timeout=60) as c:
            info = c.call("INFO", "instance")
    except (Closed, ConnectionResetError, BrokenPipeError):
        if during_kill:
            return None
        raise
    # a connection's backend that attached as the instance went down is
    # answered with the restart's error: ask again
    if during_kill and isinstance(info, RespError):
        return None
    check(not isinstance(info, RespError), f"INFO failed: {info}")
    info = info.decode()
    return int(info.split("instance_crash_restarts:")[1].split()[0])


def wait_for(cond, timeout, what, detail=lambda: ""):
    """Waits on state (a writer's counters, the instance's restart counter)."""
    deadline = time.time() + timeout
    while not cond():
        check(time.time() < deadline, f"{what} (not within {timeout:.0f} s) {detail()}")
        time.sleep(0.02)


def state(writers):
    return "; ".join(f"writer {w.n}: pid {w.pid}, {w.oks} oks ({w.oks_at_connect} at connect), "
                     f"{len(w.errors)} errors {w.errors[-1:]}, {w.after_error_ok} after an error, "
                     f"{w.reconnects} reconnects, connected {w.connected.is_set()}, "
                     f"failure {w.failure!r}" for w in writers)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--walrus", required=True)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--writers", type=int, default=4)
    ap.add_argument("--backends", type=int, default=2,
                    help="walrus serve --backends N (0: one backend per connection)")
    a = ap.parse_args()
    args = ["--backends", str(a.backends)]
    with Server(a.walrus, args=args, opts=["synchronous_commit=on"], allow_sigkill=True) as s:
        if a.backends > 0:
            s.wait_backends(a.backends)
        writers = [Writer(s, n) for n in range(a.writers)]
        for w in writers:
            w.start()
        for w in writers:
            check(w.connected.wait(30), "a writer could not connect")
        wait_for(lambda: all(w.oks > 0 or w.failure for w in writers), 60,
                 "every writer has a write acknowledged")
        for rnd in range(a.rounds):
            victim = writers[rnd % len(writers)]
            check(victim.connected.wait(60), "the victim did not reconnect")
            before = sum(len(w.acked) for w in writers)
            restarts0 = crash_restarts(s)
            errs0 = {w: w.after_error_ok for w in writers}
            conns0 = {w: w.reconnects for w in writers}
            pid = victim.pid  # the writer updates its own when it reconnects
            check(pid in s.backends(), f"backend {pid} is a child of the server")
            os.kill(pid, signal.SIGKILL)
            print(f"round {rnd}: killed backend {pid} of writer {victim.n} "
                  f"({before} keys acknowledged so far)", flush=True)
            wait_for(lambda: (crash_restarts(s, during_kill=True) or 0) > restarts0, 60,
                     f"round {rnd}: the instance crash-restarts after the kill")
            # Every writer goes on: the ones the killed backend served on a new
            # connection, every other one on its own.  Two acknowledgements
            # after the restart was seen: the first may answer a request made
            # before it, the second was made on the new instance.
            oks1 = {w: w.oks for w in writers}

            def went_on(w):
                if w.reconnects > conns0[w]:
                    return w.connected.is_set() and w.oks > w.oks_at_connect
                return w.oks >= oks1[w] + 2
            wait_for(lambda: all(w.failure or went_on(w) for w in writers), 60,
                     f"round {rnd}: every writer writes again", lambda: state(writers))
            if a.backends == 0:
                # A backend of its own, which learns of the restart from its
                # next call: an error reply, then the next request works.
                for w in writers:
                    check(w.reconnects > conns0[w] or w.after_error_ok > errs0[w],
                          f"round {rnd}: writer {w.n} had an error reply and then +OK "
                          f"on the same connection: {state([w])}")
            for w in writers:
                check(w.failure is None, f"writer {w.n} failed: {w.failure!r}")
            check(victim.reconnects > conns0[victim], f"round {rnd}: the victim reconnected")
            with s.client(timeout=60) as c:  # the server keeps accepting
                eq(c.call("PING"), "PONG", "a new connection after the kill")
            if a.backends > 0:
                pool = s.wait_backends(a.backends)
                check(pid not in pool, f"pool backend {pid} was replaced: {pool}")
            eq(crash_restarts(s), restarts0 + 1, f"round {rnd}: crash restarts of one kill")
        oks = {w: w.oks for w in writers}
        wait_for(lambda: all(w.failure or w.oks > oks[w] for w in writers), 60,
                 "every writer writes after the last round")
        for w in writers:
            w.stop.set()
        for w in writers:
            w.join(90)
            check(not w.is_alive(), f"writer {w.n} hangs (an engine call that never returns?)")
            check(w.failure is None, f"writer {w.n} failed: {w.failure!r}")
        errors = sum(len(w.errors) for w in writers)
        for w in writers:
            for e in w.errors:
                check(e.startswith("ERR the walrus instance restarted") or
                      e.startswith("ERR the write may not be durable"), f"unexpected error {e}")
        recovered = sum(w.after_error_ok for w in writers)
        print(f"acknowledged {sum(len(w.acked) for w in writers)} keys; {errors} error "
              f"replies, {recovered} connections went on after an error; "
              f"{sum(w.reconnects for w in writers)} reconnects", flush=True)
        # Every error reply (a request under way during a restart) was
        # followed by +OK on the same connection.
        for w in writers:
            eq(w.after_error_ok, len(w.errors),
               f"writer {w.n}: error replies followed by +OK on the same connection")
        verify(s, writers, "after the crash restarts")
        eq(crash_restarts(s), a.rounds, "crash restarts (one per killed backend)")
        eq(s.stop(), 0, "clean stop")
        s.start()
        verify(s, writers, "after a server restart")
        eq(s.stop(), 0, "clean stop")
    print("1 passed, 0 failed")
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except Exception as e:
        print(f"FAIL: {type(e).__name__}: {e}")
        import traceback
        traceback.print_exc(file=sys.stdout)
        print("0 passed, 1 failed")
        sys.exit(1)

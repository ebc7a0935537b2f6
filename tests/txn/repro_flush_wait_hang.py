#!/usr/bin/env python3
"""Regression test of an engine bug that test_history.py --case crash found
(a driver process hung for good after the supervisor was SIGKILLed: its four
threads in wait_for_flush, src/wal/flush.c); fixed by commit 228e311 (the
wait looks at the supervisor's liveness too).

A committer waiting for the WAL flush (flush_upto -> wait_for_flush) gave
up only when the shared memory said SHM_STATE_CRASHED.  Only a living
supervisor sets that.  When the supervisor is dead and the process that held
the WAL write lock died holding it (here: stopped by a failpoint inside its
WAL write, then SIGKILLed; in the history test: a process of the instance
killed with the supervisor, or unwound by a PANIC), nobody will ever flush
that WAL again nor mark the instance crashed: the committer waited for ever,
where include/walrus.h promises WALRUS_ERESTART ("the supervisor ... has
exited; close and reopen the database").

Steps:
  1. `walrus serve` runs the instance (its processes without failpoints);
  2. `walrus load --ack` attaches and waits for input;
  3. `walrus put k1 v` with WALRUS_FAILPOINTS=pwrite:STOP:/wal/ applies its
     batch and stops itself right before writing its WAL, holding the WAL
     write lock;
  4. a line is given to load: its commit waits for the WAL flush (asleep on
     a futex: checked in /proc);
  5. the supervisor and the stopped writer are SIGKILLed;
  6. load must return within 60 s, failing (exit 3: the instance crashed
     and is restarting); before the fix it never did.

usage: repro_flush_wait_hang.py --walrus PATH [--keep]
"""
import argparse, os, subprocess, sys, threading

sys.dont_write_bytecode = True
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "durability"))
import wtest  # noqa: E402
from wtest import log  # noqa: E402


def main(cleanup):
    ap = argparse.ArgumentParser()
    ap.add_argument("--walrus", default=wtest.default_walrus())
    ap.add_argument("--keep", action="store_true")
    a = ap.parse_args()
    base = wtest.tempdir(cleanup, "walrus-flushhang-", keep=a.keep)
    w = wtest.Walrus(os.path.abspath(a.walrus), os.path.join(base, "data"))
    w.register(cleanup)
    w.create()
    serve = w.serve()
    procs = []
    cleanup.add(lambda: wtest.kill_pids([p.pid for p in procs if p.poll() is None]))
    load = subprocess.Popen(w.argv("load", "--ack"), stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=w.env(),
                            cwd=w.dir)
    procs.append(load)
    writer = subprocess.Popen(w.argv("put", "k1", "v"), stdin=subprocess.DEVNULL,
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                              env=w.env(failpoints="pwrite:STOP:/wal/"), cwd=w.dir)
    procs.append(writer)
    wtest.check(wtest.wait_for(lambda: wtest.stopped(writer.pid), 60),
                "the writer did not stop at its WAL write")
    log(f"writer (pid {writer.pid}) stopped before its WAL write, holding the WAL write lock")
    load.stdin.write(b"k2\tv\n")
    load.stdin.flush()
    wtest.check(wtest.wait_for(lambda: wtest.asleep_in_futex(load.pid), 60),
                "load's commit is not waiting")
    log(f"load (pid {load.pid}) waits for the WAL flush; SIGKILL of the supervisor "
        f"(pid {serve.pid}) and of the writer")
    wtest.kill_pids([serve.pid, writer.pid])
    wtest.check(wtest.wait_gone([serve.pid, writer.pid], 30), "they did not die")
    out = {}
    t = threading.Thread(target=lambda: out.setdefault("r", load.communicate()), daemon=True)
    t.start()  # communicate() closes load's stdin: no more lines
    t.join(60)
    if t.is_alive():
        chan = wtest.wait_channel(load.pid)
        load.kill()
        t.join(30)
        raise wtest.TestFailure(f"BUG: load's commit still waits 60 s after the supervisor died "
                                f"(asleep in {chan}); it should fail with WALRUS_ERESTART")
    so, se = out["r"]
    log(f"load returned: exit {load.returncode}, {so.decode()!r} {se.decode()[-200:]!r}")
    wtest.check(load.returncode == 3 and b"ack " not in so,
                "load's commit should have failed (exit 3), unacknowledged")
    return 0


if __name__ == "__main__":
    wtest.guarded(main)

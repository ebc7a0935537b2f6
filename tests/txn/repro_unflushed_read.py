#!/usr/bin/env python3
"""Regression test of an engine bug that test_history.py --case crash found
(its checker reports it as "unflushed-read"): a committed read-only
transaction had read a write that a crash then lost.  Fixed by commit
228e311: a durable read-only commit waits, as a writer would, for the WAL
of the last batch its snapshot sees.

A batch becomes visible when it is applied under the tree lock
(src/kv/kv_batch.c commit_ops), and its WAL is written and flushed only
after (wal_commit_durable, outside the lock).  So other handles can read a
write before its WAL has even reached the kernel; a read-only transaction
used to commit at once, acknowledging what it read, and if the writing
process then died (a backend crash: the instance restarts from its WAL), the
write was gone though a committed transaction had seen it.

Steps (deterministic, with the test hooks' failpoints):
  1. `walrus serve` runs the instance (no failpoints in its processes);
  2. `walrus put x/k00 1` runs with WALRUS_FAILPOINTS=pwrite:STOP:/wal/: it
     applies its batch, then stops itself right before writing its WAL
     (holding the WAL write lock);
  3. histdrv --final, a serializable read-only transaction, reads x/k00 and
     sees [1] (its I line); its commit (WALRUS_SYNC) must not return OK
     before that write is durable;
  4. the stopped writer is SIGKILLed: the supervisor crash-restarts the
     instance from its WAL; the read-only commit, if still waiting, fails;
  5. histdrv --final again: x/k00 is empty.
elle.py, given the history (the put and a read whose commit failed as
attempts of unknown outcome), must find it valid.  Before the fix it
reported
  unflushed-read: final#1 (read-only, committed) read [1] of w#1 [info]
  a(0,1), whose outcome is unknown and which no final read holds: it read a
  write the crash lost

usage: repro_unflushed_read.py --walrus PATH --driver PATH [--keep]
"""
import argparse, os, subprocess, sys

sys.dont_write_bytecode = True
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import txntest  # noqa: E402
import elle  # noqa: E402
from txntest import wtest, TestFailure, log  # noqa: E402


def main(cleanup):
    ap = argparse.ArgumentParser()
    ap.add_argument("--walrus", default=wtest.default_walrus())
    ap.add_argument("--driver", required=True)
    ap.add_argument("--keep", action="store_true")
    a = ap.parse_args()
    base = wtest.tempdir(cleanup, "walrus-unflushed-", keep=a.keep)
    w = wtest.Walrus(os.path.abspath(a.walrus), os.path.join(base, "data"))
    w.register(cleanup)
    w.create()
    w.serve()
    progress = txntest.Progress()

    def final(seq):
        return txntest.Driver([a.driver, "-D", w.dir, "--final", "--prefix", "x", "--keys", "1",
                               "--seq", str(seq)], w, progress, f"final read {seq}")

    since = w.log_size()
    writer = subprocess.Popen(w.argv("put", "x/k00", "1"), stdin=subprocess.DEVNULL,
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                              env=w.env(failpoints="pwrite:STOP:/wal/"), cwd=w.dir)
    cleanup.add(lambda: writer.poll() is None and writer.kill())
    wtest.check(wtest.wait_for(lambda: wtest.stopped(writer.pid), txntest.HANG),
                "the writer did not stop at its WAL write")
    wtest.check(writer.poll() is None, f"the writer exited ({writer.returncode}) instead")
    log("writer stopped before writing its commit's WAL")
    lines = ["I w 1 a:0:1\n"]  # the put: an attempt whose outcome is unknown
    r1 = final(1)
    cleanup.add(lambda: txntest.kill_live([r1]))
    progress.wait(lambda: r1.count("I") or not r1.alive(), "read of the first final read")
    log("read while the writer is stopped: " + " ".join(ln.strip() for ln in r1.lines))
    writer.kill()
    writer.wait()
    txntest.wait_crash_restart(w, since, [writer.pid], progress)
    try:
        r1.finish()
    except TestFailure as e:  # its commit met the crash: it is no acknowledgement
        log(f"first final read: {e}")
    # Its I line, and its C line if it committed: else an unknown outcome.
    lines += [ln for ln in r1.lines if ln.startswith(("I ", "C "))]
    r2 = final(2)
    r2.finish()
    lines += r2.lines
    log("read after the crash restart: " + lines[-2].strip())
    res = elle.check(lines)
    res.report("serializable")
    bad = res.forbidden("serializable")
    wtest.check(not bad, "a committed transaction read a write that the crash then lost "
                "(visible before its WAL was written)")
    return 0


if __name__ == "__main__":
    wtest.guarded(main)

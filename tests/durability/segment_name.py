#!/usr/bin/env python3
"""A WAL segment's name is durable before anyone writes commits into it.

One process of the instance installs a new segment (renames its temp file
to the segment's name) and is stopped right before it fsyncs the WAL
directory (failpoint "fsync_dir:STOP:wal/NAME": the fsync that makes that
name durable).  A committing backend that reaches the segment finds the file
there: it must not take "the name exists" for "the name is durable".  The
load's commits are acknowledged, the power is cut (power-loss journal, mode
drop: the unsynced rename is undone) and every acknowledged key must be back.

Before the fix the backend used the segment as it found it: the power cut
took its name away, recovery stopped at the segment before it and the
acknowledged commits written into it were lost.

usage: segment_name.py --walrus PATH [--keep]
"""
import argparse, json, os, random, sys

sys.dont_write_bytecode = True  # no __pycache__ in the source tree
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import wtest  # noqa: E402
import workload  # noqa: E402
import powerloss  # noqa: E402
from io_errors import PLWalrus, items  # noqa: E402
from wtest import check, log  # noqa: E402

SEG = 256 * 1024
# No checkpoint (its recycling fsyncs the WAL directory too); the WAL writer
# wakes often, so that it creates the segments ahead of the commits.
OPTS = ["wal_segment_size=256kB", "max_wal_size=64MB", "min_wal_size=32MB",
        "checkpoint_timeout=1h", "wal_writer_delay=10ms"]


def insert_lsn(w):
    r = w.run("stats", "--json", timeout=60)
    check(r.returncode == 0, f"walrus stats failed: {r.stderr.decode()}")
    hi, lo = json.loads(r.stdout)["wal"]["insert_lsn"].split("/")
    return int(hi, 16) << 32 | int(lo, 16)


def lsn_of(name):
    return int(name, 16)


def load_until(w, book, rng, goal, what, done=lambda: False):
    """Small acknowledged loads until the WAL's insert position passes
    @goal (or done() holds)."""
    part = 0
    while not done():
        pos = insert_lsn(w)
        if pos >= goal:
            return pos
        n = max(1, min(200, (goal - pos) // 600))
        its = items(rng, f"{what}{part:03d}-", n)
        part += 1
        for k, v in its:
            book.send(k, v)
        rc, acked, err = w.load(its, batch=10)
        check(rc == 0, f"load failed: {err.strip()[-300:]}")
        for k in acked:
            book.ack(k)
    return insert_lsn(w)


def main(cleanup):
    ap = argparse.ArgumentParser()
    ap.add_argument("--walrus", default=wtest.default_walrus())
    ap.add_argument("--keep", action="store_true")
    a = ap.parse_args()
    rng = random.Random(11)
    base = wtest.tempdir(cleanup, "walrus-segname-", keep=a.keep)
    d = os.path.join(base, "data")
    jdir = os.path.join(base, "journal")
    os.mkdir(jdir)
    w = PLWalrus(a.walrus, d, OPTS, jdir)
    w.register(cleanup)
    w.create()
    book = wtest.AckBook()
    segs = sorted(n for n in os.listdir(os.path.join(d, "wal")) if len(n) == 16)
    check(segs, "no WAL segment after create")
    # Three segments past the last one there: created while the test loads.
    target = f"{lsn_of(segs[-1]) + 3 * SEG:016X}"
    since = w.log_size()
    w.serve(failpoints=f"fsync_dir:STOP:wal/{target}")

    def stopped_installer():
        for pid, name, _lv, msg in wtest.parse_log(w.log_text(since)):
            if msg.startswith("failpoint: stopping the process at fsync_dir"):
                return (pid, name) if wtest.stopped(pid) else None
        return None
    load_until(w, book, rng, lsn_of(target), "a", done=stopped_installer)
    who = wtest.wait_for(stopped_installer, 30)
    check(who is not None, f"no process of the instance stopped before the WAL directory "
          f"fsync for {target}:\n{w.log_tail(since, 20)}")
    check(who[1] != "walrus-backend", f"{who[1]} installed {target}, not a process of the "
          "instance: the test needs the instance to create it ahead of the commits")
    log(f"{who[1]} (pid {who[0]}) renamed {target} into place and stopped before its "
        "WAL directory fsync")
    check(os.path.exists(os.path.join(d, "wal", target)), f"{target} is not there")
    # Commits into the segment, a page past its start: acknowledged.
    pos = load_until(w, book, rng, lsn_of(target) + 16 * 1024, "b")
    check(pos < lsn_of(target) + SEG, "the load went past the segment "
          f"({pos:X}): the next one's creation would sync the directory for it")
    n_in = sum(1 for k in book.acked if k.startswith("b"))
    log(f"{len(book.acked)} keys acknowledged, {n_in} after the installer stopped; WAL "
        f"insert position {pos:X}")
    # The power cut: the stopped installer never fsyncs the directory.
    pids = wtest.instance_pids(w.dir)
    if w.serve_proc is not None and w.serve_proc.poll() is None:
        pids.append(w.serve_proc.pid)
    workload.stop_all_then_kill(pids)
    w.kill_instance()
    st = powerloss.simulate(jdir, d, "drop", rng)
    log(f"power cut (drop): {st}")
    wtest.check_acked(w, book, "after the power cut and recovery")
    w.kill_instance()
    log("PASS: every acknowledged key is back")
    return 0


if __name__ == "__main__":
    wtest.guarded(main)

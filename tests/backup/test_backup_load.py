#!/usr/bin/env python3
"""A base backup taken during a durable load of 8 client processes
(tests/durability/crashdrv, sync and batch modes, each on its own key
space), restored with `walrus restore`: each key space of the restored
directory holds the state after a prefix of its commits that includes every
commit acknowledged before the backup started (the crash suite's checker,
workload.Book: no lost acknowledged write, no partial batch, no value from
nowhere), `walrus verify` is clean, the restored instance takes writes, and
the source was not disturbed (it keeps taking writes).  The backup's
checkpoint is the default, spread one.  Small WAL segments
and a small buffer pool, so that the backup spans several segments and
pages are written while they are copied.

usage: test_backup_load.py --walrus PATH --driver PATH"""
import argparse, os, sys, time

sys.dont_write_bytecode = True
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import bk  # noqa: E402
import wtest  # noqa: E402
import workload  # noqa: E402
from wtest import check, log  # noqa: E402

# checkpoint_timeout: the backup's spread checkpoint (the default) takes about
# checkpoint_completion_target of it, the load running meanwhile.
OPTS = ["wal_segment_size=256kB", "max_wal_size=4MB", "min_wal_size=1MB", "shared_buffers=8MB",
        "wal_writer_delay=20ms", "supervisor_linger=2s", "checkpoint_timeout=3s",
        "checkpoint_completion_target=0.5"]
SPACES = [f"c{i}" for i in range(8)]


def acked_all(book, n):
    return all(sp.acked >= n for sp in book.spaces.values())


def main(cleanup):
    ap = argparse.ArgumentParser()
    ap.add_argument("--walrus", default=wtest.default_walrus())
    ap.add_argument("--driver", required=True)
    a = ap.parse_args()
    root = wtest.tempdir(cleanup, "walrus-backup-load-")
    src = wtest.Walrus(a.walrus, os.path.join(root, "src"), OPTS)
    src.register(cleanup)
    src.create()
    src.serve()
    book = workload.Book(SPACES)
    clients = [workload.DrvClient(a.driver, src, book.spaces[n], "sync" if i % 2 else "batch",
                                  f"{n}.1", 1000 + i, keys=400)
               for i, n in enumerate(SPACES)]
    try:
        check(wtest.wait_for(lambda: acked_all(book, 200), 120),
              "the clients did not get 200 commits acknowledged each")
        before = {n: sp.acked for n, sp in book.spaces.items()}
        dest = os.path.join(root, "backup")
        t0 = time.time()
        r = bk.backup(src, dest, "--progress", fast=False)
        out = r.stderr.decode(errors="replace")
        bk.must(r, "backup under load")
        during = {n: sp.acked - before[n] for n, sp in book.spaces.items()}
        log(f"backup in {time.time() - t0:.1f} s, commits acknowledged during it: "
            f"{sum(during.values())}; {out.strip().splitlines()[-1]}")
        lab = bk.label(dest)
        check(not os.path.exists(os.path.join(dest, bk.INCOMPLETE)), "DEST still marked")
        check(bk.lsn(lab["end_lsn"]) > bk.lsn(lab["start_lsn"]), f"label {lab}")
    finally:
        wtest.freeze_then_kill([c.p for c in clients])
        for c in clients:
            c.finish()
    check(all(not c.tracker.space.errors for c in clients),
          f"client errors: {[c.tracker.space.errors[:1] for c in clients]}")
    new = os.path.join(root, "restored")
    nw = wtest.Walrus(a.walrus, new, ["supervisor_linger=0"])
    nw.register(cleanup)
    bk.must(bk.restore(a.walrus, dest, new), "restore")
    for n, sp in book.spaces.items():
        sp.acked = before[n]  # what the restored copy must hold at least
    commits, acked = book.check(nw.scan())
    log(f"restored: {commits} commits found, every one of the {acked} acknowledged before "
        f"the backup started among them")
    nw.verify()
    bk.must(nw.run("put", "after-restore", "1"), "put on the restored instance")
    check(nw.run("get", "after-restore").stdout.strip() == b"1", "restored instance lost a put")
    # the source: alive, and every key of the clients still readable
    bk.must(src.run("put", "source-after", "1"), "put on the source after the backup")
    src.verify()
    log("1 passed, 0 failed")
    return 0


if __name__ == "__main__":
    wtest.guarded(main)

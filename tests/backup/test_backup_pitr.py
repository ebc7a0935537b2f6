#!/usr/bin/env python3
"""Point-in-time recovery from a base backup and a WAL archive, end to end
through `walrus backup` and `walrus restore`: a backup, batch A, restore
point rp1, batch B, archived by walrus-arch (archive_mode=on, archive_dir).
Restoring to rp1, to its LSN and to a
time between the batches gives exactly the base and batch A, on timeline 2;
to the end, both batches; a target past the archive's end is refused naming
the first segment the archive lacks, an unknown restore point naming it and
the ones there are; a damaged archived segment stops the
restore, naming where; NEWDIR stays marked incomplete after a failure.
Then timelines: the copy restored to rp1 (timeline 2) archives to the same
archive, is backed up and written to; that backup restored follows
timeline 2's history and starts timeline 3, and the first backup restored
again still follows timeline 1.

usage: test_backup_pitr.py --walrus PATH"""
import argparse, json, os, re, shutil, sys, time

sys.dont_write_bytecode = True
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import bk  # noqa: E402
import wtest  # noqa: E402
from wtest import check, log  # noqa: E402

SEG = 256 * 1024
OPTS = [f"wal_segment_size={SEG // 1024}kB", "supervisor_linger=0"]


def load(src, prefix, n):
    rc, acked, err = src.load([(f"{prefix}{i}", f"v{i}") for i in range(n)], batch=10)
    check(rc == 0 and len(acked) == n, f"load {prefix}: exit {rc}: {err}")


def wait_archived(src, upto):
    """Until the archiver (archive_dir) has archived every segment ending at or before @upto."""
    last = "00000001" + f"{upto - SEG:016X}"

    def done():
        r = src.run("stats", "--json")
        a = json.loads(r.stdout)["archiver"] if r.returncode == 0 else {}
        return a.get("last_archived") == last and a.get("archive_pending_bytes") == 0
    check(wtest.wait_for(done, 60), f"the archiver did not archive up to {last}")


def iso_utc(us):
    """"YYYY-MM-DD HH:MM:SS.ffffffZ" of @us microseconds since the epoch."""
    return time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime(us // 10**6)) + f".{us % 10**6:06d}Z"


def keys(w):
    return set(w.scan())


class Case:
    def __init__(self, a, root, cleanup, backup, archive):
        self.a, self.root, self.cleanup = a, root, cleanup
        self.backup, self.archive = backup, archive

    def restore(self, name, *target, archive=None):
        new = os.path.join(self.root, name)
        w = wtest.Walrus(self.a.walrus, new, ["supervisor_linger=0"])
        w.register(self.cleanup)
        r = bk.restore(self.a.walrus, self.backup, new, "--wal-archive",
                       archive or self.archive, *target)
        return w, r


def timeline_two(a, root, cleanup, c, want_a):
    """A restored copy (timeline 2) archiving to the same archive, backed up,
    written to and restored again: the restore follows timeline 2's history
    (segments before the branch under timeline 1's names, after it under
    2's) and starts timeline 3; the first backup restored again follows
    timeline 2 too (the latest, by default), or with --target-timeline
    current timeline 1 beside them."""
    _, r = c.restore("tl2", "--target-name", "rp1")
    bk.must(r, "restore for timeline 2")
    tl2 = wtest.Walrus(a.walrus, os.path.join(root, "tl2"),
                       OPTS + ["archive_mode=on", f"archive_dir={c.archive}"])
    tl2.register(cleanup)
    # (a process of the restore's instance was once seen here still exiting)
    for pid in wtest.instance_pids(tl2.dir):
        log(f"still there after the restore: {pid} {wtest.comm(pid)}")
    check(wtest.wait_for(lambda: not wtest.instance_pids(tl2.dir), 30),
          "the restore's instance did not go")
    tl2.serve()
    backup2 = os.path.join(root, "backup-tl2")
    bk.must(bk.backup(tl2, backup2), "backup on timeline 2")
    load(tl2, "tl2-", 200)
    end = bk.lsn(bk.must(tl2.run("switch-wal"), "switch-wal").strip())
    last = os.path.join(c.archive, "00000002" + f"{end - SEG:016X}")
    check(wtest.wait_for(lambda: os.path.exists(last), 60), f"{last} not archived")
    tl2.run("stop", "--wait")
    got = sorted(os.listdir(c.archive))
    check("00000002.history" in got, f"no history file archived: {got}")
    c2 = Case(a, root, cleanup, backup2, c.archive)
    w, r = c2.restore("from-tl2")
    bk.must(r, "restore of the timeline 2 backup")
    k = keys(w)
    want = want_a | {f"tl2-{i}" for i in range(200)}
    check(k == want, f"timeline 2 backup: {len(k)} keys, missing {sorted(want - k)[:3]}, "
          f"extra {sorted(k - want)[:3]}")
    check(w.controldata().get("Latest checkpoint's TimeLineID") == "3", "timeline 3 expected")
    w.verify()
    # By default a restore follows the latest timeline that descends from
    # the backup: the first backup ends on timeline 2 like the second.
    w, r = c.restore("tl1-latest")
    bk.must(r, "the first backup restored again, following the latest timeline")
    k = keys(w)
    check(k == want, f"the first backup, latest timeline: {len(k)} keys, missing "
          f"{sorted(want - k)[:3]}, extra {sorted(k - want)[:3]}")
    w, r = c.restore("tl1-again", "--target-timeline", "current")
    bk.must(r, "the first backup restored again, to the end of timeline 1")
    k = keys(w)
    check(len(k) == 601 and not any(x.startswith("tl2-") for x in k),
          f"timeline 1 again: {len(k)} keys")
    log("timeline 2: archived, backed up, restored on timeline 3; timeline 1 still restorable")


def main(cleanup):
    ap = argparse.ArgumentParser()
    ap.add_argument("--walrus", default=wtest.default_walrus())
    a = ap.parse_args()
    root = wtest.tempdir(cleanup, "walrus-backup-pitr-")
    archive = os.path.join(root, "archive")
    os.mkdir(archive)
    src = wtest.Walrus(a.walrus, os.path.join(root, "src"),
                       OPTS + ["archive_mode=on", f"archive_dir={archive}"])
    src.register(cleanup)
    src.create()
    src.serve()
    backup = os.path.join(root, "backup")
    bk.must(bk.backup(src, backup), "backup")
    load(src, "a", 300)
    rp_lsn = bk.must(src.run("restore-point", "rp1"), "restore-point").strip()
    rp_time = time.time_ns() // 1000
    while time.time_ns() // 1000 < rp_time + 2000:  # batch B in a later millisecond
        pass
    bk.must(src.run("switch-wal"), "switch-wal")
    load(src, "later-", 300)
    end = bk.lsn(bk.must(src.run("switch-wal"), "switch-wal").strip())
    wait_archived(src, end)
    src.run("stop", "--wait")
    want_a = {"walrus-test-init"} | {f"a{i}" for i in range(300)}
    c = Case(a, root, cleanup, backup, archive)
    passed = 0
    for name, target in [("by-name", ["--target-name", "rp1"]),
                         ("by-lsn", ["--target-lsn", rp_lsn]),
                         ("by-time", ["--target-time", f"@{rp_time // 10**6}.{rp_time % 10**6:06d}"]),
                         ("by-iso-time", ["--target-time", iso_utc(rp_time)])]:
        w, r = c.restore(name, *target)
        bk.must(r, f"restore {name}")
        k = keys(w)
        check(k == want_a, f"{name}: {len(k)} keys, missing {sorted(want_a - k)[:3]}, "
              f"extra {sorted(k - want_a)[:3]}")
        check(w.controldata().get("Latest checkpoint's TimeLineID") == "2", f"{name}: timeline")
        check(not os.path.exists(os.path.join(w.dir, "walrus.restore-incomplete")), name)
        w.verify()
        passed += 1
    w, r = c.restore("to-end")
    bk.must(r, "restore to the end")
    k = keys(w)
    check(len(k) == 601, f"to the end: {len(k)} keys")
    log(f"{passed + 1} restores gave exactly the WAL up to their target")

    w, r = c.restore("beyond", "--target-lsn", "7/0")
    first_missing = "00000001" + f"{end:016X}"
    err = r.stderr.decode(errors="replace")
    check(r.returncode != 0 and first_missing in err, f"beyond the end: {err.strip()}")
    check(os.path.exists(os.path.join(w.dir, "walrus.restore-incomplete")),
          "beyond the end: NEWDIR not marked incomplete")
    refused = w.run("get", "a1")
    check(refused.returncode != 0 and b"interrupted restore" in refused.stderr,
          f"a failed restore opens: {refused.stderr.decode(errors='replace')}")

    # An unknown restore point: the error names it first (it used to begin
    # with the missing segment that ended the replay), and the ones there are.
    w, r = c.restore("no-name", "--target-name", "nope")
    err = r.stderr.decode(errors="replace")
    check(r.returncode != 0 and re.search(
        r'restore: recovery failed: restore point "nope" not found in the WAL from '
        r'[0-9A-F]+/[0-9A-F]{8} to [0-9A-F]+/[0-9A-F]{8} \(restore points there: "rp1"\)',
        err), f"unknown restore point: {err.strip()}")

    # damage inside the archived segment that holds rp1 (after the backup's end)
    damaged = os.path.join(root, "archive-damaged")
    shutil.copytree(archive, damaged)
    seg_rp = bk.lsn(rp_lsn) // SEG * SEG
    victim = os.path.join(damaged, "00000001" + f"{seg_rp:016X}")
    off = bk.lsn(rp_lsn) - seg_rp - 200
    with open(victim, "r+b") as f:
        f.seek(off)
        f.write(b"\xff" * 64)
    w, r = c.restore("damaged", "--target-name", "rp1", archive=damaged)
    err = r.stderr.decode(errors="replace")
    seg_lsn = f"{seg_rp >> 32:X}/{seg_rp & 0xffffffff:08X}"
    check(r.returncode != 0 and f"archived segment 00000001{seg_rp:016X}" in err,
          f"damaged archive segment: exit {r.returncode}: {err.strip()} (segment {seg_lsn})")
    log(f"refused: beyond the archive ({first_missing}), damaged segment: {err.strip()}")
    timeline_two(a, root, cleanup, c, want_a)
    log("1 passed, 0 failed")
    return 0


if __name__ == "__main__":
    wtest.guarded(main)

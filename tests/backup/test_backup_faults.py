#!/usr/bin/env python3
"""Faults of a base backup and refusals of a restore:
  - DEST not empty: refused, its contents untouched;
  - the backup process SIGKILLed at each of its steps (failpoints
    backup:KILL:start, copy-data, copy-wal, before-label, before-done):
    DEST keeps walrus.backup-incomplete, `walrus restore` and opening DEST
    refuse it, the source restarts from the dead client and keeps every
    acknowledged key and takes writes, and a new backup of it succeeds;
  - Ctrl-C on `walrus backup` while it copies (held there by
    backup:STOP:copy-data, then SIGINT and SIGCONT): it exits 130 saying
    DEST is incomplete, the source does not restart (the process ended its
    backup and detached) and the next backup is not refused;
  - an I/O error while copying (backup:EIO:copy-data): the backup fails with
    the error, DEST stays marked, and the next backup is not refused as
    "already running" (the failed one released its hold on the WAL);
  - a backup lacking a WAL segment of its range: restore refused, naming it;
  - --verify: the good backup restored in a scratch directory, checked, removed;
  - NEWDIR not empty: restore refused; a directory without backup_label too;
  - the commands' usage errors and --help.
A load of the source runs in the background during each backup.

usage: test_backup_faults.py --walrus PATH"""
import argparse, os, signal, subprocess, sys

sys.dont_write_bytecode = True
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import bk  # noqa: E402
import wtest  # noqa: E402
from wtest import check, log  # noqa: E402

OPTS = ["wal_segment_size=256kB", "shared_buffers=8MB", "supervisor_linger=0"]
POINTS = ["start", "copy-data", "copy-wal", "before-label", "before-done"]
# What DEST holds at least when the backup is killed at each step.
STEP_LEFT = {"start": {bk.INCOMPLETE}, "copy-data": {"base"},
             "copy-wal": {"base", "WALRUS_VERSION", "wal"},
             "before-label": {"base", "WALRUS_VERSION", "wal"},
             "before-done": {"base", "WALRUS_VERSION", "wal", "walrus.control", "backup_label"}}


def refused(r, pattern, what):
    err = r.stderr.decode(errors="replace")
    check(r.returncode != 0 and pattern in err, f"{what}: exit {r.returncode}: {err.strip()}")


def load_keys(src, prefix, n):
    rc, acked, err = src.load([(f"{prefix}{i}", f"v{i}") for i in range(n)], batch=10)
    check(rc == 0 and len(acked) == n, f"load {prefix}: exit {rc}, {len(acked)} acked: {err}")


def check_marked(a, root, dest, what):
    check(os.path.exists(os.path.join(dest, bk.INCOMPLETE)), f"{what}: DEST not marked")
    refused(bk.restore(a.walrus, dest, os.path.join(root, "never")), "interrupted base backup",
            f"{what}: restore of DEST")
    check(not os.path.exists(os.path.join(root, "never")), f"{what}: restore made NEWDIR")
    if os.path.exists(os.path.join(dest, "WALRUS_VERSION")):
        d = wtest.Walrus(a.walrus, dest, ["supervisor_linger=0"])
        refused(d.run("get", "k0"), "interrupted backup", f"{what}: opening DEST")


def kill_at(a, root, src, point, n):
    dest = os.path.join(root, f"kill{n}")  # no step's name in it: failpoints match paths
    r = bk.backup(src, dest, failpoints=f"backup:KILL:{point}")
    check(r.returncode == -signal.SIGKILL,
          f"{point}: the backup was not killed there (exit {r.returncode}: "
          f"{r.stderr.decode(errors='replace').strip()})")
    check_marked(a, root, dest, f"kill at {point}")
    got = set(os.listdir(dest))
    check(got >= STEP_LEFT[point], f"{point}: killed elsewhere: DEST holds {sorted(got)}")
    # the source: the dead client's crash restart, then everything acknowledged is there
    kv = src.scan()
    check(all(kv.get(f"k{n}-{i}") == f"v{i}" for i in range(200)),
          f"{point}: acknowledged keys lost on the source")
    load_keys(src, f"after-{point}-", 20)


def ctrl_c(a, root, src):
    dest = os.path.join(root, "ctrlc")
    restarts = bk.stats(src)["instance"]["crash_restarts"]
    since = src.log_size()
    p = subprocess.Popen(src.argv("backup", dest, "--checkpoint", "fast"),
                         stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                         env=src.env("backup:STOP:copy-data"))
    try:
        check(wtest.wait_for(lambda: wtest.stopped(p.pid), 60),
              "the backup did not stop before copying a data file")
        p.send_signal(signal.SIGINT)
        p.send_signal(signal.SIGCONT)
        _, err = p.communicate(timeout=120)
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()
    err = err.decode(errors="replace")
    check(p.returncode == 128 + signal.SIGINT and "stopped by signal 2" in err,
          f"Ctrl-C on walrus backup: exit {p.returncode}: {err.strip()}")
    check_marked(a, root, dest, "Ctrl-C")
    check(not src.log_has("ended without detaching", since),
          f"Ctrl-C on walrus backup restarted the source:\n{src.log_tail(since)}")
    check(bk.stats(src)["instance"]["crash_restarts"] == restarts, "the source restarted")
    bk.must(bk.backup(src, os.path.join(root, "after-ctrlc")), "a backup after Ctrl-C")
    log("Ctrl-C on walrus backup: exit 130, DEST marked, the source kept running")


def main(cleanup):
    ap = argparse.ArgumentParser()
    ap.add_argument("--walrus", default=wtest.default_walrus())
    a = ap.parse_args()
    root = wtest.tempdir(cleanup, "walrus-backup-faults-")
    src = wtest.Walrus(a.walrus, os.path.join(root, "src"), OPTS)
    src.register(cleanup)
    src.create()
    src.serve()  # no failpoint of a backup reaches the instance

    for args, code, text in [(["backup", "--help"], 0, b"usage: walrus -D DIR backup DEST"),
                             (["restore", "--help"], 0, b"usage: walrus restore --from"),
                             (["backup"], 2, b"no destination"),
                             (["restore", "x"], 2, b"--from BACKUP and NEWDIR are required"),
                             (["restore", "--from", "b", "--target-lsn", "0/1", "--target-name",
                               "n", "x"], 2, b"at most one --target-"),
                             (["restore", "--from", root, "--target-time", "yesterday", "x"], 2,
                              b"bad target time"),
                             (["restore", "--from", root, "--target-lsn", "12", "x"], 2,
                              b"bad target LSN")]:
        r = src.run(*args)
        check(r.returncode == code and text in r.stdout + r.stderr,
              f"walrus {' '.join(args)}: exit {r.returncode}: {r.stdout + r.stderr}")
    check(not os.path.exists("x"), "a refused restore made its NEWDIR")
    refused(bk.restore(a.walrus, root, os.path.join(root, "nolabel")), "has no backup_label",
            "restore of a directory that is no backup")

    full = os.path.join(root, "full")
    os.mkdir(full)
    with open(os.path.join(full, "precious"), "w") as f:
        f.write("keep me")
    refused(bk.backup(src, full), "is not empty", "DEST not empty")
    check(os.listdir(full) == ["precious"], f"DEST touched: {os.listdir(full)}")

    for n, point in enumerate(POINTS):
        load_keys(src, f"k{n}-", 200)
        kill_at(a, root, src, point, n)
    log(f"killed at {len(POINTS)} points: DEST marked and refused, the source intact")

    ctrl_c(a, root, src)

    dest = os.path.join(root, "eio")
    r = bk.backup(src, dest, failpoints="backup:EIO:copy-data")
    refused(r, "backup failpoint at copy-data", "EIO while copying")
    check_marked(a, root, dest, "EIO while copying")
    good = os.path.join(root, "good")
    r = bk.backup(src, good, "--verify")
    bk.must(r, "a backup after the failed one, --verify")
    check(b"backup: verified" in r.stderr, f"--verify: {r.stderr}")
    check(not [d for d in os.listdir(root) if ".verify-" in d], "--verify left its scratch")
    # a finished backup opened as it is would replay only its own WAL: refused
    gw = wtest.Walrus(a.walrus, good, ["supervisor_linger=0"])
    gw.register(cleanup)
    refused(gw.run("get", "k0-0"), "is a base backup", "a backup opened as it is")
    check(os.path.exists(os.path.join(good, "backup_label")), "the refused open changed it")
    new = os.path.join(root, "restored")
    nw = wtest.Walrus(a.walrus, new, ["supervisor_linger=0"])
    nw.register(cleanup)
    bk.must(bk.restore(a.walrus, good, new), "restore of the good backup")
    kv = nw.scan()
    check(all(kv.get(f"k{n}-{i}") == f"v{i}" for n in range(len(POINTS)) for i in range(200)),
          "restored copy lacks acknowledged keys")
    nw.verify()

    full2 = os.path.join(root, "full2")
    os.mkdir(full2)
    open(os.path.join(full2, "x"), "w").close()
    refused(bk.restore(a.walrus, good, full2), "is not empty", "NEWDIR not empty")
    check(os.listdir(full2) == ["x"], "NEWDIR touched")

    for point in ("restore-copied", "restore-gathered"):
        cut = os.path.join(root, f"cut-{point[8:]}")
        r = subprocess.run([a.walrus, "restore", "--from", good, cut], capture_output=True,
                           env=dict(os.environ, WALRUS_FAILPOINTS=f"backup:KILL:{point}"))
        check(r.returncode == -signal.SIGKILL, f"restore not killed at {point}: {r.returncode}")
        check(os.path.exists(os.path.join(cut, "walrus.restore-incomplete")),
              f"a restore killed at {point} left NEWDIR unmarked")
        cw = wtest.Walrus(a.walrus, cut, ["supervisor_linger=0"])
        cw.register(cleanup)
        refused(cw.run("get", "k0-0"), "interrupted restore", f"killed at {point}, opened")
    log("restore killed after copying and after gathering: NEWDIR marked and refused")

    lab = bk.label(good)
    seg = int(lab["wal_segment_size"])
    first = bk.lsn(lab["start_lsn"]) // seg * seg
    name = f"{first:016X}"
    os.unlink(os.path.join(good, "wal", name))
    missing = os.path.join(root, "missing")
    refused(bk.restore(a.walrus, good, missing), f"lacks WAL segment {name}",
            "backup without a WAL segment")
    check(os.path.exists(os.path.join(missing, "walrus.restore-incomplete")),
          "a refused restore left NEWDIR unmarked")
    src.run("stop", "--wait")
    log("1 passed, 0 failed")
    return 0


if __name__ == "__main__":
    wtest.guarded(main)

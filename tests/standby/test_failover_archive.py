#!/usr/bin/env python3
"""Point-in-time recovery across a failover, from one shared WAL archive.

A primary archives into ARCHIVE; its streaming standby has the same
archive_dir.  The primary's archiver is frozen (SIGSTOP), so the last
segments it writes are never archived by it; then the primary is killed and
the standby promoted.  Checked:

- a point-in-time recovery made before the promotion took timeline 2 in the
  archive: the promotion takes 3, and nothing clashes there;
- the promoted standby archives the old timeline's segments its primary did
  not (under timeline 1's names), then its own under timeline 3: a restore of
  a base backup taken before the failover (recovery_target_timeline latest,
  the default) brings back every key, from both timelines;
- `--target-timeline current` stays on the backup's timeline: nothing
  written after the failover;
- a restore point made on the new primary, and a time after the failover,
  are reached from the old backup;
- the restored copy starts timeline 4 (one above every timeline in the
  archive), its history file names both branch points; the next restore
  starts timeline 5;
- bad --target-timeline values are refused with a clear message."""
import os, signal, time

import sb
import wtest
from wtest import check, log

OPTS = ["wal_segment_size=1MB", "min_wal_size=2MB", "max_wal_size=4MB"]


def write(w, tag, n=40):
    lines = "".join(f"{tag}{i:04d}\tvalue-{tag}-{i}\n" for i in range(n))
    sb.must(w.run("load", "--sync", input=lines.encode()), f"load {tag}")


def tags(rows):
    """The groups of keys write() made (a0000 ...)."""
    return sorted({k[0] for k, _ in rows if len(k) == 5 and k[1:].isdigit()})


def restore(exe, root, backup, archive, name, *extra):
    d = os.path.join(root, name)
    r = wtest.Walrus(exe, d, OPTS)
    out = sb.must(wtest.Walrus(exe, root, OPTS).run(
        "restore", "--from", backup, "--wal-archive", archive, *extra, d, timeout=300),
        f"restore {name}")
    check("restored into" in out, f"restore {name}: {out!r}")
    return r


def main(cleanup):
    exe, root = sb.setup(cleanup, "failover-archive")
    sock = os.path.join(root, "repl.sock")
    archive = os.path.join(root, "archive")
    os.mkdir(archive, 0o700)
    pdir = os.path.join(root, "primary")
    sb.write_conf(pdir, f"listen_replication = '{sock}'\nreplication_password = 'secret'\n"
                  f"archive_mode = on\narchive_dir = '{archive}'\n")
    p = wtest.Walrus(exe, pdir, OPTS)
    p.register(cleanup)
    p.create()
    write(p, "a")
    backup = os.path.join(root, "backup0")
    sb.must(p.run("backup", backup, "--checkpoint", "fast"), "backup before the failover")
    write(p, "b")
    sdir = os.path.join(root, "standby")
    sb.must(p.run("backup", sdir, "--checkpoint", "fast"), "backup for the standby")
    sb.must(p.run("stop", "--wait"), "stop")
    p.serve()
    s = wtest.Walrus(exe, sdir, OPTS)
    s.register(cleanup)
    os.environ["WALRUS_REPLICATION_PASSWORD"] = "secret"
    st = sb.Standby(s, ["--primary", sock])
    st.start()

    log("the primary's archiver frozen; WAL it never archives")
    arch = wtest.named(wtest.instance_pids(pdir), "walrus-arch")
    check(len(arch) == 1, f"the primary's archiver: {arch}")
    os.kill(arch[0], signal.SIGSTOP)
    for i in range(3):
        write(p, "c", 40 + i)
        sb.must(p.run("switch-wal"), "switch-wal")
    write(p, "c", 60)
    sb.wait_replayed(s, sb.lsn(sb.stats(p)["wal"]["flush_lsn"]))
    expected_c = sorted(k for k, _ in sb.scan(p) if k.startswith("c"))
    p.kill_instance(extra=arch)

    log("a point-in-time recovery before the promotion takes timeline 2")
    restore(exe, root, backup, archive, "pitr-first", "--target-timeline", "current")
    check(os.path.exists(os.path.join(archive, "00000002.history")),
          f"the restore did not archive its history: {sorted(os.listdir(archive))}")

    log("promotion: timeline 3, one above the archive's; writes and a restore point")
    sb.must(s.run("promote", timeout=120), "promote")
    check(s.controldata().get("Latest checkpoint's TimeLineID") == "3",
          f"the promotion's timeline: {s.controldata()}")
    write(s, "d")
    sb.must(s.run("restore-point", "after-failover"), "restore point")
    after_d = time.time()  # between the commits of d and those of e
    write(s, "e")
    sb.must(s.run("switch-wal"), "switch-wal on the new primary")
    check(wtest.wait_for(lambda: sb.stats(s)["archiver"]["archive_pending_bytes"] == 0, 60),
          f"the new primary did not archive everything: {sb.stats(s)['archiver']}")
    old = sorted(n for n in os.listdir(archive) if n.startswith("00000001") and len(n) == 24)
    log(f"  timeline 1 in the archive: {old[0]} .. {old[-1]} ({len(old)} segments)")
    st.stop()

    log("restore of the old backup follows the latest timeline")
    r = restore(exe, root, backup, archive, "latest")
    rows = sb.scan(r)
    check(tags(rows) == ["a", "b", "c", "d", "e"], f"latest: key groups {tags(rows)}")
    check(sorted(k for k, _ in rows if k.startswith("c")) == expected_c,
          "latest: the keys written while the primary's archiver was frozen differ")
    check(r.controldata().get("Latest checkpoint's TimeLineID") == "4",
          f"the restored copy's timeline: {r.controldata()}")
    with open(os.path.join(r.dir, "wal", "00000004.history")) as f:
        hist = [line.split("\t")[0] for line in f.read().splitlines() if line]
    check(hist == ["1", "3"], f"timeline 4's history: {hist}")
    sb.must(r.run("verify"), "verify the restored copy")

    log("--target-timeline current stays on timeline 1")
    r = restore(exe, root, backup, archive, "current", "--target-timeline", "current")
    check(r.controldata().get("Latest checkpoint's TimeLineID") == "5",
          f"the second restored copy's timeline: {r.controldata()}")
    got = tags(sb.scan(r))
    check("d" not in got and "e" not in got and got[:2] == ["a", "b"],
          f"current: key groups {got}")

    # Each restore started a timeline of its own (4 and 5) in the archive,
    # which "latest" would follow now: the promotion's, 3, is named.
    log("a restore point made after the failover")
    r = restore(exe, root, backup, archive, "named", "--target-name", "after-failover",
                "--target-timeline", "3")
    check(tags(sb.scan(r)) == ["a", "b", "c", "d"], f"named: key groups {tags(sb.scan(r))}")

    log("a time after the failover")
    r = restore(exe, root, backup, archive, "timed", "--target-time", f"@{after_d:.6f}",
                "--target-timeline", "3")
    check(tags(sb.scan(r)) == ["a", "b", "c", "d"], f"timed: key groups {tags(sb.scan(r))}")

    log("bad --target-timeline values")
    top = wtest.Walrus(exe, root, OPTS)
    for bad, code, words in (("banana", 2, "bad target timeline"), ("0", 2, "bad target timeline"),
                             ("-3", 2, "bad target timeline"), ("9", 3, "00000009.history")):
        r = top.run("restore", "--from", backup, "--wal-archive", archive,
                    "--target-timeline", bad, os.path.join(root, "bad-" + bad))
        err = r.stderr.decode(errors="replace")
        check(r.returncode == code and words in err,
              f"--target-timeline {bad}: exit {r.returncode}: {err}")
    return 0


if __name__ == "__main__":
    wtest.guarded(main)

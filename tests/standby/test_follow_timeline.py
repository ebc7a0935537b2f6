#!/usr/bin/env python3
"""Standbys follow a promoted sibling onto its new timeline.

Three streaming standbys of one primary.  The first two stop while the
third receives more; the primary is killed and the first standby promoted
(timeline 2).  Checked:

- the second standby, pointed at the new primary, follows timeline 2: the
  primary sends timeline 2's history file first, the standby records the
  timeline in its control file before any WAL of it, streams, and ends with
  the new primary's scan; after a restart it asks for timeline 2 and goes on;
- the third standby, whose WAL goes past the point where timeline 2
  branched off, is refused for good: it stops, naming both positions;
- the second standby, promoted in turn, starts timeline 3 whose history
  names both branches."""
import os

import sb
import wtest
from wtest import check, log

OPTS = ["wal_segment_size=1MB", "min_wal_size=2MB", "max_wal_size=4MB"]


def write(w, tag, n=50):
    lines = "".join(f"{tag}{i:04d}\tvalue-{tag}-{i}\n" for i in range(n))
    sb.must(w.run("load", "--sync", input=lines.encode()), f"load {tag}")


def receiver(s):
    return sb.stats(s)["replication"]["receiver"]


def caught_up(p, s, timeout=60):
    try:
        sb.wait_replayed(s, sb.lsn(sb.stats(p)["wal"]["flush_lsn"]), timeout)
    except wtest.TestFailure:
        log(f"the standby's log:\n{s.log_tail(n=30)}\nits primary's log:\n{p.log_tail(n=30)}")
        raise
    check(sb.scan(s) == sb.scan(p), "the standby's data differ from its primary's")


def point_at(s, sock):
    with open(os.path.join(s.dir, "walrus.standby"), "w") as f:
        f.write(f"primary = '{sock}'\npassword = 'secret'\n")
    os.chmod(os.path.join(s.dir, "walrus.standby"), 0o600)


def main(cleanup):
    exe, root = sb.setup(cleanup, "follow")
    sock = os.path.join(root, "repl.sock")
    pdir = os.path.join(root, "primary")
    sb.write_conf(pdir, f"listen_replication = '{sock}'\nreplication_password = 'secret'\n")
    p = wtest.Walrus(exe, pdir, OPTS)
    p.register(cleanup)
    p.create()
    write(p, "a")
    os.environ["WALRUS_REPLICATION_PASSWORD"] = "secret"
    standbys, runs, socks = [], [], []
    for n in range(3):
        d = os.path.join(root, f"s{n}")
        sb.must(p.run("backup", d, "--checkpoint", "fast"), f"backup for s{n}")
        socks.append(os.path.join(root, f"s{n}.sock"))
        # Where each listens once promoted (a standby listens only then).
        with open(os.path.join(d, "walrus.conf"), "a") as f:
            f.write(f"listen_replication = '{socks[n]}'\nreplication_password = 'secret'\n")
        point_at(wtest.Walrus(exe, d), sock)
        s = wtest.Walrus(exe, d, OPTS)
        s.register(cleanup)
        standbys.append(s)
    sb.must(p.run("stop", "--wait"), "stop")
    p.serve()
    for s in standbys:
        runs.append(sb.Standby(s))
        runs[-1].start()
    write(p, "b")
    for s in standbys:
        caught_up(p, s)
    s0, s1, s2 = standbys

    log("s0 and s1 stop; s2 receives more; the primary dies")
    # Stopped, not frozen: a frozen receiver still reads what the primary
    # had sent into its socket once it goes on.
    runs[0].stop()
    runs[1].stop()
    write(p, "c")
    caught_up(p, s2)
    p.kill_instance()

    log("s0 promoted: timeline 2")
    runs[0] = sb.Standby(s0)
    runs[0].start()
    sb.must(s0.run("promote", timeout=120), "promote s0")
    check(s0.controldata().get("Latest checkpoint's TimeLineID") == "2", "s0's timeline")
    write(s0, "d")

    log("s1 follows s0 onto timeline 2")
    point_at(s1, socks[0])
    runs[1] = sb.Standby(s1)
    runs[1].start()
    caught_up(s0, s1)
    check(s1.log_has(r"following the primary's timeline 2 from"), "no switch logged")
    check(s1.controldata().get("Latest checkpoint's TimeLineID") == "2",
          f"s1's control file: {s1.controldata()}")
    check(os.path.exists(os.path.join(s1.dir, "wal", "00000002.history")), "no history on s1")
    check(receiver(s1)["timeline"] == 2, f"s1's receiver: {receiver(s1)}")
    runs[1].stop()
    runs[1] = sb.Standby(s1)
    runs[1].start()
    write(s0, "e")
    caught_up(s0, s1)

    log("s2, past the branch, is refused")
    runs[2].stop()
    point_at(s2, socks[0])
    line = sb.Standby(s2).refused(r"cannot follow timeline 2: the standby's WAL reaches "
                                  r"\S+, past \S+ where it branched off timeline 1")
    log(f"  {line}")

    log("s1 promoted in turn: timeline 3")
    sb.must(s1.run("promote", timeout=120), "promote s1")
    check(s1.controldata().get("Latest checkpoint's TimeLineID") == "3", "s1's timeline")
    with open(os.path.join(s1.dir, "wal", "00000003.history")) as f:
        hist = [line.split("\t")[0] for line in f.read().splitlines() if line]
    check(hist == ["1", "2"], f"timeline 3's history: {hist}")
    sb.must(s1.run("put", "f", "1"), "a write on s1")
    sb.must(s1.run("verify"), "verify s1")
    runs[1].stop()
    return 0


if __name__ == "__main__":
    wtest.guarded(main)

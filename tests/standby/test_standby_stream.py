#!/usr/bin/env python3
"""A hot standby fed by streaming (walrus standby --primary), on this machine
over a Unix socket:

- the standby streams, replays and serves what the primary wrote;
- lag in time in the primary's stats (write/flush/replay_lag_ms): with the
  standby's replay stopped (SIGSTOP) the replay lag grows past a second
  while write and flush are idle (0); caught up, all three are 0;
- `walrus backup` of the standby is refused, the reason printed once (the
  library's log line about it reached the tool's stderr too);
- the standby killed (every process) and restarted mid-stream catches up;
- a network cut (its walrus-wrcv killed): the receiver starts again and the
  stream resumes from what is durable;
- a wrong password: the standby stops (exit 2), its FATAL line says so and
  what to do, the primary keeps serving;
- the primary's WAL recycled past a stopped standby without a slot: the
  standby stops, naming the missing segment; with the archive (wal_archive)
  it catches up from there and streams again;
- with a replication slot the primary keeps what the stopped standby needs
  and it catches up by streaming alone;
- after the standby's promotion, the former primary, whose WAL goes past
  the branch, cannot follow it: it stops, naming both positions."""
import argparse, os, signal

import sb
import wtest
from wtest import check, log

OPTS = ["wal_segment_size=1MB", "min_wal_size=2MB", "max_wal_size=4MB"]


def receiver(s):
    return sb.stats(s)["replication"]["receiver"]


def caught_up(p, s, timeout=60):
    target = sb.lsn(sb.stats(p)["wal"]["flush_lsn"])
    sb.wait_replayed(s, target, timeout)
    check(sb.scan(s) == sb.scan(p), "the standby's data differ from the primary's")


def write(p, tag, n=50):
    lines = "".join(f"{tag}{i:04d}\tvalue-{tag}-{i}\n" for i in range(n))
    sb.must(p.run("load", "--sync", input=lines.encode()), f"load {tag}")


def recycle(p, n=6):
    """Enough segments and checkpoints that the old ones are recycled.  A
    segment is recycled only once archived: each checkpoint waits for the
    archiver to take the segment just switched (on a fast machine the six
    rounds ended before it had archived any, and nothing was recycled)."""
    for i in range(n):
        write(p, f"r{i}-", 20)
        before = sb.stats(p)["archiver"]["archived_count"]
        sb.must(p.run("switch-wal"), "switch-wal")
        check(wtest.wait_for(lambda: sb.stats(p)["archiver"]["archived_count"] > before, 60),
              f"the archiver did not archive the switched segment: {sb.stats(p)['archiver']}")
        sb.must(p.run("checkpoint"), "checkpoint")


def main(cleanup):
    ap = argparse.ArgumentParser()
    ap.add_argument("--walrus", default=wtest.default_walrus())
    a = ap.parse_args()
    root = wtest.tempdir(cleanup, "walrus-standby-stream-")
    sock = os.path.join(root, "repl.sock")
    archive = os.path.join(root, "archive")
    os.mkdir(archive, 0o700)
    pdir = os.path.join(root, "primary")
    sb.write_conf(pdir, f"listen_replication = '{sock}'\nreplication_password = 'secret'\n"
                  f"archive_mode = on\narchive_dir = '{archive}'\n")
    p = wtest.Walrus(a.walrus, pdir, OPTS)
    p.register(cleanup)
    p.create()
    write(p, "a")
    sdir = os.path.join(root, "standby")
    sb.must(p.run("backup", sdir, "--checkpoint", "fast"), "backup")
    sb.must(p.run("stop", "--wait"), "stop")
    p.serve()
    s = wtest.Walrus(a.walrus, sdir, OPTS)
    s.register(cleanup)
    os.environ["WALRUS_REPLICATION_PASSWORD"] = "secret"
    st = sb.Standby(s, ["--primary", sock])
    st.start()

    log("streaming")
    write(p, "b")
    caught_up(p, s)
    check(receiver(s)["state"] == "streaming", f"receiver: {receiver(s)}")

    log("walrus backup on the standby: refused, said once")
    r = s.run("backup", os.path.join(root, "from-standby"))
    err = r.stderr.decode(errors="replace")
    check(r.returncode == 3 and err.count("is a standby in recovery") == 1,
          f"backup on a standby: exit {r.returncode}: {err}")

    log("lag in time: replay stopped, then idle")
    sender = lambda: sb.stats(p)["replication"]["senders"][0]  # noqa: E731
    lags = ("write_lag_ms", "flush_lag_ms", "replay_lag_ms")
    check(all(sender()[k] >= 0 for k in lags), f"lag fields: {sender()}")
    startup = wtest.named(wtest.instance_pids(s.dir), "walrus-startup")
    check(len(startup) == 1, f"the standby's startup process: {startup}")
    os.kill(startup[0], signal.SIGSTOP)
    cleanup.add(lambda: wtest.kill_pids(startup, signal.SIGCONT))
    write(p, "lag")
    # Written and flushed there, not replayed: the replay lag grows with
    # each FEEDBACK (one a second at least), the others are idle (0).
    check(wtest.wait_for(lambda: sender()["replay_lag_ms"] >= 1000 and
                         sender()["write_lag_ms"] == 0 and sender()["flush_lag_ms"] == 0, 60),
          f"replay stopped: {sender()}")
    os.kill(startup[0], signal.SIGCONT)
    caught_up(p, s)
    check(wtest.wait_for(lambda: all(sender()[k] == 0 for k in lags), 60),
          f"caught up and idle, the lags are not 0: {sender()}")

    log("the standby killed and restarted mid-stream")
    s.kill_instance()
    write(p, "c")
    st = sb.Standby(s)
    st.start()
    caught_up(p, s)

    log("a network cut: the receiver killed")
    old = receiver(s)["pid"]
    os.kill(old, signal.SIGKILL)
    check(wtest.wait_for(lambda: receiver(s)["pid"] not in (0, old) and
                         receiver(s)["state"] == "streaming", 60),
          f"the receiver did not come back: {receiver(s)}")
    write(p, "d")
    caught_up(p, s)

    log("WAL recycled past a standby without a slot")
    st.stop()
    recycle(p)
    with open(os.path.join(sdir, "walrus.standby")) as f:
        settings = f.read()
    line = sb.Standby(s).refused(r"requested WAL segment \w+ has already been removed.*"
                                 r"WAL archive")
    log(f"  {line}")
    with open(os.path.join(sdir, "walrus.standby"), "w") as f:
        f.write(settings + f"wal_archive = '{archive}'\n")
    st = sb.Standby(s)
    st.start()
    caught_up(p, s)
    check(sb.stats(s)["standby"]["segments_restored"] > 0, "nothing came from the archive")
    check(wtest.wait_for(lambda: receiver(s)["state"] == "streaming", 60),
          f"not streaming after the archive: {receiver(s)}")

    log("a slot keeps the WAL of a stopped standby")
    sb.must(p.run("slot", "create", "sb1"), "slot create")
    st.stop()
    with open(os.path.join(sdir, "walrus.standby"), "w") as f:
        f.write(settings + "slot = 'sb1'\n")
    st = sb.Standby(s)
    st.start()
    caught_up(p, s)
    st.stop()
    recycle(p)
    st = sb.Standby(s)  # the archive is not in its settings now: streaming alone
    st.start()
    caught_up(p, s)

    log("a wrong password")
    st.stop()
    with open(os.path.join(sdir, "walrus.standby"), "w") as f:
        f.write(settings.replace("password = 'secret'", "password = 'wrong'"))
    sb.Standby(s).refused(r"authentication failed.*must be the primary's "
                          r"replication_password")
    sb.must(p.run("put", "still", "serving"), "the primary after a bad password")
    with open(os.path.join(sdir, "walrus.standby"), "w") as f:
        f.write(settings)

    log("promotion; the former primary cannot follow on its old timeline")
    st = sb.Standby(s)
    st.start()
    caught_up(p, s)
    sb.must(s.run("promote"), "promote")
    write(p, "z")  # the former primary's WAL goes past the branch
    p.kill_instance()
    sock2 = os.path.join(root, "repl2.sock")
    st.stop()
    with open(os.path.join(sdir, "walrus.conf"), "a") as f:
        f.write(f"listen_replication = '{sock2}'\nreplication_password = 'secret'\n")
    s.serve()
    with open(os.path.join(pdir, "walrus.standby"), "w") as f:
        f.write(f"primary = '{sock2}'\npassword = 'secret'\n")
    os.chmod(os.path.join(pdir, "walrus.standby"), 0o600)
    line = sb.Standby(p).refused(r"cannot follow timeline 2: the standby's WAL reaches "
                                 r"\S+, past \S+ where it branched off timeline 1")
    log(f"  {line}")
    return 0


if __name__ == "__main__":
    wtest.guarded(main)

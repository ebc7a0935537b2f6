#!/usr/bin/env python3
"""Failover under load: a primary under an 8-process durable load (the crash
suite's crashdrv clients, sync and batch modes, each on its own key space)
streams to a standby; the primary is SIGKILLed (every process) at a random
moment; the standby is promoted.

- with synchronous_standby naming the standby, every write acknowledged by
  the primary is on the promoted standby (workload.Book: no acknowledged
  write lost, no partial batch, no value from nowhere);
- without it, the promoted standby holds a consistent prefix of every key
  space, and it has at least the WAL the primary's statistics reported the
  standby flushed just before the kill (what was lost is at most the lag);
- the promoted standby passes verify and takes writes.

Rounds at random kill points: 3 (sync, sync, async) by default, more with
WALRUS_LONG.  usage: test_standby_failover.py --walrus PATH --driver PATH"""
import argparse, os, random, signal

import sb
import workload
import wtest
from wtest import check, log

OPTS = ["wal_segment_size=1MB", "max_wal_size=8MB", "min_wal_size=2MB", "shared_buffers=16MB",
        "supervisor_linger=2s"]
SPACES = [f"c{i}" for i in range(8)]


def setup(cleanup, exe, root, sync):
    sock = os.path.join(root, "repl.sock")
    pdir = os.path.join(root, "primary")
    sb.write_conf(pdir, f"listen_replication = '{sock}'\nreplication_password = 'secret'\n")
    p = wtest.Walrus(exe, pdir, OPTS)
    p.register(cleanup)
    p.create()
    sdir = os.path.join(root, "standby")
    sb.must(p.run("backup", sdir, "--checkpoint", "fast"), "backup")
    sb.must(p.run("stop", "--wait"), "stop the primary")
    if sync:
        with open(os.path.join(pdir, "walrus.conf"), "a") as f:
            f.write("synchronous_standby = 'standby'\n")
    s = wtest.Walrus(exe, sdir, OPTS)
    s.register(cleanup)
    os.environ["WALRUS_REPLICATION_PASSWORD"] = "secret"
    p.serve()
    st = sb.Standby(s, ["--primary", sock])
    st.start()
    check(wtest.wait_for(lambda: sb.stats(s)["replication"]["receiver"]["state"] == "streaming",
                         60), "the standby does not stream")
    return p, s, st


def one_round(cleanup, a, n, sync, rng):
    root = wtest.tempdir(cleanup, "walrus-failover-")
    p, s, st = setup(cleanup, a.walrus, root, sync)
    book = workload.Book(SPACES)
    clients = [workload.DrvClient(a.driver, p, book.spaces[name], "sync" if i % 2 else "batch",
                                  f"{name}.{n}", rng.randrange(1 << 30), keys=300)
               for i, name in enumerate(SPACES)]
    want = rng.randrange(30, 300)
    try:
        check(wtest.wait_for(lambda: all(sp.acked >= want for sp in book.spaces.values()), 120),
              f"the clients did not get {want} commits acknowledged each")
        senders = sb.stats(p)["replication"]["senders"]
        confirmed = sb.lsn(senders[0]["flush_lsn"]) if senders else 0
        p.kill_instance()  # every process of the primary, at once
    finally:
        for c in clients:
            c.p.send_signal(signal.SIGKILL)
        for c in clients:
            c.finish()
    acked = sum(sp.acked for sp in book.spaces.values())
    sb.must(s.run("promote"), "promote")
    if not sync:
        for sp in book.spaces.values():
            sp.acked = 0  # a consistent prefix only: the lag may be lost
    commits, _ = book.check(s.scan())
    replayed = sb.lsn(sb.stats(s)["standby"]["replay_lsn"])
    check(replayed >= confirmed, f"the standby lost WAL it had confirmed: replayed "
          f"{replayed:#x} < {confirmed:#x}")
    log(f"round {n} ({'sync' if sync else 'async'}): killed after {want} acks per client; "
        f"{acked} acknowledged, {commits} on the promoted standby")
    s.verify()
    sb.must(s.run("put", "after-failover", "1"), "put on the promoted standby")
    st.stop()


def main(cleanup):
    ap = argparse.ArgumentParser()
    ap.add_argument("--walrus", default=wtest.default_walrus())
    ap.add_argument("--driver", required=True)
    a = ap.parse_args()
    rng = random.Random(int(os.environ.get("WALRUS_SEED", "0")) or None)
    modes = [True, True, False] * (4 if wtest.long_mode() else 1)
    for n, sync in enumerate(modes):
        one_round(cleanup, a, n, sync, rng)
    log(f"{len(modes)} passed, 0 failed")
    return 0


if __name__ == "__main__":
    wtest.guarded(main)

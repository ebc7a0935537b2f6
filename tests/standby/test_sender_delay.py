#!/usr/bin/env python3
"""wal_sender_delay: an asynchronous standby's WAL sender sends what was
flushed at most that often, a synchronous standby's at every flush.

- bad values are refused, naming the option and its range: on the command
  line, by `config set`, in walrus.conf (the start fails);
- wal_sender_delay = 10s, one asynchronous and one synchronous standby, 40
  durable puts one after the other: every put returns (the synchronous
  sender is not held back: 40 of its waits would take 400 s), the
  synchronous sender sends each commit on its own (40 WAL messages or
  more), while the asynchronous one, napping, sends at most 3 WAL messages
  and wakes fewer than 20 times (its stats' counters, not the clock); the
  rest reaches its standby once its nap ends;
- wal_sender_delay = 0: the asynchronous sender is woken by the flushes
  again (10 WAL messages or more for the same 40 puts)."""
import os

import sb
import wtest
from wtest import check, log

N = 40
BAD = "expected a time such as 10ms, between 0 and 10s"


def refused(r, what):
    err = r.stderr.decode(errors="replace")
    check(r.returncode != 0 and 'invalid value for option "wal_sender_delay"' in err
          and BAD in err, f"{what}: exit {r.returncode}, {err.strip()[-400:]!r}")


def bad_values(p):
    refused(p.run("put", "k", "v", opts=p.opts + ["wal_sender_delay=soon"]), "-o =soon")
    refused(p.run("config", "set", "wal_sender_delay", "11s"), "config set 11s")
    conf = os.path.join(p.dir, "walrus.conf")
    with open(conf) as f:
        kept = f.read()
    with open(conf, "a") as f:
        f.write("wal_sender_delay = -1ms\n")
    r = p.run("put", "k", "v")
    refused(r, "walrus.conf's -1ms")
    check(b"walrus.conf:3:" in r.stderr, f"the start's error names no line: {r.stderr!r}")
    with open(conf, "w") as f:
        f.write(kept)


def sender(p, name):
    got = [s for s in sb.stats(p)["replication"]["senders"] if s["application_name"] == name]
    return got[0] if got else None


def streaming(p, names):
    """Until each named standby has a streaming sender that sent all the primary flushed."""
    def done():
        flush = sb.lsn(sb.stats(p)["wal"]["flush_lsn"])
        for n in names:
            s = sender(p, n)
            if s is None or s["state"] != "streaming" or sb.lsn(s["sent_lsn"]) < flush:
                return False
        return True
    check(wtest.wait_for(done, 60), f"the standbys do not stream: "
          f"{sb.stats(p)['replication']['senders']}")


def counters(p, name):
    s = sender(p, name)
    return s["wakeups"], s["wal_messages"]


def load(p, tag):
    rc, acked, err = p.load([(f"{tag}{i:03d}", "v") for i in range(N)], timeout=120)
    check(rc == 0 and len(acked) == N, f"load {tag}: exit {rc}, {len(acked)} acks, {err}")


def serve_with(p, base_conf, conf_lines):
    """The primary (stopped) served with walrus.conf as made plus @conf_lines."""
    p.wait_stopped()
    with open(os.path.join(p.dir, "walrus.conf"), "w") as f:
        f.write(base_conf + conf_lines)
    p.serve()


def main(cleanup):
    exe, root = sb.setup(cleanup, "sender-delay")
    p, sock = sb.listening_primary(cleanup, exe, root)
    log("bad values refused")
    bad_values(p)
    standbys = []
    for name in ("async", "sync"):
        d = os.path.join(root, name)
        sb.must(p.run("backup", d, "--checkpoint", "fast"), f"backup {name}")
        s = wtest.Walrus(exe, d)
        s.register(cleanup)
        standbys.append(s)
    with open(os.path.join(p.dir, "walrus.conf")) as f:
        base_conf = f.read()
    serve_with(p, base_conf, "synchronous_standby = 'sync'\nwal_sender_delay = 10s\n")
    os.environ["WALRUS_REPLICATION_PASSWORD"] = "secret"
    for s in standbys:
        sb.Standby(s, ["--primary", sock]).start()
    streaming(p, ("async", "sync"))

    log(f"wal_sender_delay = 10s: {N} durable puts")
    a0, s0 = counters(p, "async"), counters(p, "sync")
    load(p, "d")
    a1, s1 = counters(p, "async"), counters(p, "sync")
    log(f"async sender: {a1[0] - a0[0]} wake-ups, {a1[1] - a0[1]} WAL messages; "
        f"sync sender: {s1[0] - s0[0]} wake-ups, {s1[1] - s0[1]} WAL messages")
    check(s1[1] - s0[1] >= N, "the synchronous standby's sender batched commits")
    check(a1[1] - a0[1] <= 3, "the asynchronous standby's sender sent at every flush")
    check(a1[0] - a0[0] < N // 2, "the asynchronous standby's sender woke at every flush")
    streaming(p, ("async",))  # its nap over, the rest follows
    sb.wait_replayed(standbys[0], sb.lsn(sb.stats(p)["wal"]["flush_lsn"]))
    check(sb.scan(standbys[0]) == sb.scan(p), "the asynchronous standby differs")

    log(f"wal_sender_delay = 0: {N} durable puts")
    sb.must(p.run("stop", "--wait"), "stop the primary")
    p.wait_serve_exit(30)
    serve_with(p, base_conf, "wal_sender_delay = 0\n")
    streaming(p, ("async", "sync"))
    a0 = counters(p, "async")
    load(p, "z")
    a1 = counters(p, "async")
    log(f"async sender: {a1[0] - a0[0]} wake-ups, {a1[1] - a0[1]} WAL messages")
    check(a1[1] - a0[1] >= N // 4, "without a delay the sender is not woken by the flushes")
    return 0


if __name__ == "__main__":
    wtest.guarded(main)

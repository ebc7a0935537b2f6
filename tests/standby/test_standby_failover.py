#!/usr/bin/env python3
"""Failover under load: a primary under a durable load streams to a standby;
the primary is SIGKILLed (every process) at a random moment; the standby is
promoted.  The load acknowledges writes by every durable path there is:

- crashdrv clients (the crash suite's, each on its own key space) in modes
  sync (WALRUS_SYNC puts), batch (WALRUS_SYNC batches) and async
  (WALRUS_ASYNC batches acknowledged by walrus_sync);
- a RESP client: SETs through `walrus serve` (the server applies them
  asynchronously, then its barrier acknowledges them: +OK).

Checks:
- with synchronous_standby naming the standby, every write acknowledged by
  the primary on any of those paths is on the promoted standby
  (workload.Book: no acknowledged write lost, no partial batch, no value
  from nowhere).  One such round also cuts the power under the standby at
  the moment the primary dies (--powerloss: the standby runs with the
  power-loss journal; what it had not made durable is rolled back): what
  the standby confirmed must have been durable there;
- without it, the promoted standby holds a consistent prefix of every key
  space, and at least the WAL the primary's statistics reported the
  standby flushed just before the kill (what was lost is at most the lag);
- the promoted standby passes verify and takes writes.

Rounds at random kill points: sync, sync with the power cut (with
--powerloss), async by default; more with WALRUS_LONG.
usage: test_standby_failover.py --walrus PATH --driver PATH [--powerloss]"""
import argparse, os, random, re, signal, subprocess, sys, threading

import sb
import powerloss
import workload
from io_errors import PLWalrus
import wtest
from wtest import check, log

sys.path.insert(0, os.path.join(sb.HERE, "..", "server"))
import srvtest  # noqa: E402

OPTS = ["wal_segment_size=1MB", "max_wal_size=8MB", "min_wal_size=2MB", "shared_buffers=16MB",
        "supervisor_linger=2s"]
MODES = ["sync", "batch", "async"]
SPACES = [f"c{i}" for i in range(6)]
RESP_SPACE = "r0"


class RespWriter:
    """`walrus serve` (the RESP server) attached to the primary's instance,
    and one connection SETting keys of @space in turn: a commit is booked
    before its SET is sent, acknowledged when +OK comes back."""

    def __init__(self, p, root, space, tag):
        self.space, self.tag = space, tag
        self.sock = os.path.join(root, "resp.sock")
        self.proc = subprocess.Popen(p.argv("serve", "--no-tcp", "--unix", self.sock),
                                     stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                     stderr=subprocess.DEVNULL, env=p.env())
        for line in self.proc.stdout:
            if b"walrus serve: ready" in line:
                break
        else:
            raise wtest.TestFailure(f"walrus serve exited with {self.proc.wait()} before "
                                    "it was ready")
        self.stop = threading.Event()
        self.t = threading.Thread(target=self._run, daemon=True)
        self.t.start()

    def pids(self):
        return [self.proc.pid] + srvtest.children(self.proc.pid)

    def _run(self):
        sp, n = self.space, 0
        try:
            c = srvtest.Client(unix=self.sock, timeout=600)
            while not self.stop.is_set():
                n += 1
                key = f"{sp.name}/k{n % 300:04d}"
                val = f"{self.tag}:{n}:" + workload.filler(n, n % 200 + 1)
                sp.commits.append((f"{self.tag}#{n}", [(key, val)]))
                r = c.call("SET", key, val)
                if r != "OK":
                    sp.errors.append(f"SET {key}: {r!r}")
                    return
                sp.acked = len(sp.commits)
        except (OSError, srvtest.Closed):
            pass  # the kill

    def finish(self):
        self.stop.set()
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait(30)
        self.proc.stdout.close()
        self.t.join(30)
        check(not self.t.is_alive(), "the RESP client did not end after the kill")


def setup(cleanup, exe, root, sync, jdir):
    sock = os.path.join(root, "repl.sock")
    pdir = os.path.join(root, "primary")
    sb.write_conf(pdir, f"listen_replication = '{sock}'\nreplication_password = 'secret'\n")
    p = wtest.Walrus(exe, pdir, OPTS)
    p.register(cleanup)
    cleanup.add(srvtest.kill_all, pdir)  # the RESP server and its backends
    p.create()
    # A slot: an asynchronous standby on a busy machine may fall more than
    # max_wal_size behind, and a standby the primary's WAL has left behind
    # stops (it can never catch up by streaming).
    sb.must(p.run("slot", "create", "standby"), "slot create")
    sdir = os.path.join(root, "standby")
    sb.must(p.run("backup", sdir, "--checkpoint", "fast"), "backup")
    sb.must(p.run("stop", "--wait"), "stop the primary")
    if sync:
        with open(os.path.join(pdir, "walrus.conf"), "a") as f:
            f.write("synchronous_standby = 'standby'\n")
    # the standby's processes journaled for a power cut (tests/durability/io_errors.py)
    s = PLWalrus(exe, sdir, OPTS, jdir) if jdir else wtest.Walrus(exe, sdir, OPTS)
    s.register(cleanup)
    os.environ["WALRUS_REPLICATION_PASSWORD"] = "secret"
    p.serve()
    st = sb.Standby(s, ["--primary", sock, "--slot", "standby"])
    st.start()
    check(wtest.wait_for(lambda: sb.stats(s)["replication"]["receiver"]["state"] == "streaming",
                         60), "the standby does not stream")
    return p, s, st


def hold_standby(p, s, book, writers):
    """The standby's WAL receiver is stopped (SIGSTOP): nothing more is
    confirmed, so every writer of the primary, whichever path it
    acknowledges by, must end up waiting for the standby.  A path that
    acknowledges without it goes on, and the kill that follows loses what
    it acknowledged.  The receiver is let go after the primary's kill."""
    rcv = wtest.named(wtest.instance_pids(s.dir), "walrus-wrcv")
    check(rcv, "the standby has no WAL receiver")
    wtest.kill_pids(rcv, signal.SIGSTOP)
    before = {k: sp.acked for k, sp in book.spaces.items()}
    waiting = wtest.wait_for(
        lambda: sb.stats(p)["wal"]["sync_standby_waiters"] >= writers, 60)
    after = {k: sp.acked - before[k] for k, sp in book.spaces.items()}
    check(waiting, f"with the standby's receiver stopped, {writers} writers should wait for "
          f"it, but {sb.stats(p)['wal']['sync_standby_waiters']} do; acknowledged meanwhile: "
          f"{after}")
    log(f"standby held: {writers} writers wait for it")
    return rcv


def power_cut(s, st, jdir, rng):
    """Every process of the standby dies at once; what it had not made
    durable is rolled back; the standby starts again on what is left."""
    pids = wtest.instance_pids(s.dir)
    if st.proc.poll() is None:
        pids.append(st.proc.pid)
    workload.stop_all_then_kill(pids)
    workload.no_survivors(s.dir)
    st.proc.wait(30)
    done = powerloss.simulate(jdir, s.dir, "drop", rng)
    log(f"power cut under the standby (drop): {done}")
    st.start()


def last_record_end(p, lsn):
    """The end of the last record of the (killed) primary's WAL that ends at
    or before @lsn.  The sender sends what the primary flushed, and a flush
    may end inside a record (a full WAL buffer, a large batch): the
    standby confirms such a prefix, but replays, and so keeps after its
    promotion, only the whole records in it."""
    r = p.run("waldump")
    ends = [sb.lsn(m) for m in re.findall(r"^lsn: \S+ end: (\S+) ", r.stdout.decode(), re.M)]
    check(ends, f"waldump of the primary printed no record: {r.stderr.decode()[-300:]}")
    return max((e for e in ends if e <= lsn), default=0)


def one_round(cleanup, a, n, sync, cut, rng):
    root = wtest.tempdir(cleanup, "walrus-failover-")
    jdir = None
    if cut:
        jdir = os.path.join(root, "journal")
        os.mkdir(jdir)
    p, s, st = setup(cleanup, a.walrus, root, sync, jdir)
    book = workload.Book(SPACES + [RESP_SPACE])
    resp = RespWriter(p, root, book.spaces[RESP_SPACE], f"resp.{n}")
    clients = [workload.DrvClient(a.driver, p, book.spaces[name], MODES[i % len(MODES)],
                                  f"{name}.{n}", rng.randrange(1 << 30), keys=300)
               for i, name in enumerate(SPACES)]
    want = rng.randrange(30, 300)
    try:
        check(wtest.wait_for(lambda: all(sp.acked >= want for sp in book.spaces.values()), 120),
              f"the clients did not get {want} commits acknowledged each: "
              f"{ {k: sp.acked for k, sp in book.spaces.items()} }")
        if sync:
            hold_standby(p, s, book, len(clients) + 1)
        senders = sb.stats(p)["replication"]["senders"]
        confirmed = sb.lsn(senders[0]["flush_lsn"]) if senders else 0
        # The primary with every client, at once: nothing is acknowledged after this.
        p.kill_instance(extra=resp.pids() + [c.p.pid for c in clients])
        wtest.kill_pids(wtest.named(wtest.instance_pids(s.dir), "walrus-wrcv"), signal.SIGCONT)
    finally:
        resp.finish()
        for c in clients:
            c.p.send_signal(signal.SIGKILL)
        for c in clients:
            c.finish()
    if cut:
        power_cut(s, st, jdir, rng)
    acked = sum(sp.acked for sp in book.spaces.values())
    sb.must(s.run("promote"), "promote")
    if not sync:
        for sp in book.spaces.values():
            sp.acked = 0  # a consistent prefix only: the lag may be lost
    commits, _ = book.check(s.scan())
    replayed = sb.lsn(sb.stats(s)["standby"]["replay_lsn"])
    whole = last_record_end(p, confirmed)
    check(replayed >= whole, f"the standby lost WAL it had confirmed: replayed "
          f"{replayed:#x} < {whole:#x}, the end of the last whole record of the "
          f"{confirmed:#x} it confirmed")
    what = ("sync, power cut under the standby" if cut else "sync") if sync else "async"
    log(f"round {n} ({what}): killed after {want} acks per client; "
        f"{acked} acknowledged, {commits} on the promoted standby")
    s.verify()
    sb.must(s.run("put", "after-failover", "1"), "put on the promoted standby")
    st.stop()


def main(cleanup):
    ap = argparse.ArgumentParser()
    ap.add_argument("--walrus", default=wtest.default_walrus())
    ap.add_argument("--driver", required=True)
    ap.add_argument("--powerloss", action="store_true",
                    help="the binary has the test hooks: one round cuts the standby's power")
    a = ap.parse_args()
    rng = random.Random(int(os.environ.get("WALRUS_SEED", "0")) or None)
    rounds = [(True, False), (True, a.powerloss), (False, False)]
    rounds *= 4 if wtest.long_mode() else 1
    for n, (sync, cut) in enumerate(rounds):
        one_round(cleanup, a, n, sync, cut, rng)
    log(f"{len(rounds)} passed, 0 failed")
    return 0


if __name__ == "__main__":
    wtest.guarded(main)

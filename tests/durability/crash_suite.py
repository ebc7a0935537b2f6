#!/usr/bin/env python3
"""Process crash suite: a mixed workload, and SIGKILL of a client, the
checkpointer, the supervisor or the whole instance at random moments.

Each round starts four clients on their own key spaces (workload.py):
  s0  crashdrv --mode sync    single puts and deletes, WALRUS_SYNC, acknowledged
  s1  crashdrv --mode batch   atomic batches of 2..16 puts/deletes, WALRUS_SYNC
  s2  crashdrv --mode async   atomic batches, WALRUS_ASYNC (rate-limited), every
                              8th followed by walrus_sync (acknowledged)
  s3  walrus load --batch 8   the command, asynchronous batches
while `walrus checkpoint` is requested every 50..300 ms, with small WAL
segments (wal_segment_size=256kB, max_wal_size=2MB) so that checkpoints
are also triggered by WAL volume and segments are recycled and removed,
and a small buffer pool so that backends evict dirty pages too.  After a
random 0.2..1.2 s one victim is SIGKILLed:
  client  one of the client processes (a backend dying while attached:
          the supervisor crash-restarts the instance)
  ckpt    walrus-ckpt, in half of the rounds while a checkpoint is running
  super   walrus-super (its children die with it; the next command starts a
          new supervisor, which recovers)
  all     the whole instance and every client at once
then, a moment later, every client that is still alive.  After recovery:
every key space holds exactly the state after a prefix of its commits that
includes every acknowledged one (no lost acknowledged write, no partial
batch, no value from nowhere), and `walrus verify` is clean.

Default: 100 rounds (about 2-3 minutes); WALRUS_LONG=1 or --rounds N for more.
usage: crash_suite.py --walrus PATH --driver PATH [--rounds N] [--seed S] [--keep]
                      [--opt NAME=VALUE ...]
Prints a summary per victim and "N passed, N failed".
"""
import os, random, subprocess, sys, threading, time

sys.dont_write_bytecode = True
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import wtest  # noqa: E402
import workload  # noqa: E402
from wtest import log  # noqa: E402

OPTS = ["wal_segment_size=256kB", "max_wal_size=2MB", "min_wal_size=1MB",
        "shared_buffers=8MB", "checkpoint_timeout=3s", "checkpoint_completion_target=0.5",
        "wal_writer_delay=20ms", "bgwriter_delay=50ms", "supervisor_linger=5s"]
VICTIMS = ["client", "ckpt", "super", "all"]


class Forcer:
    """`walrus checkpoint` every 50..300 ms."""

    def __init__(self, w, rng, every=(0.05, 0.3)):
        self.w, self.rng, self.every = w, rng, every
        self.stop = threading.Event()
        self.lock = threading.Lock()
        self.frozen = False
        self.n = self.ok = 0
        self.p = None
        self.t = threading.Thread(target=self._run, daemon=True)
        self.t.start()

    def _run(self):
        while not self.stop.wait(self.rng.uniform(*self.every)):
            with self.lock:
                if self.frozen:
                    return
                self.p = subprocess.Popen(self.w.argv("checkpoint"), stdin=subprocess.DEVNULL,
                                          stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                                          env=self.w.env())
            try:
                rc = self.p.wait(30)
                self.n += 1
                self.ok += rc == 0
            except subprocess.TimeoutExpired:
                self.p.kill()
                self.p.wait()

    def pids(self):
        p = self.p
        return [p.pid] if p is not None and p.poll() is None else []

    def freeze(self):
        """Starts no more commands; returns the pid of the one running.  A
        command started after a power cut's pids were listed would outlive
        the cut, find the instance dead and start a new one on the files
        the cut is about to roll back."""
        with self.lock:
            self.frozen = True
            return self.pids()

    def finish(self):
        self.stop.set()
        p = self.p
        if p is not None and p.poll() is None:
            p.kill()
        self.t.join(40)


def in_checkpoint(w, since):
    return any(n == "walrus-ckpt" and m.startswith("checkpoint starting")
               for _, n, _, m in wtest.parse_log(w.log_text(since)))


def main(cleanup):
    a = workload.suite_args(rounds=100, long_rounds=1000, seed=11)
    rng = random.Random(a.seed)
    base = wtest.tempdir(cleanup, "walrus-crashsuite-", keep=a.keep)
    w = wtest.Walrus(a.walrus, os.path.join(base, "data"), workload.with_opts(OPTS, a.opt))
    w.register(cleanup)
    w.create()
    rounds = workload.Rounds(w)
    stats = {v: [0, 0] for v in VICTIMS}
    t0 = time.time()
    for rnd in range(a.rounds):
        victim = VICTIMS[rnd % len(VICTIMS)] if rnd < len(VICTIMS) else rng.choice(VICTIMS)
        since = w.log_size()
        clients = rounds.start_clients(a.driver, rnd, rng, async_rate=3000)
        forcer = Forcer(w, random.Random(rng.random()))
        time.sleep(rng.uniform(0.2, 1.2))
        what = victim
        if victim == "client":
            c = rng.choice([c for c in clients if c.pids()] or clients)
            killed = c.pids()
            what = f"client {c.space.name}"
        elif victim == "ckpt":
            if rng.random() < 0.5:
                wtest.wait_for(lambda: in_checkpoint(w, since), 2.0, step=0.01)
                time.sleep(rng.uniform(0, 0.05))
            killed = wtest.named(wtest.instance_pids(w.dir), "walrus-ckpt")
        elif victim == "super":
            killed = wtest.named(wtest.instance_pids(w.dir), "walrus-super")
        else:
            killed = wtest.instance_pids(w.dir) + forcer.pids() + workload.client_pids(clients)
        wtest.kill_pids(killed)
        time.sleep(rng.uniform(0, 0.2))
        forcer.finish()
        wtest.kill_pids(workload.client_pids(clients))
        for c in clients:
            c.finish()
        # Every process killed has ended before the check's first command:
        # the supervisor then handles each end (a crash restart) before that
        # command attaches (wtest.Walrus.run_settled).
        wtest.check(wtest.wait_gone(killed, 30), f"round {rnd}: killed processes still run: "
                    f"{wtest.still_running(killed)}")
        passed = rounds.check(f"round {rnd} (kill {what})", since)
        stats[victim][0 if passed else 1] += 1
        if rounds.gave_up:
            break
        if rnd % 10 == 9:
            log(f"round {rnd + 1}: {time.time() - t0:.0f} s, {rounds.commits} commits found "
                f"recovered ({rounds.acked} acknowledged)")
    for v, (ok, bad) in stats.items():
        log(f"kill {v}: {ok} recoveries checked, {bad} failed")
    return rounds.finish(t0)


if __name__ == "__main__":
    wtest.guarded(main)

#!/usr/bin/env python3
"""Power-loss simulation: the mixed workload of crash_suite.py with the fd
cache journaling every change (WALRUS_POWERLOSS, src/testsupport/powerloss.c),
then a simulated power cut (powerloss.py): every process stopped and killed
at once, and what was written but not made durable rolled back --
  drop     all of it (the page cache never reached the disk)
  pages    a random part, per 4 KiB page: lost, kept, or an older unsynced
           version; a random suffix of unsynced creates/renames/unlinks
  sectors  the same per 512-byte sector: torn 8 KiB data and WAL pages
  keep     nothing (a plain crash, as a control)
then recovery.  Checks as in crash_suite.py: every key space holds the
state after a prefix of its commits including every acknowledged one (no
lost acknowledged write, no partial batch), `walrus verify` is clean.

Default 24 power cuts (about a minute); WALRUS_LONG=1 or --rounds N for more.
usage: powerloss_test.py --walrus PATH --driver PATH [--rounds N] [--seed S] [--keep]
                         [--opt NAME=VALUE ...]
"""
import os, random, sys, time

sys.dont_write_bytecode = True
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import wtest  # noqa: E402
import workload  # noqa: E402
import powerloss  # noqa: E402
from crash_suite import Forcer  # noqa: E402
from wtest import log  # noqa: E402

OPTS = ["wal_segment_size=256kB", "max_wal_size=2MB", "min_wal_size=1MB",
        "shared_buffers=8MB", "checkpoint_timeout=3s", "checkpoint_completion_target=0.5",
        "wal_writer_delay=20ms", "bgwriter_delay=50ms", "supervisor_linger=5s",
        "io_method=sync"]  # the matrix runs io_uring too (--opt)
MODES = ["drop", "pages", "sectors", "keep"]


class PLWalrus(wtest.Walrus):
    """Every walrus command (and so the instance it starts) journals."""

    def __init__(self, exe, data_dir, opts, jdir):
        super().__init__(exe, data_dir, opts)
        self.jdir = jdir
        self.journal = False

    def env(self, failpoints=None):
        e = wtest.Walrus.env(failpoints)
        if self.journal:
            e["WALRUS_POWERLOSS"] = self.jdir
        return e


def main(cleanup):
    a = workload.suite_args(rounds=24, long_rounds=240, seed=23)
    rng = random.Random(a.seed)
    base = wtest.tempdir(cleanup, "walrus-powerloss-", keep=a.keep)
    jdir = os.path.join(base, "journal")  # same file system: saved hard links
    os.mkdir(jdir)
    w = PLWalrus(a.walrus, os.path.join(base, "data"), workload.with_opts(OPTS, a.opt), jdir)
    w.register(cleanup)
    w.create()
    w.journal = True
    rounds = workload.Rounds(w)
    totals = {}
    t0 = time.time()
    for rnd in range(a.rounds):
        mode = MODES[rnd % len(MODES)]
        since = w.log_size()
        clients = rounds.start_clients(a.driver, rnd, rng, async_rate=2000, env=w.env())
        # Fewer forced checkpoints than crash_suite.py: more unsynced data pages.
        forcer = Forcer(w, random.Random(rng.random()), every=(0.3, 1.0))
        time.sleep(rng.uniform(0.3, 1.5))
        # The power cut: everything stops at once.
        workload.stop_all_then_kill(forcer.freeze() + wtest.instance_pids(w.dir)
                                    + workload.client_pids(clients))
        forcer.finish()
        for c in clients:
            c.finish()
        workload.no_survivors(w.dir)
        st = powerloss.simulate(jdir, w.dir, mode, random.Random(rng.random()))
        for k, v in st.items():
            totals[k] = totals.get(k, 0) + v
        rounds.check(f"power cut {rnd} ({mode}, {st})", since)
        if rounds.gave_up:
            break
        if rnd % 8 == 7:
            log(f"power cut {rnd + 1}: {time.time() - t0:.0f} s, {rounds.commits} commits "
                f"recovered ({rounds.acked} acknowledged); rolled back so far: {totals}")
    log(f"rolled back in all: {totals}")
    # Lost data shows up within a few cuts; undone name changes (a cut right
    # after a segment was created or recycled) need more: checked from 100.
    names_needed = a.rounds >= 100
    if rounds.passed == a.rounds and a.rounds >= 8 and not (
            totals.get("units_lost", 0) > 0
            and (totals.get("names_undone", 0) > 0 or not names_needed)):
        log("FAIL: the power cuts rolled nothing back: the simulation is not working")
        rounds.failed += 1
    return rounds.finish(t0)


if __name__ == "__main__":
    wtest.guarded(main)

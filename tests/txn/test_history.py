#!/usr/bin/env python3
"""Transaction histories checked for isolation anomalies (elle.py, in the
manner of Jepsen's Elle, list-append workload; histdrv.c runs the work).

Cases (--case):
  serializable  2 processes x 4 threads of histdrv, walrus_txn_* with flags 0
                and WALRUS_SYNC commits, a few thousand transactions over 8
                keys, then a final read of every key: no anomaly at all
                (no cycle, no aborted or intermediate read, no lost append).
  snapshot      the same with WALRUS_TXN_SNAPSHOT: no G0, G1 (a, b, c) nor
                G-single, no lost append; the write-skew cycles (G2) that
                snapshot isolation allows are counted and reported.
  none          the same operations without transactions (histdrv
                --isolation none: plain gets and puts): the checker MUST find
                anomalies, and among them a dependency cycle; if it finds
                none, the test fails (a checker that finds nothing there
                proves nothing in the other cases).
  crash         serializable with WALRUS_SYNC, and the instance killed in
                the middle of the run: in one round its supervisor (SIGKILL;
                the drivers' threads see WALRUS_ERESTART, open again, which
                starts a new supervisor that recovers, and go on), in another
                one of the two driver processes (a backend of the instance:
                the supervisor crash-restarts it, the threads of the other
                process open again and go on).  The kill comes after a
                number of commits (counted, not timed).  Then a final read
                of every key: every committed (acknowledged) append is
                there, an attempt whose outcome is unknown (its commit met
                the crash, or its process died) is there entirely or not at
                all, and the whole history with the final read has no
                anomaly; `walrus verify` is clean.  4 rounds (10 long).
                It found three engine bugs, fixed by commit 228e311, each
                with a regression test of its own (tests/txn/meson.build).
Short by default (each case well under a minute on 2 cores); WALRUS_LONG=1
runs more transactions and more crash rounds.

usage: test_history.py --walrus PATH --driver PATH --case CASE [--seed S] [--keep]
"""
import argparse, os, random, sys, time

sys.dont_write_bytecode = True
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import txntest  # noqa: E402
import elle  # noqa: E402
from txntest import wtest, TestFailure, log  # noqa: E402

OPTS = ["wal_segment_size=1MB", "max_wal_size=8MB", "min_wal_size=2MB", "shared_buffers=16MB",
        "checkpoint_timeout=5s", "wal_writer_delay=20ms"]
KEYS = 8
THREADS = 4
PROCS = 2


def driver_argv(a, w, client, pid, prefix, txns, isolation, seed):
    argv = [a.driver, "-D", w.dir]
    for o in w.opts:
        argv += ["-o", o]
    return argv + ["--client", client, "--id", str(pid), "--prefix", prefix,
                   "--threads", str(THREADS), "--keys", str(KEYS), "--txns", str(txns),
                   "--isolation", isolation, "--seed", str(seed)]


def final_read(a, w, prefix, progress):
    argv = [a.driver, "-D", w.dir]
    for o in w.opts:
        argv += ["-o", o]
    d = txntest.Driver(argv + ["--final", "--prefix", prefix, "--keys", str(KEYS)], w, progress,
                       "final read")
    d.finish()
    return d.lines


def check_history(base, name, lines, model):
    """Runs the checker on @lines (kept in BASE/NAME.history for --keep);
    returns its Result, its report printed."""
    path = os.path.join(base, name + ".history")
    with open(path, "w") as f:
        f.writelines(lines)
    t0 = time.time()
    res = elle.check(lines)
    res.report(model, out=sys.stdout, quiet=True)
    log(f"(checked in {time.time() - t0:.1f} s; history in {path})")
    return res


def run_plain(a, w, base, rng, isolation):
    """Cases serializable, snapshot and none: PROCS drivers to the end, then
    the final read; returns the checker's Result."""
    txns = 1500 if wtest.long_mode() else 400
    progress = txntest.Progress()
    drivers = []
    try:
        for i in range(PROCS):
            drivers.append(txntest.Driver(
                driver_argv(a, w, f"p{i}", i, isolation, txns, isolation,
                            rng.randrange(1 << 30)), w, progress, f"driver p{i}"))
        for d in drivers:
            d.finish()
    finally:
        txntest.kill_live(drivers)
    lines = [ln for d in drivers for ln in d.lines]
    lines += final_read(a, w, isolation, progress)
    model = "snapshot" if isolation == "snapshot" else "serializable"
    return check_history(base, isolation, lines, model)


def case_serializable(a, w, base, rng):
    res = run_plain(a, w, base, rng, "serializable")
    bad = res.forbidden("serializable")
    wtest.check(not bad, f"anomalies under serializable isolation: {bad}")
    wtest.check(res.stats["final_keys"] == KEYS, "the final read did not read every key")
    return 0


def case_snapshot(a, w, base, rng):
    res = run_plain(a, w, base, rng, "snapshot")
    log(f"write skew (G2, allowed under snapshot isolation): {res.count('G2')} cycle(s)")
    bad = res.forbidden("snapshot")
    wtest.check(not bad, f"anomalies under snapshot isolation: {bad}")
    return 0


CYCLES = ("G0", "G1c", "G-single", "G2")


def case_none(a, w, base, rng):
    res = run_plain(a, w, base, rng, "none")
    bad = res.forbidden("serializable")
    cycles = {c: res.count(c) for c in CYCLES if res.count(c)}
    log(f"without isolation the checker found: {bad}; cycles: {cycles}")
    wtest.check(bad, "the checker found no anomaly in a history without isolation: it "
                "would find none anywhere")
    wtest.check(cycles, "the checker found no dependency cycle in a history without "
                "isolation: its cycle search proves nothing")
    return 0


# ---------------------------------------------------------------- crash

def crash_round(a, w, base, rng, rnd, victim):
    """One round: PROCS drivers on key prefix cR, @victim ("super" or
    "backend") SIGKILLed after a number of commits, the survivors go on to
    their end, a final read, the check."""
    prefix = f"c{rnd}"
    txns = 600 if wtest.long_mode() else 250
    total = PROCS * THREADS * txns
    kill_at = rng.randint(total // 10, total // 2)
    progress = txntest.Progress()
    drivers = []
    since = w.log_size()
    killed = None
    try:
        for i in range(PROCS):
            drivers.append(txntest.Driver(
                driver_argv(a, w, f"{prefix}p{i}", PROCS * rnd + i, prefix, txns,
                            "serializable", rng.randrange(1 << 30)) + ["--max-restarts", "100"],
                w, progress, f"round {rnd} driver p{i}"))

        def commits():
            return sum(d.count("C") for d in drivers)

        def all_open():
            return all(d.count("O", f"{prefix}p{i}.t{t}") >= 1
                       for i, d in enumerate(drivers) for t in range(THREADS))
        progress.wait(lambda: (commits() >= kill_at and all_open())
                      or any(not d.alive() for d in drivers),
                      f"{kill_at} commits with every thread open")
        if any(not d.alive() for d in drivers):
            raise TestFailure("a driver ended before the kill: " +
                              "; ".join(d.diagnose() for d in drivers))
        with progress.cond:
            before = {id(d): len(d.lines) for d in drivers}
            at = commits()
        if victim == "super":
            pids = txntest.supervisor_pids(w)
            wtest.check(len(pids) == 1, f"supervisors of {w.dir}: {pids}, not one")
            wtest.kill_pids(pids)
            what = f"supervisor (pid {pids[0]}) SIGKILLed after {at} commits"
            survivors = drivers
        else:
            killed = rng.choice(drivers)
            killed.kill()
            txntest.wait_crash_restart(w, since, [killed.pid], progress)
            what = f"{killed.name} (pid {killed.pid}) SIGKILLed after {at} commits"
            survivors = [d for d in drivers if d is not killed]
        log(f"round {rnd}: {what}")
        for d in drivers:
            d.finish(expect_killed=d is killed)
    finally:
        txntest.kill_live(drivers)

    # The crash was seen, and the work went on after it.
    for d in survivors:
        after = d.lines[before[id(d)]:]
        restarts = sum(1 for ln in after if ln.startswith(("X ", "U ")))
        reopened = sum(1 for ln in after if ln.startswith("O "))
        recommits = 0
        seen = False
        for ln in after:
            seen = seen or ln.startswith(("X ", "U "))
            recommits += seen and ln.startswith("C ")
        log(f"round {rnd}: {d.name}: {restarts} restart(s) seen, {reopened} reopen(s), "
            f"{recommits} commits after the first")
        wtest.check(restarts > 0 and reopened > 0 and recommits > 0,
                    f"{d.name} saw no crash restart, or did not go on after it")
    lines = [ln for d in drivers for ln in d.lines]
    unknown = sum(1 for ln in lines if ln.startswith("U "))
    invoked = {tuple(ln.split()[1:3]) for ln in lines if ln.startswith("I ")}
    done = {tuple(ln.split()[1:3]) for ln in lines if ln.startswith(("C ", "A ", "U "))}
    log(f"round {rnd}: {unknown} commit(s) met the crash, {len(invoked - done)} attempt(s) "
        f"never completed (their process died): outcome unknown")
    lines += final_read(a, w, prefix, progress)
    res = check_history(base, f"crash{rnd}", lines, "serializable")
    bad = res.forbidden("serializable")
    wtest.check(res.stats["final_keys"] == KEYS, "the final read did not read every key")
    wtest.check(not bad, f"round {rnd} ({what}): anomalies: {bad}")
    w.verify()


def case_crash(a, w, base, rng):
    victims = ["super", "backend"] * (5 if wtest.long_mode() else 2)
    for rnd, victim in enumerate(victims):
        crash_round(a, w, base, rng, rnd, victim)
    return 0


CASES = {"serializable": case_serializable, "snapshot": case_snapshot, "none": case_none,
         "crash": case_crash}


def main(cleanup):
    ap = argparse.ArgumentParser()
    ap.add_argument("--walrus", default=wtest.default_walrus())
    ap.add_argument("--driver", required=True)
    ap.add_argument("--case", choices=sorted(CASES), required=True)
    ap.add_argument("--seed", type=int, default=7)
    ap.add_argument("--keep", action="store_true")
    a = ap.parse_args()
    log(f"case {a.case}, seed {a.seed}")
    rng = random.Random(a.seed)
    base = wtest.tempdir(cleanup, f"walrus-txnhist-{a.case}-", keep=a.keep)
    w = wtest.Walrus(os.path.abspath(a.walrus), os.path.join(base, "data"), OPTS)
    w.register(cleanup)
    w.create()
    t0 = time.time()
    rc = CASES[a.case](a, w, base, rng)
    log(f"case {a.case}: passed in {time.time() - t0:.0f} s")
    return rc


if __name__ == "__main__":
    wtest.guarded(main)

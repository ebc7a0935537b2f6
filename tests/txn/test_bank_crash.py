#!/usr/bin/env python3
"""The bank, with crashes: money neither appears nor vanishes, readers only
ever see the right total, and no acknowledged transfer is lost.

20 accounts of 1000 (bankdrv --init, one transaction).  Three client
processes (bankdrv --transfers) move random amounts between two random
accounts in serializable transactions (WALRUS_SYNC, retried on
WALRUS_ECONFLICT as new attempts); each transfer also puts a record of
itself, PFX/x/CLIENT/SEQ = "FROM TO AMOUNT", in the same transaction, and
the client prints it before the commit and "acked" once the commit
returned.  A reader process (bankdrv --reader) sums all accounts again and
again, through snapshots (point gets and an iterator) and read-only
transactions: every sum must be 20000 (the driver fails on any other).

Case crash: in even rounds the supervisor is SIGKILLed, in odd ones one
client process (a backend of the instance: the supervisor crash-restarts
it), each after a random number of acknowledged transfers (counted, not
timed).  The
processes left see the restart, open again and go on; once each has done
more work after its reopen, they are stopped, and the store (walrus scan)
must hold:
  - exactly 20 accounts summing to 20000;
  - a record for every acknowledged transfer, and none for an attempt whose
    commit reported a conflict, and none that no client printed (an attempt
    whose commit met the crash may be there or not);
  - in every account exactly 1000 plus what the records present bring in
    minus what they take out: a record is there iff its transfer's moves
    are (atomicity), and the balances are those of the transfers in some
    serial order (no lost update);
and `walrus verify` is clean.  The check is then run on the same state
with one acknowledged record removed, and with a unit moved between two
accounts: it must fail both (it is not vacuous).  WALRUS_LONG=1: 10 rounds, 4 by default.

Case control: the same clients without transactions (bankdrv --isolation
none: plain gets, then an atomic batch) and a reader summing with plain
gets: the reader must see a wrong sum and the state check must fail, or
the checks prove nothing.

usage: test_bank_crash.py --walrus PATH --driver PATH --case crash|control
                          [--seed S] [--keep]
"""
import argparse, os, random, sys, time

sys.dont_write_bytecode = True
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import txntest  # noqa: E402
from txntest import wtest, TestFailure, log  # noqa: E402

OPTS = ["wal_segment_size=1MB", "max_wal_size=8MB", "min_wal_size=2MB", "shared_buffers=16MB",
        "checkpoint_timeout=5s", "wal_writer_delay=20ms"]
ACCOUNTS = 20
BALANCE = 1000
CLIENTS = 3
AFTER = 20  # acknowledged transfers (and sums) each survivor makes after its reopen


class Book:
    """Every transfer attempt the clients printed, and what became of it."""

    def __init__(self):
        self.t = {}  # (client, seq) -> [from, to, amount, state]

    def read(self, lines):
        for ln in lines:
            p = ln.split()
            if p[0] == "transfer":
                self.t[(p[1], int(p[2]))] = [int(p[3]), int(p[4]), int(p[5]), "sent"]
            elif p[0] in ("acked", "conflict", "unknown"):
                e = self.t.get((p[1], int(p[2])))
                if e is None or e[3] != "sent":
                    raise TestFailure(f"line {ln.strip()!r} for no transfer in flight")
                e[3] = p[0]

    def count(self, state):
        return sum(1 for e in self.t.values() if e[3] == state)


def check_state(kv, book, prefix):
    """The problems of the store's state @kv (key -> value) for the bank of
    @prefix given @book; [] when it is right."""
    bad = []
    acc = {}
    rec = {}
    for k, v in kv.items():
        if k.startswith(prefix + "/a/"):
            acc[k] = v
        elif k.startswith(prefix + "/x/"):
            rec[k] = v
    bal = {}
    for k, v in acc.items():
        try:
            bal[int(k.rsplit("/", 1)[1])] = int(v)
        except ValueError:
            bad.append(f"account {k} holds {v[:30]!r}")
    if sorted(bal) != list(range(ACCOUNTS)):
        bad.append(f"accounts present: {sorted(bal)}, not 0..{ACCOUNTS - 1}")
    total = sum(bal.values())
    if total != ACCOUNTS * BALANCE:
        bad.append(f"the accounts hold {total} in all, not {ACCOUNTS * BALANCE}")
    expect = {a: BALANCE for a in range(ACCOUNTS)}
    present = set()
    for k, v in rec.items():
        _, _, client, seq = k.split("/", 3)
        e = book.t.get((client, int(seq)))
        if e is None:
            bad.append(f"record {k} = {v!r} of a transfer no client printed")
            continue
        if v != f"{e[0]} {e[1]} {e[2]}":
            bad.append(f"record {k} = {v!r}, but the client printed {e[:3]}")
            continue
        if e[3] == "conflict":
            bad.append(f"transfer {client}#{seq} is there, though its commit reported a "
                       f"conflict (nothing applied)")
        present.add((client, int(seq)))
        expect[e[0]] -= e[2]
        expect[e[1]] += e[2]
    lost = [f"{c}#{s}" for (c, s), e in book.t.items()
            if e[3] == "acked" and (c, s) not in present]
    if lost:
        bad.append(f"{len(lost)} acknowledged transfer(s) lost, e.g. {lost[:5]}")
    wrong = {a: (bal.get(a), x) for a, x in expect.items() if bal.get(a) != x}
    if wrong:
        bad.append(f"{len(wrong)} account(s) do not hold {BALANCE} plus the transfers present "
                   f"(holds, should hold): " +
                   ", ".join(f"{a}: {h}" for a, h in sorted(wrong.items())[:5]))
    return bad


def bank_argv(a, w, prefix, *args):
    argv = [a.driver, "-D", w.dir]
    for o in w.opts:
        argv += ["-o", o]
    return argv + ["--prefix", prefix, "--accounts", str(ACCOUNTS)] + list(args)


def init_bank(a, w, prefix):
    progress = txntest.Progress()
    d = txntest.Driver(bank_argv(a, w, prefix, "--init", "--balance", str(BALANCE)), w, progress,
                       "init")
    d.finish()


def teeth(kv, book, prefix):
    """The check must fail on a state with an acknowledged transfer's record
    removed, and with a unit moved between two accounts."""
    acked = [(c, s) for (c, s), e in book.t.items() if e[3] == "acked"]
    wtest.check(acked, "no acknowledged transfer to check with")
    c, s = acked[len(acked) // 2]
    kv1 = dict(kv)
    del kv1[f"{prefix}/x/{c}/{s}"]
    bad1 = check_state(kv1, book, prefix)
    kv2 = dict(kv)
    k0, k1 = f"{prefix}/a/00", f"{prefix}/a/01"
    kv2[k0], kv2[k1] = str(int(kv2[k0]) - 1), str(int(kv2[k1]) + 1)
    bad2 = check_state(kv2, book, prefix)
    wtest.check(any("acknowledged transfer(s) lost" in b for b in bad1),
                f"the check missed a lost acknowledged transfer: {bad1}")
    wtest.check(bad2, "the check missed a unit moved between two accounts")
    log(f"the check fails as it must on a state with {c}#{s} removed ({len(bad1)} problems) "
        f"and on one with a unit moved ({len(bad2)})")


def crash_round(a, w, rng, rnd, victim, book):
    prefix = "bank"
    kill_at = rng.randint(100, 600)
    progress = txntest.Progress()
    clients, reader = [], None
    since = w.log_size()
    killed = None
    try:
        for i in range(CLIENTS):
            clients.append(txntest.Driver(
                bank_argv(a, w, prefix, "--client", f"c{rnd}.{i}", "--transfers", "--seed",
                          str(rng.randrange(1 << 30)), "--until-eof", "--max-restarts", "100"),
                w, progress, f"round {rnd} client c{rnd}.{i}", stdin=True))
        reader = txntest.Driver(
            bank_argv(a, w, prefix, "--client", f"r{rnd}", "--reader", "--until-eof",
                      "--max-restarts", "100"), w, progress, f"round {rnd} reader", stdin=True)
        procs = clients + [reader]

        def acked():
            return sum(d.count("acked") for d in clients)
        progress.wait(lambda: (acked() >= kill_at and reader.count("sum") >= 50
                               and all(d.count("open") for d in procs))
                      or any(not d.alive() for d in procs),
                      f"{kill_at} acknowledged transfers and 50 sums")
        if any(not d.alive() for d in procs):
            raise TestFailure("a process ended before the kill: " +
                              "; ".join(d.diagnose() for d in procs))
        with progress.cond:
            before = {id(d): (len(d.lines), d.count("open")) for d in procs}
            at = acked()
        if victim == "super":
            pids = txntest.supervisor_pids(w)
            wtest.check(len(pids) == 1, f"supervisors of {w.dir}: {pids}, not one")
            wtest.kill_pids(pids)
            what = f"supervisor (pid {pids[0]}) SIGKILLed after {at} acknowledged transfers"
        else:
            killed = rng.choice(clients)
            killed.kill()
            txntest.wait_crash_restart(w, since, [killed.pid], progress)
            what = f"{killed.name} (pid {killed.pid}) SIGKILLed after {at} acknowledged transfers"
        log(f"round {rnd}: {what}")
        survivors = [d for d in procs if d is not killed]

        def went_on(d):
            return d.count("open") > before[id(d)][1] and \
                d.count_since("sum" if d is reader else "acked", "open") >= AFTER
        progress.wait(lambda: all(went_on(d) or not d.alive() for d in survivors),
                      "reopen and more work of every process left")
        for d in survivors:
            d.end_input()
        for d in procs:
            d.finish(expect_killed=d is killed)
    finally:
        txntest.kill_live(clients + ([reader] if reader else []))

    # Each process left saw the crash, opened again and went on after it.
    for d in survivors:
        after = d.lines[before[id(d)][0]:]
        first = next((i for i, ln in enumerate(after) if ln.startswith("open ")), None)
        work = "sum " if d is reader else "acked "
        n = 0 if first is None else sum(1 for ln in after[first:] if ln.startswith(work))
        seen = sum(1 for ln in after if ln.startswith(("restart ", "unknown ")))
        wtest.check(seen and n, f"{d.name}: {seen} restart(s) seen, {n} {work.strip()} after "
                    f"its reopen: it did not see the crash or did not go on")
    for d in clients:
        book.read(d.lines)
    sums = sum(d.count("sum") for d in [reader])
    log(f"round {rnd}: {book.count('acked')} transfers acknowledged so far, "
        f"{book.count('conflict')} conflicts, {book.count('unknown')} outcomes unknown after "
        f"their commit met the crash, {book.count('sent')} in flight when their process died; "
        f"{sums} sums of 20000 read")
    kv = w.scan()
    bad = check_state(kv, book, prefix)
    unknown = [(c, s) for (c, s), e in book.t.items() if e[3] in ("unknown", "sent")]
    there = sum(1 for c, s in unknown if f"{prefix}/x/{c}/{s}" in kv)
    log(f"round {rnd}: of the {len(unknown)} transfers of unknown outcome, {there} are there")
    wtest.check(not bad, f"round {rnd} ({what}): " + "; ".join(bad))
    w.verify()
    return kv


def case_crash(a, w, rng):
    init_bank(a, w, "bank")
    book = Book()
    victims = ["super", "backend"] * (5 if wtest.long_mode() else 2)
    kv = None
    for rnd, victim in enumerate(victims):
        kv = crash_round(a, w, rng, rnd, victim, book)
    teeth(kv, book, "bank")
    return 0


def case_control(a, w, rng):
    prefix = "ctl"
    init_bank(a, w, prefix)
    progress = txntest.Progress()
    clients, reader = [], None
    try:
        for i in range(CLIENTS):
            clients.append(txntest.Driver(
                bank_argv(a, w, prefix, "--client", f"n{i}", "--transfers", "--isolation",
                          "none", "--count", "1500", "--seed", str(rng.randrange(1 << 30))),
                w, progress, f"client n{i} (no isolation)"))
        reader = txntest.Driver(bank_argv(a, w, prefix, "--client", "r", "--reader", "--reads",
                                          "plain", "--until-eof"),
                                w, progress, "reader (plain gets)", stdin=True)
        for d in clients:
            d.finish()
        reader.end_input()
        try:
            reader.finish()
            reader_saw = None
        except TestFailure as e:
            reader_saw = str(e)
    finally:
        txntest.kill_live(clients + ([reader] if reader else []))
    wtest.check(not w.log_has(r"ended without detaching"),
                "a crash restart in the control run: " + w.log_tail(n=10))
    book = Book()
    for d in clients:
        book.read(d.lines)
    bad = check_state(w.scan(), book, prefix)
    log(f"without isolation: the reader {'saw: ' + reader_saw if reader_saw else 'saw nothing'}"
        f"; the state check found: {bad or 'nothing'}")
    wtest.check(reader_saw and "not 20 holding 20000" in reader_saw,
                "the reader saw no wrong sum without isolation: its check proves nothing")
    wtest.check(bad, "the state check found nothing wrong without isolation: it proves nothing")
    return 0


CASES = {"crash": case_crash, "control": case_control}


def main(cleanup):
    ap = argparse.ArgumentParser()
    ap.add_argument("--walrus", default=wtest.default_walrus())
    ap.add_argument("--driver", required=True)
    ap.add_argument("--case", choices=sorted(CASES), required=True)
    ap.add_argument("--seed", type=int, default=5)
    ap.add_argument("--keep", action="store_true")
    a = ap.parse_args()
    log(f"case {a.case}, seed {a.seed}")
    rng = random.Random(a.seed)
    base = wtest.tempdir(cleanup, f"walrus-bank-{a.case}-", keep=a.keep)
    w = wtest.Walrus(os.path.abspath(a.walrus), os.path.join(base, "data"), OPTS)
    w.register(cleanup)
    w.create()
    t0 = time.time()
    rc = CASES[a.case](a, w, rng)
    log(f"case {a.case}: passed in {time.time() - t0:.0f} s")
    return rc


if __name__ == "__main__":
    wtest.guarded(main)

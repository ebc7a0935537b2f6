#!/usr/bin/env python3
"""Thread crash test: many threads of one process, each with its own handle
on the same directory, and the whole process SIGKILLed at a random moment,
repeated.  Every write a thread saw acknowledged as durable must survive.

Each round starts `threaddrv --threads 8` (tests/durability/threaddrv.c):
8 threads, each a client on a key space of its own (a.t0 .. a.t7), in
modes sync / batch / async mixed across the threads (the modes change from
round to round), with gets, single deletes and forward and backward scans
of its key space checked against its own writes in between.  In some
rounds a second process runs `threaddrv --threads 2` (b.t0, b.t1).  Once
every thread has opened and a random number of acknowledgements was read
from their output (counted, not timed), one of:
  all   every driver process is SIGKILLed at once (one kill(2) of their
        process group)
  one   (two processes) one of them is SIGKILLed; the threads of the other
        see WALRUS_ERESTART, open again (bounded), each finds which of its
        commits the recovered state is the state after (a "K" line; none is
        an error), and goes on; after a random number of further
        acknowledgements the survivor is SIGKILLed too
Each death of an attached process must be a crash restart (the
supervisor's "backend process PID ended without detaching" in
DIR/log/walrus.log).  Then, through `walrus scan`: every key space holds
exactly the state after a prefix of its thread's commits that includes
every acknowledged one (A, and async commits covered by an S) -- nothing
lost, no part of a batch, no value from nowhere -- and `walrus verify` is
clean.  The check is workload.py's, as in crash_suite.py.

The first victim of an "one" round is reaped only when the round ends: a
zombie until then, as the child of a parent busy elsewhere would be.  A
regression: the crash restart used to wait for it (the supervisor took a
zombie still marked inside a write for a live process), and with it every
open of the surviving threads.

Default 10 rounds; WALRUS_LONG=1: 100; --rounds N for any other number.
usage: thread_crash.py --walrus PATH --driver PATH [--rounds N] [--seed S] [--keep]
"""
import os, random, shutil, signal, subprocess, sys, threading, time

sys.dont_write_bytecode = True
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import wtest  # noqa: E402
import workload  # noqa: E402
from wtest import TestFailure, log  # noqa: E402

OPTS = ["wal_segment_size=256kB", "max_wal_size=2MB", "min_wal_size=1MB",
        "shared_buffers=8MB", "checkpoint_timeout=3s", "checkpoint_completion_target=0.5",
        "wal_writer_delay=20ms", "bgwriter_delay=50ms", "supervisor_linger=5s"]
PROCS = [("a", 8), ("b", 2)]  # key space prefix, threads
MODES = ["sync", "batch", "async"]
KINDS = {"B", "A", "R", "S", "O", "X", "K", "E"}
HANG = 120  # s without the awaited output: a hang, reported with backtraces
# What surviving threads saw: X lines per error code, K lines (reopens checked).
SEEN = {"X": {}, "K": 0}


class Progress:
    """What the drivers' output said so far, shared by their reader threads."""

    def __init__(self):
        self.cond = threading.Condition()
        self.acks = {}   # driver prefix -> acknowledgements (A and S lines)
        self.ks = {}     # client name -> K lines
        self.opened = set()  # client names that printed their first O line

    def wait(self, pred, what, drivers):
        with self.cond:
            if self.cond.wait_for(pred, HANG):
                return
        diag = "\n".join(d.diagnose() for d in drivers)
        raise TestFailure(f"no {what} within {HANG} s: a hang?\n{diag}")


class ThreadDrv:
    """One threaddrv process: @nthreads clients on key spaces PREFIX.tI."""

    def __init__(self, drv, w, book, prefix, nthreads, rnd, rng, progress, pgid=None):
        self.prefix, self.progress = prefix, progress
        self.modes = [MODES[(rnd + i) % 3] for i in range(nthreads)]
        rng.shuffle(self.modes)
        tag = f"{prefix}.r{rnd}"
        self.trackers = {f"{tag}.t{i}": workload.Tracker(book.spaces[f"{prefix}.t{i}"],
                                                        f"{tag}.t{i}")
                         for i in range(nthreads)}
        self.lines = {}   # kind -> count
        self.errors = []  # E lines and unparsable ones
        args = [os.path.abspath(drv), "-D", w.dir]
        for o in w.opts:
            args += ["-o", o]
        args += ["--threads", str(nthreads), "--client", tag, "--keyspace", prefix,
                 "--modes", ",".join(self.modes), "--seed", str(rng.randrange(1 << 30))]
        # Working directory DIR: the cleanup (even its watchdog, when this test
        # is killed) finds the driver among the instance's processes.  One
        # process group for all the drivers of a round: one kill(2) for all.
        self.p = subprocess.Popen(args, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                  stderr=subprocess.PIPE, env=w.env(), cwd=w.dir,
                                  process_group=0 if pgid is None else pgid)
        progress.acks[prefix] = 0
        self.t = threading.Thread(target=self._read, daemon=True)
        self.t.start()

    def _read(self):
        pr = self.progress
        for raw in self.p.stdout:
            parts = raw.decode(errors="replace").split()
            if not parts:
                continue
            with pr.cond:
                kind = parts[0]
                self.lines[kind] = self.lines.get(kind, 0) + 1
                tr = self.trackers.get(parts[1]) if len(parts) > 1 else None
                if tr is None or kind not in KINDS:
                    self.errors.append(" ".join(parts))
                    continue
                try:
                    tr.line([kind] + parts[2:])
                except (KeyError, ValueError, IndexError) as e:
                    self.errors.append(f"cannot follow {' '.join(parts)[:200]}: {e!r}")
                if kind in "AS":
                    pr.acks[self.prefix] += 1
                elif kind == "O":
                    pr.opened.add(parts[1])
                elif kind == "K":
                    pr.ks[parts[1]] = pr.ks.get(parts[1], 0) + 1
                    SEEN["K"] += 1
                elif kind == "X" and len(parts) > 3:
                    SEEN["X"][parts[3]] = SEEN["X"].get(parts[3], 0) + 1
                elif kind == "E":
                    self.errors.append(" ".join(parts))
                pr.cond.notify_all()
        with pr.cond:
            pr.cond.notify_all()

    @property
    def pid(self):
        return self.p.pid

    def alive(self):
        return self.p.poll() is None

    def diagnose(self):
        out = [f"{self.prefix} (pid {self.pid}, modes {self.modes}): "
               f"{'running' if self.alive() else f'exited {self.p.returncode}'}, "
               f"lines {self.lines}, errors {self.errors[:3]}"]
        gdb = shutil.which("gdb")
        if gdb and self.alive():
            r = subprocess.run([gdb, "-q", "-batch", "-p", str(self.pid),
                                "-ex", "thread apply all bt"], capture_output=True, timeout=120)
            out += [ln for ln in r.stdout.decode(errors="replace").splitlines()
                    if ln.startswith(("#", "Thread"))]
        return "\n".join(out)

    def kill(self):
        wtest.kill_pids([self.pid])

    def finish(self):
        """Reaps the process and reads the rest of its output; fails unless
        the test killed it and it reported no error."""
        workload.reap(self.p, self.t)
        err = self.p.stderr.read().decode(errors="replace")
        self.p.stdout.close()
        self.p.stderr.close()
        if self.errors:
            raise TestFailure(f"driver {self.prefix}: {len(self.errors)} error line(s): "
                              f"{self.errors[:3]}")
        if self.p.returncode != -signal.SIGKILL:
            raise TestFailure(f"driver {self.prefix} exited with {self.p.returncode} before "
                              f"it was killed: {err[-500:]}")


def wait_crash_restart(w, since, pids, drivers):
    """The death of an attached driver is a crash restart of the instance."""
    pat = "|".join(str(p) for p in pids)
    rx = rf"walrus-super LOG:  backend process ({pat}) ended without detaching"
    if not wtest.wait_for(lambda: w.log_has(rx, since), HANG, step=0.02):
        raise TestFailure(f"the death of driver pid(s) {pids} was no crash restart "
                          f"(no \"backend process ... ended without detaching\" in the log)\n"
                          + w.log_tail(since, 20) + "\n"
                          + "\n".join(d.diagnose() for d in drivers))


def run_round(a, w, rounds, rnd, rng, live):
    two = rnd in (1, 2) or (rnd > 2 and rng.random() < 0.4)
    variant = "one" if two and (rnd == 2 or (rnd > 2 and rng.random() < 0.5)) else "all"
    since = w.log_size()
    progress = Progress()
    book = rounds.book
    drivers = [ThreadDrv(a.driver, w, book, PROCS[0][0], PROCS[0][1], rnd, rng, progress)]
    live[:] = drivers
    pgid = drivers[0].pid
    if two:
        drivers.append(ThreadDrv(a.driver, w, book, PROCS[1][0], PROCS[1][1], rnd, rng,
                                 progress, pgid=pgid))
        live[:] = drivers
    target = rng.randint(1, 300)
    what = f"{len(drivers)} process(es), kill {variant}"

    def total():
        return sum(progress.acks.values())

    def any_exited():
        return any(not d.alive() for d in drivers)

    def all_opened():
        return all(n in progress.opened for d in drivers for n in d.trackers)

    killed = False
    surv = None
    try:
        # Every thread running (a thread still in its first open when another
        # process dies attaches to the restarted instance and sees no restart).
        progress.wait(lambda: (total() >= target and all_opened()) or any_exited(),
                      f"{target} acknowledgements from threads all open", drivers)
        if any_exited():
            raise TestFailure("a driver exited before it was killed")
        what += f" after {total()} acks"
        if variant == "one":
            victim = rng.choice(drivers)
            surv = [d for d in drivers if d is not victim][0]
            ks0 = {n: progress.ks.get(n, 0) for n in surv.trackers}
            victim.kill()
            wait_crash_restart(w, since, [victim.pid], drivers)
            since2 = w.log_size()
            # Every thread of the survivor opened again and checked its state ...
            progress.wait(lambda: all(progress.ks.get(n, 0) > ks0[n] for n in ks0)
                          or not surv.alive(), "reopen of every surviving thread", [surv])
            if not surv.alive():
                raise TestFailure(f"driver {surv.prefix} exited after the restart")
            # ... and goes on; then it dies too.
            more = rng.randint(0, 100)
            base = progress.acks[surv.prefix]
            progress.wait(lambda: progress.acks[surv.prefix] >= base + more
                          or not surv.alive(), f"{more} acknowledgements after the restart",
                          [surv])
            surv.kill()
            wait_crash_restart(w, since2, [surv.pid], [surv])
            what += f" ({victim.prefix} first; {surv.prefix} reopened, {more} more acks)"
        else:
            os.killpg(pgid, signal.SIGKILL)
            wait_crash_restart(w, since, [d.pid for d in drivers], drivers)
        killed = True
    finally:
        wtest.kill_pids([d.pid for d in drivers if d.alive()])
        errs = []
        for d in drivers:
            try:
                d.finish()
            except TestFailure as e:
                errs.append(str(e))
        live[:] = []
        # Restarts seen: only the survivor of an "one" round, exactly once per thread.
        for d in drivers:
            expect = 1 if variant == "one" and killed and d is surv else 0
            ks = {n: progress.ks.get(n, 0) for n in d.trackers}
            if killed and (any(k != expect for k in ks.values())
                           or (expect == 0 and d.lines.get("X", 0))):
                errs.append(f"driver {d.prefix}: restarts seen per thread {ks} and "
                            f"{d.lines.get('X', 0)} X line(s); expected {expect} each: a "
                            f"restart the test did not cause?")
        if errs and not killed:
            log(f"round {rnd} ({what}): " + "; ".join(errs))

    def driver_errors():
        if errs:
            raise TestFailure("; ".join(errs))
    return rounds.check(f"round {rnd} ({what})", since, before=driver_errors)


def main(cleanup):
    a = workload.suite_args(rounds=10, long_rounds=100, seed=31)
    rng = random.Random(a.seed)
    base = wtest.tempdir(cleanup, "walrus-threadcrash-", keep=a.keep)
    w = wtest.Walrus(a.walrus, os.path.join(base, "data"), OPTS)
    w.register(cleanup)
    live = []
    cleanup.add(lambda: wtest.kill_pids([d.pid for d in live if d.alive()]))
    w.create()
    spaces = [f"{p}.t{i}" for p, n in PROCS for i in range(n)]
    rounds = workload.Rounds(w, spaces)
    log(f"seed {a.seed}, {a.rounds} rounds")
    t0 = time.time()
    for rnd in range(a.rounds):
        run_round(a, w, rounds, rnd, rng, live)
        if rounds.gave_up:
            break
        if rnd % 10 == 9:
            log(f"round {rnd + 1}: {time.time() - t0:.0f} s, {rounds.commits} commits found "
                f"recovered ({rounds.acked} acknowledged)")
    log(f"surviving threads: {SEEN['K']} reopened and found their state; errors that made "
        f"them reopen (code: times): {SEEN['X']}")
    return rounds.finish(t0)


if __name__ == "__main__":
    wtest.guarded(main)

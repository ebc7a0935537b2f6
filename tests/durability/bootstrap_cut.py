#!/usr/bin/env python3
"""Creating a data directory survives a power cut at any step (issue 15).

--case cuts (default): for N = 0, 1, 2, ... the first `walrus put` on a
new directory runs with the power-loss journal (WALRUS_POWERLOSS) and the
failpoint "any:KILL:DIR@N": each process SIGKILLs itself before its
(N+1)-th call through the fd cache on a path in DIR, so the supervisor,
which initialises the directory, dies at that step.  Every process of the
directory is then stopped and killed, and what was not durable is rolled
back (powerloss.py: mode keep, a plain crash, for a missing DIR that walrus
creates; mode drop, every unsynced change lost, for an empty DIR made
beforehand, as a mount point is; WALRUS_LONG=1 runs both modes on both).
Then `walrus put` and `walrus get` must work with no manual action.  The
loop ends with the first N whose run logged "initialised data directory"
before any cut.  Before the fix, a cut after base/ existed left a
directory that every command refused as "not a walrus data directory
(... it is not empty)".

--case race: several `walrus put` at once on a missing directory: each
one succeeds (one supervisor initialises it, the others wait and attach)
and every key is there.

usage: bootstrap_cut.py [--walrus PATH] [--case cuts|race]
"""
import argparse, os, shutil, subprocess, sys

sys.dont_write_bytecode = True  # no __pycache__ in the source tree
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import wtest  # noqa: E402
import workload  # noqa: E402
import powerloss  # noqa: E402
from wtest import check, log  # noqa: E402

MAX_STEPS = 400  # far more calls than an initialisation makes
# Small WAL: a cut run and its check then write little (the machine is shared).
OPTS = ["io_method=sync", "wal_segment_size=64kB", "min_wal_size=256kB", "max_wal_size=1MB"]
# (DIR made beforehand, power-loss mode); WALRUS_LONG=1 runs every pair.
PASSES = ([(False, "drop"), (False, "keep"), (True, "drop"), (True, "keep")]
          if wtest.long_mode() else [(False, "keep"), (True, "drop")])


def walrus(exe, data, *args, env=None):
    argv = [exe, "-D", data]
    for o in OPTS:
        argv += ["-o", o]
    return subprocess.run(argv + list(args), capture_output=True, timeout=120,
                          env=env or wtest.Walrus.env())


def fresh(data, jdir, premade):
    wtest.kill_dir_processes(data)
    shutil.rmtree(data, ignore_errors=True)
    for n in os.listdir(jdir):
        os.unlink(os.path.join(jdir, n))
    if premade:
        os.mkdir(data, 0o700)


def listing(data):
    out = []
    for d, dirs, files in os.walk(data):
        for n in sorted(dirs + files):
            out.append(os.path.relpath(os.path.join(d, n), data))
    return " ".join(sorted(out))


def cut_at(exe, data, jdir, n, mode):
    """The first put, cut before call n; then the power cut.  Returns
    (initialised before the cut, the cut happened)."""
    # Only calls on DIR's files: creating DIR fsyncs its parent in the client.
    env = wtest.Walrus.env(f"any:KILL:{data}@{n}")
    env["WALRUS_POWERLOSS"] = jdir
    walrus(exe, data, "put", "first", "1", env=env)
    w = wtest.Walrus(exe, data)
    text = w.log_text()
    workload.stop_all_then_kill(wtest.instance_pids(data))
    workload.no_survivors(data)
    powerloss.simulate(jdir, data, mode)
    return "initialised data directory" in text, "failpoint: killing the process" in text


def usable(exe, data):
    """None when put and get work on @data, else why not."""
    r = walrus(exe, data, "put", "k", "v")
    if r.returncode == 0:
        r = walrus(exe, data, "get", "k")
        if r.returncode == 0 and r.stdout.decode().strip() == "v":
            return None
    return (f"exit {r.returncode}: {r.stderr.decode(errors='replace').strip()[-400:]}; "
            f"DIR holds: {listing(data)}")


def cut_each_step(exe, data, jdir, premade, mode, failures):
    """Cuts before each call of the initialisation in turn; returns how many."""
    what = f"{'empty' if premade else 'missing'} DIR, {mode}"
    for n in range(MAX_STEPS):
        fresh(data, jdir, premade)
        initialised, killed = cut_at(exe, data, jdir, n, mode)
        why = usable(exe, data)
        if why is not None:
            failures.append(f"{what}, cut before call {n}: {why}")
        if initialised or not killed:
            log(f"{what}: cut before each of the {n} calls of the initialisation")
            check(n >= 10, f"{what}: only {n} calls before the directory was "
                  f"initialised: the cuts did not reach the initialisation")
            return n
    raise wtest.TestFailure(f"{what}: not initialised after {MAX_STEPS} calls")


def case_cuts(exe, base):
    data, jdir = os.path.join(base, "data"), os.path.join(base, "journal")
    os.mkdir(jdir)  # same file system as DIR: the journal's saved hard links
    failures = []
    cuts = sum(cut_each_step(exe, data, jdir, premade, mode, failures)
               for premade, mode in PASSES)
    wtest.kill_dir_processes(data)
    for f in failures[:8]:
        log("FAIL: " + f)
    check(not failures, f"{len(failures)} of {cuts} cuts left a directory walrus cannot use")
    log(f"ok: {cuts} power cuts during initialisation, each directory usable afterwards")
    return 0


def case_race(exe, base):
    data = os.path.join(base, "data")
    env = wtest.Walrus.env()
    procs = []
    for i in range(6):
        argv = [exe, "-D", data, "put", f"k{i}", f"v{i}"]
        procs.append(subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                      env=env))
    bad = []
    for i, p in enumerate(procs):
        out, err = p.communicate(timeout=120)
        if p.returncode != 0:
            bad.append(f"put k{i}: exit {p.returncode}: {err.decode(errors='replace')}")
    check(not bad, "racing creators failed: " + "; ".join(bad))
    for i in range(len(procs)):
        r = walrus(exe, data, "get", f"k{i}")
        check(r.returncode == 0 and r.stdout.decode().strip() == f"v{i}",
              f"get k{i}: exit {r.returncode}: {r.stderr.decode(errors='replace')}")
    text = wtest.Walrus(exe, data).log_text()
    check(text.count("initialised data directory") == 1,
          "the directory was initialised more than once (or never)")
    check("supervisor pid 0" not in text, "the busy message names pid 0:\n" + text[-2000:])
    wtest.kill_dir_processes(data)
    log("ok: 6 racing creators, one initialisation, every key there")
    return 0


def main(cleanup):
    ap = argparse.ArgumentParser()
    ap.add_argument("--walrus", default=wtest.default_walrus())
    ap.add_argument("--case", default="cuts", choices=["cuts", "race"])
    a = ap.parse_args()
    base = wtest.tempdir(cleanup, "walrus-bootstrap-")
    cleanup.add_durable("kill_dir", os.path.join(base, "data"))
    return (case_cuts if a.case == "cuts" else case_race)(a.walrus, base)


if __name__ == "__main__":
    wtest.guarded(main)

#!/usr/bin/env python3
"""Runs repro_reopen_race (a regression test in C: a thread's calls on its
dead handle while another thread of the process reopens after a crash
restart must report WALRUS_ERESTART, never EINVAL nor a SIGSEGV; see its
opening comment) on a scratch data directory, with the cleanup of
tests/durability/wtest.py: nothing is left behind, whatever happens.

usage: test_reopen_race.py --walrus PATH --driver PATH [--rounds N] [--keep]
"""
import argparse, os, subprocess, sys

sys.dont_write_bytecode = True
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import txntest  # noqa: E402
from txntest import wtest, log  # noqa: E402


def main(cleanup):
    ap = argparse.ArgumentParser()
    ap.add_argument("--walrus", default=wtest.default_walrus())
    ap.add_argument("--driver", required=True)
    ap.add_argument("--rounds", type=int, default=20 if wtest.long_mode() else 5)
    ap.add_argument("--keep", action="store_true")
    a = ap.parse_args()
    base = wtest.tempdir(cleanup, "walrus-reopenrace-", keep=a.keep)
    w = wtest.Walrus(os.path.abspath(a.walrus), os.path.join(base, "data"))
    w.register(cleanup)
    w.create()
    # Working directory DIR: the cleanup finds it among the instance's processes.
    p = subprocess.Popen([os.path.abspath(a.driver), w.dir, str(a.rounds)],
                         stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                         stderr=subprocess.STDOUT, cwd=w.dir, env=w.env())
    cleanup.add(lambda: p.poll() is None and p.kill())
    try:
        out, _ = p.communicate(timeout=txntest.HANG * 2)
    except subprocess.TimeoutExpired:
        p.kill()
        out, _ = p.communicate()
        raise wtest.TestFailure(f"repro_reopen_race hangs: {out.decode(errors='replace')}")
    log(out.decode(errors="replace").rstrip())
    wtest.check(p.returncode == 0, f"repro_reopen_race exited with {p.returncode}")
    return 0


if __name__ == "__main__":
    wtest.guarded(main)

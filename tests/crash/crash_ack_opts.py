#!/usr/bin/env python3
"""crash_ack.py (the shared acceptance test, run in place) on a data
directory whose walrus.conf sets engine options: the durability matrix
(io_method=io_uring; wal_direct_io=off + wal_sync_method=open_datasync;
wal_compression=on; data_direct_io=on, alone and with io_method=io_uring).  The acceptance script starts every command with the
defaults; the options reach each instance it starts through DIR/walrus.conf,
written here with `walrus config set` before the first round.  The directory
and any process left on it are removed at the end, whatever happens.

usage: crash_ack_opts.py --acceptance PATH/crash_ack.py --walrus PATH
                         --opt NAME=VALUE [--opt ...] [crash_ack.py args...]
"""
import argparse, os, subprocess, sys

sys.dont_write_bytecode = True
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "durability"))
import wtest  # noqa: E402
from wtest import log  # noqa: E402


def main(cleanup):
    ap = argparse.ArgumentParser()
    ap.add_argument("--acceptance", required=True)
    ap.add_argument("--walrus", required=True)
    ap.add_argument("--opt", action="append", required=True, metavar="NAME=VALUE")
    a, rest = ap.parse_known_args()
    base = wtest.tempdir(cleanup, "walrus-crashack-")
    data = os.path.join(base, "data")
    cleanup.add_durable("kill_dir", data)
    for kv in a.opt:
        name, _, value = kv.partition("=")
        r = subprocess.run([a.walrus, "-D", data, "config", "set", name, value],
                           capture_output=True, text=True, timeout=60)
        wtest.check(r.returncode == 0, f"config set {kv}: {r.stderr.strip()}")
    log(f"crash_ack.py with {' '.join(a.opt)}")
    r = subprocess.run([sys.executable, a.acceptance, "--walrus", a.walrus, "--dir", data] + rest,
                       cwd=os.path.dirname(os.path.abspath(a.acceptance)))
    # The options really applied: the last instance's settings say they came from the file.
    settings = os.path.join(data, "walrus.settings")
    wtest.check(os.path.exists(settings), f"no {settings}: no instance ever started")
    source = {}
    for line in open(settings):
        f = line.split()
        if len(f) >= 3:
            source[f[0]] = f[-1]
    for kv in a.opt:
        name = kv.partition("=")[0]
        wtest.check(source.get(name) == "file", f"{name} not taken from walrus.conf: {source.get(name)}")
    return r.returncode


if __name__ == "__main__":
    wtest.guarded(main)

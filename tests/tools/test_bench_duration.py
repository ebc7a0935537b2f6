#!/usr/bin/env python3
"""tests/tools/test_bench_duration.py - every `walrus bench` workload takes
--duration as well as --num: fillsync (two clients), fillseq over fewer keys
than the duration outlasts (the fill goes over them again), scan (whole
scans repeated) and checkpoint (rounds) each run a short --duration, end
with exit 0 (each run checks its own result: a wrong one exits 2) and
report their operations. No wall-clock figure is asserted: the machine is
shared; that the runs ended is enough.

Each data directory is a new temporary one, removed after its instance has
shut down (supervisor_linger=0), so nothing is left behind.

usage: test_bench_duration.py --walrus PATH
"""
import os
import shutil
import subprocess
import sys
import tempfile

sys.dont_write_bytecode = True  # no __pycache__ in the source tree
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from benchtest import fail, last_json, wait_stopped, walrus_arg  # noqa: E402

BASE_OPTS = ["-o", "supervisor_linger=0", "-o", "shared_buffers=2MB"]


def bench(walrus, db, args):
    cmd = [walrus, "-D", db] + BASE_OPTS + ["bench"] + args + ["--json"]
    print("$ " + " ".join(cmd))
    p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                       universal_newlines=True, timeout=240)
    sys.stdout.write(p.stdout)
    sys.stdout.write(p.stderr)
    if p.returncode != 0:
        fail("exit status %d:\n%s" % (p.returncode, p.stderr))
    return last_json(p)


def check_kv(j, workload):
    if j.get("workload") != workload or j.get("duration_s") != 0.5:
        fail("%s: not the run asked for: %s" % (workload, j))
    if not isinstance(j.get("ops"), int) or j["ops"] <= 0:
        fail("%s: no operations reported: %s" % (workload, j))


def main():
    walrus = walrus_arg()
    base = tempfile.mkdtemp(prefix="walrus-tbenchdur-")
    dirs = []
    try:
        sync_db = os.path.join(base, "sync")
        dirs.append(sync_db)
        check_kv(bench(walrus, sync_db, ["--workload", "fillsync", "--clients", "2",
                                         "--num", "20", "--duration", "0.5"]), "fillsync")

        db = os.path.join(base, "seq")
        dirs.append(db)
        check_kv(bench(walrus, db, ["--workload", "fillseq", "--num", "50",
                                    "--duration", "0.5"]), "fillseq")
        # The scan runs on the complete fillseq database: whole scans of its 50 keys.
        j = bench(walrus, db, ["--workload", "scan", "--num", "50", "--duration", "0.5"])
        check_kv(j, "scan")
        if j["ops"] % 50 != 0:
            fail("scan: %d keys is not a number of whole scans of 50" % j["ops"])

        ck_db = os.path.join(base, "ckpt")
        dirs.append(ck_db)
        j = bench(walrus, ck_db, ["--workload", "checkpoint", "--pages", "64",
                                  "--duration", "0.5"])
        if j.get("workload") != "checkpoint" or not j.get("rounds", 0) >= 1:
            fail("checkpoint: no rounds reported: %s" % j)
    finally:
        for d in dirs:
            wait_stopped(d, 30)
        shutil.rmtree(base, ignore_errors=True)
    print("ok")


if __name__ == "__main__":
    main()

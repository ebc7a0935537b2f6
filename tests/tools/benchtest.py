"""Helpers shared by the `walrus bench` tests (test_bench.py,
test_bench_kv.py): failing the run, waiting for an instance to shut down
before its data directory is removed, and reading the JSON line that
scripts rely on."""
import argparse
import json
import os
import sys
import time


def walrus_arg():
    """The walrus binary under test: --walrus (meson passes it) or WALRUS_BIN."""
    ap = argparse.ArgumentParser()
    ap.add_argument("--walrus", default=os.environ.get("WALRUS_BIN"))
    a = ap.parse_args()
    if not a.walrus:
        fail("--walrus or WALRUS_BIN is needed")
    return a.walrus


def fail(msg):
    """Ends the test: the first failed check is the one reported."""
    print("FAIL: " + msg, file=sys.stderr)
    sys.exit(1)


def wait_stopped(d, timeout_s):
    """The supervisor removes walrus.pid when it exits (after its
    supervisor_linger); removing d before then would pull the files from
    under a running instance."""
    for _ in range(timeout_s * 20):
        if not os.path.exists(os.path.join(d, "walrus.pid")):
            return
        time.sleep(0.05)
    fail("instance in %s still running after %d s" % (d, timeout_s))


def last_json(p):
    """The JSON object on the last line of @p's stdout (a finished
    subprocess.run with text output)."""
    lines = p.stdout.strip().splitlines()
    if not lines:
        fail("no output on stdout")
    try:
        return json.loads(lines[-1])
    except ValueError as e:
        fail("last line is not JSON (%s): %r" % (e, lines[-1]))


def check_keys(j, keys, what=None):
    """Every key of @keys is in the JSON object @j; @what names the run."""
    missing = [k for k in keys if k not in j]
    if missing:
        msg = "JSON misses %s: %s" % (missing, j)
        fail(msg if what is None else "%s: %s" % (what, msg))

#!/usr/bin/env python3
"""`walrus compact` on a running instance, black-box: after a random load and
after most values shrank, the data files' allocated size drops by exactly
the blocks it reports given back, every remaining key reads back, verify is
clean, a restart and new writes find the tree whole, and --help and usage
errors behave.  Prints 'N passed, N failed' last."""
import json, os, random, re, shutil, subprocess, sys, tempfile

sys.dont_write_bytecode = True  # no __pycache__ in the source tree
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from clitest import PAGE_SIZE, WALRUS, check, stop_instance, summary  # noqa: E402

N = 30000


def run(d, *args, stdin=None, linger="0"):
    r = subprocess.run([WALRUS, "-D", d, "-o", f"supervisor_linger={linger}", *args],
                       input=stdin, capture_output=True, timeout=300)
    return r.returncode, r.stdout, r.stderr


def allocated(d):
    """Bytes the data files hold on disk (st_blocks), every segment."""
    base = os.path.join(d, "base")
    return sum(os.stat(os.path.join(base, f)).st_blocks * 512 for f in os.listdir(base))


def compact(d, linger="0"):
    rc, out, err = run(d, "compact", linger=linger)
    m = re.search(rb"blocks in use (\d+) -> (\d+); given back (\d+)", out)
    return rc, m and tuple(int(x) for x in m.groups()), out + err


def key(i):
    return b"%016d" % i


def value(i):
    return b"v%05d-" % i + b"x" * 90


def main():
    base = tempfile.mkdtemp(prefix="walrus-compact-")
    d = os.path.join(base, "db")
    try:
        order = list(range(N))
        random.Random(7).shuffle(order)
        lines = b"".join(key(i) + b"\t" + value(i) + b"\n" for i in order)
        rc, _, err = run(d, "load", "--batch", "500", stdin=lines)
        check("random load", rc == 0, err)
        rc, _, _ = run(d, "checkpoint")
        # That instance exits (linger 0): compact must start its own, which
        # lingers, not attach to this one on its way out.
        stop_instance(d)
        before = allocated(d)
        rc, blocks, out = compact(d, linger="60s")  # stays up for its statistics
        check("compact after a random load", rc == 0 and blocks is not None, out)
        rc, out, _ = run(d, "verify")
        check("verify after compact", rc == 0 and b"ok" in out, out)
        rc, out, _ = run(d, "stats", "--json", linger="60s")
        kv = json.loads(out)["kv"] if rc == 0 else {}
        check("stats count the compaction", kv.get("compactions") == 1 and
              kv.get("compact_blocks_given_back") == (blocks or (0, 0, -1))[2] and
              kv.get("compact_leaves_merged", 0) > 0 and kv.get("compact_pages_moved", 0) > 0, kv)
        rc, _, _ = run(d, "stop", "--wait")
        check("stop", rc == 0, rc)
        if blocks:
            # Measured after the shutdown checkpoint: nothing written back into the holes.
            used_before, used_after, back = blocks
            check("fewer blocks in use", used_after < used_before, blocks)
            check("blocks given back", back > 0, blocks)
            check("the files' allocated size dropped by what was given back",
                  before - allocated(d) == back * PAGE_SIZE, (before, allocated(d), back))
        rc, out, _ = run(d, "scan")
        check("scan finds every key", rc == 0 and len(out.splitlines()) == N, len(out.splitlines()))
        # Nine values in ten shrunk to a byte: most of the file goes back.
        small = b"".join(key(i) + b"\ts\n" for i in range(N) if i % 10)
        rc, _, err = run(d, "load", "--batch", "500", stdin=small)
        check("values shrunk", rc == 0, err)
        rc, blocks, out = compact(d)
        check("compact after values shrank", rc == 0 and blocks is not None, out)
        if blocks:
            used_before, used_after, back = blocks
            check("a third of the blocks or fewer stay", used_after * 3 <= used_before, blocks)
        for i in (0, 10, 12340, N - 10):
            rc, out, _ = run(d, "get", key(i).decode())
            check(f"key {i} kept its value", rc == 0 and out == value(i) + b"\n", (rc, out[:40]))
        rc, out, _ = run(d, "get", key(1).decode())
        check("a shrunk value reads back", rc == 0 and out == b"s\n", (rc, out))
        stop_instance(d)
        # A restart, and the tree grows again over the tail given back.
        more = b"".join(key(i) + b"\t" + value(i) + b"\n" for i in range(N, 2 * N))
        rc, _, err = run(d, "load", "--batch", "500", stdin=more)
        check("load after the restart", rc == 0, err)
        rc, out, _ = run(d, "verify")
        check("verify after growing again", rc == 0 and b"ok" in out, out)
        rc, out, _ = run(d, "scan")
        check("scan after growing again", rc == 0 and len(out.splitlines()) == 2 * N,
              len(out.splitlines()))
        rc, out, _ = run(d, "compact", "--help")
        check("compact --help", rc == 0 and b"usage" in out, (rc, out))
        rc, _, err = run(d, "compact", "extra")
        check("compact takes no argument", rc == 2, (rc, err))
        stop_instance(d)
    finally:
        stop_instance(d)
        shutil.rmtree(base, ignore_errors=True)
    return summary()


if __name__ == "__main__":
    sys.exit(main())

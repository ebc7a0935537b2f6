#!/usr/bin/env python3
"""Archive recovery killed at each step after it chose where to stop (test
builds: KILL failpoints): while cutting the abandoned WAL, while writing the
new timeline's history, and after the end-of-recovery checkpoint but before
the recovery file goes.  The next start finishes the same recovery: exactly
the first batch, timeline 2, the recovery file gone, the abandoned WAL cut
off.  Prints 'N passed, N failed' last; leaves no process."""
import os, shutil, subprocess, sys, tempfile

sys.dont_write_bytecode = True  # no __pycache__ in the source tree
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from clitest import WALRUS, check, summary  # noqa: E402
import test_pitr_recovery as pitr  # noqa: E402

STEPS = [
    ("cutting the WAL", "unlink:KILL:/wal/0000000003000000"),
    ("writing the history", "rename:KILL:00000002.history"),
    ("removing the recovery file", "unlink:KILL:walrus.recovery"),
]


def killed_start(d, spec):
    env = dict(os.environ, WALRUS_FAILPOINTS=spec)
    r = subprocess.run([WALRUS, "-D", d] + pitr.FAST + ["get", "base"], env=env,
                       capture_output=True, timeout=120)
    pitr.stop(d)
    return r.returncode


def main():
    root = tempfile.mkdtemp(prefix="walrus-pitrkill-")
    try:
        src = pitr.Source(root)
        for i, (name, spec) in enumerate(STEPS):
            new = src.restore(root, f"kill{i}", "target = name\ntarget_name = rp1\n")
            rc = killed_start(new, spec)
            marker = os.path.exists(os.path.join(new, "walrus.recovery"))
            check(f"killed {name}: the start failed, the recovery file is still there",
                  marker and (rc != 0 or i == 2), f"exit {rc}")
            pitr.check_first_batch(f"after a kill {name}", src, new)
    except Exception as e:  # a failed step is a failure, reported with the rest
        check("steps", False, repr(e))
    finally:
        for d in os.listdir(root):
            if not d.startswith("wal-"):
                pitr.stop(os.path.join(root, d))
        shutil.rmtree(root, ignore_errors=True)
    return summary()


if __name__ == "__main__":
    sys.exit(main())

#!/usr/bin/env python3
"""run_fuzz.py - runs a libFuzzer target briefly from the seed corpus.

New inputs go to a scratch directory, never into the seed corpus of the
source tree.  usage: run_fuzz.py FUZZER SEED_DIR [libFuzzer options...]
"""
import os
import shutil
import subprocess
import sys
import tempfile


def main():
    fuzzer, seeds, opts = os.path.abspath(sys.argv[1]), os.path.abspath(sys.argv[2]), sys.argv[3:]
    scratch = tempfile.mkdtemp(prefix="walrus-fuzz-")
    try:
        r = subprocess.run([fuzzer] + opts + [scratch, seeds], cwd=scratch)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    print("1 passed, 0 failed" if r.returncode == 0 else "0 passed, 1 failed")
    return r.returncode


if __name__ == "__main__":
    sys.exit(main())

#!/usr/bin/env python3
"""run_fuzz.py - replays a libFuzzer target's corpus, then fuzzes it briefly.

usage: run_fuzz.py --fuzzer EXE --corpus DIR [--crashes DIR] [--time SECONDS]
                   [-- extra libFuzzer options]

The corpus (seeds and the regression inputs of bugs found) is read first:
an input that crashes again fails the test at once.  Then libFuzzer runs
for --time seconds (WALRUS_LONG=1 multiplies it by 30).  New interesting
inputs go to a scratch directory that is removed afterwards, never into the
source tree; a crashing input is written to --crashes (printed in hex too),
to be copied into the corpus as a regression input once the bug is fixed.
Prints "1 passed, 0 failed" or "0 passed, 1 failed" last.
"""
import argparse, glob, os, shutil, subprocess, sys, tempfile


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--fuzzer", required=True)
    ap.add_argument("--corpus", required=True)
    ap.add_argument("--crashes")
    ap.add_argument("--time", type=int, default=10)
    ap.add_argument("extra", nargs="*")
    a = ap.parse_args()
    t = a.time * (30 if os.environ.get("WALRUS_LONG", "") not in ("", "0") else 1)
    fuzzer = os.path.abspath(a.fuzzer)
    crashes = os.path.abspath(a.crashes or tempfile.mkdtemp(prefix="walrus-fuzz-crash-"))
    os.makedirs(crashes, exist_ok=True)
    scratch = tempfile.mkdtemp(prefix="walrus-fuzz-")
    seeds = sorted(glob.glob(os.path.join(a.corpus, "*")))
    print(f"{os.path.basename(fuzzer)}: {len(seeds)} corpus inputs, then {t} s of fuzzing",
          flush=True)
    env = dict(os.environ)
    env.setdefault("ASAN_OPTIONS", "detect_leaks=1:abort_on_error=0")
    env.setdefault("UBSAN_OPTIONS", "halt_on_error=1:print_stacktrace=1")
    before = set(os.listdir(crashes))
    try:
        r = subprocess.run([fuzzer, f"-max_total_time={t}", "-timeout=20", "-rss_limit_mb=2048",
                            "-print_final_stats=1", f"-artifact_prefix={crashes}/"]
                           + a.extra + [scratch, os.path.abspath(a.corpus)],
                           cwd=scratch, env=env)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    for name in sorted(set(os.listdir(crashes)) - before):
        path = os.path.join(crashes, name)
        with open(path, "rb") as f:
            data = f.read()
        print(f"crashing input {path} ({len(data)} bytes): {data[:512].hex()}")
    ok = r.returncode == 0
    print("1 passed, 0 failed" if ok else "0 passed, 1 failed")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())

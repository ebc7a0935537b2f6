#!/usr/bin/env python3
"""tests/tools/test_bench.py - `walrus bench`'s buffer pool workloads run
briefly (bufhit with 1 and 2 clients, threads and processes, bufscan
sequential with both io_methods and random), plus a WAL workload (1 client,
and 2 in each client mode) and bad ones: the exit status, and the final JSON
line with the keys scripts rely on.  No timing is asserted: the machine is
shared.

usage: test_bench.py --walrus PATH
"""
import os
import shutil
import subprocess
import sys
import tempfile

sys.dont_write_bytecode = True  # no __pycache__ in the source tree
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from benchtest import check_keys, fail, last_json, wait_stopped, walrus_arg  # noqa: E402

# The build's page size (meson test sets it; -Dpage_size): shared_buffers=1MB is
# 1 MiB / PAGE buffers.
PAGE = int(os.environ.get("WALRUS_TEST_PAGE_SIZE", "8192"))
NBUFFERS = (1 << 20) // PAGE

BUF_KEYS = ["workload", "clients", "clients_mode", "mode", "io_method", "depth", "effective_depth", "pages",
            "nbuffers", "page_size", "setup_s", "ops", "seconds", "ops_per_s", "pages_per_s", "MBps",
            "passes", "first_pass_s", "hits", "reads", "hit_ratio", "evictions",
            "cpu_ns_per_op", "batch", "avg_ns", "p50_ns", "p99_ns", "p999_ns", "max_ns",
            "datadir", "options"]
WAL_KEYS = ["workload", "clients", "clients_mode", "value_size", "ops", "seconds", "ops_per_s", "MBps",
            "avg_us", "p50_us", "p99_us", "p999_us", "max_us", "wal_flushes", "options"]


def bench(walrus, opts, args, expect_rc=0):
    d = tempfile.mkdtemp(prefix="walrus-tbench-")
    try:
        cmd = [walrus, "-D", d, "-o", "supervisor_linger=200ms", "-o", "shared_buffers=1MB"]
        for o in opts:
            cmd += ["-o", o]
        cmd += ["bench"] + args
        p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                           universal_newlines=True, timeout=300)
        print("$ " + " ".join(cmd))
        print(p.stdout, end="")
        if p.returncode != expect_rc:
            fail("exit status %d, expected %d; stderr:\n%s" % (p.returncode, expect_rc,
                                                                p.stderr))
        if expect_rc != 0:
            return None
        return last_json(p)
    finally:
        # It lingers 200 ms (supervisor_linger above); 20 s leaves room on a loaded machine.
        wait_stopped(d, 20)
        shutil.rmtree(d, ignore_errors=True)


def main():
    walrus = walrus_arg()

    # Threads are the default; --processes forks the clients.
    for clients, mode in ((1, None), (2, None), (2, "processes"), (2, "threads")):
        j = bench(walrus, [], ["--workload", "bufhit", "--duration", "0.5", "--clients",
                               str(clients), "--json"] + (["--" + mode] if mode else []))
        check_keys(j, BUF_KEYS)
        if j["workload"] != "bufhit" or j["clients"] != clients or j["mode"] != "random":
            fail("bufhit: %s" % j)
        if j["clients_mode"] != (mode or "threads"):
            fail("bufhit %s: %s" % (mode, j))
        # Half of the pool (1MB: 128 pages of 8 KiB, 256 of 4 KiB); every read of the run is
        # a hit once warm.
        if j["nbuffers"] != NBUFFERS or j["pages"] != NBUFFERS // 2 or j["ops"] <= 0:
            fail("bufhit: %s" % j)
        if j["page_size"] != PAGE:
            fail("bufhit page_size: %s" % j)
        if j["hits"] + j["reads"] != j["ops"] or j["options"]["shared_buffers"] != "1MB":
            fail("bufhit counters: %s" % j)

    for method in ("sync", "io_uring"):
        j = bench(walrus, ["io_method=" + method],
                  ["--workload", "bufscan", "--duration", "0.5", "--depth", "16", "--json"])
        check_keys(j, BUF_KEYS)
        if j["workload"] != "bufscan" or j["mode"] != "sequential" or j["io_method"] != method:
            fail("bufscan: %s" % j)
        if j["pages"] != NBUFFERS * 4 or j["depth"] != 16 or j["effective_depth"] != 16:
            fail("bufscan: %s" % j)
        # A relation 4x the pool, read in order: (nearly) every page is a read.
        if j["ops"] <= 0 or j["reads"] <= 0 or j["hits"] + j["reads"] < j["ops"]:
            fail("bufscan counters: %s" % j)

    j = bench(walrus, ["io_method=io_uring"],
              ["--workload", "bufscan", "--random", "--clients", "2", "--duration", "0.5",
               "--json"])
    check_keys(j, BUF_KEYS)
    if j["mode"] != "random" or j["clients"] != 2 or j["hits"] + j["reads"] != j["ops"]:
        fail("bufscan --random: %s" % j)

    j = bench(walrus, [], ["--workload", "walcommit", "--num", "20", "--json"])
    check_keys(j, WAL_KEYS)
    if j["workload"] != "walcommit" or j["ops"] != 20 or j["clients_mode"] != "threads":
        fail("walcommit: %s" % j)
    for mode in ("threads", "processes"):
        j = bench(walrus, [], ["--workload", "walcommit", "--num", "20", "--clients", "2",
                               "--" + mode, "--json"])
        check_keys(j, WAL_KEYS)
        if j["ops"] != 40 or j["clients"] != 2 or j["clients_mode"] != mode:
            fail("walcommit --%s: %s" % (mode, j))

    bench(walrus, [], ["--workload", "bufnothing"], expect_rc=2)
    bench(walrus, [], ["--workload", "bufscan", "--depth", "0"], expect_rc=2)
    bench(walrus, [], ["--workload", "bufhit", "--threads", "--processes"], expect_rc=2)
    print("ok")


if __name__ == "__main__":
    main()

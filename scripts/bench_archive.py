#!/usr/bin/env python3
"""WAL archiving benchmark (docs/performance.md, "WAL archiving"): in one
run, a durable load (walrus bench updaterandom --sync, 8 clients) without
archiving and then with archive_mode=on and archive_dir on the same file
system, sampling `walrus stats --json` every 0.2 s: the archive lag (WAL
completed but not yet archived, in bytes and in seconds of WAL at the load's
rate), segments archived, and the load's rate and p99 with archiving
against without.  Not a test: numbers depend on the machine.  Leaves
nothing behind.

usage: scripts/bench_archive.py [--walrus build/tools/walrus] [--duration 20]
                                [--clients 8] [--dir /var/tmp]"""
import argparse, json, os, shutil, statistics, subprocess, sys, tempfile, threading, time


def run(cmd):
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode != 0:
        sys.exit(f"{' '.join(cmd)}: exit {r.returncode}: {r.stderr.strip()[-500:]}")
    return r.stdout


def load(w, d, secs, clients):
    cmd = [w, "-D", d, "-o", "supervisor_linger=30s", "bench", "--workload", "updaterandom",
           "--reuse", "--sync", "--value-size", "1000", "--num", "100000", "--duration",
           str(secs), "--clients", str(clients), "--json"]
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode != 0:
        sys.exit(f"bench: exit {r.returncode}: {r.stderr.strip()[-500:]}")
    return json.loads(r.stdout.strip().splitlines()[-1])


def sampler(w, d, out, stop):
    while not stop.is_set():
        r = subprocess.run([w, "-D", d, "stats", "--json"], capture_output=True, text=True)
        if r.returncode == 0:
            s = json.loads(r.stdout)
            out.append((time.monotonic(), s["archiver"]["archive_pending_bytes"],
                        s["archiver"]["archived_count"], s["wal"]["bytes"]))
        time.sleep(0.2)


def one(w, root, name, secs, clients, archive):
    d = os.path.join(root, name)
    os.makedirs(d, mode=0o700)
    if archive:
        os.makedirs(archive, mode=0o700)
        run([w, "-D", d, "config", "set", "archive_dir", archive])
        run([w, "-D", d, "config", "set", "archive_mode", "on"])
    run([w, "-D", d, "-o", "create_if_missing=on", "-o", "supervisor_linger=30s", "bench",
         "--workload", "fillrandom", "--reuse", "--num", "100000", "--value-size", "1000"])
    samples, stop = [], threading.Event()
    t = threading.Thread(target=sampler, args=(w, d, samples, stop))
    t.start()
    res = load(w, d, secs, clients)
    stop.set()
    t.join()
    run([w, "-D", d, "stop", "--wait"])
    return res, samples


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--walrus", default="build/tools/walrus")
    ap.add_argument("--duration", type=int, default=20)
    ap.add_argument("--clients", type=int, default=8)
    ap.add_argument("--dir", default="/var/tmp")
    a = ap.parse_args()
    root = tempfile.mkdtemp(prefix="walrus-bench-archive-", dir=a.dir)
    try:
        base, _ = one(a.walrus, root, "plain", a.duration, a.clients, None)
        arch, samples = one(a.walrus, root, "archiving", a.duration, a.clients,
                            os.path.join(root, "archive"))
    finally:
        for d in ("plain", "archiving"):
            subprocess.run([a.walrus, "-D", os.path.join(root, d), "stop", "--wait"],
                           capture_output=True)
        shutil.rmtree(root, ignore_errors=True)
    pend = [p for _, p, _, _ in samples] or [0]
    span = samples[-1][0] - samples[0][0] if len(samples) > 1 else 1
    rate = (samples[-1][3] - samples[0][3]) / span if len(samples) > 1 else 0
    print(f"load without archiving: {base['ops_per_s']:.0f} ops/s, p99 {base['p99_us']:.0f} us")
    print(f"load with archiving:    {arch['ops_per_s']:.0f} ops/s, p99 {arch['p99_us']:.0f} us"
          f"  (ratio {arch['ops_per_s'] / base['ops_per_s']:.2f}, "
          f"p99 x{arch['p99_us'] / base['p99_us']:.2f})")
    print(f"WAL rate {rate / 1e6:.1f} MB/s; segments archived {samples[-1][2] if samples else 0}; "
          f"{len(samples)} samples")
    print(f"archive lag (completed, not archived): median {statistics.median(pend) / 1e6:.1f} MB, "
          f"max {max(pend) / 1e6:.1f} MB = {max(pend) / rate if rate else 0:.2f} s of WAL")


if __name__ == "__main__":
    main()

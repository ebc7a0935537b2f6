#!/usr/bin/env python3
"""Streaming replication benchmark (docs/performance.md, "Replication"): in
one run, on this machine (primary, standby and clients share its cores and
its disk; the standby streams over a Unix socket),
  1. durable commit rate: `walrus bench --workload fillsync` (every put
     waits for its WAL flush) with N clients on a primary (a) without a
     standby, (b) with an asynchronous streaming standby, (c) with a
     synchronous one (synchronous_standby names it: a commit returns once
     the standby has flushed it), interleaved a b c a b c; ops/s, ratio to
     (a) (target: (b) >= 0.90 x (a)), and what a commit pays for the round
     trip in (c) (median latency against (a));
  2. replay against the primary's write rate: while N writers load the
     primary (fillsync: durable; updaterandom without --sync: as fast as
     the CPU goes), every 0.2 s the standby's received and replayed LSNs
     and the primary's flush LSN; the lag's maximum and its value when the
     load ends, and how long the standby takes to catch up after it.
With --pin the primary (its processes, the WAL sender among them) and its
clients run on CPU 0 and the standby on CPU 1 with its directory on
/dev/shm (unless --standby-dir says otherwise): the standby's cost on the
primary is then what the primary's own CPU pays for it.  With
--keep-cpu1-awake a SCHED_IDLE spinner on CPU 1 keeps that CPU out of its
idle halt in every configuration: on this VM the disk's interrupts go to
CPU 1, and a halted CPU 1 slows every fdatasync of the primary, so without
it the runs without a standby (CPU 1 idle) are slowed by that, not only by
the standby's absence, and the ratios flatter the standby.
Not a test: numbers depend on the machine.  Leaves nothing behind, and stops
only the instances it started.

usage: scripts/bench_standby.py [--walrus build/tools/walrus] [--duration 10]
                                [--clients 8] [--rounds 2] [--dir /var/tmp]
                                [--standby-dir /dev/shm] [--pin [--keep-cpu1-awake]]
                                [-o NAME=VALUE]..."""
import argparse, json, os, shutil, signal, statistics, subprocess, sys, tempfile, threading, time

PASSWORD = "secret"
SLOT = "bench"


def run(cmd, env=None):
    r = subprocess.run(cmd, capture_output=True, text=True, env=env)
    if r.returncode != 0:
        sys.exit(f"{' '.join(cmd)}: exit {r.returncode}: {r.stderr.strip()[-500:]}")
    return r.stdout


def lsn(s):
    hi, lo = s.split("/")
    return (int(hi, 16) << 32) | int(lo, 16)


def wait_for(what, pred, timeout=60):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if pred():
            return
        time.sleep(0.05)
    sys.exit(f"timed out waiting for {what}")


class Pair:
    """A primary ROOT/NAME-p listening on a Unix socket, and its streaming
    standby ROOT/NAME-standby (application_name: that base name)."""

    def __init__(self, w, root, name, sroot, standby_cpus=None):
        self.w = w
        self.standby_cpus = standby_cpus  # None: wherever this script runs
        self.primary_opts = []  # NAME=VALUE for the primary's serve
        self.p = os.path.join(root, name + "-p")
        self.s = os.path.join(sroot, name + "-standby")
        self.name = os.path.basename(self.s)
        self.sock = os.path.join(root, name + ".sock")
        self.log = os.path.join(root, name + ".out")
        self.serve = self.standby = None

    def create(self, fill):
        """The primary's database: made by the bench fill @fill (a list of
        arguments), so that later runs find exactly the keys they expect."""
        os.makedirs(self.p, mode=0o700)
        conf = os.path.join(self.p, "walrus.conf")
        with open(conf, "w") as f:
            f.write(f"listen_replication = '{self.sock}'\nreplication_password = '{PASSWORD}'\n")
        os.chmod(conf, 0o600)
        run([self.w, "-D", self.p, "-o", "create_if_missing=on", "bench"] + fill + ["--reuse"])
        run([self.w, "-D", self.p, "stop", "--wait"])

    def stats(self, d):
        return json.loads(run([self.w, "-D", d, "stats", "--json"]))

    def start_primary(self, sync):
        opts = [x for o in self.primary_opts for x in ("-o", o)]
        opts += ["-o", f"synchronous_standby={self.name}"] if sync else []
        with open(self.log, "ab") as out:
            self.serve = subprocess.Popen([self.w, "-D", self.p] + opts + ["serve"],
                                          stdin=subprocess.DEVNULL, stdout=out, stderr=out)
        wait_for("the primary", lambda: self.serve.poll() is None and subprocess.run(
            [self.w, "-D", self.p, "status"], capture_output=True).returncode == 0)

    def stop_primary(self):
        if self.serve is not None:
            run([self.w, "-D", self.p, "stop", "--wait"])
            self.serve.wait(60)
            self.serve = None

    def start_standby(self):
        if not os.path.exists(self.s):
            # the slot keeps the WAL of the runs without the standby for it
            run([self.w, "-D", self.p, "slot", "create", SLOT])
            run([self.w, "-D", self.p, "backup", self.s, "--checkpoint", "fast"])
        env = dict(os.environ, WALRUS_REPLICATION_PASSWORD=PASSWORD)
        pin = ["taskset", "-c", self.standby_cpus] if self.standby_cpus else []
        with open(self.log, "ab") as out:
            self.standby = subprocess.Popen(pin + [self.w, "-D", self.s, "standby", "--primary",
                                                   self.sock, "--slot", SLOT], stdin=subprocess.DEVNULL,
                                            stdout=out, stderr=out, env=env)

    def stop_standby(self):
        if self.standby is not None:
            run([self.w, "-D", self.s, "stop", "--wait"])
            self.standby.wait(60)
            self.standby = None

    def wait_streaming(self):
        """Until the primary has a sender streaming to the standby (after a
        restart of the primary the standby reconnects within a second) and
        the standby has replayed everything the primary flushed (the WAL of
        the runs without it)."""
        def streaming():
            if self.standby.poll() is not None:
                sys.exit(f"walrus standby exited with {self.standby.returncode}: see {self.log}")
            r = self.stats(self.p)["replication"]
            return any(s["application_name"] == self.name and s["state"] == "streaming"
                       for s in r["senders"]) and lsn(self.stats(self.s)["standby"][
                           "replay_lsn"]) >= lsn(self.stats(self.p)["wal"]["flush_lsn"])
        try:
            wait_for("the standby to stream", streaming, 300)
        except SystemExit:
            for d in (self.p, self.s):
                with open(os.path.join(d, "log", "walrus.log"), errors="replace") as f:
                    print(f"{d}/log/walrus.log:\n" + "".join(f.readlines()[-15:]), file=sys.stderr)
            raise

    def cleanup(self):
        """On every path: stop what this pair started, then make sure."""
        for d, proc in ((self.s, self.standby), (self.p, self.serve)):
            if proc is None or proc.poll() is not None:
                continue
            subprocess.run([self.w, "-D", d, "stop", "--mode", "immediate", "--wait"],
                           capture_output=True, timeout=60)
            try:
                proc.wait(30)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()


def bench(w, d, args):
    r = subprocess.run([w, "-D", d, "bench"] + args + ["--reuse", "--json"],
                       capture_output=True, text=True)
    if r.returncode != 0:
        sys.exit(f"bench: exit {r.returncode}: {r.stderr.strip()[-500:]}")
    return json.loads(r.stdout.strip().splitlines()[-1])


def commit_rate(pair, a):
    """Configurations a b c interleaved, @a.rounds times: {config: [result]}."""
    res = {"a": [], "b": [], "c": []}
    load = ["--workload", "fillsync", "--clients", str(a.clients), "--duration", str(a.duration)]
    for _ in range(a.rounds):
        for cfg in "abc":
            pair.stop_primary()  # every run starts from a shutdown checkpoint
            if cfg == "a":
                pair.stop_standby()
            pair.start_primary(sync=cfg == "c")
            if cfg != "a":
                if pair.standby is None:
                    pair.start_standby()
                pair.wait_streaming()
            res[cfg].append(bench(a.walrus, pair.p, load))
    return res


def sampler(pair, out, stop):
    while not stop.is_set():
        try:
            s = pair.stats(pair.s)  # the standby first: the lag is not underestimated
            p = pair.stats(pair.p)
        except SystemExit:  # a stats command failed: a missed sample
            continue
        rcv = s["replication"]["receiver"]
        out.append((time.monotonic(), lsn(p["wal"]["flush_lsn"]), lsn(rcv["flushed_lsn"]),
                    lsn(s["standby"]["replay_lsn"])))
        time.sleep(0.2)


def replay(pair, a, load):
    """@load on the primary with the standby streaming, sampled until the
    standby has replayed all of it: a dict.  The load's window is read from
    the samples (the primary's flush LSN moving), not from the bench
    command, which also loads and checks its database untimed."""
    pair.stop_primary()
    pair.start_primary(sync=False)
    if pair.standby is None:
        pair.start_standby()
    pair.wait_streaming()
    samples, stop = [], threading.Event()
    t = threading.Thread(target=sampler, args=(pair, samples, stop), daemon=True)
    t.start()
    try:
        res = bench(a.walrus, pair.p, load)
        end = lsn(pair.stats(pair.p)["wal"]["flush_lsn"])
        wait_for("the standby to replay the load", lambda: samples and samples[-1][3] >= end, 300)
    finally:
        stop.set()
        t.join()
    if os.environ.get("BENCH_STANDBY_SAMPLES"):
        for x in samples:
            print(f"{x[0] - samples[0][0]:7.2f} {x[1]:#x} {x[2]:#x} {x[3]:#x} "
                  f"{(x[1] - x[3]) / 1e6:.2f}", file=sys.stderr)
    first = next(i for i, x in enumerate(samples) if x[1] > samples[0][1]) - 1
    last = next(i for i, x in enumerate(samples) if x[1] >= end)
    caught = next(x[0] for x in samples if x[3] >= end)
    t0, t1 = samples[first][0], samples[last][0]
    during = samples[first:last + 1]
    lag = [pf - rp for _, pf, _, rp in during]
    rlag = [pf - fl for _, pf, fl, _ in during]
    wal = end - samples[first][1]
    return {"res": res, "wal_mbs": wal / (t1 - t0) / 1e6,
            "replay_mbs": wal / (caught - t0) / 1e6, "max_lag": max(lag) / 1e6,
            "median_lag": statistics.median(lag) / 1e6, "end_lag": lag[-1] / 1e6,
            "max_recv_lag": max(rlag) / 1e6, "caught": caught - t1, "secs": t1 - t0}


def report(a, res, rep):
    base = statistics.mean(r["ops_per_s"] for r in res["a"])
    names = {"a": "no standby", "b": "async standby", "c": "sync standby"}
    layout = ("pinned: primary and clients on CPU 0, standby on CPU 1" if a.pin
              else "unpinned: everything on every CPU")
    if a.keep_cpu1_awake:
        layout += ", CPU 1 kept awake"
    print(f"durable commits (fillsync, {a.clients} clients, {a.duration} s per run, "
          f"a b c interleaved x{a.rounds}; {layout}):")
    print(f"  {'config':<18}{'ops/s per run':<24}{'mean':>8}{'ratio':>7}{'p50 us':>9}"
          f"{'p99 us':>9}{'us/commit/client':>18}")
    for cfg in "abc":
        runs = [r["ops_per_s"] for r in res[cfg]]
        mean = statistics.mean(runs)
        p50 = statistics.median(r["p50_us"] for r in res[cfg])
        p99 = statistics.median(r["p99_us"] for r in res[cfg])
        print(f"  {cfg} {names[cfg]:<16}{' '.join(f'{x:.0f}' for x in runs):<24}{mean:8.0f}"
              f"{mean / base:7.2f}{p50:9.0f}{p99:9.0f}{a.clients * 1e6 / mean:18.0f}")
    b = statistics.mean(r["ops_per_s"] for r in res["b"]) / base
    c = statistics.mean(r["ops_per_s"] for r in res["c"]) / base
    print(f"  async standby: {b:.2f} x without (target >= 0.90: "
          f"{'met' if b >= 0.90 else 'NOT met'}); sync standby: {c:.2f} x without")
    pa = statistics.median(r["p50_us"] for r in res["a"])
    pc = statistics.median(r["p50_us"] for r in res["c"])
    print(f"  sync standby: the median commit pays {pc - pa:.0f} us more than without "
          f"(the standby's receive + fdatasync + feedback round trip)")
    print(f"standby replay against the primary ({a.clients} writers, {a.duration} s, "
          f"samples every 0.2 s):")
    print(f"  {'load':<26}{'ops/s':>8}{'WAL MB/s':>10}{'replay MB/s':>13}{'lag MB: max':>13}"
          f"{'median':>8}{'at end':>8}{'recv max':>10}{'caught up':>11}")
    for name, r in rep:
        print(f"  {name:<26}{r['res']['ops_per_s']:8.0f}{r['wal_mbs']:10.1f}{r['replay_mbs']:13.1f}"
              f"{r['max_lag']:13.2f}{r['median_lag']:8.2f}{r['end_lag']:8.2f}"
              f"{r['max_recv_lag']:10.2f}{r['caught']:9.2f} s")
    print("  (lag: the primary's flush LSN minus the standby's replay LSN; recv: minus its "
          "flushed LSN;\n   WAL MB/s over the load's window, replay MB/s from its start until "
          "the standby has replayed\n   all of it; caught up: after the load's end, +-0.25 s)")


def terminate(signum, frame):
    raise KeyboardInterrupt  # so that every finally below runs


def pin_layout(a):
    """--pin: this script, hence the primary it starts and the bench clients,
    on CPU 0; the standby on CPU 1 (taskset), on /dev/shm by default."""
    if not a.pin:
        return None
    if not {0, 1} <= os.sched_getaffinity(0):
        sys.exit(f"--pin needs CPUs 0 and 1; this process may run on "
                 f"{sorted(os.sched_getaffinity(0))}")
    if shutil.which("taskset") is None:
        sys.exit("--pin needs taskset (util-linux) to start the standby on CPU 1")
    if a.standby_dir is None:
        a.standby_dir = "/dev/shm"
    os.sched_setaffinity(0, {0})
    return "1"


SPIN = """import os, sys
os.sched_setaffinity(0, {1})
os.sched_setscheduler(0, os.SCHED_IDLE, os.sched_param(0))
parent = int(sys.argv[1])
while os.getppid() == parent:  # ends with the script, however it ends
    pass
"""


def keep_awake(a):
    """--keep-cpu1-awake: a spinner that runs only when CPU 1 has nothing else to run."""
    if not a.keep_cpu1_awake:
        return None
    return subprocess.Popen([sys.executable, "-c", SPIN, str(os.getpid())],
                            stdin=subprocess.DEVNULL)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--walrus", default="build/tools/walrus")
    ap.add_argument("--duration", type=int, default=10)
    ap.add_argument("--clients", type=int, default=8)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--dir", default="/var/tmp")
    ap.add_argument("--standby-dir", default=None,
                    help="where the standbys go (default: --dir; e.g. /dev/shm to take the "
                    "standby's fdatasyncs off the primary's disk)")
    ap.add_argument("--pin", action="store_true",
                    help="the primary and its clients on CPU 0, the standby on CPU 1 with its "
                    "directory on /dev/shm (unless --standby-dir)")
    ap.add_argument("-o", "--primary-option", action="append", default=[], metavar="NAME=VALUE",
                    help="an option of the primary's `walrus serve` (e.g. wal_sender_delay=0)")
    ap.add_argument("--keep-cpu1-awake", action="store_true",
                    help="with --pin: a SCHED_IDLE spinner keeps CPU 1 out of its idle halt in "
                    "every configuration")
    a = ap.parse_args()
    a.walrus = os.path.abspath(a.walrus)
    if a.keep_cpu1_awake and not a.pin:
        sys.exit("--keep-cpu1-awake goes with --pin")
    standby_cpus = pin_layout(a)
    signal.signal(signal.SIGTERM, terminate)
    root = tempfile.mkdtemp(prefix="walrus-bench-standby-", dir=a.dir)
    sroot, pairs, spinner = None, [], None
    try:
        spinner = keep_awake(a)
        sroot = tempfile.mkdtemp(prefix="walrus-bench-standby-", dir=a.standby_dir or a.dir)
        commit = Pair(a.walrus, root, "commit", sroot, standby_cpus)
        commit.primary_opts = a.primary_option
        pairs.append(commit)
        commit.create(["--workload", "fillsync", "--clients", str(a.clients)])
        res = commit_rate(commit, a)
        rep = [("fillsync (durable)", replay(commit, a, [
            "--workload", "fillsync", "--clients", str(a.clients), "--duration", str(a.duration)]))]
        commit.stop_standby()
        commit.stop_primary()
        fast = Pair(a.walrus, root, "update", sroot, standby_cpus)
        fast.primary_opts = a.primary_option
        pairs.append(fast)
        fast.create(["--workload", "fillrandom", "--num", "100000", "--value-size", "1000"])
        rep.append(("updaterandom (not --sync)", replay(fast, a, [
            "--workload", "updaterandom", "--num", "100000", "--value-size", "1000",
            "--clients", str(a.clients), "--duration", str(a.duration)])))
        fast.stop_standby()
        fast.stop_primary()
        report(a, res, rep)
    finally:
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        for p in pairs:
            p.cleanup()
        if spinner is not None:
            spinner.kill()
            spinner.wait()
        shutil.rmtree(root, ignore_errors=True)
        if sroot is not None:
            shutil.rmtree(sroot, ignore_errors=True)


if __name__ == "__main__":
    main()

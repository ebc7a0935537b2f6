"""The mixed workload of the crash and power-loss suites, and its checker.

Clients write to key spaces of their own ("s0/k0042"): `crashdrv` processes
(tests/durability/crashdrv.c, through include/walrus.h) in modes sync,
batch (atomic batches, synchronous) and async (atomic batches, not waited
for, but every 8th followed by walrus_sync, which acknowledges all before
it), and a `walrus load --batch N` process (the command, asynchronous
batches).  Each one reports every commit before making it, and every
acknowledgement.  Since the WAL is one ordered stream and recovery replays
a prefix of it, after any crash the keys of a key space must hold exactly
the state after some prefix of its commits -- that proves atomic batches
(half a batch matches no prefix) -- and that prefix must include every
acknowledged commit.  `Book.check` finds the longest such prefix for each
key space, or explains why there is none (lost acknowledged write, partial
batch, value from nowhere).

A key space outlives its clients: after a check, the recovered state is the
base that the next client of that space builds on.

`Rounds` and the helpers before it are what the crash and power-loss suites
share: their command line, the four clients of a round, the check after
recovery and the tally.
"""
import argparse, os, random, subprocess, threading, time

import wtest
from wtest import TestFailure, log


def filler(seq, n):
    return chr(ord("a") + seq % 26) * n


class Space:
    """One key space: its base state and the commits of its current client."""

    def __init__(self, name):
        self.name = name
        self.base = {}      # key -> value, as recovered last time
        self.commits = []   # [(tag, [(key, value or None)])] in commit order
        self.acked = 0      # commits [0, acked) were acknowledged
        self.client = None
        self.errors = []

    def new_round(self, kv):
        self.base = {k: v for k, v in kv.items() if k.startswith(self.name + "/")}
        self.commits = []
        self.acked = 0
        self.errors = []


def reap(p, t):
    """Waits for a client's process @p and its thread @t; @p is killed if
    still there after 10 s, so that a stuck client cannot hang the suite."""
    try:
        p.wait(10)
    except subprocess.TimeoutExpired:
        p.kill()
        p.wait()
    t.join(10)


class Tracker:
    """Reads one client's report lines (crashdrv.c, threaddrv.c) into its key
    space: B lines become commits, A and S lines move the acknowledged
    prefix, K (threaddrv: the state recovered after a restart is the state
    after commit SEQ) drops the commits after SEQ, which never happened."""

    def __init__(self, space, tag):
        self.space, self.tag = space, tag
        self.start = len(space.commits)  # the commits before this client's first
        self.pos = {}       # seq -> len(space.commits) after it
        self.pending = {}   # seq -> len(space.commits) after it, not yet acknowledged
        self.counts = {}    # line kind -> how many

    def line(self, parts):
        """@parts: the words of a line, without the client name."""
        sp, kind = self.space, parts[0]
        self.counts[kind] = self.counts.get(kind, 0) + 1
        if kind == "B":
            seq = int(parts[1])
            ops = []
            for o in parts[2:]:
                f = o.split(":")
                key = f"{sp.name}/k{int(f[1]):04d}"
                if f[0] == "P":
                    prefix = f"{self.tag}:{seq}:{int(f[1])}:"
                    ops.append((key, prefix + filler(seq, int(f[2]))))
                else:
                    ops.append((key, None))
            sp.commits.append((f"{self.tag}#{seq}", ops))
            self.pos[seq] = self.pending[seq] = len(sp.commits)
        elif kind == "A":
            sp.acked = max(sp.acked, self.pending.pop(int(parts[1])))
        elif kind == "S":  # walrus_sync: this commit and all before it
            seq = int(parts[1])
            sp.acked = max(sp.acked, self.pending[seq])
            for s in [s for s in self.pending if s <= seq]:
                del self.pending[s]
        elif kind == "K":
            seq = int(parts[1])
            keep = self.pos[seq] if seq else self.start
            if keep < sp.acked:
                sp.errors.append(f"{self.tag}: K {seq} drops acknowledged commits")
            del sp.commits[keep:]
            for d in (self.pos, self.pending):
                for s in [s for s in d if s > seq]:
                    del d[s]
        elif kind == "E":
            sp.errors.append(" ".join(parts[1:]))


class DrvClient:
    """A crashdrv process writing to @space."""

    def __init__(self, drv, w, space, mode, tag, seed, rate=0, env=None, keys=200):
        self.space, self.tag, self.mode = space, tag, mode
        args = [drv, "-D", w.dir]
        for o in w.opts:
            args += ["-o", o]
        args += ["--client", tag, "--keyspace", space.name, "--mode", mode, "--seed", str(seed),
                 "--keys", str(keys)]
        if rate:
            args += ["--rate", str(rate)]
        self.p = subprocess.Popen(args, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                  stderr=subprocess.PIPE, env=env or w.env())
        self.tracker = Tracker(space, tag)
        self.t = threading.Thread(target=self._read, daemon=True)
        self.t.start()

    def _read(self):
        for raw in self.p.stdout:
            parts = raw.decode(errors="replace").split()
            if parts:
                self.tracker.line(parts)

    def pids(self):
        return [self.p.pid] if self.p.poll() is None else []

    def finish(self):
        """After the process was killed (or exited): all its output is read."""
        reap(self.p, self.t)
        self.p.stdout.close()
        self.p.stderr.close()


class LoadClient:
    """`walrus load --batch N` (asynchronous batches) fed lines for @space.
    Every line written is a possible part of a commit; load commits each run
    of N lines atomically, so the commits are the groups of N lines."""

    def __init__(self, w, space, tag, batch, rng, env=None):
        self.space, self.tag, self.batch = space, tag, batch
        self.p = subprocess.Popen(w.argv("load", "--batch", str(batch)), stdin=subprocess.PIPE,
                                  stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                                  env=env or w.env())
        self.rng = rng
        self.stop = threading.Event()
        self.t = threading.Thread(target=self._feed, daemon=True)
        self.t.start()

    def _feed(self):
        sp, n, group = self.space, 0, []
        keys = list(range(200))
        try:
            while not self.stop.is_set():
                self.rng.shuffle(keys)
                ops, text = [], []
                for k in keys[:self.batch]:
                    n += 1
                    key = f"{sp.name}/k{k:04d}"
                    v = f"{self.tag}:{n}:" + filler(n, self.rng.randrange(1, 300))
                    ops.append((key, v))
                    text.append(f"{key}\t{v}\n")
                sp.commits.append((f"{self.tag}#{n}", ops))
                self.p.stdin.write("".join(text).encode())
                self.p.stdin.flush()
                time.sleep(0.002)
        except (BrokenPipeError, OSError, ValueError):
            pass

    def pids(self):
        return [self.p.pid] if self.p.poll() is None else []

    def finish(self):
        self.stop.set()
        reap(self.p, self.t)
        try:
            self.p.stdin.close()
        except (BrokenPipeError, OSError):
            pass


def check_space(sp, kv):
    """The recovered keys of @sp must be the state after a prefix of its
    commits that includes every acknowledged one.  Returns the longest such
    prefix; raises TestFailure with a diagnosis otherwise."""
    obs = {k: v for k, v in kv.items() if k.startswith(sp.name + "/")}
    cur = dict(sp.base)
    keys = set(cur) | set(obs)
    mismatch = sum(1 for k in keys if cur.get(k) != obs.get(k))
    best = 0 if mismatch == 0 else -1
    for i, (_tag, ops) in enumerate(sp.commits):
        for k, v in ops:
            before = cur.get(k) != obs.get(k)
            if v is None:
                cur.pop(k, None)
            else:
                cur[k] = v
            mismatch += (cur.get(k) != obs.get(k)) - before
        if mismatch == 0:
            best = i + 1
    if best >= sp.acked:
        return best
    raise TestFailure(f"key space {sp.name}: " + diagnose(sp, obs))


def diagnose(sp, obs):
    """Why no prefix matches: the state after the acknowledged prefix vs what
    was recovered, and which batches are there only in part."""
    exp = dict(sp.base)
    for _tag, ops in sp.commits[:sp.acked]:
        for k, v in ops:
            if v is None:
                exp.pop(k, None)
            else:
                exp[k] = v
    # Which commit wrote each recovered value.
    writer = {}
    for i, (tag, ops) in enumerate(sp.commits):
        for k, v in ops:
            if v is not None:
                writer[(k, v)] = i
    lines = [f"{len(sp.commits)} commits sent, {sp.acked} acknowledged, "
             f"errors {sp.errors[:2]}"]
    lost = [k for k in exp if k not in obs]
    bad = [k for k in obs if obs[k] != exp.get(k) and (k, obs[k]) not in writer
           and obs[k] != sp.base.get(k)]
    if bad:
        lines.append(f"{len(bad)} value(s) written by no commit, e.g. {bad[0]}="
                     f"{obs[bad[0]][:40]!r}")
    # Partial batches: a commit some of whose puts are present while another
    # of its keys holds an older value that no later commit explains.
    seen = {}
    for k, v in obs.items():
        i = writer.get((k, v))
        if i is not None:
            seen.setdefault(i, set()).add(k)
    for i in sorted(seen):
        tag, ops = sp.commits[i]
        missing = []
        for k, v in ops:
            later = any(k2 == k for _t, ops2 in sp.commits[i + 1:] for k2, _ in ops2)
            if later:
                continue
            if v is not None and obs.get(k) != v:
                missing.append(k)
            if v is None and k in obs:
                missing.append(k)
        if missing:
            lines.append(f"commit {tag} ({len(ops)} ops) is there only in part: "
                         f"{len(seen[i])} of its keys present, not {missing[:3]}")
            break
    older = [k for k in exp if k in obs and obs[k] != exp[k]
             and writer.get((k, obs[k]), -1) < sp.acked]
    if lost or older:
        k = (lost + older)[0]
        lines.append(f"{len(lost)} acknowledged key(s) missing, {len(older)} with an older "
                     f"value; e.g. {k}: expected {exp[k][:40]!r}, got "
                     f"{obs.get(k, '<absent>')[:40]!r}")
    return "; ".join(lines)


class Book:
    def __init__(self, names):
        self.spaces = {n: Space(n) for n in names}

    def check(self, kv):
        """Checks every space against the recovered @kv; returns the total of
        commits found recovered, and rebases every space on @kv."""
        stray = [k for k in kv if k.split("/", 1)[0] not in self.spaces
                 and not k.startswith("walrus-test-init")]
        if stray:
            raise TestFailure(f"{len(stray)} key(s) nobody wrote, e.g. {stray[:3]}")
        total = acked = 0
        for sp in self.spaces.values():
            total += check_space(sp, kv)
            acked += sp.acked
        for sp in self.spaces.values():
            sp.new_round(kv)
        return total, acked


def stop_all_then_kill(pids):
    """A simulated instant death of every process in @pids: SIGSTOP all of
    them, wait until each is stopped (then none is inside a write), then
    SIGKILL all."""
    import signal
    wtest.kill_pids(pids, signal.SIGSTOP)
    deadline = time.time() + 5
    for pid in pids:
        st = "?"
        while time.time() < deadline:
            try:
                with open(f"/proc/{pid}/stat") as f:
                    st = f.read().rsplit(")", 1)[1].split()[0]
            except OSError:
                break
            if st in ("T", "t", "Z", "X"):
                break
            time.sleep(0.002)
        else:
            wtest.log(f"stop_all_then_kill: pid {pid} not stopped after 5 s (state {st}): "
                      f"its SIGKILL may land inside a write")
    wtest.kill_pids(pids, signal.SIGKILL)
    wtest.wait_gone(pids)


def no_survivors(data_dir):
    """After a simulated power cut and before its rollback: nothing may still
    run on the files (a process forked after the pids were listed would be
    writing to files the rollback rewrites).  Kills any, and fails."""
    import signal
    left = wtest.instance_pids(data_dir)
    if left:
        wtest.kill_pids(left, signal.SIGKILL)
        wtest.wait_gone(left)
        raise TestFailure(f"processes outlived the power cut: {left}")


SPACES = ["s0", "s1", "s2", "s3"]


def suite_args(rounds, long_rounds, seed):
    """The command line of the crash and power-loss suites; WALRUS_LONG=1
    makes the default @long_rounds instead of @rounds."""
    ap = argparse.ArgumentParser()
    ap.add_argument("--walrus", default=wtest.default_walrus())
    ap.add_argument("--driver", required=True)
    ap.add_argument("--rounds", type=int, default=long_rounds if wtest.long_mode() else rounds)
    ap.add_argument("--seed", type=int, default=seed)
    ap.add_argument("--keep", action="store_true")
    ap.add_argument("--opt", action="append", default=[], metavar="NAME=VALUE",
                    help="an engine option on top of the suite's own (the durability "
                         "matrix: io_method=io_uring, wal_direct_io=on, ...)")
    return ap.parse_args()


def with_opts(base, extra):
    """@base options with @extra ones added, replacing those of the same name."""
    names = {kv.split("=", 1)[0] for kv in extra}
    return [kv for kv in base if kv.split("=", 1)[0] not in names] + list(extra)


def client_pids(clients):
    """The pids of the clients still running."""
    return [pid for c in clients for pid in c.pids()]


class Rounds:
    """The key spaces of the crash and power-loss suites (@spaces: their
    names; thread_crash.py has its own) and the tally of their rounds.  A
    failed round is logged with the tail of the instance's log, and the
    suite goes on from what was recovered (a new book), so that the rounds
    after it still report; it gives up after MAX_FAILURES failed rounds, or
    when even the recovered state does not check."""

    MAX_FAILURES = 3

    def __init__(self, w, spaces=SPACES):
        self.w = w
        self.spaces = list(spaces)
        self.book = self._new_book()
        self.passed = self.failed = 0
        self.commits = self.acked = 0
        self.gave_up = False

    def _new_book(self):
        """A book on what the store holds now (after a failed round: the
        rounds after it check against that, not against nothing)."""
        book = Book(self.spaces)
        kv = self.w.scan()
        for sp in book.spaces.values():
            sp.new_round(kv)
        return book

    def start_clients(self, driver, rnd, rng, async_rate, env=None):
        """Round @rnd's four clients, one per key space: crashdrv in modes sync,
        batch and async (at most @async_rate commits/s), and `walrus load
        --batch 8`.  Their seeds come from @rng in a fixed order, so that a
        --seed reproduces the run."""
        sp = self.book.spaces
        return [
            DrvClient(driver, self.w, sp["s0"], "sync", f"s0.{rnd}", rng.randrange(1 << 30),
                      env=env),
            DrvClient(driver, self.w, sp["s1"], "batch", f"s1.{rnd}", rng.randrange(1 << 30),
                      env=env),
            DrvClient(driver, self.w, sp["s2"], "async", f"s2.{rnd}", rng.randrange(1 << 30),
                      rate=async_rate, env=env),
            LoadClient(self.w, sp["s3"], f"s3.{rnd}", 8, random.Random(rng.random()), env=env),
        ]

    def check(self, what, since, before=None):
        """After the crash of round @what (its instance log from offset
        @since): recovery, every key space and `walrus verify` (and first
        @before(), which raises TestFailure to fail the round).  Returns
        whether the round passed; sets gave_up when the suite must stop."""
        try:
            if before is not None:
                before()
            n, ack = self.book.check(self.w.scan(timeout=120))
            self.w.verify()
        except TestFailure as e:
            self.failed += 1
            log(f"{what}: FAIL: {e}")
            log(self.w.log_tail(since, 30))
            if self.failed >= self.MAX_FAILURES:
                self.gave_up = True
                return False
            try:
                self.book = self._new_book()
            except TestFailure:
                self.gave_up = True
            return False
        self.passed += 1
        self.commits += n
        self.acked += ack
        return True

    def finish(self, t0):
        """The totals (@t0: when the rounds started), the instance stopped;
        returns the exit status."""
        log(f"{self.commits} commits found recovered, {self.acked} of them acknowledged, "
            f"in {time.time() - t0:.0f} s")
        self.w.kill_instance()
        log(f"{self.passed} passed, {self.failed} failed")
        return 1 if self.failed else 0

#!/usr/bin/env python3
"""kill -9 at any point of a checkpoint.

A writer feeds `walrus load --sync --ack --batch N` (keys overwritten again
and again, values of 100 B to 20 kB, so that pages, overflow pages and full
page images all take part) while checkpoints run: timed ones every
checkpoint_timeout=2s, spread over checkpoint_completion_target=0.9 of it,
and, in half of the rounds, immediate ones requested by `walrus checkpoint`
at random intervals.  Once a checkpoint has started (its "checkpoint
starting" line from walrus-ckpt), the test SIGKILLs either the checkpointer
alone (the supervisor must notice and crash-restart the instance) or the
whole instance and the writer at once, at a chosen point of the
checkpoint: it polls /proc/PID/syscall of the checkpointer until it is
inside the system call of the chosen phase -- pwrite or running in user
space (write phase), sync_file_range (write-back hint), a futex wait (the
paced write phase's sleep), fsync (sync phase, also the control file's),
fdatasync (the checkpoint record's WAL flush), rename (the control file's
replacement, WAL recycling) -- or after a random delay.  (Without
/proc/PID/syscall, e.g. not root, every kill is at a random delay.)
After every kill: every acknowledged key holds its last acknowledged value
(or a later one that was sent), `walrus verify` is clean, and the control
file is readable.

Short by default (about a minute); WALRUS_LONG=1 or --rounds N for more.
usage: ckpt_kill.py [--walrus PATH] [--rounds N] [--seed S] [--keep]
"""
import argparse, os, platform, random, shutil, subprocess, sys, threading, time

sys.dont_write_bytecode = True  # no __pycache__ in the source tree
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import wtest  # noqa: E402
from wtest import check, log  # noqa: E402

OPTS = ["checkpoint_timeout=2s", "checkpoint_completion_target=0.9", "max_wal_size=96MB",
        "min_wal_size=32MB", "wal_segment_size=4MB"]

# System call numbers by phase.
SYSCALLS = {
    "x86_64": {"pwrite": {18, 296, 328}, "sync_file_range": {277}, "fsync": {74},
               "fdatasync": {75}, "rename": {82, 264, 316}, "futex": {202}},
    "aarch64": {"pwrite": {68, 70, 287}, "sync_file_range": {84}, "fsync": {82},
                "fdatasync": {83}, "rename": {38, 276}, "futex": {98}},
}
PHASES = ["pwrite", "sync_file_range", "futex", "fsync", "fdatasync", "rename", "random"]


def diagnose(pid):
    """What a stuck process is doing: kernel wait channel, syscall, and a
    backtrace when gdb is installed."""
    out = [f"pid {pid}: wchan {_read(f'/proc/{pid}/wchan')}, "
           f"syscall {_read(f'/proc/{pid}/syscall')}"]
    gdb = shutil.which("gdb")
    if gdb:
        r = subprocess.run([gdb, "-q", "-batch", "-p", str(pid), "-ex", "bt"],
                           capture_output=True, timeout=60)
        out += [ln for ln in r.stdout.decode(errors="replace").splitlines()
                if ln.startswith("#")]
    return "\n".join(out)


def _read(path):
    try:
        with open(path) as f:
            return f.read().strip()
    except OSError:
        return "?"


class Writer:
    """Feeds a loader and collects its acks (two threads)."""

    def __init__(self, w, book, rng, keys, batch):
        self.book, self.rng, self.keys = book, rng, keys
        self.lock = threading.Lock()
        self.stop = threading.Event()
        args = ["load", "--sync", "--ack"] + (["--batch", str(batch)] if batch > 1 else [])
        self.p = subprocess.Popen(w.argv(*args), stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                  stderr=subprocess.PIPE, env=w.env())
        self.n = 0
        self.acks = 0
        self.diag = ""
        self.t_in = threading.Thread(target=self._feed, daemon=True)
        self.t_out = threading.Thread(target=self._read, daemon=True)
        self.t_in.start()
        self.t_out.start()

    def _value(self, i):
        r = self.rng.random()
        size = (self.rng.randrange(8000, 20000) if r < 0.03 else
                self.rng.randrange(100, 600) if r < 0.7 else self.rng.randrange(600, 3000))
        head = f"v{i}-{self.rng.randrange(1 << 30):x}-"
        return head + "abcdefghijklmnopqrstuvwxyz"[i % 26] * (size - len(head))

    def _feed(self):
        try:
            while not self.stop.is_set():
                chunk = []
                for _ in range(16):
                    k = f"k{self.rng.randrange(self.keys):05d}"
                    v = self._value(self.n)
                    self.n += 1
                    with self.lock:
                        self.book.send(k, v)
                    chunk.append(f"{k}\t{v}\n")
                self.p.stdin.write("".join(chunk).encode())
                self.p.stdin.flush()
        except (BrokenPipeError, ValueError, OSError):
            pass
        finally:
            # EOF: a loader waiting for input commits what it has and meets
            # the crash (or ends), instead of waiting for us forever.
            try:
                self.p.stdin.close()
            except (BrokenPipeError, OSError):
                pass

    def _read(self):
        for line in self.p.stdout:
            if line.startswith(b"ack "):
                with self.lock:
                    self.book.ack(line[4:].rstrip(b"\n").decode())
                    self.acks += 1

    def finish(self, timeout=15):
        """Waits for the loader to end (it was killed, or its instance crashed);
        returns (its stderr, whether it had to be killed)."""
        self.stop.set()
        self.t_in.join(2)  # blocked on a full pipe if the loader is stuck: killed below
        hung = False
        try:
            self.p.wait(timeout)
        except subprocess.TimeoutExpired:
            hung = True
            self.diag = diagnose(self.p.pid)
            self.p.kill()
            self.p.wait()
        self.t_out.join(10)
        self.t_in.join(10)
        err = self.p.stderr.read().decode(errors="replace")
        self.p.stderr.close()
        self.p.stdout.close()
        return err, hung


class Requester:
    """Asks for immediate checkpoints at random intervals."""

    def __init__(self, w, rng):
        self.w, self.rng = w, rng
        self.stop = threading.Event()
        self.count = self.hung = 0
        self.p = None
        self.t = threading.Thread(target=self._run, daemon=True)
        self.t.start()

    def _run(self):
        while not self.stop.wait(self.rng.uniform(0.2, 1.2)):
            self.p = subprocess.Popen(self.w.argv("checkpoint"), stdin=subprocess.DEVNULL,
                                      stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                                      env=self.w.env())
            try:
                self.p.wait(60)
                self.count += 1
            except subprocess.TimeoutExpired:
                self.p.kill()
                self.p.wait()
                self.hung += 1

    def pid(self):
        """The running `walrus checkpoint`, an application process like the writer."""
        p = self.p
        return [p.pid] if p is not None and p.poll() is None else []

    def finish(self):
        self.stop.set()
        self.t.join(70)


def checkpointer_pid(w):
    pids = wtest.named(wtest.instance_pids(w.dir), "walrus-ckpt")
    return pids[0] if pids else None


def wait_checkpoint_start(w, since, timeout):
    """pid of walrus-ckpt once it logged "checkpoint starting" after @since."""
    def started():
        for pid, name, _, msg in wtest.parse_log(w.log_text(since)):
            if name == "walrus-ckpt" and msg.startswith("checkpoint starting"):
                if wtest.comm(pid) == "walrus-ckpt":
                    return pid
        return None
    return wtest.wait_for(started, timeout, step=0.01)


def catch_phase(pid, nums, deadline, running=False):
    """Polls the checkpointer until it is inside one of the system calls @nums
    (or, with @running, executing in user space)."""
    while time.time() < deadline:
        s = wtest.syscall_of(pid)
        if s is None:
            return False
        if (s.isdigit() and int(s) in nums) or (running and s == "running"):
            return True
    return False


def classify(w, pid, since):
    """Was the kill mid-checkpoint: the pid's last checkpoint line is "starting"?"""
    last = None
    for p, _, _, msg in wtest.parse_log(w.log_text(since)):
        if p == pid and msg.startswith("checkpoint "):
            last = msg
    return last is not None and last.startswith("checkpoint starting")


def one_round(w, book, rng, rnd, keys, table, stats):
    since = w.log_size()
    batch = rng.choice([1, 1, 4, 16, 64])
    writer = Writer(w, book, rng, keys, batch)
    requester = Requester(w, rng) if rng.random() < 0.5 else None
    victim = rng.choice(["ckpt", "all"])
    phase = rng.choice(PHASES) if table else "random"
    pid = None
    try:
        # Let some dirty data pile up, then wait for a checkpoint to start.
        time.sleep(rng.uniform(0.2, 1.0))
        others = [p for p in wtest.instance_pids(w.dir) if wtest.comm(p) != "walrus-ckpt"]
        pid = wait_checkpoint_start(w, w.log_size(), 8.0)
        check(pid is not None, f"round {rnd}: no checkpoint started within 8 s:\n"
              + w.log_tail(since))
        caught = False
        if phase == "random":
            time.sleep(rng.uniform(0.0, 1.5))
        else:
            # pwrite calls into the page cache are too short to be seen
            # often: the write loop running in user space counts too.
            caught = catch_phase(pid, table[phase], time.time() + 4.0,
                                 running=phase == "pwrite")
        sc = wtest.syscall_of(pid)
        # The checkpointer first, the rest of the instance right after (their
        # pids were listed before the checkpoint started).
        wtest.kill_pids([pid])
        if victim == "all":
            # The instance and its clients (a waiting `walrus checkpoint`
            # too: it is an application process like the writer).
            wtest.kill_pids([writer.p.pid] + others + (requester.pid() if requester else []))
        t_kill = time.time()
    finally:
        if requester:
            requester.finish()
        err, hung = writer.finish()
    check(not hung, f"round {rnd}: the loader did not end within 15 s after its instance "
          f"crashed (it must return WALRUS_ERESTART):\n{writer.diag}\n{err[-300:]}\n"
          + w.log_tail(since))
    check(not requester or not requester.hung,
          f"round {rnd}: `walrus checkpoint` did not return within 60 s")
    t_done = time.time()
    if victim == "all":
        w.kill_instance()
    else:
        # The supervisor must notice the death and restart the instance.
        check(wtest.wait_for(lambda: w.log_has(
            rf"walrus-ckpt process \(pid {pid}\) was terminated by signal 9", since), 15),
            f"round {rnd}: the supervisor did not notice the checkpointer's death:\n"
            + w.log_tail(since))
    mid = classify(w, pid, since)
    key = f"{phase}{'' if phase == 'random' else (' caught' if caught else ' missed')}"
    stats.setdefault(key, [0, 0])
    stats[key][0] += 1
    stats[key][1] += mid
    stats["mid"] = stats.get("mid", 0) + mid
    log(f"round {rnd}: batch {batch}, {writer.acks} acks, kill {victim} at {key} "
        f"(syscall {sc}){', mid-checkpoint' if mid else ''}"
        f"{', with requested checkpoints' if requester else ''}")
    check(w.controldata().get("Latest checkpoint location"), "controldata unreadable")
    t_check = time.time()
    kv = wtest.check_acked(w, book, f"round {rnd}")
    book.rebase(kv)
    log(f"  stopped in {t_done - t_kill:.2f} s, checked in {time.time() - t_check:.2f} s")
    return err


def main(cleanup):
    ap = argparse.ArgumentParser()
    ap.add_argument("--walrus", default=wtest.default_walrus())
    ap.add_argument("--rounds", type=int, default=0)
    ap.add_argument("--keys", type=int, default=4000)
    ap.add_argument("--seed", type=int, default=20260601)
    ap.add_argument("--keep", action="store_true")
    a = ap.parse_args()
    rounds = a.rounds or (150 if wtest.long_mode() else 14)
    rng = random.Random(a.seed)
    base = wtest.tempdir(cleanup, "walrus-ckill-", keep=a.keep)
    w = wtest.Walrus(a.walrus, os.path.join(base, "data"), OPTS)
    w.register(cleanup)
    w.create()
    table = SYSCALLS.get(platform.machine())
    if table is None:
        log(f"no system call table for {platform.machine()}: random kill delays only")
    book = wtest.AckBook()
    stats = {}
    t0 = time.time()
    for rnd in range(rounds):
        one_round(w, book, rng, rnd, a.keys, table, stats)
    w.kill_instance()
    mid = stats.get("mid", 0)
    check(mid * 4 >= rounds, f"only {mid} of {rounds} kills landed mid-checkpoint")
    log(f"{rounds} rounds in {time.time() - t0:.0f} s, {len(book.acked)} keys checked; "
        f"{stats.pop('mid', 0)} kills landed mid-checkpoint")
    for k in sorted(stats):
        log(f"  {k:24s} {stats[k][0]:4d} kills, {stats[k][1]:4d} mid-checkpoint")
    return 0


if __name__ == "__main__":
    wtest.guarded(main)

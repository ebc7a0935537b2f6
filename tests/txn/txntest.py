"""What the transaction tests of tests/txn share: driver processes whose
output lines are read as they come and counted, waits on those counts (a
Condition, never a sleep), and the instance helpers of
tests/durability/wtest.py (cleanup on every path, killing, the log).

A driver runs with its working directory in the data directory, so that the
cleanup (even the watchdog of a test killed by meson's timeout) finds it
among the instance's processes (wtest.instance_pids).
"""
import os, shutil, signal, subprocess, sys, threading

sys.dont_write_bytecode = True
HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "durability"))
import wtest  # noqa: E402
from wtest import TestFailure, log  # noqa: E402,F401

HANG = 120  # s without the output waited for: a hang, reported with backtraces


class Progress:
    """The counts of every driver's lines, shared by their reader threads."""

    def __init__(self):
        self.cond = threading.Condition()
        self.drivers = []

    def wait(self, pred, what):
        """Waits until @pred() (called under the lock) holds; a hang fails."""
        with self.cond:
            if self.cond.wait_for(pred, HANG):
                return
        raise TestFailure(f"no {what} within {HANG} s: a hang?\n" +
                          "\n".join(d.diagnose() for d in self.drivers))



class Driver:
    """A driver process: its complete output lines (self.lines), their count
    per kind (first word) and per kind and client (second word)."""

    def __init__(self, argv, w, progress, name, stdin=False, marks=("O", "open")):
        self.name, self.progress = name, progress
        self.marks = marks  # line kinds that count_since() counts from
        self.lines = []
        self.kinds = {}
        self.per_client = {}  # (kind, client) -> count
        self.at_mark = {}     # kind -> self.kinds as it was at the last line of that kind
        self.partial = ""     # a last line cut short by a kill
        self.err = b""
        self.p = subprocess.Popen([os.path.abspath(argv[0])] + list(argv[1:]),
                                  stdin=subprocess.PIPE if stdin else subprocess.DEVNULL,
                                  stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=w.env(),
                                  cwd=w.dir)
        progress.drivers.append(self)
        self.t = threading.Thread(target=self._read, daemon=True)
        self.t.start()
        self.te = threading.Thread(target=self._read_err, daemon=True)
        self.te.start()

    def _read(self):
        pr = self.progress
        for raw in self.p.stdout:
            text = raw.decode(errors="replace")
            if not text.endswith("\n"):
                self.partial = text
                break
            parts = text.split(" ", 2)
            with pr.cond:
                self.lines.append(text)
                k = parts[0].strip()
                self.kinds[k] = self.kinds.get(k, 0) + 1
                if k in self.marks:
                    self.at_mark[k] = dict(self.kinds)
                if len(parts) > 1:
                    key = (k, parts[1].strip())
                    self.per_client[key] = self.per_client.get(key, 0) + 1
                pr.cond.notify_all()
        with pr.cond:
            pr.cond.notify_all()

    def _read_err(self):
        self.err = self.p.stderr.read()

    @property
    def pid(self):
        return self.p.pid

    def alive(self):
        return self.p.poll() is None

    def count(self, kind, client=None):
        """Lines of @kind (of @client); call under progress.cond or after finish."""
        if client is None:
            return self.kinds.get(kind, 0)
        return self.per_client.get((kind, client), 0)

    def count_since(self, kind, mark):
        """Lines of @kind since the last line of kind @mark (one of @marks)."""
        return self.kinds.get(kind, 0) - self.at_mark.get(mark, {}).get(kind, 0)

    def end_input(self):
        """Closes its stdin (--until-eof: it stops after the work in hand)."""
        try:
            self.p.stdin.close()
        except (BrokenPipeError, OSError):
            pass

    def kill(self):
        wtest.kill_pids([self.pid])

    def backtraces(self):
        """Its threads' backtraces (gdb), or [] without gdb or process."""
        gdb = shutil.which("gdb")
        if not gdb or not self.alive():
            return []
        r = subprocess.run([gdb, "-q", "-batch", "-p", str(self.pid),
                            "-ex", "thread apply all bt"], capture_output=True, timeout=120)
        return [ln for ln in r.stdout.decode(errors="replace").splitlines()
                if ln.startswith(("#", "Thread"))]

    def diagnose(self):
        state = "running" if self.alive() else f"exited {self.p.returncode}"
        out = [f"{self.name} (pid {self.pid}): {state}, lines {self.kinds}, "
               f"errors {[ln.strip()[:200] for ln in self.lines if ln.startswith('E ')][:3]}"
               f", stderr {self.err.decode(errors='replace')[-300:]!r}"]
        return "\n".join(out + self.backtraces()[:80])

    def finish(self, expect_killed=False):
        """Waits for the process (a hang fails) and for all its output; fails
        unless it exited 0 (or, @expect_killed, died of SIGKILL) without an
        error line."""
        try:
            self.p.wait(HANG)
        except subprocess.TimeoutExpired:
            diag = self.diagnose()
            self.kill()
            self.p.wait()
            raise TestFailure(f"{self.name} did not end within {HANG} s: a hang?\n{diag}")
        self.t.join(HANG)
        self.te.join(HANG)
        for f in (self.p.stdout, self.p.stderr, self.p.stdin):
            if f is not None:
                try:
                    f.close()
                except (BrokenPipeError, OSError):
                    pass
        errs = [ln.strip()[:300] for ln in self.lines if ln.startswith("E ")]
        if errs:
            raise TestFailure(f"{self.name}: {len(errs)} error line(s): {errs[:3]}")
        want = -signal.SIGKILL if expect_killed else 0
        if self.p.returncode != want:
            raise TestFailure(f"{self.name} exited with {self.p.returncode}, not {want}: "
                              f"{self.err.decode(errors='replace')[-500:]}")


def kill_live(drivers):
    """For the cleanup: SIGKILL the drivers still running."""
    wtest.kill_pids([d.pid for d in drivers if d.alive()])


def wait_crash_restart(w, since, pids, progress):
    """The death of an attached driver process is a crash restart of the
    instance: the supervisor says so in its log."""
    pat = "|".join(str(p) for p in pids)
    rx = rf"walrus-super LOG:  backend process ({pat}) ended without detaching"
    if not wtest.wait_for(lambda: w.log_has(rx, since), HANG, step=0.02):
        raise TestFailure(f"the death of driver pid(s) {pids} was no crash restart "
                          f"(no \"backend process ... ended without detaching\" in the log)\n"
                          + w.log_tail(since, 20) + "\n"
                          + "\n".join(d.diagnose() for d in progress.drivers))


def supervisor_pids(w):
    return wtest.named(wtest.instance_pids(w.dir), "walrus-super")

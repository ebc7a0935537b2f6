"""Helpers shared by the durability tests: run the `walrus` command, start an
instance with a chosen environment, read its log and control file, kill it,
and check acknowledged keys.  Black box: only the command contract of
shared/DESIGN.md, DIR/log/walrus.log and /proc are used.

Every test registers its data directories with `Cleanup` and runs inside
`guarded(main)`, so that an exception, SIGTERM (meson's timeout) or SIGINT
still kills every walrus process it started and removes its files.
"""
import json, os, re, signal, shutil, subprocess, sys, tempfile, time, traceback

SKIP = 77  # meson: test skipped
# Bytes per data page of the build under test (-Dpage_size): meson test sets
# WALRUS_TEST_PAGE_SIZE; run by hand, the default build's 8192.  WAL pages are
# 8192 bytes whatever it is.
PAGE_SIZE = int(os.environ.get("WALRUS_TEST_PAGE_SIZE", "8192"))


def log(msg):
    print(msg, flush=True)


class TestFailure(Exception):
    pass


def check(cond, msg):
    if not cond:
        raise TestFailure(msg)


# ---------------------------------------------------------------- processes

def _ppid_map():
    children = {}
    for p in os.listdir("/proc"):
        if not p.isdigit():
            continue
        try:
            with open(f"/proc/{p}/stat") as f:
                ppid = int(f.read().rsplit(")", 1)[1].split()[1])
        except (OSError, IndexError, ValueError):
            continue
        children.setdefault(ppid, []).append(int(p))
    return children


def comm(pid):
    try:
        with open(f"/proc/{pid}/comm") as f:
            return f.read().strip()
    except OSError:
        return None


def instance_pids(data_dir):
    """Every process serving DIR: the supervisor named in walrus.pid and its
    descendants, plus any process whose working directory is DIR (the
    supervisor and its children chdir there), which catches processes left
    behind after walrus.pid was removed."""
    real = os.path.realpath(data_dir)
    roots = set()
    try:
        with open(os.path.join(data_dir, "walrus.pid")) as f:
            pid = int(f.readline().split()[0])
        # A pid file left by a killed instance may name a reused pid: only a
        # walrus process started on DIR (just forked: not yet in DIR) counts.
        if _serves(pid, real, data_dir):
            roots.add(pid)
    except (OSError, ValueError, IndexError):
        pass
    for p in os.listdir("/proc"):
        if not p.isdigit() or int(p) == os.getpid():
            continue
        try:
            if os.readlink(f"/proc/{p}/cwd") == real:
                roots.add(int(p))
        except OSError:
            pass
    children = _ppid_map()
    out, todo, seen = [], list(roots), set()
    while todo:
        pid = todo.pop()
        if pid in seen:
            continue
        seen.add(pid)
        if comm(pid) is None:
            continue
        out.append(pid)
        todo.extend(children.get(pid, []))
    return out


def _serves(pid, real, data_dir):
    try:
        if os.readlink(f"/proc/{pid}/cwd") == real:
            return True
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            argv = f.read().split(b"\0")
    except OSError:
        return False
    return (comm(pid) or "").startswith("walrus") and (
        os.fsencode(data_dir) in argv or os.fsencode(real) in argv)


def named(pids, name):
    return [p for p in pids if comm(p) == name]


def kill_pids(pids, sig=signal.SIGKILL):
    for pid in pids:
        try:
            os.kill(pid, sig)
        except (ProcessLookupError, PermissionError):
            pass


def wait_gone(pids, timeout=10.0):
    deadline = time.time() + timeout
    while time.time() < deadline:
        if all(comm(p) is None or _zombie(p) for p in pids):
            return True
        time.sleep(0.02)
    return False


def still_running(pids):
    """The pids of @pids that have not ended (a zombie has ended)."""
    return [p for p in pids if comm(p) is not None and not _zombie(p)]


def _zombie(pid):
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] == "Z"
    except OSError:
        return True


def stopped(pid):
    """Whether process @pid is stopped by a signal (or gone)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] in ("T", "Z")
    except (OSError, IndexError):
        return True


def freeze_then_kill(procs):
    """SIGSTOP every process of @procs, wait until all are stopped, then
    SIGKILL them: none is still running to see the crash restart the first
    death starts (a process killed between calls is still one that ended
    without detaching)."""
    for p in procs:
        if p.poll() is None:
            p.send_signal(signal.SIGSTOP)
    check(wait_for(lambda: all(stopped(p.pid) for p in procs), 60), "clients did not stop")
    for p in procs:
        p.kill()


def syscall_of(pid):
    """The system call a process is blocked in (number, or 'running'), from /proc."""
    try:
        with open(f"/proc/{pid}/syscall") as f:
            s = f.read().split()
    except OSError:
        return None
    if not s:
        return None
    return s[0]


def wait_channel(pid):
    """Where process @pid sleeps in the kernel (/proc/PID/wchan), or None."""
    try:
        with open(f"/proc/{pid}/wchan") as f:
            return f.read().strip()
    except OSError:
        return None


def asleep_in_futex(pid):
    """Whether process @pid (its main thread) sleeps in a futex wait: a lock,
    a latch or a counter of the shared memory."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            state = f.read().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    return state == "S" and "futex" in (wait_channel(pid) or "")


# ---------------------------------------------------------------- the walrus command

class Walrus:
    def __init__(self, exe, data_dir, opts=()):
        self.exe = exe
        self.dir = data_dir
        self.opts = list(opts)
        self.serve_proc = None

    def argv(self, *args, opts=None):
        o = []
        for kv in (self.opts if opts is None else opts):
            o += ["-o", kv]
        return [self.exe, "-D", self.dir] + o + list(args)

    @staticmethod
    def env(failpoints=None):
        e = dict(os.environ)
        e.pop("WALRUS_FAILPOINTS", None)
        e.pop("WALRUS_DATA", None)
        if failpoints:
            e["WALRUS_FAILPOINTS"] = failpoints
        return e

    def run(self, *args, failpoints=None, timeout=120, input=None, opts=None):
        return subprocess.run(self.argv(*args, opts=opts), capture_output=True, input=input,
                              timeout=timeout, env=self.env(failpoints))

    def create(self, extra_opts=()):
        r = self.run("put", "walrus-test-init", "1",
                     opts=self.opts + ["create_if_missing=on"] + list(extra_opts))
        check(r.returncode == 0, f"could not create {self.dir}: {r.stderr.decode()}")
        self.wait_stopped()

    def running(self):
        """An instance is there, ready (status exit 0) or not yet or no longer (1)."""
        r = self.run("status", timeout=30)
        return r.returncode in (0, 1)

    def wait_stopped(self, timeout=30.0):
        """Waits until no instance serves DIR (the linger after the last detach)."""
        deadline = time.time() + timeout
        while time.time() < deadline:
            if not self.running() and not instance_pids(self.dir):
                return
            time.sleep(0.1)
        raise TestFailure(f"instance on {self.dir} did not stop within {timeout:.0f} s")

    def serve(self, failpoints=None, stderr_path=None):
        """Starts `walrus serve` (the supervisor in the foreground: its children
        inherit its environment, hence its failpoints) and waits until it
        answers.  Nothing else may open DIR before that, or the opener would
        start its own supervisor without the failpoints."""
        check(not instance_pids(self.dir), "an instance already serves " + self.dir)
        err = open(stderr_path or os.devnull, "ab")
        self.serve_proc = subprocess.Popen(self.argv("serve"), stdin=subprocess.DEVNULL,
                                           stdout=err, stderr=err, env=self.env(failpoints))
        err.close()
        deadline = time.time() + 30
        sock = os.path.join(self.dir, "walrus.sock")
        while time.time() < deadline:
            if self.serve_proc.poll() is not None:
                raise TestFailure(f"walrus serve exited with {self.serve_proc.returncode} "
                                  f"before it was ready; log:\n{self.log_tail()}")
            if os.path.exists(sock) and self.log_has(
                    rf"\[{self.serve_proc.pid}\] walrus-super LOG:  instance is ready"):
                return self.serve_proc
            time.sleep(0.02)
        raise TestFailure("walrus serve did not become ready")

    def wait_serve_exit(self, timeout):
        if self.serve_proc is None:
            return None
        try:
            return self.serve_proc.wait(timeout)
        except subprocess.TimeoutExpired:
            return None

    def register(self, cleanup):
        """Its processes are killed at the end of the test, whatever happens."""
        cleanup.add_durable("kill_dir", self.dir)
        cleanup.add(self.kill_instance)

    def kill_instance(self, extra=()):
        """SIGKILL every process of the instance (and @extra); waits for them."""
        for _ in range(3):
            pids = instance_pids(self.dir) + list(extra)
            if self.serve_proc is not None and self.serve_proc.poll() is None:
                pids.append(self.serve_proc.pid)
            if not pids:
                break
            kill_pids(pids)
            wait_gone(pids)
        if self.serve_proc is not None:
            try:
                self.serve_proc.wait(10)
            except subprocess.TimeoutExpired:
                pass
            self.serve_proc = None

    def load(self, items, failpoints=None, batch=1, timeout=300):
        """Feeds KEY<TAB>VALUE lines to `load --sync --ack` (--batch N) and
        returns (exit code, list of acknowledged keys in order, stderr)."""
        args = ["load", "--sync", "--ack"] + (["--batch", str(batch)] if batch > 1 else [])
        data = "".join(f"{k}\t{v}\n" for k, v in items).encode()
        p = subprocess.Popen(self.argv(*args), stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, env=self.env(failpoints))
        try:
            out, err = p.communicate(data, timeout=timeout)
        except subprocess.TimeoutExpired:
            p.kill()
            p.communicate()
            raise TestFailure("load timed out")
        acked = [ln[4:].decode() for ln in out.split(b"\n") if ln.startswith(b"ack ")]
        return p.returncode, acked, err.decode(errors="replace")

    def restarts_under_way(self):
        """The supervisors that DIR/log shows inside a crash restart (begun,
        neither ready again nor given up) and that still run."""
        busy = set()
        for pid, name, _lv, msg in parse_log(self.log_text()):
            if name != "walrus-super":
                continue
            if msg == RESTART_BEGIN:
                busy.add(pid)
            elif RESTART_END.match(msg):
                busy.discard(pid)
        return [p for p in busy if comm(p) == "walrus-super" and not _zombie(p)]

    def run_settled(self, *args, timeout=300):
        """run() once the instance is settled, and once only.  A crash restart
        that DIR/log shows under way (the test killed a process of the
        instance, or a client attached to it) is waited for until the
        supervisor logs "instance is ready" again.  Callers first wait until
        the processes they killed are gone: then the supervisor handles their
        ends before the command's attach, and a restart under the command is
        one the test does not explain, which fails it."""
        check(wait_for(lambda: not self.restarts_under_way(), 120),
              f"a crash restart did not end within 120 s:\n{self.log_tail(n=20)}")
        since = self.log_size()
        r = self.run(*args, timeout=timeout)
        err = r.stderr.decode(errors="replace")
        if "the instance crashed and restarted" in err:
            why = [m for _p, n, _lv, m in parse_log(self.log_text(since)) if n == "walrus-super"]
            raise TestFailure(f"`walrus {args[0]}`: an unexplained crash restart under it "
                              f"(exit {r.returncode}): {err.strip()[-300:]}\n"
                              f"supervisor since it started: {why[:6]}")
        return r

    def scan(self, timeout=300):
        r = self.run_settled("scan", timeout=timeout)
        check(r.returncode == 0,
              f"scan failed ({r.returncode}): {r.stderr.decode(errors='replace')[-800:]}")
        kv = {}
        for line in r.stdout.decode(errors="replace").splitlines():
            k, _, v = line.partition("\t")
            kv[k] = v
        return kv

    def verify(self, timeout=300):
        r = self.run_settled("verify", timeout=timeout)
        out = r.stdout.decode(errors="replace")
        check(r.returncode == 0 and "verify: ok" in out,
              f"verify is not clean (exit {r.returncode}): {out[-1500:]}"
              f"{r.stderr.decode(errors='replace')[-500:]}")

    def controldata(self):
        r = self.run("controldata", timeout=30)
        check(r.returncode == 0, f"controldata failed: {r.stderr.decode()}")
        d = {}
        for line in r.stdout.decode().splitlines():
            k, sep, v = line.partition(":")
            if sep:
                d[k.strip()] = v.strip()
        return d

    def checkpoint_lsn(self):
        return self.controldata().get("Latest checkpoint location")

    # ------------------------------------------------------------ the log

    @property
    def log_path(self):
        return os.path.join(self.dir, "log", "walrus.log")

    def log_size(self):
        try:
            return os.path.getsize(self.log_path)
        except OSError:
            return 0

    def log_text(self, since=0):
        try:
            with open(self.log_path, "rb") as f:
                f.seek(since)
                return f.read().decode(errors="replace")
        except OSError:
            return ""

    def log_has(self, pattern, since=0):
        return re.search(pattern, self.log_text(since)) is not None

    def log_tail(self, since=0, n=40):
        return "\n".join(self.log_text(since).splitlines()[-n:])


# What the supervisor logs when a crash restart begins and ends
# (src/engine/supervisor.c crash_restart, instance_start).
RESTART_BEGIN = "terminating every other process of the instance"
RESTART_END = re.compile(r"instance is ready \(generation \d+\)|could not restart the instance")

LOG_RE = re.compile(r"^\S+ \S+ \S+ \[(\d+)\] (\S+) (\w+):  (.*)$")


def parse_log(text):
    """[(pid, process name, level, message)] of the lines of walrus.log."""
    out = []
    for line in text.splitlines():
        m = LOG_RE.match(line)
        if m:
            out.append((int(m.group(1)), m.group(2), m.group(3), m.group(4)))
    return out


# ---------------------------------------------------------------- acknowledged keys

class AckBook:
    """What was sent and acknowledged, per key, in order.  After a crash a key
    must hold its last acknowledged value or a value sent later (a write in
    flight may or may not have happened)."""

    def __init__(self):
        self.sent = {}   # key -> [values in send order]
        self.acked = {}  # key -> index of the last acknowledged value in sent[key]

    def send(self, k, v):
        self.sent.setdefault(k, []).append(v)

    def ack(self, k):
        self.acked[k] = self.acked.get(k, -1) + 1

    def lost(self, kv):
        bad = []
        for k, n in self.acked.items():
            if kv.get(k) not in self.sent[k][n:]:
                got = kv.get(k)
                bad.append((k, self.sent[k][n][:20], None if got is None else got[:20]))
        return bad

    def rebase(self, kv):
        """What is on disk now becomes the truth the next round builds on."""
        for k in list(self.sent):
            if k in kv:
                self.sent[k] = [kv[k]]
                self.acked[k] = 0
            else:
                self.sent.pop(k)
                self.acked.pop(k, None)
        for k, v in kv.items():
            if k not in self.sent:
                self.sent[k] = [v]
                self.acked[k] = 0


def check_acked(w, book, what):
    kv = w.scan()
    bad = book.lost(kv)
    check(not bad, f"{what}: {len(bad)} acknowledged key(s) lost or wrong, e.g. {bad[:3]}")
    w.verify()
    return kv


# ---------------------------------------------------------------- cleanup

def kill_dir_processes(data_dir):
    """SIGKILLs every walrus process serving @data_dir (found by walrus.pid and
    working directory, so never another test's) and waits for them."""
    for _ in range(3):
        pids = instance_pids(data_dir)
        if not pids:
            return
        kill_pids(pids)
        wait_gone(pids)


def umount_path(path, lazy_last=True):
    """umount, retried while busy; lazily as a last resort."""
    real = os.path.realpath(path)
    for _ in range(20):
        with open("/proc/self/mounts") as f:
            if not any(line.split()[1] == real for line in f):
                return
        if subprocess.run(["umount", real], capture_output=True).returncode == 0:
            return
        time.sleep(0.25)
    if lazy_last:
        log(f"cleanup: umount {real} keeps failing; detaching it lazily")
        subprocess.run(["umount", "-l", real], capture_output=True)


def loop_backing(dev):
    try:
        with open(f"/sys/block/{os.path.basename(dev)}/loop/backing_file") as f:
            return f.read().strip()
    except OSError:
        return None


def detach_loop(dev, backing):
    """losetup -d, only while @dev is still backed by our @backing file."""
    for _ in range(20):
        b = loop_backing(dev)
        if b is None or b.replace(" (deleted)", "") != backing:
            return
        r = subprocess.run(["losetup", "-d", dev], capture_output=True)
        if r.returncode == 0:
            return
        time.sleep(0.25)
    log(f"cleanup: could not detach {dev}")


def _do(kind, arg):
    if kind == "kill_dir":
        kill_dir_processes(arg)
    elif kind == "umount":
        umount_path(arg)
    elif kind == "losetup_d":
        detach_loop(*arg)
    elif kind == "rmtree":
        shutil.rmtree(arg, ignore_errors=True)


class Cleanup:
    """Undo actions, run in reverse order, each one even if another fails.

    Resources that must not outlive the test even when it is SIGKILLed
    (meson's timeout sends SIGTERM to the process group and SIGKILL half a
    second later) are also written to a state file watched by a small
    process in its own session: when the test's end of a pipe closes, it
    undoes whatever the test did not."""

    def __init__(self):
        self.actions = []
        self.durable = []  # [kind, arg] still to undo, mirrored in the state file
        self.state = None

    def _save(self):
        if self.state is None:
            fd, self.state = tempfile.mkstemp(prefix="walrus-test-cleanup-", suffix=".json")
            os.close(fd)
            r, w = os.pipe()
            subprocess.Popen([sys.executable, os.path.abspath(__file__), "--watchdog",
                              self.state], stdin=r, stdout=subprocess.DEVNULL,
                             stderr=subprocess.DEVNULL, start_new_session=True)
            os.close(r)
            self._pipe = w  # close-on-exec: no walrus process inherits it
        tmp = self.state + ".tmp"
        with open(tmp, "w") as f:
            json.dump(self.durable, f)
        os.replace(tmp, self.state)

    def add(self, fn, *args, **kw):
        self.actions.append((fn, args, kw))

    def add_durable(self, kind, arg):
        """Undo @kind ("kill_dir", "umount", "losetup_d", "rmtree") of @arg, even
        if this process is killed."""
        entry = [kind, arg]
        self.durable.append(entry)
        self._save()

        def undo():
            _do(kind, arg)
            self.durable.remove(entry)
            self._save()
        undo.__name__ = f"{kind} {arg}"
        self.actions.append((undo, (), {}))

    def run(self):
        while self.actions:
            fn, args, kw = self.actions.pop()
            try:
                fn(*args, **kw)
            except Exception as e:  # noqa: BLE001 - cleanup must go on
                log(f"cleanup: {getattr(fn, '__name__', fn)} failed: {e}")
        if self.state is not None:
            # Nothing left for the watchdog: an empty list, then EOF.
            os.close(self._pipe)


def _watchdog(state):
    """Waits for the test to end (EOF on stdin), then undoes what is left."""
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGHUP, signal.SIG_IGN)
    while sys.stdin.buffer.read(4096):
        pass
    try:
        with open(state) as f:
            left = json.load(f)
    except (OSError, ValueError):
        left = []
    for kind, arg in reversed(left):
        try:
            _do(kind, arg)
        except Exception:  # noqa: BLE001
            pass
    for p in (state, state + ".tmp"):
        try:
            os.unlink(p)
        except OSError:
            pass


def tempdir(cleanup, prefix, keep=False, parent=None):
    d = tempfile.mkdtemp(prefix=prefix, dir=parent)
    if not keep:
        cleanup.add_durable("rmtree", d)
    return d


def _raise_exit(signum, frame):
    raise SystemExit(128 + signum)


def guarded(main):
    """Runs main(cleanup) and always runs the cleanup; SIGTERM/SIGINT/SIGHUP
    become SystemExit so that it runs on meson's timeout too."""
    for s in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(s, _raise_exit)
    cleanup = Cleanup()
    rc = 1
    try:
        rc = main(cleanup)
    except TestFailure as e:
        log(f"FAIL: {e}")
        rc = 1
    except SystemExit as e:
        log(f"interrupted ({e.code})")
        rc = e.code if isinstance(e.code, int) else 1
    except Exception:  # noqa: BLE001
        traceback.print_exc()
        rc = 1
    finally:
        for s in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
            signal.signal(s, signal.SIG_IGN)
        cleanup.run()
    sys.exit(rc)


def long_mode():
    return os.environ.get("WALRUS_LONG", "") not in ("", "0")


def default_walrus():
    return os.environ.get("WALRUS_BIN") or shutil.which("walrus") or "build/tools/walrus"


def wait_for(fn, timeout, step=0.05):
    deadline = time.time() + timeout
    while True:
        v = fn()
        if v or time.time() >= deadline:
            return v
        time.sleep(step)


if __name__ == "__main__" and len(sys.argv) == 3 and sys.argv[1] == "--watchdog":
    _watchdog(sys.argv[2])

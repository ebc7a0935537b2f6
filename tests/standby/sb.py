"""What the standby tests share (tests/standby): the durability suites' helpers
(tests/durability/wtest.py: instances, cleanup on every path), a primary that
archives, and `walrus standby` run in the foreground."""
import argparse, json, os, re, subprocess, sys, time

sys.dont_write_bytecode = True
HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "durability"))
import wtest  # noqa: E402
from wtest import check  # noqa: E402


def must(r, what):
    check(r.returncode == 0, f"{what}: exit {r.returncode}: "
          f"{r.stderr.decode(errors='replace').strip()[-800:]}")
    return r.stdout.decode(errors="replace")


def lsn(s):
    hi, lo = s.split("/")
    return (int(hi, 16) << 32) | int(lo, 16)


def write_conf(d, text):
    os.makedirs(d, mode=0o700, exist_ok=True)
    p = os.path.join(d, "walrus.conf")
    with open(p, "w") as f:
        f.write(text)
    os.chmod(p, 0o600)


def setup(cleanup, name):
    """What a standby test starts with: its --walrus argument and a new root
    directory (walrus-standby-NAME-*, removed at cleanup): (exe, root)."""
    ap = argparse.ArgumentParser()
    ap.add_argument("--walrus", default=wtest.default_walrus())
    a = ap.parse_args()
    return a.walrus, wtest.tempdir(cleanup, f"walrus-standby-{name}-")


def archiving_primary(cleanup, exe, root, extra_conf=""):
    """A new primary in ROOT/primary archiving into ROOT/archive: (Walrus, archive)."""
    archive = os.path.join(root, "archive")
    os.mkdir(archive, 0o700)
    pdir = os.path.join(root, "primary")
    write_conf(pdir, f"archive_dir = '{archive}'\narchive_mode = on\n" + extra_conf)
    p = wtest.Walrus(exe, pdir)
    p.register(cleanup)
    p.create()
    return p, archive


def listening_primary(cleanup, exe, root, opts=()):
    """A new primary in ROOT/primary listening for standbys on ROOT/repl.sock
    (replication_password 'secret'): (Walrus, socket path)."""
    sock = os.path.join(root, "repl.sock")
    pdir = os.path.join(root, "primary")
    write_conf(pdir, f"listen_replication = '{sock}'\nreplication_password = 'secret'\n")
    p = wtest.Walrus(exe, pdir, list(opts))
    p.register(cleanup)
    p.create()
    return p, sock


def stats(w):
    return json.loads(must(w.run("stats", "--json"), "stats"))


class Standby:
    """`walrus -D DIR standby ARGS` in the foreground, as Walrus.serve runs serve."""

    def __init__(self, w, args=(), failpoints=None):
        self.w = w
        self.args = list(args)
        self.failpoints = failpoints
        self.proc = None

    def start(self):
        w = self.w
        check(not wtest.instance_pids(w.dir), "an instance already serves " + w.dir)
        err = open(os.path.join(os.path.dirname(w.dir), "standby.stderr"), "ab")
        self.proc = subprocess.Popen(w.argv("standby", *self.args), stdin=subprocess.DEVNULL,
                                     stdout=err, stderr=err,
                                     env=w.env(self.failpoints))
        err.close()
        w.serve_proc = self.proc  # killed by Walrus.kill_instance at cleanup
        deadline = time.time() + 60
        while time.time() < deadline:
            if self.proc.poll() is not None:
                raise wtest.TestFailure(f"walrus standby exited with {self.proc.returncode} "
                                        f"before it was ready; log:\n{w.log_tail()}")
            if w.log_has(rf"\[{self.proc.pid}\] walrus-super LOG:  instance is ready"):
                return
            time.sleep(0.02)
        raise wtest.TestFailure("walrus standby did not become ready:\n" + w.log_tail())

    def stop(self):
        must(self.w.run("stop", "--wait"), "stop the standby")
        check(self.proc.wait(30) == 0, f"walrus standby exited with {self.proc.returncode}")

    def refused(self, pattern, timeout=60):
        """Starts it where its primary refuses it for good: it must stop by
        itself (exit 2) with a FATAL line matching @pattern in its log, and
        its instance gone.  Returns that line."""
        w = self.w
        check(not wtest.instance_pids(w.dir), "an instance already serves " + w.dir)
        since = os.path.getsize(w.log_path) if os.path.exists(w.log_path) else 0
        self.proc = subprocess.Popen(w.argv("standby", *self.args), stdin=subprocess.DEVNULL,
                                     stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                                     env=w.env())
        w.serve_proc = self.proc
        try:
            rc = self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            rc = None
        check(rc == 2, f"walrus standby did not stop by itself with exit 2 ({rc}):\n"
              f"{w.log_tail(since)}")
        line = re.search(r"FATAL:  the standby cannot follow its primary: .*", w.log_text(since))
        check(line and re.search(pattern, line.group(0)),
              f"no FATAL line matching {pattern!r}:\n{w.log_tail(since)}")
        check(wtest.wait_for(lambda: not wtest.instance_pids(w.dir), 30),
              "the standby's processes outlived it")
        w.serve_proc = None
        return line.group(0) if line else ""


def wait_replayed(s, target, timeout=60):
    """Until the standby's replay reaches @target (an LSN): its stats say so."""
    got = wtest.wait_for(lambda: lsn(stats(s)["standby"]["replay_lsn"]) >= target, timeout)
    check(got, f"the standby did not replay up to {target:#x} within {timeout} s: "
          f"{stats(s)['standby']}")


def scan(w):
    out = must(w.run("scan"), "scan")
    return [tuple(line.split("\t", 1)) for line in out.splitlines()]


def log_matches(w, pattern):
    with open(os.path.join(w.dir, "log", "walrus.log"), errors="replace") as f:
        return re.findall(pattern, f.read(), re.M)

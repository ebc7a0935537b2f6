"""srvtest.py - what the RESP server's tests share: starting and stopping
`walrus serve` on a private data directory, a raw RESP client for exact
bytes, redis-cli, and the check that nothing of the instance is left.

Every server is started through Server(), used as a context manager: on
any exit, passing or failing, every process whose command line names the
test's directory is killed (SIGKILL) and waited for, so a failed test leaves
no server, backend or supervisor behind.
"""
import fcntl
import os
import re
import shutil
import signal
import socket
import struct
import subprocess
import sys
import tempfile
import termios
import time


class TestFailure(Exception):
    pass


def check(cond, what):
    if not cond:
        raise TestFailure(what)


def eq(got, want, what=""):
    if got != want:
        raise TestFailure(f"{what}: got {got!r}, want {want!r}")


# ---------------------------------------------------------------- processes

def dir_pids(path):
    """Pids of the processes whose command line mentions @path."""
    needle = path.encode()
    pids = []
    for d in os.listdir("/proc"):
        if not d.isdigit() or int(d) == os.getpid():
            continue
        try:
            with open(f"/proc/{d}/cmdline", "rb") as f:
                cmd = f.read()
            with open(f"/proc/{d}/stat", "rb") as f:
                state = f.read().rsplit(b")", 1)[1].split()[0]
        except OSError:
            continue
        if needle in cmd and state != b"Z":
            pids.append(int(d))
    return pids


def kill_all(path):
    for _ in range(5):
        pids = dir_pids(path)
        if not pids:
            return
        for p in pids:
            try:
                os.kill(p, signal.SIGKILL)
            except ProcessLookupError:
                pass
        time.sleep(0.2)


def wait_no_pids(path, timeout=30.0):
    deadline = time.time() + timeout
    while time.time() < deadline:
        if not dir_pids(path):
            return
        time.sleep(0.1)
    raise TestFailure(f"processes of {path} still running: {dir_pids(path)}")


def children(pid):
    try:
        with open(f"/proc/{pid}/task/{pid}/children") as f:
            return [int(x) for x in f.read().split()]
    except OSError:
        return []


# ---------------------------------------------------------------- the server

# The build's data page size (-Dpage_size; meson test sets WALRUS_TEST_PAGE_SIZE,
# by hand the default 8192) and the longest key it takes (WALRUS_MAX_KEY).
PAGE_SIZE = int(os.environ.get("WALRUS_TEST_PAGE_SIZE", "8192"))
MAX_KEY = {8192: 1024, 4096: 480}[PAGE_SIZE]

# Arguments every Server gets first (run_cases' --backends: the process model).
DEFAULT_ARGS = []


class Server:
    def __init__(self, walrus, args=(), opts=(), base=None, allow_sigkill=False):
        self.walrus = walrus
        self.base = base or tempfile.mkdtemp(prefix="walrus-srv-")
        os.chmod(self.base, 0o700)
        self.dir = os.path.join(self.base, "data")
        self.args = DEFAULT_ARGS + list(args)
        self.opts = ["create_if_missing=on", "supervisor_linger=200ms"] + list(opts)
        self.allow_sigkill = allow_sigkill
        self.proc = None
        self.port = None
        self.unix = None
        self.out = []
        self.err = ""

    def __enter__(self):
        try:
            self.start()
        except BaseException:
            self.__exit__(*sys.exc_info())  # a server that failed to start leaves nothing
            raise
        return self

    def __exit__(self, etype, *exc):
        try:
            if etype is None and self.proc is not None:
                eq(self.stop(), 0, "exit code of walrus serve after SIGTERM")
            if self.proc is not None and self.proc.poll() is None:
                self.proc.kill()
                self.proc.wait(10)
        finally:
            kill_all(self.base)
            shutil.rmtree(self.base, ignore_errors=True)
        return False

    def cmdline(self):
        argv = [self.walrus, "-D", self.dir]
        for o in self.opts:
            argv += ["-o", o]
        return argv + ["serve", "--port", "0"] + self.args

    def start(self):
        self.proc = subprocess.Popen(self.cmdline(), stdin=subprocess.DEVNULL,
                                     stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        deadline = time.time() + 60
        while time.time() < deadline:
            line = self.proc.stdout.readline().decode()
            if not line:
                err = self.proc.stderr.read().decode()
                raise TestFailure(f"walrus serve exited early: {err}")
            self.out.append(line)
            m = re.search(r"RESP on \S+ port (\d+)", line)
            if m:
                self.port = int(m.group(1))
            m = re.search(r"RESP on unix socket (\S+)", line)
            if m:
                self.unix = m.group(1)
            if "walrus serve: ready" in line:
                return
        raise TestFailure("walrus serve did not become ready")

    def stop(self, sig=signal.SIGTERM, timeout=60):
        """Stops the server; returns its exit code after checking nothing is left."""
        self.proc.send_signal(sig)
        try:
            code = self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            raise TestFailure(f"walrus serve did not stop within {timeout} s after {sig}")
        self.out += self.proc.stdout.read().decode().splitlines(True)
        self.err = self.proc.stderr.read().decode()
        self.check_stderr(self.err)
        wait_no_pids(self.base, 30)
        self.proc = None
        return code

    def check_stderr(self, err):
        """A backend that died or exited badly (a sanitizer's report, say) fails the test."""
        for line in err.splitlines():
            bad = ("killed by signal" in line or "exited with code" in line or
                   "Sanitizer" in line or "runtime error" in line)
            if bad and not (self.allow_sigkill and "killed by signal 9 " in line):
                raise TestFailure(f"walrus serve reported: {line}\n{err}")

    def backends(self):
        return children(self.proc.pid)

    def wait_backends(self, n, timeout=30.0):
        """Waits until the server has @n backend processes (a pool refilled); returns them."""
        deadline = time.time() + timeout
        while len(self.backends()) != n:
            check(time.time() < deadline, f"{n} backends expected, got {self.backends()}")
            time.sleep(0.1)
        return self.backends()

    def client(self, **kw):
        return Client(port=self.port, **kw)

    def write_conf(self, text, mode=0o600):
        """DIR/walrus.conf before the first start (the directory is created for it)."""
        os.makedirs(self.dir, mode=0o700, exist_ok=True)
        path = os.path.join(self.dir, "walrus.conf")
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, mode)
        with os.fdopen(fd, "w") as f:
            f.write(text)
        os.chmod(path, mode)
        return path

    def pids(self):
        """The server and every process it forked (backends), with the instance's."""
        return sorted(set([self.proc.pid] + self.backends() + dir_pids(self.base)))

    def anon_kib(self):
        """Anonymous memory (RssAnon, KiB) of the server and its backends: where
        buffered requests live."""
        return sum(self.anon_by_pid().values())

    def anon_by_pid(self):
        """RssAnon (KiB) of the server and of each backend, by pid."""
        out = {}
        for pid in [self.proc.pid] + self.backends():
            try:
                with open(f"/proc/{pid}/status") as f:
                    for line in f:
                        if line.startswith("RssAnon:"):
                            out[pid] = int(line.split()[1])
            except OSError:
                pass  # a backend that just exited holds nothing
        return out

    def connected_clients(self, c):
        """connected_clients of INFO, asked on connection @c."""
        info = c.call("INFO", "clients").decode()
        return int(info.split("connected_clients:")[1].split()[0])

    def verify(self):
        """`walrus verify` of the (stopped) directory passes."""
        r = subprocess.run([self.walrus, "-D", self.dir, "verify"], capture_output=True,
                           timeout=120)
        check(r.returncode == 0, f"walrus verify failed: {r.stdout.decode()}{r.stderr.decode()}")

    def cli(self, *args, stdin=None, raw=True):
        """redis-cli against this server; returns its stdout as bytes."""
        argv = ["redis-cli", "-p", str(self.port)] + (["--raw"] if raw else []) + list(args)
        r = subprocess.run(argv, input=stdin, capture_output=True, timeout=60)
        check(r.returncode == 0, f"redis-cli {args} failed: {r.stderr.decode()}")
        return r.stdout


# ---------------------------------------------------------------- a raw RESP client

class RespError(Exception):
    pass


class Closed(Exception):
    pass


class Client:
    def __init__(self, port=None, unix=None, timeout=30.0):
        if unix is not None:
            self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            self.sock.settimeout(timeout)
            self.sock.connect(unix)
        else:
            self.sock = socket.create_connection(("127.0.0.1", port), timeout=timeout)
        self.buf = b""

    def close(self):
        self.sock.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
        return False

    @staticmethod
    def encode(*args):
        out = [b"*%d\r\n" % len(args)]
        for a in args:
            if isinstance(a, str):
                a = a.encode()
            elif isinstance(a, int):
                a = str(a).encode()
            out.append(b"$%d\r\n%s\r\n" % (len(a), a))
        return b"".join(out)

    def send_raw(self, data):
        self.sock.sendall(data)

    def wait_replies(self, timeout=30.0):
        """Waits until the server has begun answering: reply bytes wait,
        unread, in this connection's socket."""
        deadline = time.time() + timeout
        while not self.buf and fcntl.ioctl(self.sock, termios.FIONREAD,
                                           struct.pack("i", 0)) == struct.pack("i", 0):
            check(time.time() < deadline, f"no reply within {timeout:.0f} s")
            time.sleep(0.01)

    def send(self, *args):
        self.sock.sendall(self.encode(*args))

    def _fill(self):
        d = self.sock.recv(1 << 20)
        if not d:
            raise Closed("connection closed by the server")
        self.buf += d

    def _line(self):
        while b"\r\n" not in self.buf:
            self._fill()
        line, self.buf = self.buf.split(b"\r\n", 1)
        return line

    def _exact(self, n):
        while len(self.buf) < n + 2:
            self._fill()
        data, self.buf = self.buf[:n], self.buf[n + 2:]
        return data

    def read(self):
        """One reply: bytes, int, None, list, dict, or RespError (returned, not raised)."""
        line = self._line()
        t, rest = line[:1], line[1:]
        if t == b"+":
            return rest.decode()
        if t == b"-":
            return RespError(rest.decode())
        if t == b":":
            return int(rest)
        if t == b"$" or t == b"=":
            n = int(rest)
            return None if n < 0 else self._exact(n)
        if t == b"*":
            n = int(rest)
            return None if n < 0 else [self.read() for _ in range(n)]
        if t == b"%":
            n = int(rest)
            return {self.read(): self.read() for _ in range(n)}
        if t == b"_":
            return None
        if t == b"#":
            return rest == b"t"
        raise TestFailure(f"unexpected reply line {line!r}")

    def call(self, *args):
        self.send(*args)
        return self.read()

    def closed(self, timeout=5.0):
        """True when the server closes the connection (after any pending bytes)."""
        self.sock.settimeout(timeout)
        try:
            while True:
                if not self.sock.recv(65536):
                    return True
        except ConnectionResetError:
            return True
        except socket.timeout:
            return False


def is_err(r, prefix=""):
    return isinstance(r, RespError) and str(r).startswith(prefix)


def backend_pid(c):
    """The pid of the backend process serving connection @c (INFO server's process_id).
    INFO may answer that the instance restarted (a crash test): asked again then."""
    for _ in range(100):
        info = c.call("INFO", "server")
        if not is_err(info, "ERR the walrus instance restarted"):
            return int(info.decode().split("process_id:")[1].split()[0])
        time.sleep(0.1)
    raise TestFailure(f"INFO keeps failing: {info}")


# ---------------------------------------------------------------- running cases

def run_cases(cases, argv):
    """Runs the named cases (all when none named); prints one line each; exit code."""
    import argparse
    ap = argparse.ArgumentParser()
    ap.add_argument("--walrus", required=True)
    ap.add_argument("--backends", type=int, default=None,
                    help="walrus serve --backends N for every server (0: per connection)")
    ap.add_argument("cases", nargs="*")
    a = ap.parse_args(argv)
    if a.backends is not None:
        DEFAULT_ARGS[:] = ["--backends", str(a.backends)]
    if shutil.which("redis-cli") is None:
        print("redis-cli is missing (sh scripts/deps.sh installs redis-tools)")
        return 1
    names = a.cases or list(cases)
    failed = 0
    for name in names:
        t0 = time.time()
        try:
            cases[name](a.walrus)
            print(f"ok   {name} ({time.time() - t0:.1f} s)", flush=True)
        except Exception as e:  # a failure of any kind fails the case, never the rest
            failed += 1
            print(f"FAIL {name}: {type(e).__name__}: {e}", flush=True)
            import traceback
            traceback.print_exc(file=sys.stdout)
    print(f"{len(names) - failed} passed, {failed} failed")
    return 1 if failed else 0

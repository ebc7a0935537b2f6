#!/usr/bin/env python3
"""`walrus status`, black-box: its exit codes (pg_isready's: 0 ready, 1 not
yet, 2 no instance, 3 bad usage) and `--wait`.  "Ready" means every
listener is open: a supervisor held (failpoint step:STOP) after it wrote its
pid but before its sockets is "starting" (exit 1), and once `status --wait`
returns 0 the replication socket accepts a connection; a `walrus serve`
RESP server held after its open but before its listeners keeps the ready
instance at exit 1, and once `status --wait` returns 0 its port accepts a
connection.  Prints 'N passed, N failed' last; leaves no process."""
import os, re, shutil, signal, socket, subprocess, sys, tempfile, time

sys.dont_write_bytecode = True  # no __pycache__ in the source tree
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from clitest import WALRUS, check, summary, wait_for, wait_stopped  # noqa: E402


def run(d, *args, env=None):
    argv = [WALRUS] + (["-D", d] if d else []) + list(args)
    r = subprocess.run(argv, capture_output=True, timeout=120, env=env)
    return r.returncode, r.stdout.decode(), r.stderr.decode()


def stopped(pid):
    """Whether @pid stopped itself (SIGSTOP: state T)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] == "T"
    except OSError:
        return False


def held_env(step):
    env = dict(os.environ)
    env["WALRUS_FAILPOINTS"] = f"step:STOP:{step}"
    return env


def finish(proc, d):
    """SIGTERM to a `walrus serve` (continued first, if held) and its instance gone."""
    if proc.poll() is None:
        os.kill(proc.pid, signal.SIGCONT)
        os.kill(proc.pid, signal.SIGTERM)
        try:
            proc.wait(60)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
    run(d, "stop", "--mode", "immediate", "--wait")
    wait_stopped(d)


def usage(base):
    env = dict(os.environ)
    env.pop("WALRUS_DATA", None)
    r = subprocess.run([WALRUS, "status"], capture_output=True, timeout=60, env=env)
    check("status without -D exits 3", r.returncode == 3, (r.returncode, r.stderr))
    rc, _, err = run(base, "status", "--wait", "soon")
    check("a bad --wait exits 3", rc == 3 and "--wait" in err, (rc, err))
    rc, _, err = run(base, "status", "--later")
    check("an unknown argument exits 3", rc == 3, (rc, err))
    rc, out, _ = run(os.path.join(base, "missing"), "status")
    check("a missing directory: no instance, exit 2", rc == 2 and "no such directory" in out,
          (rc, out))
    rc, out, _ = run(base, "status")
    check("no instance: exit 2", rc == 2 and "no instance is running" in out, (rc, out))
    rc, out, _ = run(base, "status", "--wait", "1")
    check("--wait with nothing starting: exit 2 after the wait", rc == 2, (rc, out))
    rc, out, _ = run(None, "status", "--help")
    check("status --help names the exit codes", rc == 0 and "pg_isready" in out, out)


def supervisor_held(base):
    """The replication listener is open when status says ready."""
    d = os.path.join(base, "primary")
    sock = os.path.join(base, "repl.sock")
    os.mkdir(d, 0o700)
    with open(os.path.join(d, "walrus.conf"), "w") as f:
        f.write(f"listen_replication = '{sock}'\nreplication_password = 'secret'\n")
    os.chmod(os.path.join(d, "walrus.conf"), 0o600)
    proc = subprocess.Popen([WALRUS, "-D", d, "-o", "create_if_missing=on", "serve"],
                            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL, env=held_env("supervisor listen"))
    try:
        check("supervisor: held before its sockets",
              wait_for(lambda: stopped(proc.pid) or proc.poll() is not None)
              and proc.poll() is None, proc.returncode)
        rc, out, _ = run(d, "status")
        check("supervisor held: exit 1, starting",
              rc == 1 and "status: starting" in out, (rc, out))
        waiter = subprocess.Popen([WALRUS, "-D", d, "status", "--wait", "60"],
                                  stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        os.kill(proc.pid, signal.SIGCONT)
        out = waiter.communicate(timeout=90)[0].decode()
        check("supervisor: status --wait exits 0 once ready",
              waiter.returncode == 0 and "status: ready" in out, (waiter.returncode, out))
        c = socket.socket(socket.AF_UNIX)
        try:
            c.connect(sock)
            connected = True
        except OSError as e:
            connected = e
        c.close()
        check("supervisor: ready means the replication socket accepts", connected is True,
              connected)
    finally:
        finish(proc, d)
    rc, out, _ = run(d, "status")
    check("after the stop: exit 2", rc == 2, (rc, out))


def server_held(base):
    """The RESP port is open when status says ready."""
    d = os.path.join(base, "served")
    proc = subprocess.Popen([WALRUS, "-D", d, "-o", "create_if_missing=on", "serve", "--port",
                             "0", "--unix", "none"],
                            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL, env=held_env("serve listen"))
    try:
        check("server: held before its listeners",
              wait_for(lambda: stopped(proc.pid) or proc.poll() is not None)
              and proc.poll() is None, proc.returncode)
        rc, out, _ = run(d, "status")
        check("server held: exit 1 though the instance is ready",
              rc == 1 and "status: ready" in out and re.search(
                  rf"RESP server \(pid {proc.pid}\): starting", out), (rc, out))
        waiter = subprocess.Popen([WALRUS, "-D", d, "status", "--wait", "60"],
                                  stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        os.kill(proc.pid, signal.SIGCONT)
        out = waiter.communicate(timeout=90)[0].decode()
        m = re.search(r"RESP server \(pid \d+\): ready: RESP on 127\.0\.0\.1 port (\d+)", out)
        check("server: status --wait exits 0 naming the port",
              waiter.returncode == 0 and m, (waiter.returncode, out))
        if m:
            c = socket.create_connection(("127.0.0.1", int(m.group(1))), timeout=30)
            c.sendall(b"PING\r\n")
            check("server: ready means the port answers", c.recv(64) == b"+PONG\r\n")
            c.close()
    finally:
        finish(proc, d)
    rc, out, _ = run(d, "status")
    check("after the server's stop: exit 2, no server", rc == 2 and "RESP" not in out,
          (rc, out))
    check("the server's file is gone", not os.path.exists(os.path.join(d, "walrus-serve.pid")))


def main():
    base = tempfile.mkdtemp(prefix="walrus-status-")
    os.chmod(base, 0o700)
    try:
        usage(base)
        supervisor_held(base)
        server_held(base)
    finally:
        shutil.rmtree(base, ignore_errors=True)
    return summary()


if __name__ == "__main__":
    sys.exit(main())

#!/usr/bin/env python3
"""`walrus stop`, black-box: --help, usage errors (exit 2: no -D, a missing
directory, a bad --mode), no instance running (exit 1), each mode with
--wait on an idle instance (every process of the instance gone and the
directory lock free when it returns; an immediate stop recovers at the next
start), smart waiting for an attached `walrus load` while refusing new
processes, and fast making that load's next write fail.  Every acknowledged
key is read back.  Prints 'N passed, N failed' last; leaves no process."""
import os, re, shutil, signal, subprocess, sys, tempfile, time

sys.dont_write_bytecode = True  # no __pycache__ in the source tree
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from clitest import WALRUS, check, summary, wait_for  # noqa: E402

LINGER = ["-o", "supervisor_linger=60s"]  # so that what ends an instance is the stop


def run(d, *args, stdin=None):
    argv = [WALRUS] + (["-D", d] if d else []) + LINGER + list(args)
    r = subprocess.run(argv, input=stdin, capture_output=True, timeout=120)
    return r.returncode, r.stdout.decode(), r.stderr.decode()


def instance_pids(d):
    """The supervisor's and its children's pids, as `walrus status` lists them."""
    rc, out, _ = run(d, "status")
    lines = re.findall(r"^\s+(\d+)\s+walrus-", out, re.M) if rc in (0, 1) else []
    return [int(p) for p in lines]


def gone(pid):
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] == "Z"
    except OSError:
        return True


def kill_instance(d):
    """The cleanup of a failed run: an immediate stop, else SIGKILL."""
    pids = instance_pids(d)
    if run(d, "stop", "--mode", "immediate", "--wait")[0] not in (0, 1):
        for pid in pids:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass


def start_load(d):
    p = subprocess.Popen([WALRUS, "-D", d] + LINGER + ["load", "--ack", "--batch", "1"],
                         stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    return p


def load_line(p, key):
    """Sends KEY<TAB>KEY; returns whether it was acknowledged."""
    try:
        p.stdin.write(f"{key}\t{key}\n".encode())
        p.stdin.flush()
    except BrokenPipeError:
        return False
    return p.stdout.readline().decode().strip() == f"ack {key}"


def usage_errors(base):
    rc, out, _ = run(None, "stop", "--help")
    check("stop --help", rc == 0 and "usage" in out and "immediate" in out, (rc, out))
    env = dict(os.environ)
    env.pop("WALRUS_DATA", None)
    r = subprocess.run([WALRUS, "stop"], capture_output=True, timeout=60, env=env)
    check("stop without -D exits 2", r.returncode == 2, (r.returncode, r.stderr))
    rc, _, err = run(os.path.join(base, "missing"), "stop")
    check("stop on a missing directory exits 2", rc == 2 and "missing" in err, (rc, err))
    rc, _, err = run(base, "stop", "--mode", "gentle")
    check("a bad --mode exits 2", rc == 2 and "smart, fast or immediate" in err, (rc, err))
    rc, _, err = run(base, "stop", "--mode")
    check("--mode without a value exits 2", rc == 2, (rc, err))
    rc, _, err = run(base, "stop", "--later")
    check("an unknown argument exits 2", rc == 2, (rc, err))
    rc, _, err = run(base, "stop")
    check("no instance running exits 1", rc == 1 and "no instance is running" in err, (rc, err))


def idle_stop(base, mode):
    d = os.path.join(base, "idle-" + mode)
    try:
        rc, _, err = run(d, "put", "k", "v")
        check(f"{mode}: put", rc == 0, err)
        pids = instance_pids(d)
        check(f"{mode}: supervisor and 3 auxiliary processes", len(pids) == 4, pids)
        rc, out, err = run(d, "stop", "--mode", mode, "--wait")
        check(f"{mode}: stop --wait", rc == 0 and "stopped" in out, (rc, out, err))
        check(f"{mode}: every process gone when stop returns", all(gone(p) for p in pids),
              [p for p in pids if not gone(p)])
        rc, _, _ = run(d, "status")
        check(f"{mode}: status says none is running", rc == 2, rc)
        rc, _, err = run(d, "stop", "--mode", mode)
        check(f"{mode}: a second stop exits 1", rc == 1, (rc, err))
        rc, out, err = run(d, "get", "k")
        check(f"{mode}: the key after a restart", rc == 0 and out == "v\n", (rc, out, err))
        log = open(os.path.join(d, "log", "walrus.log")).read()
        recovered = "before crash recovery" in log
        check(f"{mode}: crash recovery only after an immediate stop",
              recovered == (mode == "immediate"), recovered)
        rc, _, err = run(d, "stop", "--wait")
        check(f"{mode}: stop after the get", rc == 0, (rc, err))
    finally:
        kill_instance(d)


def smart_with_client(base):
    d = os.path.join(base, "smart")
    load = None
    try:
        run(d, "put", "k0", "k0")
        pids = instance_pids(d)
        load = start_load(d)
        check("smart: load acknowledges a line", load_line(load, "k1"))
        rc, out, err = run(d, "stop", "--mode", "smart")
        check("smart: stop without --wait", rc == 0 and "requested" in out, (rc, out, err))
        rc, _, err = run(d, "get", "k1")
        check("smart: a new process is refused", rc == 3 and "being stopped" in err, (rc, err))
        check("smart: the instance stays while a process is attached",
              not any(gone(p) for p in pids), pids)
        check("smart: the attached load still writes", load_line(load, "k2"))
        load.stdin.close()
        check("smart: load ends cleanly", load.wait(60) == 0, load.stderr.read())
        check("smart: the instance stops once it detached",
              wait_for(lambda: all(gone(p) for p in pids)), pids)
        rc, _, _ = run(d, "status")
        check("smart: status says none is running", rc == 2, rc)
        for k in ("k0", "k1", "k2"):
            rc, out, _ = run(d, "get", k)
            check(f"smart: {k} is there", rc == 0 and out == f"{k}\n", (rc, out))
    finally:
        if load is not None and load.poll() is None:
            load.kill()
            load.wait()
        kill_instance(d)


def fast_with_client(base):
    d = os.path.join(base, "fast")
    load = None
    try:
        run(d, "put", "k0", "k0")
        pids = instance_pids(d)
        load = start_load(d)
        check("fast: load acknowledges a line", load_line(load, "k1"))
        rc, out, err = run(d, "stop", "--mode", "fast", "--wait")
        check("fast: stop --wait", rc == 0, (rc, out, err))
        check("fast: every process gone when stop returns", all(gone(p) for p in pids), pids)
        check("fast: the attached load's next write fails", not load_line(load, "k2"))
        load.stdin.close()
        err = load.stderr.read().decode()
        check("fast: load exits 3 naming the shutdown",
              load.wait(60) == 3 and "shutdown" in err, (load.returncode, err))
        rc, out, _ = run(d, "get", "k1")
        check("fast: the acknowledged key is there", rc == 0 and out == "k1\n", (rc, out))
        rc, _, _ = run(d, "get", "k2")
        check("fast: the refused key is not", rc == 1, rc)
    finally:
        if load is not None and load.poll() is None:
            load.kill()
            load.wait()
        kill_instance(d)


def main():
    base = tempfile.mkdtemp(prefix="walrus-stop-")
    os.chmod(base, 0o700)
    try:
        usage_errors(base)
        for mode in ("smart", "fast", "immediate"):
            idle_stop(base, mode)
        smart_with_client(base)
        fast_with_client(base)
    finally:
        shutil.rmtree(base, ignore_errors=True)
    return summary()


if __name__ == "__main__":
    sys.exit(main())

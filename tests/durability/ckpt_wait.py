#!/usr/bin/env python3
"""A `walrus checkpoint` that waits for its checkpoint must return when the
instance dies under it, not wait forever.

The checkpointer is stopped (SIGSTOP) so that the checkpoint the command
asked for cannot end; then
  --victim ckpt:      the checkpointer alone is SIGKILLed: the supervisor
                      crash-restarts the instance and the command must
                      return an error ("the instance crashed during the
                      checkpoint", exit 3);
  --victim instance:  the supervisor and the checkpointer are SIGKILLed
                      (the other auxiliary processes die with the
                      supervisor), as when the whole instance is killed or
                      the machine's OOM killer takes the supervisor: nobody
                      marks the shared memory CRASHED, and the command must
                      still notice that its instance is gone (DESIGN.md:
                      "backends see their connection end at their next
                      call ... and return WALRUS_ERESTART") and return
                      an error.
In both cases the command must exit within 15 s with a non-zero code, and
the next start recovers and serves the key written before.  (--victim
instance is a regression test: ckpt_request() in
src/checkpointer/request.c once waited for SHM_STATE_CRASHED only, which
only a living supervisor sets; it now also asks whether the supervisor is
still there.)
  --victim wal-lock:  a committing `walrus load` waits for the WAL write
                      lock held by the checkpointer, stopped right after
                      its fdatasync of the checkpoint record, which is then
                      SIGKILLed: the loader must return an error.

usage: ckpt_wait.py [--walrus PATH] --victim ckpt|instance
"""
import argparse, os, platform, signal, subprocess, sys, threading, time

sys.dont_write_bytecode = True  # no __pycache__ in the source tree
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import wtest  # noqa: E402
import ckpt_kill  # noqa: E402
from wtest import check, log  # noqa: E402


FDATASYNC = {"x86_64": 75, "aarch64": 83}


def wal_lock_case(w, a, cleanup):
    """A committer waits for the WAL write lock held by the checkpointer,
    which is SIGKILLed inside its fdatasync of the checkpoint record."""
    nr = FDATASYNC.get(platform.machine())
    if nr is None:
        log(f"SKIP: no system call number for fdatasync on {platform.machine()}")
        return wtest.SKIP
    loader = subprocess.Popen(w.argv("load", "--sync", "--ack"), stdin=subprocess.PIPE,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=w.env())
    cleanup.add(lambda: loader.poll() is None and loader.kill())
    acks = [0]
    stop = threading.Event()

    def feed():
        i = 0
        try:
            while not stop.is_set():
                loader.stdin.write(b"".join(b"k%07d\t%s\n" % (i + j, b"v" * 200)
                                            for j in range(8)))
                loader.stdin.flush()
                i += 8
        except (BrokenPipeError, ValueError, OSError):
            pass
        finally:
            try:
                loader.stdin.close()
            except OSError:
                pass

    def read():
        for line in loader.stdout:
            acks[0] += line.startswith(b"ack ")
    threads = [threading.Thread(target=feed, daemon=True),
               threading.Thread(target=read, daemon=True)]
    for t in threads:
        t.start()
    check(wtest.wait_for(lambda: acks[0] > 100, 20), "the loader does not commit")
    ckpt = wtest.named(wtest.instance_pids(w.dir), "walrus-ckpt")
    check(len(ckpt) == 1, "no checkpointer")
    def stopped_holding_lock():
        """With the checkpointer stopped: True once the committer sleeps
        waiting for it, False once commits go on without it (that fdatasync
        was not under the WAL write lock: a segment's, say), None if neither
        happens within 20 s."""
        before = acks[0]
        r = wtest.wait_for(lambda: (wtest.asleep_in_futex(loader.pid) and "blocked")
                           or (acks[0] >= before + 50 and "passing"), 20)
        return {"blocked": True, "passing": False}.get(r)
    caught = False
    deadline = time.time() + 60
    while not caught and time.time() < deadline:
        req = subprocess.Popen(w.argv("checkpoint"), stdout=subprocess.DEVNULL,
                               stderr=subprocess.DEVNULL, env=w.env())
        while req.poll() is None and not caught and time.time() < deadline:
            s = wtest.syscall_of(ckpt[0])
            if s is None or not s.isdigit() or int(s) != nr:
                continue
            os.kill(ckpt[0], signal.SIGSTOP)  # stops as fdatasync returns
            held = stopped_holding_lock()
            check(held is not None, "with the checkpointer stopped the loader neither "
                  f"waits nor commits: {wtest.wait_channel(loader.pid)}")
            caught = held
            if not caught:
                log("that fdatasync was not under the WAL write lock (commits go on): again")
                os.kill(ckpt[0], signal.SIGCONT)
        if not caught:
            req.wait()
    check(caught, "never caught the checkpointer in an fdatasync under the WAL write lock")
    since = w.log_size()
    log(f"checkpointer stopped right after its WAL fdatasync; the loader waits for the WAL "
        f"write lock ({acks[0]} commits acknowledged)")
    os.kill(ckpt[0], signal.SIGKILL)
    check(wtest.wait_for(lambda: w.log_has(r"instance is ready \(generation 1\)", since), 15),
          "the instance did not restart")
    stop.set()
    try:
        code = loader.wait(a.wait)
    except subprocess.TimeoutExpired:
        diag = ckpt_kill.diagnose(loader.pid)
        loader.kill()
        loader.wait()
        req.kill()
        raise wtest.TestFailure(
            f"BUG: the committing `walrus load` still waits {a.wait:.0f} s after the crash "
            f"restart (the dead checkpointer held the WAL write lock):\n{diag}\n"
            + w.log_tail(since))
    req.kill()
    req.wait()
    err = loader.stderr.read().decode(errors="replace").strip()
    log(f"the loader returned {code}: {err[-200:]}")
    check(code != 0, "the loader reported success although its instance crashed")
    return 0


def main(cleanup):
    ap = argparse.ArgumentParser()
    ap.add_argument("--walrus", default=wtest.default_walrus())
    ap.add_argument("--victim", choices=["ckpt", "instance", "wal-lock"], required=True)
    ap.add_argument("--wait", type=float, default=15.0)
    a = ap.parse_args()
    base = wtest.tempdir(cleanup, "walrus-ckwait-")
    w = wtest.Walrus(a.walrus, os.path.join(base, "data"))
    w.register(cleanup)
    w.create()
    w.opts = ["supervisor_linger=60s"]  # the instance stays between commands
    if a.victim == "wal-lock":
        rc = wal_lock_case(w, a, cleanup)
        if rc:
            return rc
        w.kill_instance()
        w.verify()
        w.kill_instance()
        log("PASS")
        return 0
    r = w.run("put", "before", "1")
    check(r.returncode == 0, f"put failed: {r.stderr.decode()}")
    # The auxiliary processes name themselves just after their fork: under
    # load a process may still carry its parent's name for a moment.
    def found():
        pids = wtest.instance_pids(w.dir)
        return (wtest.named(pids, "walrus-ckpt"), wtest.named(pids, "walrus-super"), pids)
    wtest.wait_for(lambda: all(len(x) == 1 for x in found()[:2]), 10, step=0.05)
    ckpt, sup, pids = found()
    check(len(ckpt) == 1 and len(sup) == 1, f"instance processes not found: {pids}")
    since = w.log_size()
    os.kill(ckpt[0], signal.SIGSTOP)
    cp = subprocess.Popen(w.argv("checkpoint"), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                          env=w.env())
    cleanup.add(lambda: cp.poll() is None and cp.kill())
    # The command waits for its checkpoint (ckpt_request's futex wait).
    check(wtest.wait_for(lambda: cp.poll() is not None or wtest.asleep_in_futex(cp.pid), 20),
          f"`walrus checkpoint` never waited: {wtest.wait_channel(cp.pid)}")
    check(cp.poll() is None, "the checkpoint returned although the checkpointer is stopped")
    if a.victim == "ckpt":
        wtest.kill_pids(ckpt)
    else:
        wtest.kill_pids(sup + ckpt)
    log(f"SIGKILLed {'the checkpointer' if a.victim == 'ckpt' else 'supervisor and checkpointer'}"
        f" while `walrus checkpoint` (pid {cp.pid}) waits")
    try:
        code = cp.wait(a.wait)
    except subprocess.TimeoutExpired:
        wchan = open(f"/proc/{cp.pid}/wchan").read() if os.path.exists(f"/proc/{cp.pid}/wchan") \
            else "?"
        cp.kill()
        cp.wait()
        raise wtest.TestFailure(
            f"BUG: `walrus checkpoint` still waits ({wchan}) {a.wait:.0f} s after its instance "
            f"died; see ckpt_request() in src/checkpointer/request.c\n" + w.log_tail(since))
    err = cp.stderr.read().decode(errors="replace").strip()
    log(f"`walrus checkpoint` returned {code}: {err}")
    check(code != 0, "the checkpoint reported success although its checkpointer was killed")
    w.kill_instance()
    kv = w.scan()
    check(kv.get("before") == "1", "the key written before is gone")
    w.verify()
    w.kill_instance()
    log("PASS")
    return 0


if __name__ == "__main__":
    wtest.guarded(main)

#!/usr/bin/env python3
"""An empty (0-byte) WAL segment, black-box (issue 19).  Past the end of WAL
it is harmless: a segment made ahead of use, or a recycled one, truncated
while the instance was stopped; the start removes it with a WARNING that
names it, the data is intact, verify is clean, and the next start has
nothing to say.  A segment recovery needs stays an error naming the file:
the one holding the checkpoint record after a clean stop, and one between
WAL that a crash left for replay.  WAL segments of 64 kB keep it quick.
Prints 'N passed, N failed' last."""
import os, shutil, signal, subprocess, sys, tempfile

sys.dont_write_bytecode = True  # no __pycache__ in the source tree
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from clitest import WALRUS, check, stop_instance, summary, wait_stopped  # noqa: E402

SEG = 64 * 1024
CREATE = ["-o", "wal_segment_size=64kB"]


def run(d, *args, stdin=None, linger="0"):
    r = subprocess.run([WALRUS, "-D", d, "-o", f"supervisor_linger={linger}", *CREATE, *args],
                       input=stdin, capture_output=True, timeout=120)
    return r.returncode, r.stdout, r.stderr


def lines(prefix, n, size):
    return b"".join(b"%s%05d\t%s\n" % (prefix, i, b"v" * size) for i in range(n))


def stop(d):
    rc, _, err = run(d, "stop", "--wait")
    check(f"{d}: stopped cleanly", rc in (0, 1), (rc, err))


def checkpoint_segment(d):
    """The start of the segment holding the control file's latest checkpoint."""
    rc, out, _ = run(d, "controldata")
    for line in out.decode().splitlines():
        if line.startswith("Latest checkpoint location:"):
            hi, lo = line.split()[-1].split("/")
            lsn = (int(hi, 16) << 32) | int(lo, 16)
            return lsn - lsn % SEG
    raise AssertionError(f"no checkpoint location in controldata: {out!r}")


def seg_path(d, start):
    return os.path.join(d, "wal", "%016X" % start)


def holds_bytes(path):
    with open(path, "rb") as f:
        return f.read(8) != b"\0" * 8


def warnings_about(d, path):
    log = open(os.path.join(d, "log", "walrus.log"), errors="replace").read()
    return [l for l in log.splitlines() if "WARNING" in l and path in l and "empty" in l]


def start_and_check(d, path, nkeys, what):
    """The start removes the empty segment @path with a warning; data and tree intact."""
    rc, out, err = run(d, "scan")
    check(f"{what}: the instance starts", rc == 0, (rc, err[-400:]))
    check(f"{what}: every key there", len(out.splitlines()) == nkeys, len(out.splitlines()))
    check(f"{what}: a WARNING names the segment", len(warnings_about(d, path)) == 1,
          warnings_about(d, path))
    rc, out, _ = run(d, "verify")
    check(f"{what}: verify clean", rc == 0 and b"ok" in out, out[-300:])
    rc, _, err = run(d, "load", "--sync", stdin=lines(b"after", 200, 1000))
    check(f"{what}: the WAL goes on past it", rc == 0, err[-300:])
    stop(d)
    rc, out, err = run(d, "scan")
    check(f"{what}: the next start is clean", rc == 0 and len(out.splitlines()) == nkeys + 200,
          (rc, err[-300:]))
    check(f"{what}: ... and has nothing more to say", len(warnings_about(d, path)) == 1,
          warnings_about(d, path))
    stop(d)


def preallocated(base):
    """The segment made ahead of the WAL, past a clean shutdown's checkpoint."""
    d = os.path.join(base, "prealloc")
    rc, _, err = run(d, "load", "--sync", stdin=lines(b"k", 100, 100))
    check("prealloc: load", rc == 0, err)
    stop(d)
    path = seg_path(d, checkpoint_segment(d) + SEG)
    check("prealloc: the next segment was made ahead of use",
          os.path.exists(path) and os.path.getsize(path) == SEG and not holds_bytes(path), path)
    os.truncate(path, 0)
    start_and_check(d, path, 100, "prealloc")
    return d


def recycled(base):
    """A recycled segment: old WAL under a future name, past the end of WAL."""
    d = os.path.join(base, "recycled")
    for rnd in range(2):
        rc, _, err = run(d, "load", "--sync", stdin=lines(b"r%d-" % rnd, 300, 1000))
        check(f"recycled: load {rnd}", rc == 0, err[-300:])
        rc, _, err = run(d, "checkpoint")
        check(f"recycled: checkpoint {rnd}", rc == 0, err)
    stop(d)
    end = checkpoint_segment(d)
    future = sorted(int(n, 16) for n in os.listdir(os.path.join(d, "wal"))
                    if len(n) == 16 and int(n, 16) > end)
    old = [s for s in future if holds_bytes(seg_path(d, s))]
    check("recycled: a future segment holds old WAL", old, future)
    if old:
        path = seg_path(d, old[0])
        os.truncate(path, 0)
        start_and_check(d, path, 600, "recycled")


def needed_after_clean_stop(base, src):
    """The segment holding the checkpoint record: the start refuses, naming it."""
    d = os.path.join(base, "needed-clean")
    shutil.copytree(src, d, symlinks=True)
    path = seg_path(d, checkpoint_segment(d))
    os.truncate(path, 0)
    rc, _, err = run(d, "get", "k00001")
    check("needed (clean stop): the start is refused as damage", rc == 2, (rc, err))
    check("needed (clean stop): the message names the empty segment",
          path.encode() in err and b"empty" in err, err)


def kill_instance(d):
    """SIGKILL for the supervisor and its children: a crash."""
    sup = int(open(os.path.join(d, "walrus.pid")).readline().split()[0])
    kids = []
    for p in os.listdir("/proc"):
        try:
            if p.isdigit() and int(open(f"/proc/{p}/stat").read().rsplit(")", 1)[1].split()[1]) == sup:
                kids.append(int(p))
        except (OSError, ValueError, IndexError):
            pass
    for pid in [sup] + kids:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    check("crash: every process of the instance gone", wait_stopped(d), d)


def needed_after_crash(base):
    """Replay must cross a segment that is now empty: refused, naming it."""
    d = os.path.join(base, "needed-crash")
    rc, _, err = run(d, "put", "first", "1", linger="600s")
    check("crash: put", rc == 0, err)
    ckpt = checkpoint_segment(d)
    rc, _, err = run(d, "load", "--sync", stdin=lines(b"c", 300, 1000), linger="600s")
    check("crash: load", rc == 0, err[-300:])
    check("crash: no checkpoint since", checkpoint_segment(d) == ckpt, ckpt)
    kill_instance(d)
    after = seg_path(d, ckpt + 2 * SEG)
    check("crash: WAL to replay two segments past the checkpoint's",
          os.path.exists(after) and holds_bytes(after), after)
    path = seg_path(d, ckpt + SEG)
    os.truncate(path, 0)
    rc, _, err = run(d, "get", "c00001")
    check("needed (crash): the start is refused as damage", rc == 2, (rc, err))
    check("needed (crash): the message names the empty segment",
          path.encode() in err and b"empty" in err, err)
    stop_instance(d)


def main():
    base = tempfile.mkdtemp(prefix="walrus-walempty-")
    dirs = [os.path.join(base, n) for n in ("prealloc", "recycled", "needed-clean",
                                             "needed-crash")]
    try:
        src = preallocated(base)
        needed_after_clean_stop(base, src)
        recycled(base)
        needed_after_crash(base)
    finally:
        for d in dirs:
            if os.path.exists(os.path.join(d, "walrus.pid")):
                subprocess.run([WALRUS, "-D", d, "stop", "--mode", "immediate", "--wait"],
                               capture_output=True, timeout=120)
            stop_instance(d)
        shutil.rmtree(base, ignore_errors=True)
    return summary()


if __name__ == "__main__":
    sys.exit(main())

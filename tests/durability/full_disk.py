#!/usr/bin/env python3
"""Reads work on a full disk (issue 19).

On a small tmpfs (root needed; exit 77 = SKIP otherwise), with a filler
file written first, a durable load (`load --sync --ack`) runs until the
file system is full, then every process of the instance is killed and a
second file takes whatever space is left.  The
next start must come up read-only instead of failing ("startup process
PANICked" before the fix): `walrus get` and `walrus scan` find every
acknowledged key with its value, `walrus status` and the log say
read-only, and a put fails with WALRUS_ENOSPC naming the file system.
After a clean stop, the disk still full, a get must start it again (a
new pid file would find no block: a read-only instance leaves it).
Once the filler is removed and the instance restarted, it accepts writes
again and `walrus verify` is clean.

usage: full_disk.py [--walrus PATH]
"""
import argparse, json, os, subprocess, sys

sys.dont_write_bytecode = True  # no __pycache__ in the source tree
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import wtest  # noqa: E402
from wtest import check, log  # noqa: E402

TMPFS_MB = 48
FILLER_MB = 8
# Small WAL segments (a reserve of 2 MB), a small pool: the disk fills fast.
OPTS = ["wal_segment_size=1MB", "min_wal_size=2MB", "max_wal_size=8MB", "shared_buffers=4MB"]


def items(n, vsize=1500):
    return [(f"key{i:07d}", f"{i:07d}" + "v" * vsize) for i in range(n)]


def out(r):
    return (r.stdout + r.stderr).decode(errors="replace")


def fill(mnt, name):
    """A file that takes every block left on the file system."""
    fd = os.open(os.path.join(mnt, name), os.O_WRONLY | os.O_CREAT, 0o600)
    try:
        while os.write(fd, b"\0" * 4096) > 0:
            pass
    except OSError:
        pass
    os.close(fd)
    check(os.statvfs(mnt).f_bavail == 0, "the tmpfs is not full")


def serve(w, status):
    """`walrus serve`, ready once `walrus status` shows @status: on a full disk
    without its reserve the instance cannot write its log (wtest's serve
    waits for a log line), but its status line needs no new space."""
    w.serve_proc = subprocess.Popen(w.argv("serve"), stdin=subprocess.DEVNULL,
                                    stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                                    env=w.env())

    def ready():
        check(w.serve_proc.poll() is None, f"walrus serve exited with "
              f"{w.serve_proc.returncode}; log:\n{w.log_tail()}")
        return f"status: {status}" in out(w.run("status"))
    check(wtest.wait_for(ready, 30, step=0.1), f"walrus serve did not become {status}")


def stop(w):
    r = w.run("stop", "--wait")
    check(r.returncode == 0 and w.wait_serve_exit(30) is not None, f"stop failed: {out(r)}")
    w.serve_proc = None


def main(cleanup):
    ap = argparse.ArgumentParser()
    ap.add_argument("--walrus", default=wtest.default_walrus())
    a = ap.parse_args()
    if os.geteuid() != 0:
        log("SKIP: not root (mounting a tmpfs)")
        return wtest.SKIP
    base = wtest.tempdir(cleanup, "walrus-full-")
    mnt = os.path.join(base, "mnt")
    os.mkdir(mnt, 0o700)
    r = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={TMPFS_MB}m", "tmpfs", mnt],
                       capture_output=True)
    if r.returncode != 0:
        log("SKIP: cannot mount a tmpfs: " + r.stderr.decode(errors="replace").strip())
        return wtest.SKIP
    cleanup.add_durable("umount", mnt)
    w = wtest.Walrus(a.walrus, os.path.join(mnt, "data"), OPTS)
    w.register(cleanup)
    w.create()
    with open(os.path.join(mnt, "filler"), "wb") as f:
        f.write(b"\0" * (FILLER_MB << 20))

    rc, acked, err = w.load(items(60000), batch=20, timeout=120)
    st = os.statvfs(mnt)
    log(f"load: exit {rc}, {len(acked)} acknowledged, {st.f_bavail * st.f_frsize >> 10} kB "
        f"free; {err.strip()[-300:]}")
    check(rc != 0 and "No space left on device" in err + w.log_text(),
          "the load did not end on a full disk")
    check(len(acked) > 1000, "too few acknowledged writes to prove anything")
    w.kill_instance()
    # Whatever the load left free (a WAL segment it could not make) taken too.
    fill(mnt, "top-up")

    # Read-only on the full disk (`walrus serve` keeps it running for status).
    serve(w, "read-only")
    want = dict(items(60000))
    r = w.run("get", acked[-1])
    check(r.returncode == 0 and r.stdout.decode().strip() == want[acked[-1]],
          f"get on the full disk failed: {out(r)[-600:]}")
    kv = w.scan()
    lost = [k for k in acked if kv.get(k) != want[k]]
    check(not lost, f"{len(lost)} acknowledged keys lost or wrong, first {lost[:3]}")
    r = w.run("status")
    check(r.returncode == 0 and "status: read-only: no space left on device" in out(r)
          and f'(mounted on "{os.path.realpath(mnt)}")' in out(r),
          f"status does not say read-only: {out(r)[-800:]}")
    check(w.log_has(r"WARNING:  the instance starts read-only: no space left on device"),
          "the log does not say read-only")
    r = w.run("stats", "--json")
    check(r.returncode == 0 and json.loads(r.stdout)["instance"]["read_only"] == 1,
          f"stats do not say read-only: {out(r)[-400:]}")
    r = w.run("put", "after-full", "x")
    check(r.returncode != 0 and "read-only: no space left on device" in out(r)
          and f'the file system of "{os.path.realpath(w.dir)}"' in out(r)
          and "kB free" in out(r), f"put on the full disk: {out(r)[-600:]}")
    log("read-only: get, scan, status and the refused put as expected")

    # A clean stop, the disk still full (what the start released taken
    # too): the next start must still serve reads.
    stop(w)
    fill(mnt, "top-up-2")
    r = w.run("get", acked[0])
    check(r.returncode == 0 and r.stdout.decode().strip() == want[acked[0]],
          f"get after a clean stop on the full disk failed: {out(r)[-600:]}")
    w.wait_stopped()

    # Room again: the next start accepts writes.
    for n in ("filler", "top-up", "top-up-2"):
        os.unlink(os.path.join(mnt, n))
    serve(w, "ready")
    r = w.run("put", "after-full", "x")
    check(r.returncode == 0, f"put after freeing space failed: {out(r)[-600:]}")
    r = w.run("status")
    check("status: ready" in out(r), f"status after freeing space: {out(r)[-400:]}")
    check(w.scan().get("after-full") == "x", "the put after freeing space is missing")
    w.verify()
    stop(w)
    log("ok")
    return 0


if __name__ == "__main__":
    wtest.guarded(main)

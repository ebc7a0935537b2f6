#!/usr/bin/env python3
"""Data files opened with O_DIRECT (data_direct_io), black box.

  on        data_direct_io=on: `walrus stats` says buffers.io "direct"; the
            checkpointer's and a backend's data file descriptors carry
            O_DIRECT (/proc/PID/fdinfo); a durable load, a checkpoint, a
            kill -9 and recovery keep every key; verify and scan are clean;
            `walrus backup` (which reads the files through its own
            descriptors) makes a copy that, restored, starts with the page
            cache and holds every key
  auto      data_direct_io=auto where the file system refuses O_DIRECT (an
            injected EINVAL at the probe's open, failpoint open_direct):
            exactly one LOG line says so and why, buffers.io is "buffered",
            and writes and reads work
  refused   data_direct_io=on where O_DIRECT is refused: the start fails
            with a message naming DIR/base and its file system; a real
            refusal too (ramfs, mounted here as root; skipped otherwise)
  mmap      mmap_reads=on with data_direct_io=on: refused at the start,
            naming both options; with data_direct_io=auto the instance
            starts with the page cache and says why

usage: direct_io.py --walrus PATH [--case NAME ...]
"""
import argparse, json, os, subprocess, sys

sys.dont_write_bytecode = True
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import wtest  # noqa: E402
from wtest import check, log  # noqa: E402

OPTS = ["wal_segment_size=1MB", "max_wal_size=32MB", "min_wal_size=8MB",
        "checkpoint_timeout=1h", "supervisor_linger=300ms", "shared_buffers=1MB"]
O_DIRECT = 0o40000
REFUSED = "refuses O_DIRECT"


def stats(w, opts=None):
    r = w.run("stats", "--json", opts=opts)
    check(r.returncode == 0, f"stats failed: {r.stderr.decode()}")
    return json.loads(r.stdout)


def data_fd_flags(pid, data_dir):
    """Flags of @pid's open fds on files under DIR/base."""
    base = os.path.realpath(os.path.join(data_dir, "base")) + "/"
    out = []
    for fd in os.listdir(f"/proc/{pid}/fd"):
        try:
            target = os.readlink(f"/proc/{pid}/fd/{fd}")
            if not target.startswith(base):
                continue
            with open(f"/proc/{pid}/fdinfo/{fd}") as f:
                for line in f:
                    if line.startswith("flags:"):
                        out.append(int(line.split()[1], 8))
        except OSError:
            pass  # closed meanwhile
    return out


def items(n, tag):
    return [(f"key{i:06d}", f"{tag}-{i}-" + "v" * 200) for i in range(n)]


def check_keys(w, want):
    got = w.scan()
    bad = [k for k, v in want if got.get(k) != v]
    check(not bad and len(got) >= len(want), f"{len(bad)} keys wrong or missing: {bad[:3]}")


def case_on(w, base):
    w.opts += ["data_direct_io=on"]
    w.create()
    rc, acked, err = w.load(items(3000, "a"), batch=50)
    check(rc == 0 and len(acked) == 3000, f"load: exit {rc}, {len(acked)} acked: {err[-300:]}")
    # A second client keeps the instance up while its processes are looked at.
    hold = w.argv("load", "--sync")
    p = subprocess.Popen(hold, stdin=subprocess.PIPE, env=w.env())
    try:
        p.stdin.write(b"held\t1\n")
        p.stdin.flush()
        check(wtest.wait_for(lambda: wtest.named(wtest.instance_pids(w.dir), "walrus-ckpt"), 30),
              "no checkpointer")
        r = w.run("checkpoint")
        check(r.returncode == 0, f"checkpoint: {r.stderr.decode()}")
        check(stats(w)["buffers"]["io"] == "direct", "buffers.io is not direct")
        ckpt = wtest.named(wtest.instance_pids(w.dir), "walrus-ckpt")[0]
        flags = data_fd_flags(ckpt, w.dir) + data_fd_flags(p.pid, w.dir)
        check(flags and all(f & O_DIRECT for f in flags),
              f"data fds without O_DIRECT: {[oct(f) for f in flags]}")
    finally:
        p.stdin.close()
        p.wait(60)
    rc, acked, err = w.load(items(2000, "b"), batch=50)
    check(rc == 0 and len(acked) == 2000, f"second load: exit {rc}: {err[-300:]}")
    w.kill_instance()
    want = items(2000, "b") + items(3000, "a")[2000:]
    check_keys(w, want)
    w.verify()
    dest = os.path.join(base, "on-copy")
    r = w.run("backup", dest, timeout=120)
    check(r.returncode == 0, f"backup: {r.stderr.decode()[-400:]}")
    w.wait_stopped()
    restored = os.path.join(base, "on-restored")
    r = subprocess.run([w.exe, "restore", "--from", dest, restored], capture_output=True,
                       env=w.env(), timeout=120)
    check(r.returncode == 0, f"restore: {r.stderr.decode()[-400:]}")
    copy = wtest.Walrus(w.exe, restored, OPTS)
    copy.register(w.cleanup)
    check(stats(copy)["buffers"]["io"] == "buffered", "the copy is not buffered")
    check_keys(copy, want)
    copy.verify()
    copy.kill_instance()
    return f"{len(flags)} data fds O_DIRECT; {len(want)} keys after kill -9 and in the backup"


def case_auto(w, base):
    fp = "open_direct:EINVAL:/base*0"
    w.opts += ["data_direct_io=auto"]
    r = w.run("put", "a", "1", failpoints=fp, opts=w.opts + ["create_if_missing=on",
                                                             "supervisor_linger=1h"])
    check(r.returncode == 0, f"put: {r.stderr.decode()}")
    check(stats(w)["buffers"]["io"] == "buffered", "buffers.io is not buffered")
    rc, acked, err = w.load(items(500, "c"), batch=50)
    check(rc == 0 and len(acked) == 500, f"load: exit {rc}: {err[-300:]}")
    check_keys(w, items(500, "c"))
    lines = [ln for ln in w.log_text().splitlines() if REFUSED in ln]
    base_dir = os.path.realpath(os.path.join(w.dir, "base"))
    check(len(lines) == 1 and f'"{base_dir}"' in lines[0] and "Invalid argument" in lines[0]
          and "data files go through the page cache (data_direct_io=auto)" in lines[0],
          f"not one clear LOG line: {lines}")
    r = w.run("stop", "--wait")
    check(r.returncode == 0, f"stop: {r.stderr.decode()}")
    return lines[0].split("LOG:  ")[-1]


def refused_start(w, failpoints=None, fs=None):
    r = w.run("put", "a", "1", failpoints=failpoints,
              opts=w.opts + ["create_if_missing=on", "data_direct_io=on"])
    err = r.stderr.decode()
    base_dir = os.path.realpath(os.path.join(w.dir, "base"))
    want = f'data_direct_io=on, but the file system of "{base_dir}" ({fs}) {REFUSED}'
    check(r.returncode != 0 and want in err, f"exit {r.returncode}, not /{want}/: {err}")
    check(wtest.wait_for(lambda: not wtest.instance_pids(w.dir), 30), "an instance is left")
    return err.strip().splitlines()[-1]


def fs_name(path):
    r = subprocess.run(["stat", "-f", "-c", "%T", path], capture_output=True, text=True)
    name = r.stdout.strip()
    return {"ext2/ext3": "ext4"}.get(name, name)


def case_refused(w, base):
    detail = refused_start(w, failpoints="open_direct:EINVAL:/base*0", fs=fs_name(base))
    if os.geteuid() != 0:
        return detail + " (no ramfs: not root)"
    mnt = os.path.join(base, "ramfs")
    os.makedirs(mnt)
    r = subprocess.run(["mount", "-t", "ramfs", "ramfs", mnt], capture_output=True, text=True)
    if r.returncode != 0:
        return detail + f" (no ramfs: {r.stderr.strip()})"
    w.cleanup.add_durable("umount", mnt)
    os.chmod(mnt, 0o700)
    rw = wtest.Walrus(w.exe, os.path.join(mnt, "data"), OPTS)
    rw.register(w.cleanup)
    return refused_start(rw, fs="ramfs")


def case_mmap(w, base):
    r = w.run("put", "a", "1",
              opts=w.opts + ["create_if_missing=on", "data_direct_io=on", "mmap_reads=on"])
    err = r.stderr.decode()
    want = 'option "mmap_reads" cannot be on with option "data_direct_io" on'
    check(r.returncode != 0 and want in err, f"exit {r.returncode}, not /{want}/: {err}")
    w.opts += ["data_direct_io=auto", "mmap_reads=on"]
    w.create()
    check(stats(w)["buffers"]["io"] == "buffered", "buffers.io is not buffered")
    check(w.log_has(r"data files go through the page cache: mmap_reads is on"),
          "no LOG line saying why")
    return err.strip().splitlines()[-1]


CASES = {"on": case_on, "auto": case_auto, "refused": case_refused, "mmap": case_mmap}


def main(cleanup):
    ap = argparse.ArgumentParser()
    ap.add_argument("--walrus", default=wtest.default_walrus())
    ap.add_argument("--case", action="append", choices=sorted(CASES))
    a = ap.parse_args()
    base = wtest.tempdir(cleanup, "walrus-direct-")
    failed = 0
    for name in a.case or list(CASES):
        w = wtest.Walrus(a.walrus, os.path.join(base, name), OPTS)
        w.cleanup = cleanup
        w.register(cleanup)
        try:
            log(f"PASS {name}: {CASES[name](w, base)}")
        except wtest.TestFailure as e:
            failed += 1
            log(f"FAIL {name}: {e}\n{w.log_tail(n=15)}")
        w.kill_instance()
    return 1 if failed else 0


if __name__ == "__main__":
    wtest.guarded(main)

#!/usr/bin/env python3
"""Real kernel write-back errors (shared/DESIGN.md, "Testing with real kernel
write-back errors"): the data files live on an ext4 file system in a loop
device whose backing file is on a tmpfs that is too small for it, so the
kernel's write-back of data pages fails and fsync/sync_file_range report
ENOSPC or EIO -- no failpoint involved.  The WAL and the log live on a
healthy file system behind symbolic links, so every acknowledged write is
durable in the WAL.

Recipe (needs root and loop devices; exit 77 = SKIP otherwise):
  mount -t tmpfs -o size=40m tmpfs T
  truncate -s 512M T/disk.img; mkfs.ext4 -q -F -J size=4 T/disk.img
  LOOP=$(losetup -f --show T/disk.img); mount $LOOP M
  walrus -D M/data -o create_if_missing=on put a b   (then it stops)
  mv M/data/wal M/data/log to a healthy file system, symlink them back
  sync -f M/data
Then `load --sync --ack` values big enough to overflow the tmpfs, with a
`walrus checkpoint` after each part.  Expected: the instance PANICs on a
data file's fsync/sync_file_range/close with EIO or ENOSPC, no checkpoint
completes after the error, and as long as the device stays broken every
restart PANICs too.  Recovery: stop everything, umount M, `mount -o
remount,size=1G T`, `e2fsck -fy $LOOP`, mount again, start walrus: every
acknowledged key holds its value and `walrus verify` is clean.

Every path cleans up (try/finally, SIGTERM included): walrus processes of
the directory, the mounts, the loop device, the temporary directories.
usage: writeback_loop.py [--walrus PATH] [--keep-on-failure]
"""
import argparse, ctypes, errno, os, random, re, shutil, subprocess, sys, time

sys.dont_write_bytecode = True  # no __pycache__ in the source tree
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import wtest  # noqa: E402
from wtest import check, log  # noqa: E402

TOOLS = ["mount", "umount", "losetup", "mkfs.ext4", "e2fsck", "sync", "truncate"]
# The data files' write-back fails first, or, when the tmpfs ran out just
# after they were synced, the control file's (on the same broken file system):
# either fsync error must PANIC.
SYNC_PANIC = re.compile(r'could not (fsync|sync_file_range|close) file '
                        r'"[^"]*/(base/[^"]*|walrus\.control\.tmp)": '
                        r'(Input/output error|No space left on device)')
# --mode wal: a WAL write or flush, the creation or recycling of a segment,
# or the WAL directory's fsync fails (ext4 may then turn itself read-only).
WAL_PANIC = re.compile(r'(WAL segment|WAL directory).*'
                       r'(Input/output error|No space left on device|Read-only file system)')


def sh(*args, ok=(0,), timeout=120):
    r = subprocess.run(list(args), capture_output=True, timeout=timeout)
    if r.returncode not in ok:
        raise wtest.TestFailure(f"{' '.join(args)} failed ({r.returncode}): "
                                f"{r.stderr.decode(errors='replace').strip()}")
    return r


def skip(msg):
    log(f"SKIP: needs root and loop devices ({msg})")
    return wtest.SKIP


def is_mounted(path):
    real = os.path.realpath(path)
    with open("/proc/self/mounts") as f:
        return any(line.split()[1] == real for line in f)


class CacheStat(ctypes.Structure):
    _fields_ = [(n, ctypes.c_uint64) for n in ("nr_cache", "nr_dirty", "nr_writeback",
                                                 "nr_evicted", "nr_recently_evicted")]


NR_CACHESTAT = 451  # the same number on every architecture (Linux 6.5)
_libc = ctypes.CDLL(None, use_errno=True)


def dirty_pages(path):
    """Pages of @path dirty or under write-back in the page cache (cachestat(2));
    None when the kernel has no cachestat."""
    fd = os.open(path, os.O_RDONLY)
    try:
        whole = (ctypes.c_uint64 * 2)(0, 0)  # offset 0, length 0: the whole file
        cs = CacheStat()
        if _libc.syscall(NR_CACHESTAT, fd, ctypes.byref(whole), ctypes.byref(cs), 0) != 0:
            return None
        return cs.nr_dirty + cs.nr_writeback
    finally:
        os.close(fd)


SYNC_FILE_RANGE_ALL = 7  # WAIT_BEFORE | WRITE | WAIT_AFTER


def writeback_failed(basedir):
    """Whether the write-back of a data file failed.  sync_file_range(2)
    waits for the write-back and reports its error (the mapping's error
    flags) without committing metadata, so unlike an fsync it does not
    itself make the file system fail; the errseq_t the checkpointer's fsync
    reports through its own fd is left as it was."""
    failed = False
    for name in os.listdir(basedir):
        fd = os.open(os.path.join(basedir, name), os.O_RDONLY)
        try:
            if _libc.sync_file_range(fd, ctypes.c_int64(0), ctypes.c_int64(0),
                                     SYNC_FILE_RANGE_ALL) != 0:
                err = ctypes.get_errno()
                check(err in (errno.EIO, errno.ENOSPC), f"sync_file_range of {name}: errno {err}")
                failed = True
        finally:
            os.close(fd)
    return failed


def writeback_now(basedir):
    """Starts the write-back of every data file now, from another open file
    description, and drops the written pages from the page cache
    (POSIX_FADV_DONTNEED: write-back without waiting, then invalidation):
    a write-back error is then recorded in the file's errseq_t before the
    checkpointer's fsync, which must still report it through the fd it
    was handed before the writes.  The invalidation comes once no page of
    the files is dirty or under write-back any more (cachestat)."""
    names = [os.path.join(basedir, n) for n in os.listdir(basedir)]
    for name in names:
        fd = os.open(name, os.O_RDONLY)
        try:
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        finally:
            os.close(fd)
    check(wtest.wait_for(lambda: all(dirty_pages(n) == 0 for n in names), 60),
          f"data pages still dirty or under write-back 60 s after the write-back began: "
          f"{[(os.path.basename(n), dirty_pages(n)) for n in names if dirty_pages(n)]}")
    for name in names:
        fd = os.open(name, os.O_RDONLY)
        try:
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        finally:
            os.close(fd)


def main(cleanup):
    ap = argparse.ArgumentParser()
    ap.add_argument("--walrus", default=wtest.default_walrus())
    ap.add_argument("--tmpfs-mb", type=int, default=40)
    ap.add_argument("--load-mb", type=int, default=96)
    ap.add_argument("--seed", type=int, default=11)
    ap.add_argument("--mode", choices=["checkpoint", "background", "wal"], default="checkpoint",
                    help="background: a 1 MB buffer pool (backends and the background "
                         "writer write the pages and pass their fds on); before each "
                         "checkpoint the data files are written back and dropped from the "
                         "page cache from another fd (fadvise DONTNEED), so the write-back "
                         "error happens before, not inside, the checkpointer's fsync; "
                         "wal: the WAL is on the broken device and the data files on the "
                         "healthy one, so the WAL's writes, flushes and new segments fail")
    a = ap.parse_args()
    if os.geteuid() != 0:
        return skip("not root")
    missing = [t for t in TOOLS if shutil.which(t) is None]
    if missing:
        return skip("missing " + ", ".join(missing))
    if not os.path.exists("/dev/loop-control"):
        return skip("no /dev/loop-control")
    if a.mode == "background" and dirty_pages(sys.executable) is None:
        log("SKIP: --mode background needs cachestat(2) (Linux 6.5)")
        return wtest.SKIP

    base = wtest.tempdir(cleanup, "walrus-loop-")
    tmpfs, mnt, healthy = (os.path.join(base, n) for n in ("tmpfs", "mnt", "healthy"))
    for d in (tmpfs, mnt, healthy):
        os.mkdir(d, 0o700)
    r = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={a.tmpfs_mb}m", "tmpfs", tmpfs],
                       capture_output=True)
    if r.returncode != 0:
        return skip("cannot mount a tmpfs: " + r.stderr.decode(errors="replace").strip())
    cleanup.add_durable("umount", tmpfs)
    img = os.path.join(tmpfs, "disk.img")
    sh("truncate", "-s", "512M", img)
    sh("mkfs.ext4", "-q", "-F", "-J", "size=4", img)
    r = subprocess.run(["losetup", "-f", "--show", img], capture_output=True)
    if r.returncode != 0:
        return skip("losetup: " + r.stderr.decode(errors="replace").strip())
    loop = r.stdout.decode().strip()
    cleanup.add_durable("losetup_d", [loop, os.path.realpath(img)])
    sh("mount", loop, mnt)
    cleanup.add_durable("umount", mnt)
    log(f"tmpfs of {a.tmpfs_mb} MiB at {tmpfs}; 512 MiB ext4 image on {loop} mounted at {mnt}")
    tmpfs_mb = a.tmpfs_mb

    # --mode wal: the data directory (control file, data files, log) stays
    # healthy and only DIR/wal lives on the broken device.
    data = os.path.join(healthy if a.mode == "wal" else mnt, "data")
    w = wtest.Walrus(a.walrus, data)
    w.register(cleanup)
    w.create()
    if a.mode == "background":
        w.opts = ["shared_buffers=1MB"]
    if a.mode == "wal":
        # No checkpoint while loading: every segment since the first is
        # kept, so the WAL needs new blocks of the broken device all along
        # (recycled segments, up to min_wal_size, would reuse their blocks
        # in place and might never fill the tmpfs).
        w.opts = ["checkpoint_timeout=1h"]
        shutil.move(os.path.join(data, "wal"), os.path.join(mnt, "wal"))
        os.symlink(os.path.join(mnt, "wal"), os.path.join(data, "wal"))
        sh("sync", "-f", os.path.join(mnt, "wal"))
        log("DIR/wal moved to the broken device behind a symbolic link")
    else:
        for sub in ("wal", "log"):
            shutil.move(os.path.join(data, sub), os.path.join(healthy, sub))
            os.symlink(os.path.join(healthy, sub), os.path.join(data, sub))
        sh("sync", "-f", data)
        log("DIR/wal and DIR/log moved to a healthy file system behind symbolic links")

    # Load values of 16..48 kB, a checkpoint after every part.
    rng = random.Random(a.seed)
    book = wtest.AckBook()
    per_part, nparts = 8 << 20, max(1, (a.load_mb << 20) // (8 << 20))
    panic_at = None
    total = 0
    i = 0
    ckpts_ok = 0
    t0 = time.time()
    for part in range(nparts):
        its, size = [], 0
        while size < per_part:
            v = f"v{i}-" + rng.choice("abcdefgh") * rng.randrange(16 << 10, 48 << 10)
            its.append((f"k{i:06d}", v))
            size += len(v)
            i += 1
        for k, v in its:
            book.send(k, v)
        before = w.log_size()
        rc, acked, err = w.load(its, batch=4)
        for k in acked:
            book.ack(k)
        total += sum(len(v) for k, v in its[:len(acked)])
        if a.mode == "background" and rc == 0:
            writeback_now(os.path.join(data, "base"))
            st = os.statvfs(tmpfs)
            free = st.f_bavail * st.f_frsize
            # Less than a page free: the tmpfs refused a write, so the
            # device lost one.  Usually a data page's, which sync_file_range
            # reports; but ext4's own writes (journal, zeroed extents) can be
            # the refused ones, and then the data files' fsync reports the
            # failed file system instead.  Either way the device broke before
            # the checkpoint, and growing the tmpfs now would not undo it.
            refused = free < os.sysconf("SC_PAGE_SIZE")
            tmpfs_full_before = writeback_failed(os.path.join(data, "base")) or refused
            if refused:
                log("  the tmpfs is full: a write to the device was refused")
            if not tmpfs_full_before and free < (1 << 20):
                # The data fit, to the last few pages: the checkpoint would
                # fail on its own metadata (the control file) instead.  A
                # little more room makes a later part's data write-back the
                # one that fails.
                tmpfs_mb += 2
                sh("mount", "-o", f"remount,size={tmpfs_mb}m", tmpfs)
                log(f"  the data's write-back fit with {free >> 10} kB to spare: tmpfs grown "
                    f"to {tmpfs_mb} MiB")
            js = w.run("stats", "--json").stdout.decode()
            wb = {k: int(m.group(1)) for k in ("written_backend", "written_bgwriter",
                                                 "written_checkpoint")
                  for m in [re.search(rf'"{k}":\s*(\d+)', js)] if m}
            log(f"  after the write-back from outside: tmpfs free {free >> 10} kB; pages "
                f"written by backends {wb.get('written_backend')}, background writer "
                f"{wb.get('written_bgwriter')}, checkpoints {wb.get('written_checkpoint')}")
        r = w.run("checkpoint") if rc == 0 and a.mode != "wal" else None
        ok = rc == 0 if a.mode == "wal" else r is not None and r.returncode == 0
        if a.mode == "background" and rc == 0:
            check(not (ok and tmpfs_full_before), "a data file's write-back failed before "
                  "the checkpoint, yet the checkpoint completed: its fsync missed the error")
        ckpts_ok += ok
        log(f"part {part}: {len(acked)}/{len(its)} acked ({total >> 20} MiB in all); "
            f"load exit {rc}, checkpoint {'ok' if r and ok else 'FAILED' if r else 'not run'}")
        if not ok or rc != 0:
            panic_at = before
            if a.mode == "background" and rc == 0:
                check(tmpfs_full_before, "the data's write-back had not failed before the "
                      "failing checkpoint: the error did not happen before its fsync")
                log("  the data's write-back failed before the checkpoint started: its fsync "
                    "reported that earlier error through the fd it was handed")
            break
    check(panic_at is not None,
          f"{total >> 20} MiB loaded into a {tmpfs_mb} MiB tmpfs and every checkpoint "
          f"completed: write-back errors were not reported")
    # The instance stays broken: its restart's end-of-recovery checkpoint
    # fails as well, and the supervisor gives up (or we stop it).
    wtest.wait_for(lambda: not wtest.instance_pids(data), 30, step=0.2)
    w.kill_instance()
    entries = wtest.parse_log(w.log_text(panic_at))
    panics = [(p, n, m) for p, n, lv, m in entries if lv == "PANIC"]
    for p, n, m in panics[:4]:
        log(f"  PANIC [{p}] {n}: {m}")
    if a.mode == "wal":
        check(any(WAL_PANIC.search(m) for _, _, m in panics),
              "no PANIC on a WAL write, flush or new segment with EIO/ENOSPC:\n"
              + w.log_tail(panic_at, 30))
    else:
        check(any(SYNC_PANIC.search(m) for _, _, m in panics),
              "no PANIC on a data or control file's fsync/sync_file_range/close with "
              "EIO/ENOSPC:\n"
              + w.log_tail(panic_at, 30))
    first = next(i for i, e in enumerate(entries) if e[2] == "PANIC")
    done_after = [m for _, _, _, m in entries[first:] if m.startswith("checkpoint complete")]
    check(not done_after, f"a checkpoint completed after the write-back error: {done_after}")
    check(any(lv == "FATAL" and "could not restart the instance" in m
              for _, _, lv, m in entries[first:]),
          "the supervisor did not give up restarting on the broken device:\n"
          + w.log_tail(panic_at, 30))
    # Every start PANICs while the device stays broken.
    again = w.log_size()
    r = w.run("get", "k000000", timeout=120)
    w.kill_instance()
    check(r.returncode not in (0, 1), "a start on the broken device succeeded")
    check(any(lv in ("PANIC", "FATAL") for _, _, lv, _ in wtest.parse_log(w.log_text(again))),
          "a start on the broken device failed without a PANIC or FATAL in the log")
    log(f"a start on the broken device fails: {r.stderr.decode(errors='replace').strip()}")
    cd = w.controldata()
    log(f"control file still names checkpoint {cd.get('Latest checkpoint location')} "
        f"(redo {cd.get(chr(76) + 'atest checkpoint' + chr(39) + 's REDO location')}); "
        f"{ckpts_ok} {'part(s) loaded' if a.mode == 'wal' else 'checkpoint(s) completed'} "
        f"before the error")

    # Repair: unmount, grow the tmpfs, fsck, mount, start.
    t_fix = time.time()
    wtest.umount_path(mnt, lazy_last=False)
    check(not is_mounted(mnt), f"could not unmount {mnt}")
    sh("mount", "-o", "remount,size=1G", tmpfs)
    r = sh("e2fsck", "-fy", loop, ok=(0, 1, 2), timeout=600)
    log(f"e2fsck -fy exit {r.returncode}")
    sh("mount", loop, mnt)
    restart = w.log_size()
    kv = wtest.check_acked(w, book, "after the repair")
    check(all(k in kv for k in book.acked), "acknowledged keys missing")
    r = w.run("checkpoint")
    check(r.returncode == 0, f"checkpoint after the repair failed: {r.stderr.decode()}")
    check(w.log_has(r"checkpoint complete \(immediate\)", restart),
          "no checkpoint completed after the repair")
    w.kill_instance()
    log(f"PASS: {len(book.acked)} acknowledged keys ({total >> 20} MiB) back after the repair "
        f"(load+error {t_fix - t0:.0f} s, repair+check {time.time() - t_fix:.0f} s)")
    return 0


if __name__ == "__main__":
    wtest.guarded(main)

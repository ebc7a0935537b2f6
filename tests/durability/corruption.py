#!/usr/bin/env python3
"""Corruption handling: damage the files of a stopped (or killed) instance
and check that walrus notices, says where, and repairs what it can.

  data-page     a flipped bit in a B+tree page of DIR/base/1 (clean shutdown
                before): `walrus verify` exits 2 naming the file and block
                ("invalid page in block N of file ..."); `walrus scan` fails
                with the same message; nothing wrong is returned
  fpi-repair    a checkpoint, then a durable update of one key (its page's
                first change after the checkpoint logs a full-page image),
                then kill -9; the page is damaged on disk (bits flipped, then
                its second half zeroed: torn).  Recovery restores it from
                the image: the key has its new value and verify is clean.
                A page with no image in the WAL since the checkpoint,
                damaged the same way, is reported by verify (exit 2)
  wal-record    a flipped bit inside a WAL record that recovery must replay
                (acknowledged commits follow it): the start fails with a
                message naming the LSN (and the segment), instead of ending
                the WAL there and losing the commits after it
  wal-truncated the WAL segment holding acknowledged commits cut short:
                the start fails naming the segment and its size
  wal-missing   a WAL segment that recovery needs removed, a later one kept:
                the start fails naming the missing segment
  control       a flipped bit in walrus.control: every command fails (exit 2)
                naming the file and the checksum
  data-missing  DIR/base/1 removed after a clean shutdown: a command fails
                naming the file, instead of starting with an empty tree

usage: corruption.py --walrus PATH --case NAME [--opt NAME=VALUE ...] [--keep]
(--opt: engine options added to every instance's, e.g. data_direct_io=on)
"""
import argparse, os, re, subprocess, sys, time

sys.dont_write_bytecode = True
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import wtest  # noqa: E402
from wtest import check, log  # noqa: E402

PAGE = wtest.PAGE_SIZE  # data pages: 8192, or 4096 (-Dpage_size)
WAL_PAGE = 8192  # WAL pages, whatever the data pages are
SEG = 256 * 1024
OPTS = ["wal_segment_size=256kB", "max_wal_size=64MB", "min_wal_size=32MB",
        "checkpoint_timeout=1h", "supervisor_linger=500ms"]


def flip(path, off, mask=0x10):
    with open(path, "r+b") as f:
        f.seek(off)
        b = f.read(1)
        f.seek(off)
        f.write(bytes([b[0] ^ mask]))


def fill(w, n, prefix="key", size=100, batch=100):
    data = "".join(f"{prefix}{i:05d}\tvalue-{i}-{'x' * size}\n" for i in range(n)).encode()
    r = subprocess.run(w.argv("load", "--batch", str(batch)), input=data, capture_output=True,
                       env=w.env(), timeout=120)
    check(r.returncode == 0, f"load failed: {r.stderr.decode()}")


def block_of(path, needle):
    """Blocks of @path whose bytes contain @needle.  Look for values: leaves
    leave out the key bytes their fences share, so keys are not whole."""
    with open(path, "rb") as f:
        data = f.read()
    return [b for b in range(len(data) // PAGE) if needle in data[b * PAGE:(b + 1) * PAGE]]


def run(w, *args):
    r = w.run(*args, timeout=60)
    return r.returncode, (r.stdout + r.stderr).decode(errors="replace")


def acked_load(w, n, prefix):
    """n commits of one key each, acknowledged; returns the book."""
    book = wtest.AckBook()
    its = [(f"{prefix}{i:05d}", f"v{i}-" + "y" * 300) for i in range(n)]
    for k, v in its:
        book.send(k, v)
    rc, acked, err = w.load(its)
    check(rc == 0 and len(acked) == n, f"load failed: {err}")
    for k in acked:
        book.ack(k)
    return book


def records(w):
    """[(lsn, end)] from walrus waldump."""
    rc, out = run(w, "waldump")
    recs = []
    for line in out.splitlines():
        m = re.match(r"lsn: ([0-9A-F]+)/([0-9A-F]+) end: ([0-9A-F]+)/([0-9A-F]+)", line)
        if m:
            recs.append(((int(m[1], 16) << 32) | int(m[2], 16),
                         (int(m[3], 16) << 32) | int(m[4], 16)))
    return recs


def lsn_text(lsn):
    return f"{lsn >> 32:X}/{lsn & 0xffffffff:08X}"


def seg_path(w, lsn):
    return os.path.join(w.dir, "wal", f"{lsn - lsn % SEG:016X}")


def crashed_with_commits(w, n=600):
    """An instance that acknowledged n commits since its last checkpoint and
    was killed: recovery must replay them.  Returns the book and the redo LSN."""
    w.serve()
    redo = w.controldata()["Latest checkpoint's REDO location"]
    book = acked_load(w, n, "c")
    w.kill_instance()
    return book, redo


def expect_refusal(w, what, patterns):
    """The next command must fail, with every regex of @patterns in its
    output or in the log."""
    since = w.log_size()
    rc, out = run(w, "get", "c00000")
    w.kill_instance()
    text = out + w.log_text(since)
    check(rc != 0, f"{what}: the instance started and answered (exit {rc}): {out[-300:]}")
    for p in patterns:
        check(re.search(p, text), f"{what}: no /{p}/ in the error: {out[-400:]}"
                                  f"\n{w.log_tail(since, 8)}")
    return out.strip().splitlines()[-1] if out.strip() else ""


def case_data_page(w):
    w.create()
    fill(w, 3000)
    w.wait_stopped()
    base = os.path.join(w.dir, "base", "1")
    blk = block_of(base, b"value-1500-")[0]  # key01500's leaf
    flip(base, blk * PAGE + PAGE // 2)  # in the middle of the page
    rc, out = run(w, "verify")
    check(rc == 2, f"verify exit {rc}, expected 2: {out[-300:]}")
    want = f'invalid page in block {blk} of file "{os.path.realpath(base)}"'
    check(want in out, f"verify does not say /{want}/: {out[-400:]}")
    rc, out2 = run(w, "scan")
    check(rc == 2 and want in out2, f"scan exit {rc} without the message: {out2[-300:]}")
    return f"verify: {[ln for ln in out.splitlines() if 'invalid page' in ln][0]}"


def case_fpi_repair(w):
    w.create()
    fill(w, 3000)
    w.wait_stopped()
    w.serve()
    r = w.run("checkpoint")
    check(r.returncode == 0, "checkpoint failed")
    r = w.run("put", "key01500", "NEW-VALUE-after-the-checkpoint")
    check(r.returncode == 0, "put failed")
    since = w.log_size()
    w.kill_instance()
    base = os.path.join(w.dir, "base", "1")
    # the put's record carries a full-page image of the leaf it changed
    rc, dump = run(w, "waldump")
    last = [ln for ln in dump.splitlines() if "rmgr: KV" in ln][-1]
    m = re.search(r"rel 1 blk (\d+) fpi", last)
    check(m, f"the update logged no full-page image: {last[:300]}")
    blk = int(m[1])
    on_disk = block_of(base, b"value-1500-") + block_of(base, b"NEW-VALUE-after")
    check(blk in on_disk, f"block {blk} does not hold key01500")
    flip(base, blk * PAGE + PAGE * 3 // 8, 0xff)
    with open(base, "r+b") as f:  # and torn: the second half of the page lost
        f.seek(blk * PAGE + PAGE // 2)
        f.write(bytes(PAGE // 2))
    # another page, not changed since the checkpoint: no image to restore it
    other = [b for b in block_of(base, b"value-") if b != blk and b > 2][-1]
    flip(base, other * PAGE + PAGE * 5 // 8, 0xff)
    r = w.run("get", "key01500")
    check(r.returncode == 0 and r.stdout.decode().strip() == "NEW-VALUE-after-the-checkpoint",
          f"after recovery key01500 = {r.stdout[:60]!r} (exit {r.returncode}) "
          f"{r.stderr.decode()[-300:]}")
    check(w.log_has(r"redo starts at", since), "no recovery ran")
    rc, out = run(w, "verify")
    w.kill_instance()
    check(rc == 2, f"verify exit {rc}, expected 2 for the page without an image: {out[-300:]}")
    bad = [ln for ln in out.splitlines() if "invalid page" in ln]
    check(bad and all(f"block {other} " in ln for ln in bad),
          f"verify should report block {other} only (block {blk} was restored): {bad}")
    return (f"block {blk} restored from its full-page image; block {other} (no image) "
            f"reported: {bad[0]}")


def case_wal_record(w):
    w.create()
    book, redo = crashed_with_commits(w)
    recs = records(w)
    mid = [r for r in recs if r[1] - r[0] > 64][len(recs) // 2]
    off = mid[0] % SEG + 40
    check(off % WAL_PAGE >= 40, "record start too close to a page header")
    flip(seg_path(w, mid[0]), off)
    seg = os.path.basename(seg_path(w, mid[0]))
    msg = expect_refusal(w, "flipped bit in a WAL record", [re.escape(lsn_text(mid[0]))])
    if seg not in msg:
        msg += f" [note: names the LSN, not the segment file {seg}]"
    return msg


def case_wal_truncated(w):
    w.create()
    book, redo = crashed_with_commits(w)
    recs = records(w)
    last = recs[-1][0]
    path = seg_path(w, recs[len(recs) // 2][0])
    check(path != seg_path(w, last) or True, "")
    os.truncate(path, SEG // 2)
    return expect_refusal(w, "truncated WAL segment", [os.path.basename(path)])


def case_wal_missing(w):
    w.create()
    book, redo = crashed_with_commits(w, 1500)
    recs = records(w)
    segs = sorted({seg_path(w, r[0]) for r in recs})
    check(len(segs) >= 3, f"the commits span only {len(segs)} segment(s)")
    os.unlink(segs[1])
    return expect_refusal(w, "missing WAL segment", [os.path.basename(segs[1])])


def case_control(w):
    w.create()
    w.wait_stopped()
    flip(os.path.join(w.dir, "walrus.control"), 40, 1)
    rc, out = run(w, "get", "walrus-test-init")
    check(rc == 2, f"exit {rc}, expected 2: {out}")
    check("walrus.control" in out and "checksum" in out, f"message: {out}")
    return out.strip().splitlines()[-1]


def case_data_missing(w):
    w.create()
    fill(w, 500)
    w.wait_stopped()
    os.unlink(os.path.join(w.dir, "base", "1"))
    rc, out = run(w, "get", "key00001")
    w.kill_instance()
    check(rc not in (0, 1), f"`walrus get` of a stored key answered exit {rc} (1 = not "
                            f"found): the missing data file went unnoticed")
    check("base/1" in out, f"the error does not name base/1: {out}")
    return out.strip().splitlines()[-1]


CASES = {"data-page": case_data_page, "fpi-repair": case_fpi_repair,
         "wal-record": case_wal_record, "wal-truncated": case_wal_truncated,
         "wal-missing": case_wal_missing, "control": case_control,
         "data-missing": case_data_missing}


def main(cleanup):
    ap = argparse.ArgumentParser()
    ap.add_argument("--walrus", default=wtest.default_walrus())
    ap.add_argument("--case", action="append", choices=sorted(CASES))
    ap.add_argument("--opt", action="append", default=[], metavar="NAME=VALUE")
    ap.add_argument("--keep", action="store_true")
    a = ap.parse_args()
    base = wtest.tempdir(cleanup, "walrus-corrupt-", keep=a.keep)
    failed = passed = 0
    for name in a.case or list(CASES):
        w = wtest.Walrus(a.walrus, os.path.join(base, name), OPTS + a.opt)
        w.register(cleanup)
        try:
            detail = CASES[name](w)
            passed += 1
            log(f"PASS {name}: {detail}")
        except wtest.TestFailure as e:
            failed += 1
            log(f"FAIL {name}: {e}")
        w.kill_instance()
    log(f"{passed} passed, {failed} failed")
    return 1 if failed else 0


if __name__ == "__main__":
    wtest.guarded(main)

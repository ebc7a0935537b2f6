#!/usr/bin/env python3
"""I/O error table: every write, fsync, fdatasync, sync_file_range, open,
rename, unlink, close and directory-fsync site of walrus, with EIO and with
ENOSPC injected by the fd cache's failpoints (src/testsupport/failpoint.c).

The rule checked (DESIGN.md, durability rules 2, 5, 6): the outcome is
either a clean error to the caller -- a failing command, or a failed
checkpoint, whose message names the file and the errno -- with nothing
acknowledged that is not durable, or a PANIC and a correct recovery; never
a silent success.  To tell "durable" from "written", every case runs under
the power-loss journal (WALRUS_POWERLOSS): after the error the instance is
stopped and killed at once and everything not fsynced is rolled back
(powerloss.py, mode drop) before recovery.  Then every acknowledged key
must hold its acknowledged value and `walrus verify` must be clean.

Each case: create DIR; start `walrus serve` (with the failpoint when the
site is the instance's); `walrus load --sync --ack` (with the failpoint
when the site is a backend's); then the case's action (a checkpoint, an
asynchronous load for the WAL writer, or enough WAL to create, recycle and
remove segments, with checkpoints); the power cut; recovery without
failpoints.  The outcome is read from DIR/log/walrus.log and the commands'
results:
  PANIC      the process that met the error PANICked; the instance
             restarted (or refused to start while the error lasted)
  error      no PANIC; the command or the checkpoint failed, and the error
             (file and errno) was reported: returned, or logged at ERROR
  refused    the instance did not start, with the error in its message
  SILENT     the failpoint fired and nobody reported anything: a failure
  not hit    the failpoint never fired (the site was not reached)
The table (site x errno -> outcome) is printed at the end, in the Markdown
of docs/durability.md.

usage: io_errors.py --walrus PATH [--errno EIO|ENOSPC ...] [--case NAME ...]
                    [--skip NAME ...] [--repeat N] [--stop-on-fail] [--keep]
"""
import argparse, os, random, re, subprocess, sys, time

sys.dont_write_bytecode = True
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import wtest  # noqa: E402
import workload  # noqa: E402
import powerloss  # noqa: E402
from wtest import check, log  # noqa: E402

ERRTEXT = {"EIO": "Input/output error", "ENOSPC": "No space left on device"}
OPTS = ["wal_segment_size=256kB", "max_wal_size=1MB", "min_wal_size=512kB",
        "checkpoint_timeout=30s", "io_method=sync", "supervisor_linger=1s",
        "wal_writer_delay=20ms"]

# 128kB, the least shared_buffers, is 16 buffers of 8 KiB pages but 32 of 4 KiB
# ones: the cases that run with it load keys in proportion to the buffers (twice
# as many with 4 KiB pages), so that the load's dirty pages still outgrow the
# pool and a backend must evict one of them.
SMALL_POOL = "shared_buffers=128kB"
SMALL_POOL_SCALE = 8192 // wtest.PAGE_SIZE

# The process where a site's failpoint must fire, where another one could
# meet the same call first (the case would then test another site).
LANDS = {"control-dirsync": "walrus-startup"}

# name: (where the call is made, op, path substring, whose failpoint, action, extra options)
#   whose: "inst" = walrus serve (supervisor and its children), "backend" =
#   the `walrus load` command
#   action: ckpt (a `walrus checkpoint`), ckpt2 (two of them), async (an asynchronous load: the
#   WAL writer writes and flushes), fill (3 MB of WAL with checkpoints:
#   segments created, recycled and removed), none
SITES = {
    "data-write-ckpt": ("checkpointer writes a dirty page (smgr_write)", "pwrite", "/base/",
                        "inst", "ckpt", []),
    "data-write-evict": ("backend evicts a dirty page (buffer pool, smgr_write)", "pwrite",
                         "/base/", "backend", "none", [SMALL_POOL]),
    "data-extend": ("backend grows the relation (smgr_grow)", "fallocate", "/base/1",
                    "backend", "none", [SMALL_POOL]),
    "data-open": ("backend opens a data file (smgr_open)", "open", "/base/", "backend",
                  "none", []),
    "data-fsync": ("checkpointer fsyncs a data file (sync phase)", "fsync", "/base/", "inst",
                   "ckpt", []),
    # Without page images, replay skips a page whose copy in the page cache
    # (written before the crash, never fsynced) is already newer: only a
    # sync of the data directory at the start of crash recovery makes it
    # durable before the end-of-recovery checkpoint moves the redo point
    # past its WAL.  "ckptrestart": the power cut comes after the crash
    # restart (or after the instance gave up restarting).
    "data-fsync-nofpw": ("checkpointer fsyncs a data file, full_page_writes=off, power cut "
                         "after the crash restart", "fsync", "/base/", "inst",
                         "ckptrestart", ["full_page_writes=off"]),
    "data-sync-range": ("checkpointer's write-back hint (sync_file_range)", "sync_range",
                        "/base/", "inst", "ckpt", []),
    "data-close": ("close of a written data fd (after its fsync)", "close", "/base/", "inst",
                   "ckpt", []),
    "wal-write-commit": ("committing backend writes WAL (group commit)", "pwrite", "/wal/0",
                         "backend", "none", []),
    "wal-fdatasync-commit": ("committing backend flushes WAL (fdatasync)", "fdatasync",
                             "/wal/0", "backend", "none", []),
    "wal-open-commit": ("committing backend opens a WAL segment", "open", "/wal/0",
                        "backend", "none", []),
    # @1: each process of the instance lets its first such call pass (the
    # startup process's end-of-recovery checkpoint), so that the error
    # lands in the WAL writer or the checkpointer
    "wal-write-walwriter": ("WAL writer writes asynchronous commits", "pwrite", "/wal/0@1",
                            "inst", "async", []),
    "wal-fdatasync-walwriter": ("WAL writer flushes asynchronous commits", "fdatasync",
                                "/wal/0@1", "inst", "async", []),
    "wal-fdatasync-ckpt": ("checkpoint record flush (the second checkpoint's)", "fdatasync",
                           "/wal/0@1", "inst", "ckpt2", ["wal_writer_delay=10s"]),
    "wal-seg-open": ("new WAL segment: temp file created", "open", ".tmp.", "inst", "fill",
                     []),
    "wal-seg-write": ("new WAL segment: zero-fill", "pwrite", ".tmp.", "inst", "fill", []),
    "wal-seg-fdatasync": ("new WAL segment: fdatasync of the temp file", "fdatasync", ".tmp.",
                          "inst", "fill", []),
    "wal-seg-rename": ("new or recycled WAL segment: rename", "rename", "/wal/", "inst",
                       "fill", []),
    "wal-seg-dirsync": ("WAL directory fsync after a create/recycle", "fsync_dir", "WALDIR@1",
                        "inst", "fill", []),
    # *0: every WAL directory fsync fails, as on a device that keeps failing
    "wal-prealloc-dirsync": ("WAL writer's directory fsync after preallocating, failing "
                             "for good", "fsync_dir", "WALDIR*0", "inst", "syncfill",
                             ["max_wal_size=64MB", "min_wal_size=32MB"]),
    "wal-seg-unlink": ("old WAL segment removed after a checkpoint", "unlink", "/wal/0",
                       "inst", "fill", []),
    # @1 and two checkpoints: the startup process's end-of-recovery
    # checkpoint and the first requested one pass, the second one fails
    "control-open": ("control file: temp file created (checkpoint)", "open",
                     "walrus.control.tmp@1", "inst", "ckpt2", []),
    "control-write": ("control file: temp file written", "pwrite", "walrus.control.tmp@1",
                      "inst", "ckpt2", []),
    "control-fsync": ("control file: temp file fsynced", "fsync", "walrus.control.tmp@1",
                      "inst", "ckpt2", []),
    "control-rename": ("control file: rename over walrus.control", "rename",
                       "walrus.control.tmp@1", "inst", "ckpt2", []),
    "control-dirsync": ("control file: data directory fsync (end-of-recovery checkpoint)",
                        "fsync_dir", "/cases/", "inst", "ckpt", []),
    "control-read": ("control file read at start", "open", "walrus.control", "inst", "start",
                     []),
}


class PLWalrus(wtest.Walrus):
    def __init__(self, exe, data_dir, opts, jdir):
        super().__init__(exe, data_dir, opts)
        self.jdir = jdir

    def env(self, failpoints=None):
        e = wtest.Walrus.env(failpoints)
        e["WALRUS_POWERLOSS"] = self.jdir
        return e


def short(text):
    """Quoted absolute paths reduced to their last two components."""
    return re.sub(r'"/[^"]*?([^"/]*/[^"/]*)"', r'"\1"', text)


def items(rng, prefix, n, vsize=300):
    return [(f"{prefix}{i:05d}", f"{prefix}{i}-{rng.randrange(1 << 30):x}-" + "v" * vsize)
            for i in range(n)]


def load(w, book, its, failpoints=None, sync=True):
    for k, v in its:
        book.send(k, v)
    if sync:
        rc, acked, err = w.load(its, failpoints=failpoints)
        for k in acked:
            book.ack(k)
        return rc, err
    data = "".join(f"{k}\t{v}\n" for k, v in its).encode()
    p = subprocess.Popen(w.argv("load", "--batch", "50"), stdin=subprocess.PIPE,
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=w.env(failpoints))
    try:
        _out, err = p.communicate(data, timeout=30)
    except subprocess.TimeoutExpired:
        from ckpt_kill import diagnose
        diag = diagnose(p.pid)
        p.kill()
        p.communicate()
        raise wtest.TestFailure(f"an asynchronous `walrus load` hung for 30 s:\n{diag}\n"
                                + w.log_tail(0, 12))
    return p.returncode, err.decode(errors="replace")


def wait_restarted(w, since, timeout=60):
    """Waits until the instance has PANICked and finished its crash restart
    (the end-of-recovery checkpoint included): the startup process exits
    after it, then a client can attach."""
    t = time.time()
    while time.time() - t < timeout:
        text = w.log_text(since)
        i = text.find("PANIC")
        if i >= 0 and "could not restart the instance" in text[i:]:
            return
        if i >= 0 and "checkpoint complete (end-of-recovery)" in text[i:]:
            if w.run("stats", timeout=30).returncode == 0:
                return
        time.sleep(0.05)
    raise wtest.TestFailure("no crash restart within %d s:\n%s" % (timeout, w.log_tail(since, 20)))


def wait_reported(w, start, errno, reported, fire_timeout=0):
    """Waits until the injected error, once it fired, was reported: a PANIC,
    a line at ERROR, WARNING or FATAL naming the errno, or a failed command
    (@reported).  With @fire_timeout (an asynchronous site: the WAL writer),
    first waits that long for the failpoint to fire.  Without it the power
    cut could come between the error and its report (outcome SILENT)."""
    def lines():
        return wtest.parse_log(w.log_text(start))

    def fired():
        return any(m.startswith("failpoint: injecting") for _p, _n, _lv, m in lines())

    def told():
        return any(lv == "PANIC" or (lv in ("ERROR", "WARNING", "FATAL") and ERRTEXT[errno] in m)
                   for _p, _n, lv, m in lines())
    if fire_timeout:
        wtest.wait_for(fired, fire_timeout)
    if reported or not fired():
        return
    wtest.wait_for(told, 30)


def run_case(exe, name, errno, base, cleanup, rng):
    where, op, path, whose, action, extra = SITES[name]
    fp = f"{op}:{errno}:{path}"
    # neutral directory names: a failpoint's path filter must not match them
    case_no = sorted(SITES).index(name)
    run_no = 0
    while os.path.exists(os.path.join(base, "cases", f"c{case_no:02d}-{errno}-{run_no}")):
        run_no += 1
    d = os.path.join(base, "cases", f"c{case_no:02d}-{errno}-{run_no}")
    jdir = os.path.join(base, "j", f"c{case_no:02d}-{errno}-{run_no}")
    os.makedirs(jdir)
    if path.startswith("WALDIR"):  # DIR/wal itself
        fp = f"{op}:{errno}:{os.path.realpath(d)}/wal{path[6:]}"
    if path == "/cases/":
        # The data directory.  @1: the supervisor's first fsync of it (the
        # settings file, DIR/walrus.settings, before the instance starts)
        # passes; the startup process inherits that count and fails its
        # first one, the control file's.
        fp = f"{op}:{errno}:{os.path.realpath(d)}@1"
    w = PLWalrus(exe, d, OPTS + extra, jdir)
    w.register(cleanup)
    w.create()
    book = wtest.AckBook()
    load(w, book, items(rng, "a", 200))  # before the failpoint: acknowledged for sure
    w.wait_stopped()
    inst_fp = fp if whose == "inst" else None
    back_fp = fp if whose == "backend" else None
    start = w.log_size()
    reported = []  # errors returned to a caller
    refused = False
    try:
        w.serve(failpoints=inst_fp, stderr_path=os.path.join(base, f"{name}-{errno}.serve"))
    except wtest.TestFailure as e:
        refused = True
        reported.append(str(e))
    if not refused:
        if name == "wal-fdatasync-ckpt":
            # the first checkpoint's record flush passes (@1): its second one fails
            pass
        # ckptrestart overwrites the keys in place: no page is split, so
        # replay finds the checkpoint's unsynced copies newer than its records
        nfirst = 300 * (SMALL_POOL_SCALE if SMALL_POOL in extra else 1)
        first = items(rng, "a", 200) if action == "ckptrestart" else items(rng, "b", nfirst)
        rc, err = load(w, book, first, failpoints=back_fp)
        if rc != 0:
            reported.append(f"load: {err.strip()[-300:]}")
        if action in ("ckpt", "ckpt2", "ckptrestart"):
            for i in range(2 if action == "ckpt2" else 1):
                if i:
                    load(w, book, items(rng, "d", 50), sync=False)
                r = w.run("checkpoint", timeout=60)
                if r.returncode != 0:
                    reported.append("checkpoint: "
                                    + r.stderr.decode(errors='replace').strip()[-300:])
                    break
            if action == "ckptrestart":
                wait_restarted(w, start)
        elif action == "async":
            rc, err = load(w, book, items(rng, "c", 400), sync=False)
            if rc != 0:
                reported.append(f"async load: {err.strip()[-300:]}")
            wait_reported(w, start, errno, reported, fire_timeout=30)
        elif action == "syncfill":  # 1.4 MB of acknowledged commits: new segments
            rc, err = load(w, book, items(rng, "s", 1500, 900))
            if rc != 0:
                reported.append(f"load: {err.strip()[-300:]}")
        elif action == "fill":
            for part in range(4):
                rc, err = load(w, book, items(rng, f"f{part}", 800, 900), sync=False)
                if rc != 0:
                    reported.append(f"load: {err.strip()[-300:]}")
                r = w.run("checkpoint", timeout=60)
                if r.returncode != 0:
                    reported.append("checkpoint: "
                                    + r.stderr.decode(errors='replace').strip()[-300:])
        wait_reported(w, start, errno, reported)
    # The power cut: everything not fsynced is lost.
    pids = wtest.instance_pids(w.dir)
    if w.serve_proc is not None and w.serve_proc.poll() is None:
        pids.append(w.serve_proc.pid)
    workload.stop_all_then_kill(pids)
    w.kill_instance()
    entries = wtest.parse_log(w.log_text(start))
    fired = [(p, n, m) for p, n, lv, m in entries if m.startswith("failpoint: injecting")]
    panics = [(p, n, m) for p, n, lv, m in entries if lv == "PANIC"]
    logged = [(p, n, m) for p, n, lv, m in entries
              if lv in ("ERROR", "WARNING", "FATAL") and ERRTEXT[errno] in m]
    st = powerloss.simulate(jdir, d, "drop", rng)
    # Recovery without failpoints; every acknowledged key is back.
    kv = wtest.check_acked(w, book, f"{name} {errno}: after the power cut and recovery")
    w.kill_instance()
    if not fired:
        outcome = "not hit"
    elif name in LANDS and fired[0][1] != LANDS[name]:
        outcome = f"MISSED (fired in {fired[0][1]}, not {LANDS[name]})"
    elif panics:
        outcome = "PANIC"
    elif refused:
        outcome = "refused"
    elif reported or logged:
        outcome = "error"
    else:
        outcome = "SILENT"
    landed = fired[0][1] + ": " + short(fired[0][2][len("failpoint: "):]) if fired else ""
    how = ""
    if panics:
        how = f"{panics[0][1]} PANIC: {short(panics[0][2])}"
    elif reported:
        how = short(reported[0].splitlines()[-1])[:200]
    elif logged:
        how = f"{logged[0][1]}: {short(logged[0][2])[:200]}"
    if outcome in ("error", "refused") and not (ERRTEXT[errno] in how or
                                                 any(ERRTEXT[errno] in x for x in reported)):
        # the message must name the errno
        if not logged:
            outcome = "SILENT"
    return outcome, landed, how, len(book.acked), st


def main(cleanup):
    ap = argparse.ArgumentParser()
    ap.add_argument("--walrus", default=wtest.default_walrus())
    ap.add_argument("--errno", action="append", choices=sorted(ERRTEXT))
    ap.add_argument("--case", action="append", choices=sorted(SITES))
    ap.add_argument("--skip", action="append", default=[], choices=sorted(SITES),
                    help="leave a case out (one that runs in a test of its own)")
    ap.add_argument("--keep", action="store_true")
    ap.add_argument("--seed", type=int, default=5)
    ap.add_argument("--repeat", type=int, default=1, help="run each case N times")
    ap.add_argument("--stop-on-fail", action="store_true")
    a = ap.parse_args()
    rng = random.Random(a.seed)
    base = wtest.tempdir(cleanup, "walrus-ioerr-", keep=a.keep)
    rows, failed, passed = [], 0, 0
    for errno in a.errno or ["EIO", "ENOSPC"]:
        for name in [n for n in a.case or list(SITES) if n not in a.skip] * a.repeat:
            if failed and a.stop_on_fail:
                break
            t = time.time()
            try:
                outcome, landed, how, nacked, st = run_case(a.walrus, name, errno, base,
                                                            cleanup, rng)
                ok = outcome in ("PANIC", "error", "refused")
                err = ""
            except wtest.TestFailure as e:
                outcome, landed, how, ok, err = "FAIL", "", "", False, str(e)
            passed += ok
            failed += not ok
            rows.append((name, errno, outcome, landed, how or err))
            log(f"{'PASS' if ok else 'FAIL'} {name} {errno}: {outcome} ({time.time() - t:.1f} s)"
                f" {landed} | {how or err}")
    log("")
    log("| site | call | errno | outcome | what was reported |")
    log("|---|---|---|---|---|")
    for name, errno, outcome, landed, how in rows:
        log(f"| {name} | {SITES[name][1]} | {errno} | {outcome} | {how.replace('|', '/')} |")
    log(f"{passed} passed, {failed} failed")
    return 1 if failed else 0


if __name__ == "__main__":
    wtest.guarded(main)

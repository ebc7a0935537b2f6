#!/usr/bin/env python3
"""Fault injection at each sync call site of walrus (DESIGN.md, durability rule 5).

An error from fsync, fdatasync, sync_file_range or close of a written data
file must PANIC the instance; it is never retried and never ignored, no
checkpoint that depends on it is completed, and recovery from the WAL brings
back every acknowledged write.

Failpoints (WALRUS_FAILPOINTS, test builds only:
src/testsupport/testsupport.h) are read by each process's fd cache at
initialisation: by the supervisor, whose children (the startup process,
checkpointer, background writer, WAL writer) inherit its entries with their
counters as they were at fork time, and by each backend (a `walrus` command)
for itself. So a failpoint meant for the instance is put in the environment
of `walrus serve`, which runs the supervisor in the foreground; one meant
for a backend is put in that command's environment. Since every child of the
supervisor starts with fresh counters, a failpoint that stays in force also
makes the restarted instance's end-of-recovery checkpoint fail: "if the
error persists, every start PANICs".

Each case: create DIR; start the instance; load keys with `load --sync
--ack`; note controldata's checkpoint location; provoke the error (mostly by
`walrus checkpoint`); then assert
  - a PANIC line in DIR/log/walrus.log from the expected process, naming the
    file and the errno's text;
  - no failpoint fired twice in one process for that operation and every
    injection is followed by that process's PANIC (never retried, never
    ignored), and no "checkpoint complete" after the error;
  - the control file still names the checkpoint from before;
and after stopping everything and starting again without failpoints: every
acknowledged key holds its value, `walrus verify` is clean, and a new
checkpoint completes.

usage: fault_inject.py [--walrus PATH] [--case NAME ...] [--keep]
exit 0 when every case passed; prints one PASS/FAIL line per case.
"""
import argparse, os, random, re, sys

sys.dont_write_bytecode = True  # no __pycache__ in the source tree
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import wtest  # noqa: E402
from wtest import check, log  # noqa: E402

ERRTEXT = {"EIO": "Input/output error", "ENOSPC": "No space left on device"}

# name: (description, dict)
#   fp_instance: failpoints of the instance (walrus serve)
#   fp_backend:  failpoints of the second load (a backend)
#   op:          the failpoint's operation (for the injection count)
#   proc:        the process that must PANIC
#   msg:         regex of the PANIC message; {dir} is the data directory
#   create/opts: options at creation / for the instance
CASES = {
    "ckpt-fsync": ("the checkpointer's sync phase fsyncs a data file: EIO (failing for good)", dict(
        fp_instance="fsync:EIO:/base/*0", op="fsync", proc="walrus-ckpt",
        msg=r'could not fsync file "{dir}/base/1": Input/output error')),
    "ckpt-fsync-once": ("the same, failing only once: a retried fsync would succeed and "
                        "complete the checkpoint", dict(
        fp_instance="fsync:EIO:/base/", op="fsync", proc="walrus-ckpt",
        msg=r'could not fsync file "{dir}/base/1": Input/output error')),
    "ckpt-fsync-enospc": ("the checkpointer's fsync fails with ENOSPC (as a thin or full "
                          "device reports it)", dict(
        fp_instance="fsync:ENOSPC:/base/", op="fsync", proc="walrus-ckpt",
        msg=r'could not fsync file "{dir}/base/1": No space left on device')),
    "early-sync-fsync": ("64 kB data segments and an fd budget of 8: the checkpointer fsyncs "
                         "files early, during its write phase; the 3rd fsync fails.  The keys "
                         "are loaded beforehand and overwritten in place, so that no backend "
                         "extends a file while the failpoint is armed", dict(
        fp_instance="fsync:EIO:/base/@2*0", op="fsync", proc="walrus-ckpt",
        create=["data_segment_size=64kB"], keys=1200, vsize=900, preload=True,
        # 16: half for the sync request table, half for the checkpointer's fd cache
        opts=["max_open_files=16", "log_min_messages=debug"],
        before_panic=r"sync request table full \(budget 8 fds\): 2 files synced early",
        msg=r'could not fsync file "{dir}/base/1(\.\d+)?": Input/output error')),
    "sync-range": ("the write-back hint (sync_file_range) of the checkpoint's writes fails",
                   dict(fp_instance="sync_range:EIO:/base/*0", op="sync_range",
                        proc="walrus-ckpt",
                        msg=r'could not sync_file_range file "{dir}/base/1": '
                            r'Input/output error')),
    "close": ("close() of a written data file fd fails (after its fsync, in the sync phase)",
              dict(fp_instance="close:EIO:/base/*0", op="close", proc="walrus-ckpt",
                   msg=r'could not close file "{dir}/base/1": Input/output error')),
    "wal-flush-ckpt": ("the checkpointer's flush of its checkpoint record (fdatasync of the "
                       "WAL) fails; a first checkpoint succeeds, the second fails", dict(
        fp_instance="fdatasync:EIO:/wal/@1*0", op="fdatasync", proc="walrus-ckpt",
        opts=["wal_writer_delay=10s"], two_checkpoints=True, restart_survives=True,
        msg=r'could not fdatasync WAL segment "{dir}/wal/[0-9A-F]{{16}}": '
            r'Input/output error')),
    "wal-flush-commit": ("a committing backend's WAL flush (group commit fdatasync) fails "
                         "after 40 commits", dict(
        fp_backend="fdatasync:EIO:/wal/@40*0", op="fdatasync", proc="walrus-backend",
        msg=r'could not fdatasync WAL segment "{dir}/wal/[0-9A-F]{{16}}": '
            r'Input/output error')),
    "sender-fsync": ("a backend's fallback fsync: the checkpointer's socket is gone, so a "
                     "backend that evicts a dirty page fsyncs the file itself; EIO", dict(
        fp_backend="fsync:EIO:/base/*0", op="fsync", proc="walrus-backend",
        opts=["shared_buffers=128kB", "log_min_messages=debug"], remove_ckpt_socket=True,
        before_panic=r"no checkpointer to send sync requests to",
        msg=r'could not fsync file "{dir}/base/1": Input/output error')),
}


def items(rng, prefix, n, vsize):
    out = []
    for i in range(n):
        v = f"{prefix}{i}-" + "".join(rng.choice("abcdefghij") for _ in range(8))
        out.append((f"{prefix}{i:05d}", v + "x" * rng.randrange(vsize // 2, vsize)))
    return out


def load_all(w, book, its, failpoints=None, expect_ok=True, batch=1):
    for k, v in its:
        book.send(k, v)
    rc, acked, err = w.load(its, failpoints=failpoints, batch=batch)
    for k in acked:
        book.ack(k)
    if expect_ok:
        check(rc == 0 and len(acked) == len(its),
              f"load failed ({rc}, {len(acked)}/{len(its)} acked): {err[-500:]}")
    return rc, acked, err


def injections_and_panics(entries, op):
    """Per pid: the number of failpoint injections into @op, and whether each
    injection is followed by that pid's PANIC as its next log line."""
    inj, bad = {}, []
    last_by_pid = {}
    for pid, name, level, msg in entries:
        prev = last_by_pid.get(pid)
        if prev is not None and prev[3].startswith("failpoint: injecting") and level != "PANIC":
            bad.append((pid, name, prev[3], msg))
        if msg.startswith("failpoint: injecting") and f" into {op} of " in msg:
            inj[pid] = inj.get(pid, 0) + 1
        last_by_pid[pid] = (pid, name, level, msg)
    for pid, e in last_by_pid.items():
        if e[3].startswith("failpoint: injecting"):
            bad.append((pid, e[1], e[3], "<no PANIC after it>"))
    return inj, bad


def restarted(w, since):
    """The supervisor reported a new generation ready after @since."""
    return any(n == "walrus-super" and re.search(r"instance is ready \(generation [1-9]", m)
               for _, n, _, m in wtest.parse_log(w.log_text(since)))


def run_case(exe, name, spec, base, cleanup, seed):
    rng = random.Random(seed)
    data_dir = os.path.join(base, name)
    opts = spec.get("opts", [])
    w = wtest.Walrus(exe, data_dir, opts)
    w.register(cleanup)
    w.create(spec.get("create", []))
    real = os.path.realpath(data_dir)
    book = wtest.AckBook()
    nkeys, vsize = spec.get("keys", 300), spec.get("vsize", 600)

    if spec.get("preload"):
        first = items(rng, "a", nkeys, vsize)
        load_all(w, book, first)
        w.wait_stopped()
        # The same keys, values of the same sizes: updated in place.
        again = [(k, v[:-8] + "".join(rng.choice("klmnop") for _ in range(8))) for k, v in first]
    start = w.log_size()
    w.serve(failpoints=spec.get("fp_instance"), stderr_path=os.path.join(base, name + ".serve"))
    load_all(w, book, again if spec.get("preload") else items(rng, "a", nkeys, vsize))
    if spec.get("two_checkpoints"):
        r = w.run("checkpoint")
        check(r.returncode == 0, f"the first checkpoint failed: {r.stderr.decode()}\n"
                                 f"{w.log_tail(start)}")
        load_all(w, book, items(rng, "b", nkeys // 2, vsize))
    cd = w.controldata()
    lsn_before = cd.get("Latest checkpoint location")
    redo_before = cd.get("Latest checkpoint's REDO location")
    fault_at = w.log_size()

    if "fp_backend" in spec:
        if spec.get("remove_ckpt_socket"):
            os.unlink(os.path.join(data_dir, "walrus-ckpt.sock"))
        rc, acked, err = load_all(w, book, items(rng, "c", nkeys * 4, vsize),
                                  failpoints=spec["fp_backend"], expect_ok=False)
        check(rc != 0, "the load with a failing sync call succeeded")
        check("PANIC" in err, f"the load did not report the PANIC: {err[-400:]}")
        log(f"  {len(acked)} keys acknowledged before the backend PANICked")
        # The instance (no failpoints) restarts from the WAL at once.
        check(wtest.wait_for(lambda: restarted(w, fault_at), 30),
              "the instance did not restart after the backend's PANIC:\n" + w.log_tail(fault_at))
    else:
        r = w.run("checkpoint")
        check(r.returncode != 0, "`walrus checkpoint` succeeded although a sync call failed:\n"
              + w.log_tail(fault_at))
        if spec.get("restart_survives"):
            # @1 lets the first flush of each process pass: the restarted
            # instance's end-of-recovery checkpoint succeeds.
            check(wtest.wait_for(lambda: restarted(w, fault_at), 30),
                  "the instance did not restart after the PANIC:\n" + w.log_tail(fault_at))
        else:
            # The failpoint is still in force in the supervisor: the restarted
            # instance's end-of-recovery checkpoint fails too, and it gives up.
            code = w.wait_serve_exit(60)
            check(code is not None and code != 0,
                  f"the supervisor did not give up while the error persists (exit {code}):\n"
                  + w.log_tail(fault_at))
            entries = wtest.parse_log(w.log_text(fault_at))
            check(any(lv == "PANIC" and n == "walrus-startup" for _, n, lv, _ in entries),
                  "the restart with the error still present did not PANIC in recovery:\n"
                  + w.log_tail(fault_at))
            check(any(lv == "FATAL" and "could not restart the instance" in m
                      for _, _, lv, m in entries), "no FATAL 'could not restart the instance'")
            check(w.checkpoint_lsn() == lsn_before,
                  f"the control file moved from {lsn_before} to {w.checkpoint_lsn()}: a "
                  f"checkpoint was recorded although its sync failed")

    w.kill_instance()
    text = w.log_text(fault_at)
    entries = wtest.parse_log(text)
    want = re.compile(spec["msg"].format(dir=re.escape(real)))
    panics = [(p, n, m) for p, n, lv, m in entries if lv == "PANIC"]
    first = panics[0] if panics else None
    check(first is not None and first[1] == spec["proc"] and want.search(first[2]),
          f"expected a first PANIC from {spec['proc']} matching /{want.pattern}/, got "
          f"{first}\n{w.log_tail(fault_at)}")
    if "before_panic" in spec:
        pan = next(i for i, e in enumerate(entries) if e[2] == "PANIC")
        check(any(p == first[0] and re.search(spec["before_panic"], m)
                  for p, _, _, m in entries[:pan]),
              f"no /{spec['before_panic']}/ from the checkpointer before its PANIC")
    check(any(n == "walrus-super" and "PANICked" in m for _, n, _, m in entries),
          "the supervisor did not report the PANIC")
    inj, bad = injections_and_panics(entries, spec["op"])
    check(inj and max(inj.values()) == 1,
          f"a failed {spec['op']} was attempted again in the same process: {inj}")
    check(not bad, f"a failed {spec['op']} did not PANIC at once: {bad}")
    # No checkpoint completed between the failure and the PANIC; the only ones
    # after it are end-of-recovery checkpoints of a restarted instance.
    pan = next(i for i, e in enumerate(entries) if e[2] == "PANIC")
    check(not any(m.startswith("checkpoint complete") for _, _, _, m in entries[:pan]),
          "a checkpoint completed after the failed call, before the PANIC")
    late = [m for _, n, _, m in entries[pan:] if m.startswith("checkpoint complete")
            and not m.startswith("checkpoint complete (end-of-recovery)")]
    check(not late, f"a checkpoint other than end-of-recovery completed: {late}")

    # Stop everything, start without failpoints: the WAL brings it all back.
    restart = w.log_size()
    kv = wtest.check_acked(w, book, "after restart without failpoints")
    # Recovery after the PANIC started at the redo point of the checkpoint
    # from before the failure: the failed checkpoint was never recorded.
    # (While the error lasts, a restart PANICs already in the sync of the
    # data directory that precedes replay: the first replay is this one.)
    redo = [m for _, n, _, m in wtest.parse_log(w.log_text(fault_at))
            if n == "walrus-startup" and m.startswith("redo starts")]
    check(redo and redo[0] == f"redo starts at {redo_before}",
          f"recovery after the PANIC did not start at the previous checkpoint's redo point "
          f"{redo_before}: {redo[:1]}")
    check(len(kv) >= len(book.acked), "keys missing")
    r = w.run("checkpoint")
    check(r.returncode == 0, f"checkpoint after recovery failed: {r.stderr.decode()}")
    check(w.log_has(r"checkpoint complete \(immediate\)", restart),
          "no completed checkpoint after recovery")
    check(w.checkpoint_lsn() != lsn_before, "the control file did not move after recovery")
    wtest.check_acked(w, book, "after a checkpoint")
    w.kill_instance()
    injected = sum(inj.values())
    log(f"  PANIC: [{first[0]}] {first[1]}: {first[2]}")
    log(f"  failpoint fired {injected} time(s) in {len(inj)} process(es), once in each; "
        f"recovery started at the previous checkpoint's redo {redo_before}; "
        f"{len(book.acked)} acked keys back")


def main(cleanup):
    ap = argparse.ArgumentParser()
    ap.add_argument("--walrus", default=wtest.default_walrus())
    ap.add_argument("--case", action="append", choices=sorted(CASES))
    ap.add_argument("--keep", action="store_true", help="keep the data directories")
    ap.add_argument("--seed", type=int, default=7)
    a = ap.parse_args()
    base = wtest.tempdir(cleanup, "walrus-fault-", keep=a.keep)
    failed = 0
    for name in a.case or list(CASES):
        desc, spec = CASES[name]
        log(f"--- {name}: {desc}")
        try:
            run_case(a.walrus, name, spec, base, cleanup, a.seed)
            log(f"PASS {name}")
        except wtest.TestFailure as e:
            failed += 1
            log(f"FAIL {name}: {e}")
    if a.keep:
        log(f"data directories kept in {base}")
    log(f"{len(a.case or CASES) - failed} passed, {failed} failed")
    return 1 if failed else 0


if __name__ == "__main__":
    wtest.guarded(main)

#!/usr/bin/env python3
"""The checkpointer writes dirty pages sorted by (file, block), with
write-back hints, as seen by strace (DESIGN.md rule 7).

Random keys dirty pages all over a relation of 256 kB segment files; strace
follows the checkpointer (walrus-ckpt) during `walrus checkpoint` and
records its pwrite64 calls into DIR/base/ and its sync_file_range calls.
Checks: every page is written once, in (relation, segment, offset) order,
and write-back hints are issued.  Control: with checkpoint_sort=off the
same check must find the order unsorted, which shows that the check can
fail.

Needs strace and permission to trace (root); exit 77 (SKIP) otherwise.
usage: write_order.py [--walrus PATH]
"""
import argparse, os, random, re, shutil, signal, subprocess, sys

sys.dont_write_bytecode = True  # no __pycache__ in the source tree
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import wtest  # noqa: E402
from wtest import check, log  # noqa: E402

SEG = 256 << 10
CALL = re.compile(r'^(pwrite64|sync_file_range)\(\d+<([^>]*)>, (?:""\.\.\., )?(\d+), (\d+)')


def capture(w, serve_opts, rng, nkeys, base):
    """Loads random keys into a running instance, then strace's its
    checkpointer during `walrus checkpoint`: [(call, path, a, b)]."""
    w.opts = serve_opts
    w.serve(stderr_path=os.path.join(base, "serve.err"))
    its = [(f"k{rng.randrange(10 ** 7):07d}", "v" * rng.randrange(100, 900))
           for _ in range(nkeys)]
    rc, acked, err = w.load(its, batch=50)
    check(rc == 0, f"load failed: {err}")
    ck = wtest.named(wtest.instance_pids(w.dir), "walrus-ckpt")
    check(len(ck) == 1, "no checkpointer")
    out = os.path.join(base, "strace.out")
    st = subprocess.Popen(["strace", "-p", str(ck[0]), "-y", "-s", "0", "-o", out,
                           "-e", "trace=pwrite64,sync_file_range"],
                          stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        attached = wtest.wait_for(lambda: st.poll() is not None or _traced(ck[0]), 10)
        if st.poll() is not None or not attached:
            raise SkipTest("strace could not attach: " + st.stderr.read().decode()[-300:])
        r = w.run("checkpoint")
        # Every traced call returned before the checkpoint completed (strace
        # holds the tracee at each one); SIGINT makes strace write out the rest.
        check(r.returncode == 0, f"checkpoint failed: {r.stderr.decode()}")
    finally:
        if st.poll() is None:
            st.send_signal(signal.SIGINT)
            st.wait(10)
    w.kill_instance()
    calls = []
    with open(out) as f:
        for line in f:
            m = CALL.match(line)
            if m and "/base/" in m.group(2):
                calls.append((m.group(1), m.group(2), int(m.group(3)), int(m.group(4))))
    os.unlink(out)
    return calls


def _traced(pid):
    try:
        with open(f"/proc/{pid}/status") as f:
            return any(l.startswith("TracerPid:") and l.split()[1] != "0" for l in f)
    except OSError:
        return False


class SkipTest(Exception):
    pass


def page_of(path, off):
    name = os.path.basename(path)
    rel, _, seg = name.partition(".")
    return (int(rel), int(seg or 0) * (SEG // wtest.PAGE_SIZE) + off // wtest.PAGE_SIZE)


def main(cleanup):
    ap = argparse.ArgumentParser()
    ap.add_argument("--walrus", default=wtest.default_walrus())
    ap.add_argument("--keys", type=int, default=4000)
    a = ap.parse_args()
    if shutil.which("strace") is None:
        log("SKIP: needs strace")
        return wtest.SKIP
    base = wtest.tempdir(cleanup, "walrus-order-")
    w = wtest.Walrus(a.walrus, os.path.join(base, "data"))
    w.register(cleanup)
    w.create([f"data_segment_size={SEG >> 10}kB"])
    rng = random.Random(3)
    try:
        calls = capture(w, [], rng, a.keys, base)
    except SkipTest as e:
        log(f"SKIP: {e}")
        return wtest.SKIP
    writes = [page_of(p, off) for c, p, _, off in calls if c == "pwrite64"]
    hints = [c for c in calls if c[0] == "sync_file_range"]
    files = sorted({p for _, p, _, _ in calls})
    log(f"sorted run: {len(writes)} page writes into {len(files)} files, "
        f"{len(hints)} sync_file_range hints")
    check(len(writes) >= 100 and len(files) >= 3,
          "too few pages written to judge the order")
    check(len(set(writes)) == len(writes), "a page was written twice in one checkpoint")
    bad = [(x, y) for x, y in zip(writes, writes[1:]) if y <= x]
    check(not bad, f"writes out of (file, block) order, e.g. {bad[:3]}")
    check(hints, "no write-back hint (sync_file_range) during the checkpoint")

    # Control: the same check fails without sorting.
    calls = capture(w, ["checkpoint_sort=off"], rng, a.keys, base)
    writes = [page_of(p, off) for c, p, _, off in calls if c == "pwrite64"]
    bad = [(x, y) for x, y in zip(writes, writes[1:]) if y <= x]
    log(f"checkpoint_sort=off: {len(writes)} page writes, {len(bad)} out of order")
    check(len(writes) >= 100 and bad,
          "with checkpoint_sort=off the writes were in order too: the check proves nothing")
    wtest.check_acked(w, wtest.AckBook(), "end")  # verify clean
    w.kill_instance()
    log("PASS")
    return 0


if __name__ == "__main__":
    wtest.guarded(main)

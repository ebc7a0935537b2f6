#!/usr/bin/env python3
"""A standby whose shared_buffers is too small for a batch its primary
accepted: replay holds all of a batch's pages at once (readers never see half
of it), so the standby cannot apply it.  It stops with an error naming the
batch, its page count and the shared_buffers that will do, instead of
failing on whichever pin finds the pool full; started again with that size,
it replays the batch and serves it."""
import os

import sb
import wtest
from wtest import check, log

VALUE_MB = 4


def main(cleanup):
    exe, root = sb.setup(cleanup, "pool")
    p, sock = sb.listening_primary(cleanup, exe, root)
    sdir = os.path.join(root, "standby")
    sb.must(p.run("backup", sdir, "--checkpoint", "fast"), "backup")
    sb.must(p.run("stop", "--wait"), "stop")
    p.serve()
    s = wtest.Walrus(exe, sdir)
    s.register(cleanup)
    s.opts = ["shared_buffers=1MB"]
    os.environ["WALRUS_REPLICATION_PASSWORD"] = "secret"
    st = sb.Standby(s, ["--primary", sock])
    st.start()

    log(f"one batch of three {VALUE_MB} MB values on the primary (128MB pool)")
    its = [(f"big{i}", "abc"[i] * (VALUE_MB << 20)) for i in range(3)]
    rc, acked, err = p.load(its, batch=3)
    check(rc == 0 and len(acked) == 3, f"load on the primary: exit {rc}: {err}")
    check(st.proc.wait(60) not in (0, None), "the standby went on with a pool too small")
    msgs = sb.log_matches(s, r"FATAL:  .*the key-value batch ending at \S+ changes (\d+) "
                             r"pages.*at least (\d+)MB")
    check(msgs, "no error naming the batch and the shared_buffers it needs:\n" + s.log_tail())
    pages, need = (int(x) for x in msgs[-1])
    log(f"the standby stopped: the batch changes {pages} pages, it needs {need}MB")
    check(pages > 64 and need * (1 << 20) >= pages * 2 * wtest.PAGE_SIZE,
          f"{pages} pages, {need}MB advised: inconsistent")

    log(f"started again with shared_buffers={need}MB: the batch is replayed")
    wtest.wait_for(lambda: not wtest.instance_pids(sdir), 30, step=0.1)
    s.opts = [f"shared_buffers={need}MB"]
    st.start()
    sb.wait_replayed(s, sb.lsn(sb.stats(p)["wal"]["flush_lsn"]))
    for k, v in its:
        got = sb.must(s.run("get", k), f"get {k}").rstrip("\n")
        check(got == v, f"{k} on the standby: {len(got)} bytes, not the {len(v)} written")
    st.stop()
    return 0


if __name__ == "__main__":
    wtest.guarded(main)

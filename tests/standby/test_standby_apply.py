#!/usr/bin/env python3
"""synchronous_standby_level = apply (PostgreSQL's remote_apply): a durable
put acknowledged by the primary is already readable on the standby, every
time (read-your-writes across the two); and stopping the primary while a
commit waits for a standby that is gone ends the wait with an error that
says the commit is durable here but not confirmed."""
import os, subprocess

import sb
import wtest
from wtest import check, log


def main(cleanup):
    exe, root = sb.setup(cleanup, "apply")
    p, sock = sb.listening_primary(cleanup, exe, root)
    pdir = p.dir
    sdir = os.path.join(root, "standby")
    sb.must(p.run("backup", sdir, "--checkpoint", "fast"), "backup")
    sb.must(p.run("stop", "--wait"), "stop")
    with open(os.path.join(pdir, "walrus.conf"), "a") as f:
        f.write("synchronous_standby = 'standby'\nsynchronous_standby_level = apply\n")
    p.serve()
    s = wtest.Walrus(exe, sdir)
    s.register(cleanup)
    os.environ["WALRUS_REPLICATION_PASSWORD"] = "secret"
    st = sb.Standby(s, ["--primary", sock])
    st.start()

    log("every acknowledged put is readable on the standby at once")
    for i in range(40):
        sb.must(p.run("put", f"k{i}", f"v{i}"), "put")
        got = sb.must(s.run("get", f"k{i}"), f"get k{i} on the standby").strip()
        check(got == f"v{i}", f"k{i}: {got!r} on the standby right after the ack")

    log("the standby gone: a stop ends the commit's wait with an error")
    st.stop()
    put = subprocess.Popen(p.argv("put", "lonely", "1"), stdout=subprocess.PIPE,
                           stderr=subprocess.PIPE, env=p.env())
    check(wtest.wait_for(lambda: sb.stats(p)["wal"]["sync_standby_waiters"] >= 1, 60),
          "the put does not wait for the standby")
    sb.must(p.run("stop", "--mode", "fast"), "stop")
    out, err = put.communicate(timeout=60)
    check(put.returncode == 3 and b"not confirmed by the synchronous standby" in err,
          f"the waiting put: exit {put.returncode} {err!r}")
    return 0


if __name__ == "__main__":
    wtest.guarded(main)

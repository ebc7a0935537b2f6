#!/usr/bin/env python3
"""A standby older than its primary: the primary writes a WAL format the
standby's walrus does not read (announced by a test hook here,
WALRUS_TEST_ANNOUNCE_WAL_FORMAT, in test builds only).  The standby refuses
at the handshake, for good: the standby stops (exit 2) with one FATAL line
saying why (the format, the walrus it needs, its own, "upgrade the standby
first"), the primary's log says so too, and nothing PANICs.  A new standby (a base backup
over the connection) is refused the same way and leaves no directory.
Started again against a primary of its own format, the standby streams."""
import os

import sb
import wtest
from wtest import check, log

LATER = 200  # a WAL format far past any this walrus reads


def receiver(s):
    return sb.stats(s)["replication"]["receiver"]


def main(cleanup):
    exe, root = sb.setup(cleanup, "format")
    p, sock = sb.listening_primary(cleanup, exe, root)
    sb.must(p.run("put", "k1", "v1"), "put")
    sdir = os.path.join(root, "standby")
    sb.must(p.run("backup", sdir, "--checkpoint", "fast"), "backup")
    sb.must(p.run("stop", "--wait"), "stop")
    os.environ["WALRUS_TEST_ANNOUNCE_WAL_FORMAT"] = f"{LATER}:9.9.9"
    p.serve()
    del os.environ["WALRUS_TEST_ANNOUNCE_WAL_FORMAT"]
    s = wtest.Walrus(exe, sdir)
    s.register(cleanup)
    os.environ["WALRUS_REPLICATION_PASSWORD"] = "secret"
    st = sb.Standby(s, ["--primary", sock])

    log(f"the primary announces WAL format {LATER}: the standby stops, saying why")
    line = st.refused(rf"writes WAL format {LATER}, which needs walrus >= 9\.9\.9; this "
                      r"standby runs walrus \S+: upgrade the standby first")
    msgs = sb.log_matches(s, rf"FATAL:  .*writes WAL format {LATER}")
    check(len(msgs) == 1, f"{len(msgs)} refusals logged, not one:\n" + s.log_tail())
    check(not sb.log_matches(s, r"PANIC"), "a PANIC on the standby:\n" + s.log_tail())
    check(wtest.wait_for(lambda: p.log_has(r"replication connection from .* ended by "
                                           rf"the standby: .* writes WAL format {LATER}"), 30),
          "the primary's log does not say why the standby left:\n" + p.log_tail())
    log(f"  {line}")

    log("a new standby (base backup over the connection) is refused the same way")
    ndir = os.path.join(root, "new-standby")
    r = wtest.Walrus(exe, ndir).run("standby", "--primary", sock, timeout=60)
    err = r.stderr.decode(errors="replace")
    check(r.returncode != 0 and f"writes WAL format {LATER}, which needs walrus >= 9.9.9" in err
          and not os.path.exists(ndir), f"exit {r.returncode}: {err[-600:]}")

    log("the primary of the standby's own format: it streams again")
    sb.must(p.run("stop", "--wait"), "stop the primary")
    p.serve()
    st = sb.Standby(s)
    st.start()
    check(sb.must(s.run("get", "k1"), "get k1 on the standby").strip() == "v1",
          "the standby lost k1")
    sb.must(p.run("put", "k2", "v2"), "put k2")

    def replayed():
        r = s.run("get", "k2")
        return r.returncode == 0 and r.stdout.decode().strip() == "v2"
    check(wtest.wait_for(replayed, 60), f"k2 did not reach the standby: {receiver(s)}")
    check(receiver(s)["state"] == "streaming", f"receiver: {receiver(s)}")
    st.stop()
    return 0


if __name__ == "__main__":
    wtest.guarded(main)

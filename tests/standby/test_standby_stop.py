#!/usr/bin/env python3
"""A stop ends a streaming standby's startup process at once.  Between
records it sleeps until WAL comes, a promotion or a stop (each moves the
standby's WAL sequence), with a nap of 10 s as the bound for noticing a dead
supervisor.  The stop used to leave it to that nap: every standby stop took
10 s.  Here the nap is an hour (WALRUS_TEST_STANDBY_NAP_MS, test builds), so
a stop that relied on it would hang past `walrus stop --wait`'s limit."""
import os

import sb
import wtest
from wtest import check, log


def main(cleanup):
    exe, root = sb.setup(cleanup, "stop")
    p, sock = sb.listening_primary(cleanup, exe, root)
    sb.must(p.run("put", "k1", "v1"), "put")
    sdir = os.path.join(root, "standby")
    sb.must(p.run("backup", sdir, "--checkpoint", "fast"), "backup")
    s = wtest.Walrus(exe, sdir)
    s.register(cleanup)
    os.environ["WALRUS_REPLICATION_PASSWORD"] = "secret"
    os.environ["WALRUS_TEST_STANDBY_NAP_MS"] = str(3600 * 1000)
    for round in range(2):
        st = sb.Standby(s, ["--primary", sock] if round == 0 else [])
        st.start()
        key = f"k{round + 2}"
        sb.must(p.run("put", key, "v"), "put")
        def replayed():
            r = s.run("get", key)
            return r.returncode == 0 and r.stdout.decode().strip() == "v"
        check(wtest.wait_for(replayed, 60), f"{key} did not reach the standby")
        log(f"round {round}: the standby replayed {key}; stop")
        r = s.run("stop", "--wait", timeout=60)
        check(r.returncode == 0, f"stop: exit {r.returncode}: {r.stderr.decode()[-400:]}")
        check(st.proc.wait(30) == 0, f"walrus standby exited with {st.proc.returncode}")
    return 0


if __name__ == "__main__":
    wtest.guarded(main)

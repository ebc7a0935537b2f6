#!/usr/bin/env python3
"""A durable write waiting for a synchronous standby that is not there:
after a few seconds the log says what it waits for (as PostgreSQL's
"waiting for ... to be replicated"), and when the primary's supervisor dies
(SIGKILL, nothing else of the instance) the waiting client ends with an
error saying the supervisor exited, instead of waiting for ever on shared
memory nobody updates any more."""
import os, signal, subprocess

import sb
import wtest
from wtest import check, log


def main(cleanup):
    exe, root = sb.setup(cleanup, "syncwait")
    pdir = os.path.join(root, "primary")
    sb.write_conf(pdir, "synchronous_standby = 'nowhere'\n")
    p = wtest.Walrus(exe, pdir, ["supervisor_linger=2s"])
    p.register(cleanup)
    # created without the setting (its own first put would wait), then served with it
    r = p.run("put", "init", "1", opts=p.opts + ["create_if_missing=on",
                                                 "synchronous_standby="])
    check(r.returncode == 0, f"create: {r.stderr.decode()}")
    p.wait_stopped()
    since = p.log_size()
    p.serve()
    put = subprocess.Popen(p.argv("put", "k", "v"), stdout=subprocess.PIPE,
                           stderr=subprocess.PIPE, env=p.env())
    cleanup.add(lambda: put.poll() is None and put.kill())
    check(wtest.wait_for(lambda: p.log_has(r"a durable commit has waited \d+ s for synchronous "
                                           r"standby \"nowhere\"", since), 60),
          f"no WARNING about the wait:\n{p.log_tail(since)}")
    log("the wait is in the log")
    sup = p.serve_proc.pid
    os.kill(sup, signal.SIGKILL)
    out, err = put.communicate(timeout=60)
    check(put.returncode == 3 and b"supervisor exited" in err,
          f"the waiting put after its supervisor died: exit {put.returncode} {err!r}")
    log("the waiting put ended: " + err.decode().strip().splitlines()[-1][:160])
    return 0


if __name__ == "__main__":
    wtest.guarded(main)

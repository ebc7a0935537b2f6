#!/usr/bin/env python3
"""Snapshots on a hot standby: a primary rewrites every key of a set in
batches (MSET through its RESP server: one batch each, the values carrying
a generation), its standby replays them, and a reader on the standby reads
every key in one read-only transaction (MULTI, MGET, EXEC through the
standby's RESP server, READONLY): each read must see one generation, whole.
Without the standby's versions (src/kv/kv_redo_mv.c) a transaction reads the
tree as replay changes it and sees two.  Also: a transaction that writes is
refused on the standby at its commit.

usage: test_standby_snapshot.py --walrus PATH"""
import os, subprocess, sys, threading

import sb
import wtest
from wtest import check, log

sys.path.insert(0, os.path.join(sb.HERE, "..", "server"))
import srvtest  # noqa: E402

KEYS = [f"g{i:04d}" for i in range(600)]  # several leaves
READS = 60


class Resp:
    """`walrus serve` on a directory whose instance runs already: a RESP client of it."""

    def __init__(self, w, sock):
        self.sock = sock
        self.proc = subprocess.Popen(w.argv("serve", "--no-tcp", "--unix", sock),
                                     stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                     stderr=subprocess.DEVNULL, env=w.env())
        for line in self.proc.stdout:
            if b"walrus serve: ready" in line:
                break
        else:
            raise wtest.TestFailure(f"walrus serve exited with {self.proc.wait()}")

    def client(self):
        return srvtest.Client(unix=self.sock, timeout=120)



def main(cleanup):
    exe, root = sb.setup(cleanup, "snapshot")
    p, sock = sb.listening_primary(cleanup, exe, root, ["supervisor_linger=2s"])
    sdir = os.path.join(root, "standby")
    sb.must(p.run("backup", sdir, "--checkpoint", "fast"), "backup")
    sb.must(p.run("stop", "--wait"), "stop the primary")
    s = wtest.Walrus(exe, sdir, ["supervisor_linger=2s"])
    s.register(cleanup)
    cleanup.add(srvtest.kill_all, root)  # the RESP servers
    os.environ["WALRUS_REPLICATION_PASSWORD"] = "secret"
    p.serve()
    st = sb.Standby(s, ["--primary", sock])
    st.start()
    pr = Resp(p, os.path.join(root, "p.sock"))
    sr = Resp(s, os.path.join(root, "s.sock"))
    w = pr.client()
    gen = [0]
    stop = threading.Event()
    errors = []

    def writer():
        try:
            while not stop.is_set():
                gen[0] += 1
                args = []
                for k in KEYS:
                    args += [k, f"{gen[0]}:{k}"]
                r = w.call("MSET", *args)
                if r != "OK":
                    errors.append(f"MSET: {r!r}")
                    return
        except Exception as e:  # noqa: BLE001 - reported by the test
            errors.append(repr(e))

    wt = threading.Thread(target=writer, daemon=True)
    w.call("MSET", *[x for k in KEYS for x in (k, f"0:{k}")])
    sb.wait_replayed(s, sb.lsn(sb.stats(p)["wal"]["insert_lsn"]))  # every key there
    wt.start()
    r = sr.client()
    check(r.call("READONLY") == "OK", "READONLY")
    seen = set()
    try:
        for n in range(READS):
            check(r.call("MULTI") == "OK", "MULTI")
            check(r.call("MGET", *KEYS) == "QUEUED", "MGET queued")
            got = r.call("EXEC")
            check(isinstance(got, list) and len(got) == 1, f"EXEC: {got!r}")
            vals = got[0]
            check(None not in vals, f"read {n}: keys missing: {vals.count(None)}")
            gens = {v.split(b":", 1)[0] for v in vals}
            check(len(gens) == 1, f"read {n}: a transaction on the standby saw generations "
                  f"{sorted(int(g) for g in gens)[:5]}: not one commit")
            seen.add(int(gens.pop()))
            # the next read after the standby replayed more (not a sleep: its state)
            target = sb.lsn(sb.stats(p)["wal"]["insert_lsn"])
            sb.wait_replayed(s, target)
    finally:
        stop.set()
        wt.join(60)
    check(not errors, f"writer: {errors}")
    check(len(seen) >= READS // 2, f"the reads saw too few generations: {sorted(seen)[:10]}")
    log(f"{READS} read-only transactions on the standby, each one generation "
        f"({len(seen)} distinct, up to {max(seen)}; the primary wrote {gen[0]})")
    # a transaction that writes: refused at its commit, nothing applied
    check(r.call("MULTI") == "OK", "")
    check(r.call("SET", "x", "1") == "QUEUED", "")
    e = r.call("EXEC")
    check(isinstance(e, srvtest.RespError) and "READONLY" in str(e), f"EXEC with a write: {e!r}")
    r.close()
    w.close()
    return 0  # the servers and both instances: killed by the cleanup


if __name__ == "__main__":
    wtest.guarded(main)

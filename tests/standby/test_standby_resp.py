#!/usr/bin/env python3
"""The RESP server on a standby (walrus serve on a directory holding
walrus.standby), as a Redis Cluster replica behaves:

- a read from a connection that did not send READONLY is refused
  (-READONLY), after READONLY it is served; READWRITE undoes it;
- a write is refused with Redis's "-READONLY You can't write against a read
  only replica.";
- INFO standby shows the recovery (active, replay LSN);
- SELECT: database 1 is the key space db1 the primary wrote, database 2
  (no such space) reads empty, and a write there is refused like any
  other (the standby makes no key space);
- after `walrus promote`, reads need nothing and writes work (database 2
  is made by its first write); INFO slots lists a slot made then (an
  array of the statistics, flattened)."""
import os, subprocess, sys

import sb
import wtest
from wtest import check, log

sys.path.insert(0, os.path.join(sb.HERE, "..", "server"))
import srvtest  # noqa: E402


def err(c, *args):
    r = c.call(*args)
    check(isinstance(r, srvtest.RespError), f"{args}: no error but {r!r}")
    return str(r)


def main(cleanup):
    exe, root = sb.setup(cleanup, "resp")
    p, archive = sb.archiving_primary(cleanup, exe, root)
    sb.must(p.run("put", "k1", "v1"), "put")
    sb.must(p.run("space", "create", "db1"), "space create db1")
    sb.must(p.run("-s", "db1", "put", "k1", "one"), "put in db1")
    base = os.path.join(root, "srv")
    os.mkdir(base, 0o700)
    sdir = os.path.join(base, "data")
    sb.must(p.run("backup", sdir, "--checkpoint", "fast"), "backup")
    with open(os.path.join(sdir, "walrus.standby"), "w") as f:
        f.write(f"wal_archive = '{archive}'\n")
    os.chmod(os.path.join(sdir, "walrus.standby"), 0o600)
    cleanup.add_durable("kill_dir", sdir)
    with srvtest.Server(exe, base=base) as srv:
        c = srvtest.Client(port=srv.port)
        log("reads need READONLY; writes are refused")
        e = err(c, "GET", "k1")
        check(e.startswith("READONLY") and "standby" in e, f"GET without READONLY: {e}")
        check(c.call("READONLY") == "OK", "READONLY")
        check(c.call("GET", "k1") == b"v1", "GET after READONLY")
        e = err(c, "SET", "x", "y")
        check(e.startswith("READONLY You can't write against a read only replica"),
              f"SET on a standby: {e}")
        check(c.call("READWRITE") == "OK", "READWRITE")
        check(err(c, "MGET", "k1").startswith("READONLY"), "MGET after READWRITE")
        info = srv.cli("INFO", "standby").decode()
        check("standby_active:1" in info and "standby_replay_lsn:" in info, f"INFO: {info}")
        check(c.call("READONLY") == "OK", "READONLY")
        check(c.call("SELECT", "1") == "OK" and c.call("GET", "k1") == b"one",
              "database 1 on the standby")
        check(c.call("SELECT", "2") == "OK" and c.call("GET", "k1") is None and
              c.call("DBSIZE") == 0, "database 2 on the standby: empty")
        e = err(c, "SET", "x", "y")
        check(e.startswith("READONLY You can't write against a read only replica"),
              f"SET in database 2 on a standby: {e}")
        check(c.call("SELECT", "0") == "OK" and c.call("READWRITE") == "OK", "")

        log("promoted: reads and writes for everyone")
        r = subprocess.run([exe, "-D", sdir, "promote"], capture_output=True, timeout=120)
        check(r.returncode == 0, f"promote: {r.stderr.decode()}")
        check(c.call("GET", "k1") == b"v1", "GET after the promotion")
        check(c.call("SET", "x", "y") == "OK", "SET after the promotion")
        check(c.call("SELECT", "2") == "OK" and c.call("SET", "x", "two") == "OK" and
              c.call("GET", "x") == b"two", "database 2 made after the promotion")
        check(c.call("SELECT", "1") == "OK" and c.call("GET", "k1") == b"one", "database 1")
        r = subprocess.run([exe, "-D", sdir, "slot", "create", "s1"], capture_output=True,
                           timeout=60)
        check(r.returncode == 0, f"slot create: {r.stderr.decode()}")
        info = srv.cli("INFO", "slots").decode()
        check("slots_0_name:s1" in info and "slots_0_invalidated:0" in info, f"INFO: {info}")
        check("standby_active:0" in srv.cli("INFO", "standby").decode(), "still a standby")
        c.close()
    return 0


if __name__ == "__main__":
    wtest.guarded(main)

#!/usr/bin/env python3
"""A standby its primary refuses, told apart: transient or for good.

- for good, the standby stops by itself (exit 2) with a FATAL line naming
  the reason and what to do, instead of retrying in silence: a standby of
  another system, a replication slot that does not exist, an invalidated
  slot, and a standby given another standby as its primary (which refuses
  saying it is a standby);
- transient, it retries with a back-off and logs now and then: its primary
  stopped, the receiver's failed attempts grow in its stats while its log
  has one line for the reason; the primary back, it streams again and the
  count is 0;
- a transient refusal of the primary (a slot still held by another
  standby) keeps the refused standby retrying, and the primary logs it
  once for many attempts.
(A wrong password, WAL removed and a timeline it cannot follow: standby-stream.)"""
import argparse, os, re

import sb
import wtest
from wtest import check, log

OPTS = ["wal_segment_size=1MB", "min_wal_size=2MB", "max_wal_size=4MB"]


def receiver(s):
    return sb.stats(s)["replication"]["receiver"]


def write(p, tag, n=20):
    lines = "".join(f"{tag}{i:04d}\tvalue-{tag}-{i}\n" for i in range(n))
    sb.must(p.run("load", "--sync", input=lines.encode()), f"load {tag}")


def caught_up(p, s):
    sb.wait_replayed(s, sb.lsn(sb.stats(p)["wal"]["flush_lsn"]))


def settings(sdir, text):
    path = os.path.join(sdir, "walrus.standby")
    with open(path, "w") as f:
        f.write(text)
    os.chmod(path, 0o600)


def backup(p, sdir):
    sb.must(p.run("backup", sdir, "--checkpoint", "fast"), f"backup into {sdir}")
    return wtest.Walrus(p.exe, sdir, OPTS)


def main(cleanup):
    ap = argparse.ArgumentParser()
    ap.add_argument("--walrus", default=wtest.default_walrus())
    a = ap.parse_args()
    root = wtest.tempdir(cleanup, "walrus-standby-refused-")
    sock = os.path.join(root, "repl.sock")
    pdir = os.path.join(root, "primary")
    sb.write_conf(pdir, f"listen_replication = '{sock}'\nreplication_password = 'secret'\n"
                  "max_slot_wal_keep_size = 16MB\n")
    p = wtest.Walrus(a.walrus, pdir, OPTS)
    p.register(cleanup)
    p.create()
    write(p, "a")
    s = backup(p, os.path.join(root, "standby"))
    s.register(cleanup)
    # Another system: an instance of its own, with a backup of it.
    other = wtest.Walrus(a.walrus, os.path.join(root, "other"), OPTS)
    other.register(cleanup)
    other.create()
    o = backup(other, os.path.join(root, "other-standby"))
    o.register(cleanup)
    other.wait_stopped()
    p.run("stop", "--wait")  # or its linger ended it already
    p.wait_stopped()
    p.serve()

    log("another system: stops")
    settings(o.dir, f"primary = '{sock}'\npassword = 'secret'\n")
    line = sb.Standby(o).refused(r"system identifier \d+ differs from the primary's \d+.*"
                                 r"make a new one from a base backup")
    log(f"  {line}")

    log("a slot that does not exist: stops")
    settings(s.dir, f"primary = '{sock}'\npassword = 'secret'\nslot = 'nope'\n")
    line = sb.Standby(s).refused(r'replication slot "nope" does not exist.*slot create')
    log(f"  {line}")

    log("an invalidated slot: stops")
    sb.must(p.run("slot", "create", "late"), "slot create late")
    for i in range(24):  # past max_slot_wal_keep_size (16MB) in 1MB segments
        write(p, f"l{i}-", 5)
        sb.must(p.run("switch-wal"), "switch-wal")
    sb.must(p.run("checkpoint"), "checkpoint")
    check("invalidated" in sb.must(p.run("slot", "list"), "slot list"), "late not invalidated")
    settings(s.dir, f"primary = '{sock}'\npassword = 'secret'\nslot = 'late'\n")
    line = sb.Standby(s).refused(r'replication slot "late" was invalidated')
    log(f"  {line}")

    # A fresh standby for the rest: the one above is behind the recycled WAL.
    s = backup(p, os.path.join(root, "standby2"))
    s.register(cleanup)
    settings(s.dir, f"primary = '{sock}'\npassword = 'secret'\n")
    st = sb.Standby(s)
    st.start()
    caught_up(p, s)
    r = s.run("status")
    check(r.returncode == 0 and b"status: ready: a standby, serving reads" in r.stdout,
          f"status of a standby serving reads: {r.returncode} {r.stdout[:200]}")

    log("a standby given another standby as its primary: stops")
    sock2 = os.path.join(root, "repl-standby.sock")
    st.stop()
    with open(os.path.join(s.dir, "walrus.conf"), "a") as f:
        f.write(f"listen_replication = '{sock2}'\n")  # no password: a standby serves no WAL
    st = sb.Standby(s)
    st.start()
    check(s.log_has(r"a standby: refusing replication connections on "), "not listening")
    cascade = backup(p, os.path.join(root, "cascade"))
    cascade.register(cleanup)
    settings(cascade.dir, f"primary = '{sock2}'\npassword = 'secret'\n")
    line = sb.Standby(cascade).refused(rf'"{re.escape(s.dir)}" is a standby: point the '
                                       r"standby at its primary")
    log(f"  {line}")
    check(s.log_has(r"replication connection from unix socket refused: this instance is a "
                    r"standby"), "the standby does not log its refusal")

    log("the primary stopped: retries with a back-off, logged now and then")
    since = os.path.getsize(s.log_path)
    sb.must(p.run("stop", "--mode", "immediate", "--wait"), "stop the primary")
    check(wtest.wait_for(lambda: receiver(s)["failed_attempts"] >= 6, 60),
          f"the receiver does not retry: {receiver(s)}")
    lines = re.findall(r"could not connect to .*retrying.*", s.log_text(since))
    check(len(lines) == 1, f"{len(lines)} log lines for {receiver(s)['failed_attempts']} "
          f"failed attempts: {lines}")
    log(f"  {receiver(s)['failed_attempts']} attempts, logged: {lines}")
    p.serve()
    check(wtest.wait_for(lambda: receiver(s)["state"] == "streaming", 60),
          f"not streaming again: {receiver(s)}")
    check(receiver(s)["failed_attempts"] == 0, f"the count stays: {receiver(s)}")
    write(p, "b")
    caught_up(p, s)

    log("a slot held by another standby: retried, the primary logs it once")
    sb.must(p.run("slot", "create", "shared"), "slot create shared")
    st.stop()
    settings(s.dir, f"primary = '{sock}'\npassword = 'secret'\nslot = 'shared'\n")
    st = sb.Standby(s)
    st.start()
    caught_up(p, s)
    t = backup(p, os.path.join(root, "standby3"))
    t.register(cleanup)
    settings(t.dir, f"primary = '{sock}'\npassword = 'secret'\nslot = 'shared'\n")
    psince = os.path.getsize(p.log_path)
    st3 = sb.Standby(t)
    st3.start()
    check(wtest.wait_for(lambda: receiver(t)["failed_attempts"] >= 6, 60),
          f"the standby refused a held slot does not retry: {receiver(t)}")
    check('replication slot "shared" is in use' in receiver(t)["error"], receiver(t))
    refusals = re.findall(r'refused: replication slot "shared" is in use.*',
                          p.log_text(psince))
    check(len(refusals) == 1, f"the primary logged {len(refusals)} refusals for "
          f"{receiver(t)['failed_attempts']} attempts: {refusals}")
    st3.stop()
    st.stop()
    return 0


if __name__ == "__main__":
    wtest.guarded(main)

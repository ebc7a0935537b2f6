#!/usr/bin/env python3
"""Replication slots on a primary (walrus slot create|drop|list):

- bad names, duplicates, dropping a missing slot and max_replication_slots
  are refused with their errors and exit codes;
- a slot keeps the segment holding its restart LSN through checkpoints that
  recycle everything else; once dropped, the next checkpoint recycles it;
- a slot more than max_slot_wal_keep_size behind is invalidated (WARNING,
  listed as invalidated) and keeps nothing;
- slots survive a clean restart and a crash (kill -9 of every process)."""
import argparse, os

import sb
import wtest
from wtest import check, log


def slots(w):
    out = sb.must(w.run("slot", "list"), "slot list")
    return {l.split("\t")[0]: l.split("\t")[1:] for l in out.splitlines()}


def segment_of(w, lsn_text):
    seg = 16 << 20
    start = sb.lsn(lsn_text) // seg * seg
    return os.path.join(w.dir, "wal", f"{start:016X}")


def advance(w, n):
    """n segments of WAL, each ended by a switch, then a checkpoint."""
    for i in range(n):
        sb.must(w.run("put", f"k{i}", "v" * 100), "put")
        sb.must(w.run("switch-wal"), "switch-wal")
    sb.must(w.run("checkpoint"), "checkpoint")


def main(cleanup):
    ap = argparse.ArgumentParser()
    ap.add_argument("--walrus", default=wtest.default_walrus())
    a = ap.parse_args()
    root = wtest.tempdir(cleanup, "walrus-slots-")
    pdir = os.path.join(root, "primary")
    sb.write_conf(pdir, "max_replication_slots = 2\nmin_wal_size = 32MB\nmax_wal_size = 64MB\n")
    w = wtest.Walrus(a.walrus, pdir)
    w.register(cleanup)
    w.create()

    log("bad input")
    for name in ("", "a b", "x" * 64, "../etc"):
        r = w.run("slot", "create", name)
        check(r.returncode == 2 and b"invalid" in r.stderr, f"slot name {name!r}: {r!r}")
    sb.must(w.run("slot", "create", "keep"), "create keep")
    r = w.run("slot", "create", "keep")
    check(r.returncode == 3 and b"already exists" in r.stderr, f"duplicate: {r!r}")
    sb.must(w.run("slot", "create", "second"), "create second")
    r = w.run("slot", "create", "third")
    check(r.returncode == 3 and b"max_replication_slots = 2" in r.stderr, f"limit: {r!r}")
    r = w.run("slot", "drop", "missing")
    check(r.returncode == 1 and b"does not exist" in r.stderr, f"drop missing: {r!r}")
    sb.must(w.run("slot", "drop", "second"), "drop second")

    log("a slot keeps its WAL through checkpoints")
    restart = slots(w)["keep"][0]
    kept = segment_of(w, restart)
    check(os.path.exists(kept), f"{kept} missing at the start")
    advance(w, 8)
    check(os.path.exists(kept), f"{kept} recycled although the slot needs it")
    check(slots(w)["keep"] == [restart, "inactive"], f"slot moved: {slots(w)}")

    log("slots survive a clean restart and a crash")
    sb.must(w.run("stop", "--wait"), "stop")
    check(slots(w)["keep"][0] == restart, "slot lost at a clean restart")
    w.kill_instance()
    check(slots(w)["keep"][0] == restart, "slot lost at a crash")

    log("dropped: the next checkpoint recycles its WAL")
    sb.must(w.run("slot", "drop", "keep"), "drop keep")
    advance(w, 1)
    check(not os.path.exists(kept), f"{kept} still there after the drop")
    check(slots(w) == {}, f"slots left: {slots(w)}")

    log("invalidation past max_slot_wal_keep_size")
    sb.must(w.run("stop", "--wait"), "stop")
    with open(os.path.join(pdir, "walrus.conf"), "a") as f:
        f.write("max_slot_wal_keep_size = 16MB\n")
    sb.must(w.run("slot", "create", "late"), "create late")
    advance(w, 4)
    check(slots(w)["late"][1] == "invalidated", f"not invalidated: {slots(w)}")
    check(w.log_has(r'replication slot "late" invalidated'), "no warning logged")
    sb.must(w.run("stop", "--wait"), "stop")
    check(slots(w)["late"][1] == "invalidated", "the invalidation was not kept")
    sb.must(w.run("stop", "--wait"), "stop")
    return 0


if __name__ == "__main__":
    wtest.guarded(main)

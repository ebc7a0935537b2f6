#!/usr/bin/env python3
"""A hot standby fed by the WAL archive (log shipping): `walrus standby
--wal-archive` on a base backup of an archiving primary.

- reads work on the standby, writes get WALRUS_EREADONLY (exit 3, "standby"),
  and so does compact; a compaction on the primary is replayed (same scan,
  verify clean on the standby);
- what the primary archives is replayed (stats: replay_lsn) and read back;
- a scan on the standby while replay applies batches of updates to a fixed
  key set returns every key exactly once, with a whole value (the iterator
  contract; redo holds a batch's pages until the batch is applied);
- a restarted standby is a standby again (walrus.standby), consistent, with
  its data; its restartpoints moved the control file's checkpoint;
- promote on a primary is refused; the standby's promotion starts timeline 2,
  takes writes, and verify is clean; promote again is refused."""
import os, re, threading

import sb
import wtest
from wtest import check, log

KEYS = 200


def load_generation(p, gen):
    lines = "".join(f"key{i:04d}\tgen-{gen}-key{i:04d}\n" for i in range(KEYS))
    # New keys among the fixed ones: leaves split while the standby scans.
    lines += "".join(f"key{i:04d}-{gen:02d}\t{'x' * 200}\n" for i in range(0, KEYS, 2))
    sb.must(p.run("load", "--sync", input=lines.encode()), f"load generation {gen}")


def check_scan(rows, what):
    keys = [k for k, _ in rows if k.startswith("key") and "-" not in k]
    check(len(keys) == len(set(keys)), f"{what}: a key returned twice")
    check(len(keys) == KEYS, f"{what}: {len(keys)} of the {KEYS} keys")
    for k, v in rows:
        if k.startswith("key") and "-" not in k:
            check(v.startswith("gen-") and v.endswith("-" + k), f"{what}: torn value {v!r}")


def main(cleanup):
    exe, root = sb.setup(cleanup, "arch")
    p, archive = sb.archiving_primary(cleanup, exe, root)
    load_generation(p, 0)
    sdir = os.path.join(root, "standby")
    sb.must(p.run("backup", sdir, "--checkpoint", "fast"), "backup")
    s = wtest.Walrus(exe, sdir)
    s.register(cleanup)
    st = sb.Standby(s, ["--wal-archive", archive])
    st.start()

    log("reads on the standby, writes refused")
    check(sb.must(s.run("get", "key0007"), "get").strip() == "gen-0-key0007", "get on the standby")
    r = s.run("put", "x", "y")
    check(r.returncode == 3 and b"standby" in r.stderr,
          f"a put on the standby: exit {r.returncode} {r.stderr!r}")
    r = s.run("compact")
    check(r.returncode == 3 and b"standby" in r.stderr,
          f"compact on the standby: exit {r.returncode} {r.stderr!r}")

    log("archived WAL is replayed")
    for i in range(20):
        sb.must(p.run("put", f"new{i:02d}", f"v{i}"), "put")
    end = sb.lsn(sb.must(p.run("switch-wal"), "switch-wal").strip())
    sb.wait_replayed(s, end)
    check(sb.scan(s) == sb.scan(p), "the standby's scan differs from the primary's")

    log("a compaction on the primary is replayed")
    # Generation 0's long values shrunk to a byte: leaves for it to pack.
    small = "".join(f"key{i:04d}-00\ts\n" for i in range(0, KEYS, 2))
    sb.must(p.run("load", "--sync", input=small.encode()), "shrink values")
    out = sb.must(p.run("compact"), "compact")
    m = re.search(r"blocks in use (\d+) -> (\d+)", out)
    check(m is not None and int(m.group(2)) < int(m.group(1)), f"compact: {out!r}")
    end = sb.lsn(sb.must(p.run("switch-wal"), "switch-wal").strip())
    sb.wait_replayed(s, end)
    check(sb.scan(s) == sb.scan(p), "the standby's scan differs after the compaction")
    r = s.run("verify")
    check(r.returncode == 0, f"verify on the standby after the compaction: {r.stdout!r}")

    log("scans during replay: every key once, values whole")
    done = threading.Event()
    errors = []

    def writer():
        try:
            for gen in range(1, 16):
                load_generation(p, gen)
                sb.must(p.run("switch-wal"), "switch-wal")
        except Exception as e:  # noqa: BLE001 - reported by the main thread
            errors.append(e)
        finally:
            done.set()
    t = threading.Thread(target=writer)
    t.start()
    scans = 0
    while not done.is_set() or scans < 3:
        check_scan(sb.scan(s), f"scan {scans}")
        scans += 1
    t.join()
    check(not errors, f"the primary's writer failed: {errors}")
    end = sb.lsn(sb.stats(p)["wal"]["insert_lsn"])
    sb.wait_replayed(s, end - end % (16 << 20))
    check(sb.scan(s) == sb.scan(p), "the standby lags after the last switch")
    log(f"{scans} scans during replay")

    log("restartpoints, and a restart stays a standby")
    sb.must(p.run("checkpoint"), "checkpoint on the primary")
    sb.wait_replayed(s, sb.lsn(sb.must(p.run("switch-wal"), "switch-wal").strip()))
    sb.must(s.run("checkpoint"), "checkpoint (a restartpoint) on the standby")
    check(sb.log_matches(s, r"walrus-ckpt LOG:  restartpoint complete"),
          "no restartpoint logged")
    st.stop()
    st2 = sb.Standby(s)
    st2.start()
    check(sb.stats(s)["standby"]["active"] == 1, "restarted, not a standby")
    check(sb.scan(s) == sb.scan(p), "the restarted standby lost data")

    log("promotion")
    r = p.run("promote")
    check(r.returncode == 3 and b"not a standby" in r.stderr, f"promote on a primary: {r!r}")
    check(sb.must(s.run("promote"), "promote").strip() == "promoted", "promote's answer")
    check(sb.stats(s)["standby"]["active"] == 0, "still a standby after the promotion")
    sb.must(s.run("put", "after", "promotion"), "a put after the promotion")
    check("TimeLineID:       2" in sb.must(s.run("controldata"), "controldata"),
          "timeline 2 not recorded")
    check(not os.path.exists(os.path.join(sdir, "walrus.standby")), "walrus.standby left")
    sb.must(s.run("verify"), "verify the promoted standby")
    r = s.run("promote")
    check(r.returncode == 3 and b"not a standby" in r.stderr, f"promote twice: {r!r}")
    st2.stop()
    return 0


if __name__ == "__main__":
    wtest.guarded(main)

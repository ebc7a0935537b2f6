#!/usr/bin/env python3
"""Named key spaces on a streaming hot standby, read with the command line
(`walrus -D STANDBY -s NAME get K`):

- spaces created and written on the primary after the standby's base backup
  are replayed: the same list, the same keys in each, the default space
  apart; on the standby -s put, space create and space drop are refused as
  writes;
- a drop on the primary is replayed: the space is missing on the standby
  and its data file (DIR/base/N, N the relation the drop's commit names) is
  gone there too, while the other space's stays;
- after a restart of the standby and its promotion the spaces are there,
  take writes, a new one is made (a relation number of its own) and
  verify is clean."""
import json, os, re

import sb
import wtest
from wtest import check, log


def inserted(p):
    """The primary's WAL so far: load's commits are asynchronous, and the
    WAL writer flushes (and so sends) them soon, not before load exits."""
    return sb.lsn(sb.stats(p)["wal"]["insert_lsn"])


def spaces(w):
    return json.loads(sb.must(w.run("space", "list", "--json"), "space list"))


def scan_in(w, name):
    out = sb.must(w.run("-s", name, "scan"), f"-s {name} scan")
    return [tuple(line.split("\t", 1)) for line in out.splitlines()]


def dropped_rel(p):
    out = sb.must(p.run("waldump"), "waldump of the primary")
    rels = re.findall(r"drops relation (\d+)", out)
    check(len(rels) == 1, f"one drop in the primary's WAL expected: {rels}")
    return int(rels[0])


def space_files(w):
    return sorted(int(n) for n in os.listdir(os.path.join(w.dir, "base")) if int(n) >= 16)


def replayed(p, s):
    log("spaces made and written on the primary are replayed")
    sb.must(p.run("space", "create", "alpha"), "space create alpha")
    sb.must(p.run("space", "create", "beta"), "space create beta")
    sb.must(p.run("-s", "alpha", "put", "k", "in-alpha"), "put in alpha")
    sb.must(p.run("put", "k", "in-default"), "put in the default space")
    lines = "".join(f"b{i:03d}\tv{i}\n" for i in range(300))
    sb.must(p.run("-s", "beta", "load", "--batch", "50", input=lines.encode()), "load into beta")
    sb.wait_replayed(s, inserted(p))
    check(spaces(s) == ["alpha", "beta"], f"spaces on the standby: {spaces(s)}")
    got = sb.must(s.run("-s", "alpha", "get", "k"), "get in alpha on the standby").strip()
    check(got == "in-alpha", f"alpha's k on the standby: {got!r}")
    got = sb.must(s.run("get", "k"), "get on the standby").strip()
    check(got == "in-default", f"the default space's k on the standby: {got!r}")
    on_s, on_p = scan_in(s, "beta"), scan_in(p, "beta")
    check(on_s == on_p and len(on_p) == 300,
          f"beta: {len(on_s)} keys on the standby, {len(on_p)} on the primary")
    check(space_files(s) == space_files(p) and len(space_files(s)) == 2,
          f"data files: standby {space_files(s)}, primary {space_files(p)}")
    for args in (["-s", "alpha", "put", "x", "y"], ["space", "create", "gamma"],
                 ["space", "drop", "alpha"]):
        r = s.run(*args)
        check(r.returncode == 3 and b"standby" in r.stderr,
              f"{args} on the standby: exit {r.returncode} {r.stderr!r}")


def drop_replayed(p, s):
    log("a drop on the primary is replayed: the space and its file go on the standby")
    sb.must(p.run("space", "drop", "alpha"), "space drop alpha")
    rel = dropped_rel(p)
    check(not os.path.exists(os.path.join(p.dir, "base", str(rel))),
          f"base/{rel} is still on the primary")
    sb.wait_replayed(s, inserted(p))
    r = s.run("-s", "alpha", "get", "k")
    check(r.returncode == 1 and b'"alpha" does not exist' in r.stderr,
          f"alpha on the standby after its drop: exit {r.returncode} {r.stderr!r}")
    check(spaces(s) == ["beta"], f"spaces on the standby after the drop: {spaces(s)}")
    # the file goes once no reader is inside the space: a state to wait for
    gone = wtest.wait_for(lambda: not os.path.exists(os.path.join(s.dir, "base", str(rel))), 30)
    check(gone, f"base/{rel} is still on the standby")
    check(space_files(s) == space_files(p) and len(space_files(s)) == 1,
          f"data files: standby {space_files(s)}, primary {space_files(p)}")


def promoted(p, s, st):
    log("restarted and promoted: the spaces are there and take writes")
    st.stop()
    st2 = sb.Standby(s)
    st2.start()
    check(spaces(s) == ["beta"], f"spaces after the standby's restart: {spaces(s)}")
    check(sb.must(s.run("promote"), "promote").strip() == "promoted", "promote's answer")
    check(spaces(s) == ["beta"], f"spaces after the promotion: {spaces(s)}")
    check(scan_in(s, "beta") == scan_in(p, "beta"), "beta changed by the promotion")
    sb.must(s.run("-s", "beta", "put", "after", "promotion"), "put in beta after the promotion")
    sb.must(s.run("space", "create", "alpha"), "alpha made again after the promotion")
    sb.must(s.run("space", "create", "gamma"), "space create gamma after the promotion")
    sb.must(s.run("-s", "gamma", "put", "g", "1"), "put in gamma")
    check(spaces(s) == ["alpha", "beta", "gamma"], f"spaces after the promotion: {spaces(s)}")
    files = space_files(s)
    check(len(files) == 3 and len(set(files)) == 3, f"a relation each: {files}")
    check(scan_in(s, "alpha") == [], "alpha made again is empty")
    got = sb.must(s.run("-s", "gamma", "get", "g"), "get in gamma").strip()
    check(got == "1", f"gamma's g: {got!r}")
    sb.must(s.run("verify"), "verify the promoted standby")
    st2.stop()


def main(cleanup):
    exe, root = sb.setup(cleanup, "spaces")
    p, sock = sb.listening_primary(cleanup, exe, root)
    sdir = os.path.join(root, "standby")
    sb.must(p.run("backup", sdir, "--checkpoint", "fast"), "backup")
    sb.must(p.run("stop", "--wait"), "stop")
    p.serve()
    s = wtest.Walrus(exe, sdir)
    s.register(cleanup)
    os.environ["WALRUS_REPLICATION_PASSWORD"] = "secret"
    st = sb.Standby(s, ["--primary", sock])
    st.start()
    replayed(p, s)
    drop_replayed(p, s)
    promoted(p, s, st)
    return 0


if __name__ == "__main__":
    wtest.guarded(main)

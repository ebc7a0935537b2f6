#!/usr/bin/env python3
"""Point-in-time recovery of named key spaces through `walrus backup` and
`walrus restore` with a WAL archive: after a backup, spaces are created,
written, dropped and created again under a dropped one's name, with a
restore point after each step.  A restore to each restore point (and to the
end) has exactly the spaces of that moment, each with exactly its keys, the
data files of exactly those spaces (a dropped space's file is not brought
back, a space created later has none), and verify is clean.

usage: test_backup_spaces.py --walrus PATH"""
import argparse, json, os, sys

sys.dont_write_bytecode = True
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import bk  # noqa: E402
import wtest  # noqa: E402
from wtest import check, log  # noqa: E402

SEG = 256 * 1024
OPTS = [f"wal_segment_size={SEG // 1024}kB", "supervisor_linger=0"]


def wait_archived(src, upto):
    """Until the archiver has archived every segment ending at or before @upto."""
    last = "00000001" + f"{upto - SEG:016X}"

    def done():
        r = src.run("stats", "--json")
        a = json.loads(r.stdout)["archiver"] if r.returncode == 0 else {}
        return a.get("last_archived") == last and a.get("archive_pending_bytes") == 0
    check(wtest.wait_for(done, 60), f"the archiver did not archive up to {last}")


def in_space(w, name, *args, **kw):
    return bk.must(w.run("-s", name, *args, **kw), f"-s {name} {' '.join(args)}")


def state_of(w):
    """{space: {key: value}} of every named key space of @w."""
    names = json.loads(bk.must(w.run("space", "list", "--json"), "space list"))
    out = {}
    for n in names:
        lines = in_space(w, n, "scan").splitlines()
        out[n] = dict(line.split("\t", 1) for line in lines)
    return out


def space_files(w):
    return sorted(n for n in os.listdir(os.path.join(w.dir, "base")) if int(n) >= 16)


def history(src):
    """The steps, each ending at a restore point: [(name, state)] of what each holds."""
    steps = []
    want = {}

    def point(name):
        bk.must(src.run("restore-point", name), f"restore-point {name}")
        steps.append((name, {k: dict(v) for k, v in want.items()}))

    point("rp0")  # no space yet
    bk.must(src.run("space", "create", "alpha"), "create alpha")
    in_space(src, "alpha", "put", "ka", "1")
    want["alpha"] = {"ka": "1"}
    point("rp1")
    bk.must(src.run("space", "create", "beta"), "create beta")
    lines = "".join(f"b{i:03d}\tv{i}\n" for i in range(200))
    in_space(src, "beta", "load", "--batch", "25", input=lines.encode())
    want["beta"] = {f"b{i:03d}": f"v{i}" for i in range(200)}
    in_space(src, "alpha", "put", "ka2", "2")
    want["alpha"]["ka2"] = "2"
    point("rp2")
    bk.must(src.run("space", "drop", "alpha"), "drop alpha")
    del want["alpha"]
    point("rp3")
    bk.must(src.run("space", "create", "alpha"), "create alpha again")
    in_space(src, "alpha", "put", "fresh", "3")
    bk.must(src.run("space", "drop", "beta"), "drop beta")
    want = {"alpha": {"fresh": "3"}}
    point("rp4")
    check(state_of(src) == want, f"the source itself: {state_of(src)}")
    return steps


def main(cleanup):
    ap = argparse.ArgumentParser()
    ap.add_argument("--walrus", default=wtest.default_walrus())
    a = ap.parse_args()
    root = wtest.tempdir(cleanup, "walrus-backup-spaces-")
    archive = os.path.join(root, "archive")
    os.mkdir(archive)
    src = wtest.Walrus(a.walrus, os.path.join(root, "src"),
                       OPTS + ["archive_mode=on", f"archive_dir={archive}"])
    src.register(cleanup)
    src.create()
    src.serve()
    backup = os.path.join(root, "backup")
    bk.must(bk.backup(src, backup), "backup")
    steps = history(src)
    end = bk.lsn(bk.must(src.run("switch-wal"), "switch-wal").strip())
    wait_archived(src, end)
    src.run("stop", "--wait")
    targets = [(name, ["--target-name", name], want) for name, want in steps]
    targets.append(("end", [], steps[-1][1]))
    for name, target, want in targets:
        new = os.path.join(root, "to-" + name)
        w = wtest.Walrus(a.walrus, new, ["supervisor_linger=0"])
        w.register(cleanup)
        bk.must(bk.restore(a.walrus, backup, new, "--wal-archive", archive, *target),
                f"restore to {name}")
        got = state_of(w)
        check(got == want, f"restored to {name}: spaces {sorted(got)} "
              f"({ {k: len(v) for k, v in got.items()} }), want {sorted(want)} "
              f"({ {k: len(v) for k, v in want.items()} })")
        check(len(space_files(w)) == len(want),
              f"restored to {name}: data files {space_files(w)} for spaces {sorted(want)}")
        r = w.run("get", "walrus-test-init")
        check(r.returncode == 0, f"restored to {name}: the default space's key")
        w.verify()
        log(f"restored to {name}: spaces {sorted(want)}")
    log("1 passed, 0 failed")
    return 0


if __name__ == "__main__":
    wtest.guarded(main)

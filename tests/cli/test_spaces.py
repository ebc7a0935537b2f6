#!/usr/bin/env python3
"""Named key spaces from the command line, black-box: `walrus space create |
drop | list [--json]` and their errors (a bad name exits 2, a space that
exists or is missing 1, usage 2); the global -s NAME (--space NAME) for put,
get, del, incr, scan and load, apart from the default space; a missing space
named with the command that creates it (exit 1); -s refused by the commands
it does not apply to; stats' spaces section; `walrus waldump` naming the
relation of a space's blocks (" rel N") and the drop's commit ("drops
relation N"), whose data file is gone.  Prints 'N passed, N failed' last."""
import json, os, re, shutil, subprocess, sys, tempfile

sys.dont_write_bytecode = True  # no __pycache__ in the source tree
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from clitest import WALRUS, check, stop_instance, summary  # noqa: E402


def run(d, *args, stdin=None):
    r = subprocess.run([WALRUS, "-D", d, "-o", "supervisor_linger=0", *args], input=stdin,
                       capture_output=True, timeout=120)
    return r.returncode, r.stdout, r.stderr


def space_commands(d):
    rc, out, err = run(d, "space", "list")
    check("space list of a directory without spaces", rc == 0 and out == b"", (rc, out, err))
    rc, _, err = run(d, "-s", "s1", "put", "k", "v")
    check("put in a missing space exits 1, naming it and how to create it",
          rc == 1 and b'"s1" does not exist' in err and b"space create s1" in err, (rc, err))
    for name in ("s1", "s2.b-c_D"):
        rc, _, err = run(d, "space", "create", name)
        check(f"space create {name}", rc == 0, (rc, err))
    rc, _, err = run(d, "space", "create", "s1")
    check("space create of an existing space exits 1", rc == 1 and b'"s1" exists' in err,
          (rc, err))
    for bad in ("a b", "x/y", "", "n" * 65):
        rc, _, err = run(d, "space", "create", bad)
        check(f"space create {bad[:10]!r}: a bad name exits 2", rc == 2 and b"key space" in err,
              (rc, err))
    rc, _, err = run(d, "space", "drop", "nosuch")
    check("space drop of a missing space exits 1", rc == 1 and b'"nosuch"' in err, (rc, err))
    for args in (["space"], ["space", "create"], ["space", "frob", "x"],
                 ["space", "list", "x"], ["space", "drop", "a", "b"]):
        rc, _, err = run(d, *args)
        check(f"{' '.join(args)}: usage", rc == 2 and b"usage" in err, (rc, err))
    rc, out, _ = run(d, "space", "list")
    check("space list: one name a line, in order", rc == 0 and out == b"s1\ns2.b-c_D\n", out)
    rc, out, _ = run(d, "space", "list", "--json")
    check("space list --json", rc == 0 and json.loads(out) == ["s1", "s2.b-c_D"], out)


def kv_in_space(d):
    rc, _, err = run(d, "put", "k", "default")
    check("put in the default space", rc == 0, err)
    rc, _, err = run(d, "-s", "s1", "put", "k", "one")
    check("-s s1 put", rc == 0, err)
    rc, out, _ = run(d, "-s", "s1", "get", "k")
    check("-s s1 get", rc == 0 and out == b"one\n", out)
    rc, out, _ = run(d, "--space", "s1", "get", "k")
    check("--space s1 get", rc == 0 and out == b"one\n", out)
    rc, out, _ = run(d, "get", "k")
    check("the default space keeps its value", rc == 0 and out == b"default\n", out)
    rc, out, _ = run(d, "-s", "s2.b-c_D", "get", "k")
    check("another space has no k: exit 1", rc == 1 and out == b"", (rc, out))
    rc, out, err = run(d, "-s", "s1", "incr", "n")
    rc2, out2, err2 = run(d, "-s", "s1", "incr", "--by", "41", "n")
    check("-s s1 incr", (rc, out, rc2, out2) == (0, b"1\n", 0, b"42\n"), (out, err, out2, err2))
    rc, _, _ = run(d, "get", "n")
    check("incr wrote nothing in the default space", rc == 1, rc)
    lines = b"".join(b"l%02d\tv%02d\n" % (i, i) for i in range(20))
    rc, out, err = run(d, "-s", "s1", "load", "--ack", "--batch", "7", stdin=lines)
    check("-s s1 load --ack", rc == 0 and out.count(b"ack ") == 20, (rc, out, err))
    rc, out, err = run(d, "-s", "s1", "scan", "--from", "l05", "--to", "l08")
    check("-s s1 scan [from, to)", rc == 0 and out == b"l05\tv05\nl06\tv06\nl07\tv07\n",
          (out, err))
    rc, out, _ = run(d, "-s", "s1", "scan")
    keys = [line.split(b"\t")[0] for line in out.splitlines()]
    check("-s s1 scan: its keys only", rc == 0 and keys ==
          [b"k"] + [b"l%02d" % i for i in range(20)] + [b"n"], keys)
    rc, out, _ = run(d, "scan")
    keys = [line.split(b"\t")[0] for line in out.splitlines()]
    check("scan of the default space: none of s1's", rc == 0 and keys == [b"init", b"k"], keys)
    rc, _, err = run(d, "-s", "s1", "del", "k")
    rc2, _, _ = run(d, "-s", "s1", "del", "k")
    check("-s s1 del, then of an absent key exit 1", (rc, rc2) == (0, 1), err)
    rc, out, _ = run(d, "get", "k")
    check("del in s1 left the default space's k", out == b"default\n", out)
    rc, _, err = run(d, "-s", "s1", "stats")
    check("-s with stats: usage", rc == 2 and b"not to stats" in err, (rc, err))
    rc, _, err = run(d, "-s")
    check("-s without a name: usage", rc == 2 and b"needs a value" in err, (rc, err))
    rc, _, err = run(d, "-s", "bad name", "get", "k")
    check("-s with a bad name exits 2", rc == 2 and b"key space" in err, (rc, err))
    rc, out, _ = run(d, "stats")
    flat = dict(line.split(None, 1) for line in out.decode().splitlines() if " " in line)
    check("stats shows the spaces section",
          flat.get("spaces.count", "").strip() == "2" and
          flat.get("spaces.keys", "").strip() == "21", {k: v for k, v in flat.items()
                                                         if k.startswith("spaces")})
    rc, out, _ = run(d, "stats", "--json")
    sp = json.loads(out)["spaces"]
    check("stats --json spaces", sp["count"] == 2 and sp["keys"] == 21 and sp["pages"] >= 2, sp)
    lst = sp.get("list", [])
    check("stats --json lists each space with its keys",
          [e["name"] for e in lst] == ["s1", "s2.b-c_D"] and
          sum(e["keys"] for e in lst) == 21 and all(e["pages"] >= 2 for e in lst), lst)
    check("stats numbers the list's members",
          [flat.get(f"spaces.list.{i}.name", "").strip() for i in range(2)]
          == ['"s1"', '"s2.b-c_D"'] and
          [flat.get(f"spaces.list.{i}.keys", "").strip() for i in range(2)]
          == [str(e["keys"]) for e in lst], {k: v for k, v in flat.items()
                                            if k.startswith("spaces")})


def drop_and_waldump(d):
    rc, out, err = run(d, "waldump")
    rels = {int(n) for n in re.findall(r"; rel (\d+) blk \d+", out.decode())}
    check("waldump names the relations of the spaces' and the catalog's blocks",
          rc == 0 and 2 in rels and any(n >= 16 for n in rels), (rels, err[-300:]))
    rc, _, err = run(d, "space", "drop", "s1")
    check("space drop s1", rc == 0, err)
    rc, _, err = run(d, "-s", "s1", "get", "n")
    check("a dropped space is missing", rc == 1 and b'"s1" does not exist' in err, (rc, err))
    rc, out, _ = run(d, "space", "list")
    check("space list after the drop", out == b"s2.b-c_D\n", out)
    rc, out, _ = run(d, "waldump")
    drops = re.findall(r"^.*drops relation (\d+).*$", out.decode(), re.M)
    check("waldump shows the drop's commit", rc == 0 and len(drops) == 1, drops)
    if drops:
        rel = int(drops[0])
        text = out.decode()
        check("the dropped relation's blocks were in the WAL",
              re.search(rf"; rel {rel} blk \d+( FPW)?: [^;]*insert", text) is not None, rel)
        check("its data file is gone", not os.path.exists(os.path.join(d, "base", str(rel))),
              os.listdir(os.path.join(d, "base")))
        check("the other space's file stays",
              [n for n in os.listdir(os.path.join(d, "base")) if int(n) >= 16] != [],
              os.listdir(os.path.join(d, "base")))
    rc, _, err = run(d, "space", "create", "s1")
    rc2, out, _ = run(d, "-s", "s1", "scan")
    check("a space made again under the name is empty", (rc, rc2, out) == (0, 0, b""),
          (rc, err, out))
    rc, out, _ = run(d, "verify")
    check("verify after it all", rc == 0, out)


def bench_in_space(base):
    d = os.path.join(base, "bench")
    rc, out, err = run(d, "-s", "b1", "bench", "--workload", "fillrandom", "--num", "3000")
    check("-s b1 bench: fillrandom in the space, made by the bench", rc == 0, (rc, err))
    rc, out, _ = run(d, "stats", "--json")
    st = json.loads(out)
    check("the bench's keys are in the space, none in the default one",
          st["spaces"]["count"] == 1 and st["spaces"]["keys"] == 3000 and st["kv"]["keys"] == 0,
          (st["spaces"], st["kv"]["keys"]))
    rc, out, err = run(d, "-s", "b1", "bench", "--workload", "readrandom", "--num", "3000")
    check("-s b1 bench: readrandom finds every key there", rc == 0 and b"ops/s" in out,
          (rc, err))
    stop_instance(d)


def main():
    base = tempfile.mkdtemp(prefix="walrus-spaces-")
    d = os.path.join(base, "db")
    try:
        rc, _, err = run(d, "put", "init", "1")
        check("put creates the directory", rc == 0, err)
        space_commands(d)
        kv_in_space(d)
        drop_and_waldump(d)
        bench_in_space(base)
    finally:
        stop_instance(d)
        shutil.rmtree(base, ignore_errors=True)
    return summary()


if __name__ == "__main__":
    sys.exit(main())

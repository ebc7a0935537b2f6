#!/usr/bin/env python3
"""The power-loss journal survives a torn record.

A process SIGKILLed inside its append to DIR/journal (the supervisor kills
the instance's other processes after a PANIC) leaves part of a record, and
the next process's append follows it directly.  powerloss.py must drop the
torn record and read every other one; before, it stopped with "bad record"
or "truncated record", and the test that cut the power failed.

A real journal is written by `walrus put` on a new directory (the command
and the instance it starts journal every change); then, for records of
each kind, the journal is rewritten with that record cut short (inside its
header, inside its path or data, or as the last record) and parsed again:
exactly the other records must come back, with one torn record counted.

usage: journal_torn.py --walrus PATH
"""
import argparse, os, sys

sys.dont_write_bytecode = True  # no __pycache__ in the source tree
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import wtest  # noqa: E402
import powerloss  # noqa: E402
from io_errors import PLWalrus  # noqa: E402
from wtest import check, log  # noqa: E402


def key(r):
    return (r.type, r.pid, r.dev, r.ino, r.dirdev, r.dirino, r.off, r.len, r.size, r.ref,
            r.path, r.data)


def parsed(buf, path):
    with open(path, "wb") as f:
        f.write(buf)
    torn = [0]
    return powerloss.parse(path, torn), torn[0]


def main(cleanup):
    ap = argparse.ArgumentParser()
    ap.add_argument("--walrus", default=wtest.default_walrus())
    a = ap.parse_args()
    base = wtest.tempdir(cleanup, "walrus-jtorn-")
    jdir = os.path.join(base, "journal")
    os.mkdir(jdir)
    w = PLWalrus(a.walrus, os.path.join(base, "data"), ["supervisor_linger=0"], jdir)
    w.register(cleanup)
    w.create()
    jpath = os.path.join(jdir, "journal")
    with open(jpath, "rb") as f:
        buf = f.read()
    recs, torn = parsed(buf, os.path.join(base, "copy"))
    check(torn == 0 and recs, f"the untouched journal: {len(recs)} records, {torn} torn")
    ends = [r.at for r in recs[1:]] + [len(buf)]
    check(recs[0].at == 0 and all(r.at + powerloss.HDR.size + len(r.path) + len(r.data) == e
                                  for r, e in zip(recs, ends)),
          "the untouched journal's records do not cover it end to end")
    kinds = sorted({r.type for r in recs})
    log(f"{len(recs)} records of {len(buf)} bytes, types {kinds}")
    cases = 0
    for t in kinds:
        i = next(j for j, r in enumerate(recs) if r.type == t and 0 < j < len(recs) - 1)
        r = recs[i]
        size = ends[i] - r.at
        cuts = {"in the header": 40, "after the header": powerloss.HDR.size,
                "near the end": size - 1}
        for where, keep in cuts.items():
            if keep >= size or keep <= 0:
                continue
            for last in (False, True):  # in the middle, or the journal's last record
                torn_buf = buf[:r.at + keep] if last else buf[:r.at + keep] + buf[ends[i]:]
                want = [key(x) for x in recs[:i]] + ([] if last else
                                                     [key(x) for x in recs[i + 1:]])
                got, n = parsed(torn_buf, os.path.join(base, "copy"))
                what = (f"record {i} (type {t}, {size} bytes) cut {where} ({keep} bytes kept)"
                        + (", last" if last else ""))
                check(n == 1, f"{what}: {n} torn records counted, not 1")
                check([key(x) for x in got] == want,
                      f"{what}: {len(got)} records read, {len(want)} expected")
                cases += 1
    log(f"PASS: {cases} torn journals read, each without its torn record only")
    return 0


if __name__ == "__main__":
    wtest.guarded(main)

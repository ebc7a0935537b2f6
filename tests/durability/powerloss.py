#!/usr/bin/env python3
"""The power cut of the power-loss simulation: rolls back, from the journal
that the fd cache keeps with WALRUS_POWERLOSS=JDIR (src/testsupport/powerloss.c),
whatever was written but not made durable, as a power cut may lose it.

Model (what a journaling file system such as ext4 guarantees, by POSIX):
  - a write is durable once a later fsync/fdatasync of the same file (by
    any process, through any fd) has begun after the write returned;
  - a name change (create, rename, unlink) is durable once a later fsync of
    its directory has begun after it returned;
  - anything else may be lost, in part: the data of each unsynced write
    independently per unit (4 KiB page-cache pages, or 512-byte sectors
    for torn writes) to any of the versions it went through since the last
    sync (old, new, or in between); the file size to the size it had after
    the last change kept; name changes are lost as a suffix (metadata is
    journaled in order), except the ones made durable by a directory fsync.
Modes:
  drop    every unsynced change lost (nothing was written back)
  pages   each 4 KiB unit of unsynced data: lost, kept, or an intermediate
          version; a random suffix of the unsynced name changes lost
  sectors the same at 512-byte granularity: 4 KiB pages torn inside
  keep    nothing lost (a plain crash: the control experiment)

The processes must be dead first (SIGSTOP all, then SIGKILL: a stopped
process is not inside a write()).  Afterwards the journal and the saved
links are removed: what is on disk now is the new durable state.

usage: powerloss.py JDIR DATADIR [--mode M] [--seed S]   (prints what it did)
"""
import argparse, os, random, struct, sys, zlib

HDR = struct.Struct("<IHHII8QII")  # pl_rec in src/testsupport/powerloss.c: 88 bytes
assert HDR.size == 88
MAGIC = 0x314A4C50
MAGIC_BYTES = struct.pack("<I", MAGIC)
W, T, F, C, R, U, DONE, SYNC, DIRSYNC = 1, 2, 3, 4, 5, 6, 10, 20, 21


class Rec:
    __slots__ = ("at", "type", "pid", "dev", "ino", "dirdev", "dirino", "off", "len", "size",
                 "ref", "path", "data")


def _whole_header(buf, pos):
    """Whether a record header starts at @pos: magic and CRC (the `check`
    field, zlib's CRC-32 of the 84 bytes before it)."""
    if pos + HDR.size > len(buf) or buf[pos:pos + 4] != MAGIC_BYTES:
        return False
    return zlib.crc32(buf[pos:pos + HDR.size - 4]) == struct.unpack_from("<I", buf,
                                                                          pos + HDR.size - 4)[0]


def _next_header(buf, pos):
    """The first record header at or after @pos (len(buf) if none)."""
    while True:
        pos = buf.find(MAGIC_BYTES, pos)
        if pos < 0:
            return len(buf)
        if _whole_header(buf, pos):
            return pos
        pos += 1


def parse(path, torn=None):
    """The journal's records.  A process SIGKILLed inside its append (the
    supervisor kills the others after a PANIC) leaves a torn record, which
    the next append follows directly: it is dropped (its change never
    started, or, a DONE or SYNC record, is taken as not done: a power cut
    may lose it), counted in torn[0]."""
    with open(path, "rb") as f:
        buf = f.read()
    torn = torn if torn is not None else [0]
    out, pos = [], 0
    while pos < len(buf):
        if not _whole_header(buf, pos):  # the rest of a torn record
            torn[0] += 1
            pos = _next_header(buf, pos + 1)
            continue
        (_magic, typ, _fl, pid, plen, dev, ino, ddev, dino, off, ln, size, ref, dlen,
         _check) = HDR.unpack_from(buf, pos)
        end = pos + HDR.size + plen + dlen
        if end > len(buf) or (end < len(buf) and not _whole_header(buf, end)):
            nxt = _next_header(buf, pos + 1)
            if nxt < end:  # the next record starts inside this one: torn
                torn[0] += 1
                pos = nxt
                continue
        r = Rec()
        r.at, r.type, r.pid = pos, typ, pid
        r.dev, r.ino, r.dirdev, r.dirino = dev, ino, ddev, dino
        r.off, r.len, r.size, r.ref = off, ln, size, ref
        p = pos + HDR.size
        r.path = buf[p:p + plen]
        r.data = buf[p + plen:end]
        out.append(r)
        pos = end
    return out


def inode_paths(roots):
    """(dev, ino) -> a path, for every regular file under @roots (symlinked
    directories such as DIR/wal followed)."""
    m = {}
    for root in roots:
        for d, dirs, files in os.walk(root, followlinks=True):
            for n in files:
                p = os.path.join(d, n)
                try:
                    st = os.stat(p)
                except OSError:
                    continue
                m.setdefault((st.st_dev, st.st_ino), p)
    return m


def data_range(r):
    """The byte range an intent changes, and the old bytes' start."""
    if r.type == T:  # shrinking: old bytes from the new end; growing: zeros
        lo, hi = min(r.off, r.size), max(r.off, r.size)
        return lo, hi, lo
    return r.off, r.off + r.len, r.off


def simulate(jdir, datadir, mode="drop", rng=None):
    rng = rng or random.Random()
    jpath = os.path.join(jdir, "journal")
    torn = [0]
    recs = parse(jpath, torn) if os.path.exists(jpath) else []
    done = {}
    sync_ref, dirsync_ref = {}, {}
    for r in recs:
        if r.type == DONE:
            done[r.ref] = r.at
        elif r.type == SYNC:
            k = (r.dev, r.ino)
            sync_ref[k] = max(sync_ref.get(k, 0), r.ref)
        elif r.type == DIRSYNC:
            k = (r.dirdev, r.dirino)
            dirsync_ref[k] = max(dirsync_ref.get(k, 0), r.ref)
    # Data changes per file, in journal order.  A change is settled when a
    # sync of its file began after it returned -- or, for an intent that
    # never returned (its process died, or the call failed), after the
    # intent: the write then either happened before that sync or never.
    per_file = {}
    for r in recs:
        if r.type in (W, T, F):
            k = (r.dev, r.ino)
            d = done.get(r.at, r.at)
            per_file.setdefault(k, []).append((r, d < sync_ref.get(k, 0)))
    unit = 512 if mode == "sectors" else 4096
    paths = inode_paths([datadir, jdir])
    st = {"files": 0, "writes": 0, "units_lost": 0, "units_kept": 0, "units_mid": 0,
          "names_undone": 0, "names_unsynced": 0}
    if torn[0]:
        st["torn_records"] = torn[0]
    for k, allints in per_file.items():
        us = [r for r, settled in allints if not settled]
        p = paths.get(k)
        if not us or p is None:
            continue  # nothing to lose, or the file is gone for good (a temp file)
        # Bytes of each unsettled change that a later settled change rewrote
        # are not rolled back (that later content is durable).
        masks = []
        for i, (r, settled) in enumerate(allints):
            if not settled:
                lo, hi, _ = data_range(r)
                later = [data_range(r2)[:2] for r2, s2 in allints[i + 1:] if s2]
                masks.append(later)
        last_settled = max([i for i, (_, s2) in enumerate(allints) if s2], default=-1)
        tail_from = sum(1 for i, (_, s2) in enumerate(allints) if not s2 and i < last_settled)
        st["files"] += 1
        st["writes"] += len(us)
        # Versions per unit: the indexes (1-based) of the changes touching it.
        touch = {}
        for i, r in enumerate(us, 1):
            lo, hi, _ = data_range(r)
            for u in range(lo // unit, (hi + unit - 1) // unit):
                touch.setdefault(u, []).append(i)
        choice = {}
        for u, ks in touch.items():
            if mode == "drop":
                j = 0
            elif mode == "keep":
                j = ks[-1]
            else:
                x = rng.random()
                j = 0 if x < 0.5 else ks[-1] if x < 0.8 else rng.choice([0] + ks)
            choice[u] = j
            st["units_lost" if j == 0 else "units_kept" if j == ks[-1] else "units_mid"] += 1
        # The size: as after the last change kept, among those after the last
        # settled one (a sync made the size before them durable).
        m = max([0] + list(choice.values()))
        tail = us[tail_from:]
        if not tail:
            final_size = os.path.getsize(p)
        else:
            t = m - tail_from  # position in the tail of the last change kept
            final_size = (tail[0].size if t <= 0 else tail[t].size if t < len(tail)
                          else os.path.getsize(p))
        with open(p, "r+b") as f:
            content = bytearray(f.read())
            for i in range(len(us), 0, -1):
                r = us[i - 1]
                lo, hi, dstart = data_range(r)
                if hi > len(content):
                    content.extend(bytes(hi - len(content)))
                for u in range(lo // unit, (hi + unit - 1) // unit):
                    if choice[u] >= i:
                        continue
                    # old bytes inside the old size, zeros beyond it; not
                    # where a later settled change wrote
                    for a, b in _minus((max(lo, u * unit), min(hi, (u + 1) * unit)),
                                       masks[i - 1]):
                        olen = len(r.data)
                        s0, s1 = max(a, dstart), min(b, dstart + olen)
                        if s1 > s0:
                            content[s0:s1] = r.data[s0 - dstart:s1 - dstart]
                        z0 = max(a, dstart + olen)
                        if b > z0:
                            content[z0:b] = bytes(b - z0)
            final_size = max(final_size, _settled_end(allints))
            del content[final_size:]
            if len(content) < final_size:
                content.extend(bytes(final_size - len(content)))
            f.seek(0)
            f.write(content)
            f.truncate(final_size)
    # Name changes: the unsynced ones, lost as a suffix.
    names = []
    for r in recs:
        if r.type in (C, R, U):
            d = done.get(r.at)
            if d is not None and d < dirsync_ref.get((r.dirdev, r.dirino), 0):
                continue
            names.append(r)
    st["names_unsynced"] = len(names)
    if mode == "keep":
        cut = len(names)
    elif mode == "drop":
        cut = 0
    else:
        cut = rng.randrange(len(names) + 1)
    for r in reversed(names[cut:]):
        st["names_undone"] += undo_name(r)
    # The new durable state: start a new journal (WALRUS_PL_KEEP=1 keeps the
    # old one as JDIR.N, for debugging).
    if os.environ.get("WALRUS_PL_KEEP") and os.path.exists(jpath):
        n = 0
        while os.path.exists(f"{jdir}.{n}"):
            n += 1
        os.rename(jpath, f"{jdir}.{n}")
    for n in os.listdir(jdir):
        os.unlink(os.path.join(jdir, n))
    return st


def _minus(rng_, cuts):
    """[rng_] minus the ranges in @cuts, as a list of ranges."""
    out = [rng_]
    for c0, c1 in cuts:
        nxt = []
        for a, b in out:
            if c1 <= a or c0 >= b:
                nxt.append((a, b))
                continue
            if a < c0:
                nxt.append((a, c0))
            if c1 < b:
                nxt.append((c1, b))
        out = nxt
    return [(a, b) for a, b in out if b > a]


def _settled_end(allints):
    """The end of the last settled write: the file is at least that long."""
    return max([r.off + r.len for r, s in allints if s and r.type in (W, F)], default=0)


def _ino(p):
    try:
        return os.stat(p).st_ino
    except OSError:
        return None


def undo_name(r):
    if r.type == C:
        p = os.fsdecode(r.path)
        if os.path.isfile(p) and not os.path.islink(p):
            os.unlink(p)
            return 1
        return 0
    saved = os.fsdecode(r.data) if r.data else None
    if r.type == R:
        frm, to = (os.fsdecode(x) for x in r.path.split(b"\0", 1))
        if _ino(to) == r.ino and r.ino and not os.path.exists(frm):
            os.rename(to, frm)
            if saved and os.path.exists(saved) and not os.path.exists(to):
                os.link(saved, to)
            return 1
        return 0
    p = os.fsdecode(r.path)  # U
    if saved and os.path.exists(saved) and not os.path.exists(p):
        os.link(saved, p)
        return 1
    return 0


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("jdir")
    ap.add_argument("datadir")
    ap.add_argument("--mode", default="drop", choices=["drop", "pages", "sectors", "keep"])
    ap.add_argument("--seed", type=int)
    a = ap.parse_args()
    print(simulate(a.jdir, a.datadir, a.mode, random.Random(a.seed)))


if __name__ == "__main__":
    sys.exit(main())

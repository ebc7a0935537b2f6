#!/usr/bin/env python3
"""make_corpus.py - (re)generates the seed corpora of the fuzz targets from a
real instance, so that the fuzzers start from well-formed WAL records and
pages: `make_corpus.py --walrus build/tools/walrus` writes corpus/wal,
corpus/page and corpus/cli beside this file (existing files are kept: the
regression inputs of bugs found live there too).

A data directory is created in a temporary directory, loaded with small and
large (overflow) values, updated after a checkpoint (full-page images, with
and without wal_compression=zstd), partly deleted, and stopped.  Records
are cut from the first WAL segment (page headers removed), pages read from
DIR/base/1.
"""
import argparse, hashlib, os, struct, subprocess, tempfile, shutil

HERE = os.path.dirname(os.path.abspath(__file__))
PAGE = 8192


def run(exe, d, *args, inp=None, opts=()):
    o = []
    for kv in opts:
        o += ["-o", kv]
    r = subprocess.run([exe, "-D", d] + o + list(args), input=inp, capture_output=True)
    if r.returncode != 0:
        raise SystemExit(f"{args}: {r.stderr.decode()}")
    return r.stdout


def wal_stream(seg):
    with open(seg, "rb") as f:
        data = f.read()
    out = bytearray()
    for off in range(0, len(data), PAGE):
        page = data[off:off + PAGE]
        magic, info = struct.unpack_from("<HH", page)
        if magic != 0xD17E:
            break
        out += page[40 if info & 2 else 24:]
    return bytes(out)


def records(stream):
    pos = 0
    while pos + 24 <= len(stream):
        tot = struct.unpack_from("<I", stream, pos)[0]
        if tot < 24 or tot > (1 << 20) or pos + tot > len(stream):
            break
        yield stream[pos:pos + tot]
        pos = (pos + tot + 7) & ~7


def block_data(rec):
    """[(flags, data bytes)] of each block of a record (wal.h's layout)."""
    p, blocks = 24, []
    while p < len(rec) and rec[p] != 0xFF:
        bid, flags, dlen, rel, blk = struct.unpack_from("<BBHII", rec, p)
        p += 12
        ilen = 0
        if flags & 1:
            ilen = struct.unpack_from("<H", rec, p)[0]
            p += 8
        blocks.append((ilen, dlen))
    if p >= len(rec):
        return []
    p += 5
    out = []
    for ilen, dlen in blocks:
        p += ilen
        out.append(rec[p:p + dlen])
        p += dlen
    return out


def save(kind, data):
    d = os.path.join(HERE, "corpus", kind)
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, "seed-" + hashlib.sha1(data).hexdigest()[:16]), "wb") as f:
        f.write(data)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--walrus", required=True)
    a = ap.parse_args()
    exe = os.path.abspath(a.walrus)
    tmp = tempfile.mkdtemp(prefix="walrus-corpus-")
    try:
        for comp in ("off", "zstd"):
            d = os.path.join(tmp, comp)
            opts = ["wal_compression=" + comp, "supervisor_linger=0"]
            run(exe, d, "put", "first", "1", opts=opts + ["create_if_missing=on"])
            lines = "".join(f"key{i:05d}\t{'v' * (i % 50)}{i}\n" for i in range(1500))
            lines += "".join(f"big{i}\t{'B' * (9000 + i * 3000)}\n" for i in range(3))
            run(exe, d, "load", "--batch", "50", inp=lines.encode(), opts=opts)
            run(exe, d, "checkpoint", opts=opts)
            lines = "".join(f"key{i:05d}\tnew{i}\n" for i in range(0, 1500, 7))
            run(exe, d, "load", "--sync", inp=lines.encode(), opts=opts)
            run(exe, d, "del", "key00003", opts=opts)
            run(exe, d, "del", "big1", opts=opts)
            segs = sorted(os.listdir(os.path.join(d, "wal")))
            seen = set()
            n = 0
            for rec in records(wal_stream(os.path.join(d, "wal", segs[0]))):
                rmid, info = rec[4], rec[5]
                has_img = any(rec[24 + 12 * i + 1] & 1 for i in range(1) if len(rec) > 37)
                sig = (rmid, info, has_img, len(rec) // 2000)
                if sig in seen and n > 60:
                    continue
                seen.add(sig)
                n += 1
                if n > 80:
                    break
                save("wal", b"\x00" + rec)
                for ops in block_data(rec)[:1]:
                    if ops:
                        save("page", b"\x00" + struct.pack("<I", 5) + bytes(PAGE) + b"\x00"
                             + ops)
            with open(os.path.join(d, "base", "1"), "rb") as f:
                base = f.read()
            kinds = {}
            for blk in range(len(base) // PAGE):
                page = base[blk * PAGE:(blk + 1) * PAGE]
                t = page[20]
                if kinds.get(t, 0) >= 4:
                    continue
                kinds[t] = kinds.get(t, 0) + 1
                save("page", b"\x01" + struct.pack("<I", blk) + page + b"\x08key00100")
        for text in (b"\x00a\tb\nkey\tvalue\n\nnotab\n", b"\x01616263\t78797a\nzz\t00\n",
                     b"\x03" + b"6b\t76\n--hex\tx\n", b"\x02--\t-k\tv\n"):
            save("cli", text)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()

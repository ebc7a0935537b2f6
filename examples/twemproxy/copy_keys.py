#!/usr/bin/env python3
"""copy_keys.py - copies every key of some `walrus serve` instances through
a proxy (or to any RESP server): the copy step of resizing a twemproxy ring
(docs/scale-out.md, "Resizing").  Standard library only.

Each source is scanned directly (SCAN, which twemproxy refuses), its values
read with MGET and written with SET through --to, whose ring decides where
each key lands now.  Stop the writers first: a write made to a source after
its key was copied is not copied.  Prints the keys copied per source.

usage: copy_keys.py --to HOST:PORT [--password-file FILE] SRC_HOST:PORT...
"""
import argparse
import socket
import sys


class Resp:
    def __init__(self, addr, password=None):
        host, port = addr.rsplit(":", 1)
        self.sock = socket.create_connection((host, int(port)), timeout=300)
        self.buf = b""
        if password is not None:
            self.call([b"AUTH", password])

    def send(self, args):
        out = [b"*%d\r\n" % len(args)]
        for a in args:
            a = a if isinstance(a, bytes) else str(a).encode()
            out.append(b"$%d\r\n%s\r\n" % (len(a), a))
        self.sock.sendall(b"".join(out))

    def line(self):
        while b"\r\n" not in self.buf:
            d = self.sock.recv(1 << 20)
            if not d:
                raise ConnectionError("connection closed")
            self.buf += d
        ln, self.buf = self.buf.split(b"\r\n", 1)
        return ln

    def read(self):
        ln = self.line()
        t, rest = ln[:1], ln[1:]
        if t == b"-":
            raise RuntimeError(rest.decode(errors="replace"))
        if t in (b"+", b":"):
            return rest
        if t == b"$":
            n = int(rest)
            if n < 0:
                return None
            while len(self.buf) < n + 2:
                d = self.sock.recv(1 << 20)
                if not d:
                    raise ConnectionError("connection closed")
                self.buf += d
            v, self.buf = self.buf[:n], self.buf[n + 2:]
            return v
        if t == b"*":
            return [self.read() for _ in range(int(rest))]
        raise RuntimeError(f"unexpected reply {ln!r}")

    def call(self, args):
        self.send(args)
        return self.read()


def copy_one(src, dst):
    copied, cursor = 0, b"0"
    while True:
        cursor, keys = src.call([b"SCAN", cursor, b"COUNT", b"500"])
        if keys:
            values = src.call([b"MGET"] + keys)
            for k, v in zip(keys, values):
                if v is not None:  # deleted since the SCAN
                    dst.send([b"SET", k, v])
            for k, v in zip(keys, values):  # pipelined: the replies, in order
                if v is not None:
                    dst.read()
                    copied += 1
        if cursor == b"0":
            return copied


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--to", required=True, help="the new ring's proxy, HOST:PORT")
    ap.add_argument("--password-file", help="AUTH with the first line of FILE (sources and --to)")
    ap.add_argument("sources", nargs="+", help="the old shards, HOST:PORT each")
    a = ap.parse_args()
    pw = None
    if a.password_file:
        with open(a.password_file, "rb") as f:
            pw = f.readline().rstrip(b"\r\n")
    dst = Resp(a.to, pw)
    total = 0
    for s in a.sources:
        n = copy_one(Resp(s, pw), dst)
        print(f"{s}: {n} keys copied", flush=True)
        total += n
    print(f"{total} keys copied")
    return 0


if __name__ == "__main__":
    sys.exit(main())

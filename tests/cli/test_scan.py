#!/usr/bin/env python3
"""`walrus scan` output, black-box (issue 19): bytes that are not printable
ASCII are escaped as redis-cli quotes them (\\xHH, \\n, \\r, \\t, \\a, \\b,
and \\\\ for the backslash), so that every line is one KEY<TAB>VALUE pair;
printable ASCII (letters, digits, punctuation, spaces) is printed as it is,
as the scripts that read scan output expect; --raw prints the bytes as they
are, --hex in hexadecimal, both at once is a usage error; `walrus get`
prints the value as it is.  Prints 'N passed, N failed' last."""
import os, re, shutil, subprocess, sys, tempfile

sys.dont_write_bytecode = True  # no __pycache__ in the source tree
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from clitest import WALRUS, check, stop_instance, summary  # noqa: E402

ESC = {"n": 10, "r": 13, "t": 9, "a": 7, "b": 8, "\\": 92}


def run(d, *args, stdin=None):
    r = subprocess.run([WALRUS, "-D", d, "-o", "supervisor_linger=0", *args], input=stdin,
                       capture_output=True, timeout=120)
    return r.returncode, r.stdout, r.stderr


def unescape(text):
    """The bytes an escaped field stands for."""
    out, i = bytearray(), 0
    while i < len(text):
        c = text[i]
        if c != "\\":
            out.append(ord(c))
            i += 1
        elif text[i + 1] == "x":
            out.append(int(text[i + 2:i + 4], 16))
            i += 4
        else:
            out.append(ESC[text[i + 1]])
            i += 2
    return bytes(out)


def main():
    base = tempfile.mkdtemp(prefix="walrus-scan-")
    d = os.path.join(base, "db")
    try:
        pairs = {
            b"a\0b\r\n": b"\tt\\\xff\x07\x08\x7f",
            b"plain key, with: punct!~\"'#$%&()*+-./;<=>?@[]^_`{|}": b"v a l u e 0123",
            bytes(range(1, 256)): bytes(range(255, -1, -1)),
            b"getme": b"line1\nline2\t\x01",
        }
        for k, v in pairs.items():
            rc, _, err = run(d, "put", "--hex", k.hex(), v.hex())
            check(f"put {k[:8]!r}", rc == 0, err)
        rc, out, err = run(d, "scan")
        lines = out.split(b"\n")
        check("scan: one line per pair",
              rc == 0 and lines[-1] == b"" and len(lines) == len(pairs) + 1,
              (rc, out, err))
        text = out.decode("ascii", errors="replace")
        check("scan: only printable ASCII, TAB between key and value",
              re.fullmatch(r"([ -~]*\t[ -~]*\n)*", text) is not None, out)
        check("scan: the example of the issue",
              b"a\\x00b\\r\\n\t\\tt\\\\\\xff\\a\\b\\x7f\n" in out, out)
        check("scan: printable ASCII unchanged",
              b"plain key, with: punct!~\"'#$%&()*+-./;<=>?@[]^_`{|}\tv a l u e 0123\n" in out,
              out)
        got = {}
        for line in text.splitlines():
            k, _, v = line.partition("\t")
            got[unescape(k)] = unescape(v)
        check("scan: the escapes stand for the bytes", got == pairs, got)
        rc, out, _ = run(d, "scan", "--raw")
        want = b"".join(k + b"\t" + v + b"\n" for k, v in sorted(pairs.items()))
        check("scan --raw: the bytes as they are", rc == 0 and out == want, out)
        rc, out, _ = run(d, "scan", "--hex")
        want = b"".join(k.hex().encode() + b"\t" + v.hex().encode() + b"\n"
                        for k, v in sorted(pairs.items()))
        check("scan --hex: hexadecimal", rc == 0 and out == want, out)
        rc, _, err = run(d, "scan", "--hex", "--raw")
        check("scan --hex --raw: a usage error", rc == 2 and b"usage" in err, (rc, err))
        rc, out, _ = run(d, "get", "getme")
        check("get: the value as it is", rc == 0 and out == pairs[b"getme"] + b"\n", out)
        rc, out, _ = run(d, "scan", "--help")
        check("scan --help names --raw", rc == 0 and b"--raw" in out, out)
    finally:
        stop_instance(d)
        shutil.rmtree(base, ignore_errors=True)
    return summary()


if __name__ == "__main__":
    sys.exit(main())

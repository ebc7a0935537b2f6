#!/usr/bin/env python3
"""The `walrus` command's key-value contract, black-box: put/get/del/scan/load,
--hex round trips of binary data, exit codes (0 ok, 1 not found, 2 usage or
damage, 3 engine error), and the bad inputs of the key-value issue: empty key,
key over the limit (1 KiB, 480 bytes with 4 KiB pages), value over the limit,
a directory that is not walrus's, one of an incompatible version.  Prints
'N passed, N failed' last."""
import os, shutil, subprocess, sys, tempfile

sys.dont_write_bytecode = True  # no __pycache__ in the source tree
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from clitest import MAX_KEY, WALRUS, check, stop_instance, summary  # noqa: E402

def run(d, *args, stdin=None):
    r = subprocess.run([WALRUS, "-D", d, "-o", "supervisor_linger=0", *args], input=stdin,
                       capture_output=True, timeout=120)
    return r.returncode, r.stdout, r.stderr

def main():
    base = tempfile.mkdtemp(prefix="walrus-cli-")
    d = os.path.join(base, "db")
    try:
        rc, out, err = run(d, "get", "nothing")
        check("get on a missing directory is an engine error", rc == 3, (rc, err))
        rc, _, err = run(d, "put", "k1", "v1")
        check("put creates the directory", rc == 0, err)
        rc, out, _ = run(d, "get", "k1")
        check("get prints the value", rc == 0 and out == b"v1\n", out)
        rc, out, _ = run(d, "get", "absent")
        check("get of an absent key exits 1", rc == 1 and out == b"", (rc, out))
        rc, _, _ = run(d, "del", "absent")
        check("del of an absent key exits 1", rc == 1, rc)
        rc, _, err = run(d, "put", "", "v")
        check("empty key is a usage error", rc == 2 and b"empty" in err, (rc, err))
        rc, _, err = run(d, "put", "k" * (MAX_KEY + 1), "v")
        check(f"key over {MAX_KEY} bytes refused",
              rc == 3 and b"limit of %d bytes" % MAX_KEY in err, (rc, err))
        rc, _, _ = run(d, "put", "k" * MAX_KEY, "v")
        check(f"key of exactly {MAX_KEY} bytes accepted", rc == 0, rc)
        big = "aa" * (64 * 1024 * 1024 + 1)
        rc, _, err = run(d, "load", "--hex", stdin=("6b62\t" + big + "\n").encode())
        check("value over 64 MiB refused with a message", rc == 3 and b"64" in err,
              (rc, err[-300:]))
        rc, out, _ = run(d, "get", "kb")
        check("nothing of a refused value stored", rc == 1, rc)
        binkey, binval = bytes([0, 255, 9, 10, 0x80]), bytes(range(256))
        rc, _, err = run(d, "put", "--hex", binkey.hex(), binval.hex())
        check("binary put with --hex", rc == 0, err)
        rc, out, _ = run(d, "get", "--hex", binkey.hex())
        check("binary round trip with --hex", rc == 0 and bytes.fromhex(out.decode().strip()) == binval, out[:80])
        rc, _, err = run(d, "put", "--hex", "zz", "00")
        check("bad hex is a usage error", rc == 2, (rc, err))
        utf = "clé-ключ-鍵".encode()
        rc, _, _ = run(d, "put", utf.decode(), "\udcff" if False else "x")
        check("non-ASCII key", rc == 0, rc)
        lines = b"".join(b"key%03d\tval%03d\n" % (i, i) for i in range(50))
        rc, out, err = run(d, "load", "--sync", "--ack", stdin=lines)
        acks = out.decode().split()
        check("load --ack acknowledges every line", rc == 0 and acks.count("ack") == 50, (rc, out[:200], err))
        rc, out, _ = run(d, "scan", "--from", "key010", "--to", "key020")
        got = [l.split(b"\t")[0] for l in out.splitlines()]
        check("scan [from, to) in order", rc == 0 and got == [b"key%03d" % i for i in range(10, 20)], got)
        rc, out, _ = run(d, "scan", "--limit", "3", "--hex")
        check("scan --limit", rc == 0 and len(out.splitlines()) == 3, out)
        rc, _, err = run(d, "load", stdin=b"no tab here\n")
        check("a load line without TAB is a usage error", rc == 2 and b"line 1" in err, (rc, err))
        rc, _, _ = run(d, "del", "key000")
        check("del", rc == 0, rc)
        rc, _, _ = run(d, "get", "key000")
        check("deleted key is gone", rc == 1, rc)
        rc, out, _ = run(d, "incr", "ctr")
        check("incr of an absent key", rc == 0 and out == b"1\n", (rc, out))
        rc, out, _ = run(d, "incr", "--by", "-11", "ctr")
        check("incr --by a negative", rc == 0 and out == b"-10\n", (rc, out))
        rc, _, err = run(d, "incr", "k1")
        check("incr of a value that is no integer", rc == 3 and b"not an integer" in err,
              (rc, err))
        rc, out, _ = run(d, "get", "k1")
        check("a refused incr changes nothing", out == b"v1\n", out)
        rc, _, err = run(d, "incr", "--by", "x", "ctr")
        check("incr --by x is a usage error", rc == 2, (rc, err))
        procs = [subprocess.Popen([WALRUS, "-D", d, "incr", "race"], stdout=subprocess.DEVNULL,
                                  stderr=subprocess.PIPE) for _ in range(6)]
        codes = [p.wait(120) for p in procs]
        rc, out, _ = run(d, "get", "race")
        check("6 concurrent incr: 6", codes == [0] * 6 and out == b"6\n", (codes, out))
        rc, out, _ = run(d, "stats", "--json")
        check("stats --json", rc == 0 and b'"kv":{' in out and b'"checkpoints":{' in out, out[:200])
        rc, _, _ = run(d, "checkpoint")
        check("checkpoint", rc == 0, rc)
        rc, out, _ = run(d, "verify")
        check("verify clean", rc == 0 and b"ok" in out, out)
        rc, _, _ = run(d, "frobnicate")
        check("unknown command exits 2", rc == 2, rc)
        for sub in ("put", "get", "del", "incr", "scan", "load", "checkpoint", "stats", "verify"):
            rc, out, _ = run(d, sub, "--help")
            check(f"{sub} --help", rc == 0 and b"usage" in out, (rc, out))
        stop_instance(d)
        # Buffer pool options at open: too large for this machine, too small.
        for size, word in (("60GB", b"memory"), ("64kB", b"between 128kB")):
            r = subprocess.run([WALRUS, "-D", os.path.join(base, "sb" + size), "-o",
                                f"shared_buffers={size}", "put", "a", "b"],
                               capture_output=True, timeout=60)
            check(f"shared_buffers={size} refused at open", r.returncode in (2, 3) and
                  b"shared_buffers" in r.stderr and word in r.stderr, (r.returncode, r.stderr))
        # The background writer cleans ahead of the clock sweep of a small pool.
        bg = os.path.join(base, "bg")
        # A load may end before a CPU-starved bgwriter runs (2 shared vCPUs):
        # load again, up to 8 times, until it has written.
        import json
        for rnd in range(8):
            lines = b"".join(b"bg%d-%07d\t%s\n" % (rnd, i, b"v" * 200) for i in range(40000))
            r = subprocess.run([WALRUS, "-D", bg, "-o", "shared_buffers=1MB", "-o",
                                "bgwriter_delay=10ms", "-o", "supervisor_linger=2s", "load",
                                "--batch", "10"], input=lines, capture_output=True, timeout=300)
            check("load into a 1 MB pool", r.returncode == 0, r.stderr)
            rc, out, _ = run(bg, "stats", "--json")
            st = json.loads(out) if rc == 0 else {}
            b = st.get("buffers", {})
            if b.get("written_bgwriter", 0) > 0:
                break
        check("the background writer wrote pages", b.get("written_bgwriter", 0) > 0, b)
        rc, out, _ = run(bg, "verify")
        check("verify after evictions", rc == 0, out)
        stop_instance(bg)
        # A directory that is not walrus's, and one of another format version.
        other = os.path.join(base, "other")
        os.mkdir(other, 0o700)
        open(os.path.join(other, "precious.txt"), "w").write("keep me")
        rc, _, err = run(other, "put", "a", "b")
        check("a foreign directory is refused", rc == 3 and b"walrus" in err, (rc, err))
        check("the foreign file is untouched", open(os.path.join(other, "precious.txt")).read() == "keep me")
        ver = os.path.join(d, "WALRUS_VERSION")
        old = open(ver).read()
        open(ver, "w").write("999\n")
        rc, _, err = run(d, "get", "k1")
        check("an incompatible version is refused", rc == 3 and b"version" in err.lower(), (rc, err))
        open(ver, "w").write(old)
        rc, out, _ = run(d, "get", "k1")
        check("data intact after the refusals", rc == 0 and out == b"v1\n", (rc, out))
        stop_instance(d)
    finally:
        stop_instance(d)
        shutil.rmtree(base, ignore_errors=True)
    return summary()

if __name__ == "__main__":
    sys.exit(main())

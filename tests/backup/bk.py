"""What the base backup tests share (tests/backup): the durability suites'
helpers (tests/durability/wtest.py: instances, cleanup on every path) and
running `walrus backup` / `walrus restore`."""
import json, os, re, subprocess, sys

sys.dont_write_bytecode = True
HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "durability"))
import wtest  # noqa: E402,F401
from wtest import check  # noqa: E402

INCOMPLETE = "walrus.backup-incomplete"


def backup(w, dest, *extra, failpoints=None, timeout=300, fast=True):
    """`walrus -D SRC backup DEST` (--checkpoint fast unless @fast is false):
    the CompletedProcess."""
    args = ["--checkpoint", "fast"] if fast else []
    return w.run("backup", dest, *args, *extra, failpoints=failpoints, timeout=timeout)


def restore(exe, backup_dir, newdir, *extra, timeout=300):
    return subprocess.run([exe, "restore", "--from", backup_dir] + list(extra) + [newdir],
                          capture_output=True, timeout=timeout, env=wtest.Walrus.env())


def must(r, what):
    check(r.returncode == 0, f"{what}: exit {r.returncode}: "
          f"{r.stderr.decode(errors='replace').strip()[-800:]}")
    return r.stdout.decode(errors="replace")


def label(dest):
    with open(os.path.join(dest, "backup_label")) as f:
        return dict(re.findall(r"^(\w+) = (.*)$", f.read(), re.M))


def stats(w):
    r = w.run("stats", "--json", timeout=60)
    check(r.returncode == 0, f"walrus stats: {r.stderr.decode(errors='replace')}")
    return json.loads(r.stdout)


def lsn(s):
    hi, lo = s.split("/")
    return (int(hi, 16) << 32) | int(lo, 16)

#!/usr/bin/env python3
"""Archive recovery's own side, without `walrus backup`: a copy of a stopped
instance (a cold base backup) plus the WAL written after it, given
DIR/walrus.recovery by hand as `walrus restore` writes it.  Recovery to a
restore point, to its LSN and to a time between it and the next batch gives
exactly the first batch, on a new timeline (controldata, the history file),
leaves an ordinary directory that takes writes and verifies; the switch
record is crossed; a target past the WAL's end, an unknown restore point and
a target before the backup's end are refused with the reason, leaving the
copy as it was.  Prints 'N passed, N failed' last; leaves no process."""
import os, re, shutil, subprocess, sys, tempfile, time

sys.dont_write_bytecode = True  # no __pycache__ in the source tree
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from clitest import WALRUS, check, summary, wait_stopped  # noqa: E402

FAST = ["-o", "supervisor_linger=0"]
# The source lives across its commands: a shutdown checkpoint after the
# switch would recycle the segment before it, which only an archive keeps.
LIVE = ["-o", "supervisor_linger=60s"]


def run(d, *args, linger=FAST):
    r = subprocess.run([WALRUS, "-D", d] + linger + list(args), capture_output=True, timeout=120)
    return r.returncode, r.stdout.decode(), r.stderr.decode()


def must(d, *args, linger=FAST):
    rc, out, err = run(d, *args, linger=linger)
    if rc != 0:
        raise RuntimeError(f"walrus {' '.join(args)}: exit {rc}: {err}")
    return out.strip()


def stop(d):
    run(d, "stop", "--wait")
    wait_stopped(d)


def load(d, prefix, n):
    lines = "".join(f"{prefix}{i}\tv{i}\n" for i in range(n))
    r = subprocess.run([WALRUS, "-D", d] + LIVE + ["load", "--sync"], input=lines.encode(),
                       capture_output=True, timeout=120)
    if r.returncode != 0:
        raise RuntimeError(f"load: {r.stderr.decode()}")


def controldata(d, field):
    out = must(d, "controldata")
    m = re.search(rf"^{re.escape(field)}:\s+(.*)$", out, re.M)
    return m.group(1) if m else None


class Source:
    """An instance stopped and copied (the base backup), then batch A, a
    restore point, a WAL switch, batch B; its WAL copied while it runs."""

    def __init__(self, root):
        self.dir = os.path.join(root, "src")
        self.backup = os.path.join(root, "backup")
        must(self.dir, "-o", "create_if_missing=on", "put", "base", "1")
        stop(self.dir)
        shutil.copytree(self.dir, self.backup, symlinks=True)
        self.backup_end = controldata(self.backup, "Latest checkpoint location")
        # the first batch in a later segment: the earlier one is the old history
        must(self.dir, "switch-wal", linger=LIVE)
        load(self.dir, "a", 200)
        self.rp_lsn = must(self.dir, "restore-point", "rp1", linger=LIVE)
        self.rp_time_us = time.time_ns() // 1000
        # batch B must be inserted in a later millisecond than the target time
        while time.time_ns() // 1000 < self.rp_time_us + 2000:
            pass
        must(self.dir, "switch-wal", linger=LIVE)
        load(self.dir, "later-key-", 200)
        self.wal = os.path.join(root, "wal-copy")
        # A segment being made (NAME.tmp.PID) may be renamed while the copy
        # lists the directory; it holds nothing the copy needs.
        shutil.copytree(os.path.join(self.dir, "wal"), self.wal,
                        ignore=shutil.ignore_patterns("*.tmp.*"))
        stop(self.dir)

    def restore(self, root, name, settings, archive=None):
        new = os.path.join(root, name)
        shutil.copytree(self.backup, new, symlinks=True)
        if archive:
            os.makedirs(archive, mode=0o700)
            with open(os.path.join(new, "walrus.conf"), "w") as f:
                f.write(f"archive_mode = on\narchive_dir = '{archive}'\n")
        for f in os.listdir(self.wal):
            if re.fullmatch(r"[0-9A-F]{16}", f):
                shutil.copy(os.path.join(self.wal, f), os.path.join(new, "wal", f))
        text = f"backup_end_lsn = {self.backup_end}\nnew_timeline = 2\n" + settings
        with open(os.path.join(new, "walrus.recovery"), "w") as f:
            f.write(text)
        return new


def keys(d):
    out = must(d, "scan")
    return {line.split("\t")[0] for line in out.splitlines() if line}


def check_archived_after(name, new, archive):
    """The restored instance archives the new timeline from its branch point
    on: its history file and the branch's segment under timeline 2, never
    the segment before it, which holds only the old history."""
    got = sorted(os.listdir(archive))
    check(name + ": new timeline archived from the branch on",
          "00000002.history" in got and "000000020000000001000000" not in got, got)


def check_first_batch(name, src, new):
    try:
        k = keys(new)
    except RuntimeError as e:
        check(name + " opens", False, str(e))
        return
    want = {"base"} | {f"a{i}" for i in range(200)}
    check(name + ": exactly the first batch", k == want,
          f"{len(k)} keys, missing {sorted(want - k)[:3]}, extra {sorted(k - want)[:3]}")
    check(name + ": timeline 2", controldata(new, "Latest checkpoint's TimeLineID") == "2",
          controldata(new, "Latest checkpoint's TimeLineID"))
    hist = os.path.join(new, "wal", "00000002.history")
    check(name + ": history file", os.path.exists(hist) and
          open(hist).read().startswith("1\t"), hist)
    check(name + ": recovery file removed",
          not os.path.exists(os.path.join(new, "walrus.recovery")))
    rc, _, err = run(new, "put", "after", "x")
    check(name + ": takes writes", rc == 0, err)
    rc, _, err = run(new, "verify")
    check(name + ": verifies", rc == 0, err)
    stop(new)
    # the old history's later WAL must not come back after a restart
    check(name + ": no key of the abandoned history after a restart",
          not any(x.startswith("later-key-") for x in keys(new)) and "after" in keys(new))
    stop(new)
    # nothing of it is left in the WAL files either (cut off, not just unread)
    wal = os.path.join(new, "wal")
    left = [f for f in os.listdir(wal) if os.path.isfile(os.path.join(wal, f)) and
            b"later-key-" in open(os.path.join(wal, f), "rb").read()]
    check(name + ": the abandoned WAL is cut off", not left, left)


def check_refused(name, new, pattern):
    rc, out, err = run(new, "get", "base")
    check(name + ": refused", rc != 0 and re.search(pattern, err) is not None,
          f"exit {rc}: {err.strip()}")
    check(name + ": recovery file kept", os.path.exists(os.path.join(new, "walrus.recovery")))
    stop(new)


def check_switch_then_crash(root):
    """A switch record last in the WAL, then a crash: recovery ends at the
    next segment's start, where the WAL goes on (not inside the skipped rest)."""
    d = os.path.join(root, "switch-crash")
    must(d, "-o", "create_if_missing=on", "put", "k1", "1", linger=LIVE)
    end = must(d, "switch-wal", linger=LIVE)
    run(d, "stop", "--mode", "immediate", "--wait")
    must(d, "put", "k2", "2", linger=LIVE)
    run(d, "stop", "--mode", "immediate", "--wait")
    got = [run(d, "get", k)[1].strip() for k in ("k1", "k2")]
    check("switch then crash: both keys", got == ["1", "2"], got)
    log = open(os.path.join(d, "log", "walrus.log")).read()
    check("switch then crash: recovery ends at the next segment's start " + end,
          f"end of WAL at {end}:" in log, log[-800:])
    first = re.search(r"^lsn: (\S+) .* prev: (\S+) ", must(d, "waldump"), re.M)
    want = end[:-8] + "%08X" % (int(end[-8:], 16) + 40)  # after the long page header
    check("switch then crash: the WAL goes on there", first is not None and
          first.group(1) == want and first.group(2) < end, first and first.groups())
    stop(d)


def main():
    root = tempfile.mkdtemp(prefix="walrus-pitr-")
    src = None
    try:
        check_switch_then_crash(root)
        src = Source(root)
        arch = os.path.join(root, "wal-archive-new")
        new = src.restore(root, "by-name", "target = name\ntarget_name = rp1\n", archive=arch)
        check_first_batch("name", src, new)
        check_archived_after("name", new, arch)
        check_first_batch("lsn", src, src.restore(root, "by-lsn", "target = lsn\n"
                                                  f"target_lsn = {src.rp_lsn}\n"))
        check_first_batch("time", src, src.restore(root, "by-time", "target = time\n"
                                                   f"target_time = {src.rp_time_us}\n"))
        new = src.restore(root, "to-end", "target = end\n")
        k = keys(new)
        check("end: both batches", len(k) == 401, f"{len(k)} keys")
        stop(new)
        check_refused("beyond the end", src.restore(root, "beyond", "target = lsn\n"
                                                    "target_lsn = 7/0\n"),
                      r"the recovery target \(LSN 7/00000000\) lies past the end of the "
                      r"WAL, which goes from \S+ to \S+: ")
        check_refused("unknown name", src.restore(root, "noname", "target = name\n"
                                                  "target_name = nope\n"),
                      r'restore point "nope" not found in the WAL from \S+ to \S+ '
                      r'\(restore points there: "rp1"\)')
        check_refused("before the backup end", src.restore(root, "early", "target = lsn\n"
                                                           "target_lsn = 0/100\n"),
                      r"lies before the end of the base backup")
    except Exception as e:  # a failed step is a failure, reported with the rest
        check("steps", False, repr(e))
    finally:
        for d in os.listdir(root):
            if d != "wal-copy" and not d.startswith("wal-"):
                stop(os.path.join(root, d))
        shutil.rmtree(root, ignore_errors=True)
    return summary()


if __name__ == "__main__":
    sys.exit(main())

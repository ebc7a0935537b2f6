#!/usr/bin/env python3
"""The built-in copy (archive_dir) into a full file system (issue 16): the
archive directory is a small tmpfs (root needed; exit 77 = SKIP otherwise).
The archiver gets ENOSPC from the kernel: a WARNING naming the segment and
the cause at each retry, the unarchived WAL kept through checkpoints, no
temporary file left to hold the space; once the tmpfs is grown, it catches
up with no gap and the archived bytes equal DIR/wal's.  The tmpfs is
unmounted and the instance stopped on every path (a watchdog does it if
the test is killed).  Prints 'N passed, N failed' last."""
import os, re, subprocess, sys

sys.dont_write_bytecode = True  # no __pycache__ in the source tree
HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "durability"))
sys.path.insert(0, HERE)
import wtest  # noqa: E402
import test_archive as ta  # noqa: E402  (also brings clitest's WALRUS from argv[1])
from clitest import check, summary  # noqa: E402


def main(cleanup):
    if os.geteuid() != 0:
        print("SKIP: not root (mounting a tmpfs)")
        return wtest.SKIP
    root = wtest.tempdir(cleanup, "walrus-archive-full-")
    d, arc = os.path.join(root, "d"), os.path.join(root, "arc")
    os.mkdir(arc, 0o700)
    # room for 8 segments of 64 kB
    r = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=512k,mode=0700", "tmpfs", arc],
                       capture_output=True)
    if r.returncode != 0:
        print("SKIP: cannot mount a tmpfs: " + r.stderr.decode(errors="replace").strip())
        return wtest.SKIP
    cleanup.add_durable("umount", arc)
    ta.write_conf(d, {"archive_mode": "on", "archive_dir": arc})
    cleanup.add_durable("kill_dir", d)
    ta.start(d)
    ta.load(d, "k", 20 * ta.SEG)
    end = ta.switch(d)
    ta.wait_for("a failure", lambda: ta.arch(d)["failed_count"] >= 2)
    ta.must(d, "checkpoint")
    text = ta.log_text(d)
    check("full: WARNING naming the segment and ENOSPC",
          re.search(r'WARNING:  could not archive "00000001[0-9A-F]{16}": .*No space left on '
                    r'device', text) is not None, text[-1500:])
    archived = set(os.listdir(arc))
    lost = [s for s in range(ta.SEG, end, ta.SEG) if ta.aname(s) not in archived and
            not os.path.exists(os.path.join(d, "wal", f"{s:016X}"))]
    check("full: no unarchived segment recycled by the checkpoint", not lost,
          [f"{s:X}" for s in lost])
    tmp = [f for f in archived if not re.fullmatch(r"[0-9A-F]{24}", f)]
    check("full: no temporary file left holding the space", not tmp, tmp)
    subprocess.run(["mount", "-o", "remount,size=64m", arc], check=True)
    end2 = ta.switch(d)
    ta.wait_for("the archive to catch up", lambda: ta.caught_up(d, ta.aname(end2 - ta.SEG)))
    ta.check_archive("full", d, arc, ta.SEG, end2)
    ta.stop(d)
    return summary()


if __name__ == "__main__":
    wtest.guarded(main)

#!/usr/bin/env python3
"""A crash inside the end-of-promotion checkpoint never brings the directory
back as a standby on the old timeline.

The checkpointer writes the control file (new timeline, promotion decided)
before the checkpoint's record, the first WAL of the new timeline; a start
that finds the standby's settings and that control file completes the
promotion.  Each round kills the standby's checkpointer at one step
(failpoints "step:KILL:promotion-decided", after the control file and before
walrus.standby goes; "step:KILL:promotion-record-written", after the record
is flushed and before the control file records it) and checks that
`walrus promote` still ends in a primary on timeline 2, with walrus.standby
gone, every key of the primary, a write accepted and verify clean.

Both standbys come from the same primary and archive into its archive: the
second promotion picks timeline 3 (one above every timeline the archive
holds), so neither history nor segment clashes there."""
import os

import sb
import wtest
from wtest import check, log

KEYS = 300


def one_round(cleanup, exe, root, p, archive, n, step):
    tli = n + 2  # the first round's promotion holds timeline 2 in the archive
    sdir = os.path.join(root, f"standby{n}")
    sb.must(p.run("backup", sdir, "--checkpoint", "fast"), "backup")
    s = wtest.Walrus(exe, sdir)
    s.register(cleanup)
    st = sb.Standby(s, ["--wal-archive", archive], failpoints="step:KILL:" + step)
    st.start()
    lines = "".join(f"{step}-{i:04d}\tv{i}\n" for i in range(KEYS))
    sb.must(p.run("load", "--sync", input=lines.encode()), "load")
    end = sb.lsn(sb.must(p.run("switch-wal"), "switch-wal").strip())
    sb.wait_replayed(s, end)
    expected = sb.scan(p)

    log(f"promotion with the checkpointer killed at {step}")
    try:
        out = sb.must(s.run("promote", timeout=120), "promote")
    except Exception:
        log("the standby's log:\n" + s.log_tail(n=60))
        raise
    check(out.strip() == "promoted", f"promote's answer: {out!r}")
    check(s.log_has(r"failpoint: killing the process at step of \"" + step),
          f"the failpoint at {step} did not fire:\n{s.log_tail()}")
    # Killed before walrus.standby went, the start completes the promotion;
    # after, it starts as the primary: either way the promote waiter learns it.
    if step == "promotion-decided":
        check(s.log_has(rf"the promotion to timeline {tli} was decided before the instance "
                        "stopped"), "the restart did not complete the promotion:\n" + s.log_tail())
    check(s.log_has(rf"promoted: timeline {tli} \(completed by a restart after a crash\)"),
          "the promotion's waiter was not answered after the restart:\n" + s.log_tail())
    check(not os.path.exists(os.path.join(sdir, "walrus.standby")), "walrus.standby left")
    cd = s.controldata()
    check(cd.get("Latest checkpoint's TimeLineID") == str(tli), f"timeline: {cd}")
    check(sb.stats(s)["standby"]["active"] == 0, "still a standby")
    check(sb.scan(s) == expected, "the promoted standby's keys differ from the primary's")
    sb.must(s.run("put", "after-" + step, "x"), "a put after the promotion")
    sb.must(s.run("checkpoint"), "a checkpoint after the promotion")
    check(s.controldata().get("Promotion decided") == "no", "the flag outlives a checkpoint")
    sb.must(s.run("verify"), "verify")
    # Its history and first segment reach the archive next to the other
    # promotion's: different timelines, nothing refused.
    sb.must(s.run("switch-wal"), "switch-wal")
    hist = os.path.join(archive, f"{tli:08X}.history")
    check(wtest.wait_for(lambda: sb.stats(s)["archiver"]["archive_pending_bytes"] == 0 and
                         os.path.exists(hist), 60),
          f"the promoted standby's WAL is not archived: {sb.stats(s)['archiver']}")
    check(not s.log_has(r"could not archive"), "archiving failed:\n" + s.log_tail())
    st.stop()


def main(cleanup):
    exe, root = sb.setup(cleanup, "promote-crash")
    p, archive = sb.archiving_primary(cleanup, exe, root)
    for n, step in enumerate(("promotion-decided", "promotion-record-written")):
        one_round(cleanup, exe, root, p, archive, n, step)
    return 0


if __name__ == "__main__":
    wtest.guarded(main)

#!/usr/bin/env python3
"""WAL archiving (archive_mode, walrus-arch), black-box through the `walrus`
command.  One scenario per run (argv[2]), each registered as its own test:

  order     archive_dir: every completed segment archived once, in order,
            under TIMELINE+LSN names, with the bytes of DIR/wal's copy;
            switch-wal completes the current segment; the statistics agree
  failing   archive_command failing while a flag file exists: WARNINGs
            naming the segment and the command's output, WAL kept through
            checkpoints, then caught up with no gap, then recycled
  enospc    the same with the archive full (the command writes to
            /dev/full): retried, nothing lost
  shutdown  a clean shutdown waits for every completed segment to be
            archived (the archive starts working only after the shutdown
            checkpoint)
  timeout   archive_timeout switches a segment holding WAL so that it gets
            archived without more WAL
  options   the options through walrus.conf, `config set` (quoting), -o;
            archive_mode=on needs exactly one of archive_dir and
            archive_command; too long a value is refused naming the option;
            stats --json stays valid with quotes in the command

Each run uses its own temporary directories and leaves no process behind.
Prints 'N passed, N failed' last."""
import json, os, re, shutil, signal, subprocess, sys, tempfile, time

sys.dont_write_bytecode = True  # no __pycache__ in the source tree
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "cli"))
from clitest import WALRUS, check, summary, wait_stopped  # noqa: E402

SEG = 64 * 1024
# Small segments so that a little data fills many; checkpoints only when
# asked for, so that DIR/wal keeps the segments to compare with.
BASE_CONF = {
    "wal_segment_size": "64kB",
    "max_wal_size": "32MB",
    "min_wal_size": "1MB",
    "checkpoint_timeout": "1h",
    "supervisor_linger": "60s",
}
WAIT_S = 40


def conf_quote(v):
    return "'" + v.replace("'", "''") + "'"


def write_conf(d, extra):
    os.makedirs(d, mode=0o700, exist_ok=True)
    conf = dict(BASE_CONF, **extra)
    with open(os.path.join(d, "walrus.conf"), "w") as f:
        for k, v in conf.items():
            f.write(f"{k} = {conf_quote(v)}\n")


def run(d, *args, inp=None, timeout=120):
    r = subprocess.run([WALRUS, "-D", d] + list(args), input=inp, capture_output=True,
                       timeout=timeout)
    return r.returncode, r.stdout.decode(), r.stderr.decode()


def must(d, *args, inp=None):
    rc, out, err = run(d, *args, inp=inp)
    if rc != 0:
        raise RuntimeError(f"walrus {' '.join(args)}: exit {rc}: {err}")
    return out.strip()


def start(d):
    must(d, "-o", "create_if_missing=on", "put", "first", "1")


def stop(d):
    run(d, "stop", "--wait")
    if not wait_stopped(d, 90):
        pid = open(os.path.join(d, "walrus.pid")).readline().split()[0]
        os.kill(int(pid), signal.SIGKILL)
        wait_stopped(d, 30)


def load(d, prefix, nbytes):
    """Writes about nbytes of values (durable) through `walrus load`."""
    n = nbytes // 200
    lines = "".join(f"{prefix}{i:06d}\t{'v' * 180}\n" for i in range(n))
    must(d, "load", "--sync", inp=lines.encode())


def stats(d):
    return json.loads(must(d, "stats", "--json"))


def arch(d):
    return stats(d)["archiver"]


def parse_lsn(s):
    hi, lo = s.strip('"').split("/")
    return int(hi, 16) << 32 | int(lo, 16)


def aname(seg_start, tli=1):
    return f"{tli:08X}{seg_start:016X}"


def wait_for(what, pred, timeout=WAIT_S):
    """Polls pred (reads of counters and files) until true; the deadline
    only turns a hang into a failure."""
    deadline = time.monotonic() + timeout
    while True:
        v = pred()
        if v:
            return v
        if time.monotonic() > deadline:
            raise TimeoutError(f"timed out waiting for {what}")
        time.sleep(0.1)


def log_text(d):
    with open(os.path.join(d, "log", "walrus.log"), errors="replace") as f:
        return f.read()


def switch(d):
    """Ends the current segment; returns its end (every segment before is complete)."""
    out = must(d, "switch-wal")
    end = parse_lsn(out.split()[-1])
    return end if end else parse_lsn(stats(d)["wal"]["insert_lsn"]) // SEG * SEG


def check_archive(tag, d, arc, first, end, compare=True):
    """ARC holds exactly the segments first .. end-SEG, no gap, no temp file,
    each with the bytes of DIR/wal's copy."""
    names = sorted(os.listdir(arc))
    want = [aname(s) for s in range(first, end, SEG)]
    check(f"{tag}: archive holds every completed segment in order", names == want,
          f"got {names[:3]}..{names[-3:]} ({len(names)}), want {want[:3]}..{want[-3:]} "
          f"({len(want)})")
    if not compare:
        return
    bad, compared = [], 0
    for s in range(first, end, SEG):
        try:  # a crash restart's checkpoint recycles the archived ones
            with open(os.path.join(d, "wal", f"{s:016X}"), "rb") as f:
                mine = f.read()
        except FileNotFoundError:
            continue
        compared += 1
        try:
            with open(os.path.join(arc, aname(s)), "rb") as f:
                theirs = f.read()
        except FileNotFoundError:
            theirs = None
        if mine != theirs:
            bad.append(aname(s))
    check(f"{tag}: archived bytes equal DIR/wal's", not bad and compared >= 2,
          f"differ: {bad[:5]}, {compared} compared")


def caught_up(d, last):
    a = arch(d)
    return a["last_archived"] == last and a["archive_pending_bytes"] == 0 and a


# ---------------------------------------------------------------- scenarios

def scenario_order(root):
    d, arc = os.path.join(root, "d"), os.path.join(root, "arc")
    os.mkdir(arc)
    write_conf(d, {"archive_mode": "on", "archive_dir": arc})
    try:
        start(d)
        load(d, "k", 12 * SEG)
        end = switch(d)
        a = wait_for("the archive to catch up", lambda: caught_up(d, aname(end - SEG)))
        check_archive("order", d, arc, SEG, end)
        n = len(range(SEG, end, SEG))
        check("order: archived_count counts each segment once", a["archived_count"] == n,
              f"{a['archived_count']} != {n}")
        check("order: nothing failed", a["failed_count"] == 0 and a["last_failed"] == "", a)
        check("order: last_archived_time is set", a["last_archived_time"] > 0, a)
        status = os.listdir(os.path.join(d, "wal", "archive_status"))
        check("order: each archived segment is .done",
              sorted(status) == sorted(f"{s:016X}.done" for s in range(SEG, end, SEG)),
              status)
        check("order: the archiver runs as walrus-arch",
              "walrus-arch LOG:  archiver started: timeline 1" in log_text(d))
    finally:
        stop(d)


def children_named(pid, comm):
    out = []
    for p in os.listdir("/proc"):
        try:
            st = open(f"/proc/{p}/stat").read()
        except (OSError, ValueError):
            continue
        name, rest = st[st.index("(") + 1:st.rindex(")")], st[st.rindex(")") + 2:].split()
        if name == comm and int(rest[1]) == pid:
            out.append(int(p))
    return out


def scenario_crash(root):
    d, arc = os.path.join(root, "d"), os.path.join(root, "arc")
    os.mkdir(arc)
    write_conf(d, {"archive_mode": "on", "archive_dir": arc})
    try:
        start(d)
        load(d, "k", 4 * SEG)
        end = switch(d)
        wait_for("the archive to catch up", lambda: caught_up(d, aname(end - SEG)))
        sup = stats(d)["instance"]["supervisor_pid"]
        arch_pids = children_named(sup, "walrus-arch")
        check("crash: one walrus-arch child of the supervisor", len(arch_pids) == 1, arch_pids)
        # its last .done lost, as if killed between the copy and the rename
        os.rename(os.path.join(d, "wal", "archive_status", f"{end - SEG:016X}.done"),
                  os.path.join(d, "wal", "archive_status", f"{end - SEG:016X}.ready"))
        os.kill(arch_pids[0], signal.SIGKILL)
        wait_for("the crash restart", lambda: stats(d)["instance"]["crash_restarts"] == 1)
        wait_for("a new walrus-arch", lambda: children_named(sup, "walrus-arch"))
        load(d, "m", 4 * SEG)
        end2 = switch(d)
        wait_for("the archive to catch up", lambda: caught_up(d, aname(end2 - SEG)))
        check_archive("crash", d, arc, SEG, end2)
        check("crash: the segment archived again with the same bytes counts as archived",
              os.path.exists(os.path.join(d, "wal", "archive_status", f"{end - SEG:016X}.done")))
    finally:
        stop(d)


def scenario_history(root):
    d, arc = os.path.join(root, "d"), os.path.join(root, "arc")
    os.mkdir(arc)
    write_conf(d, {"archive_mode": "on", "archive_dir": arc})
    try:
        start(d)
        stop(d)
        text = "1\t0/00020000\tno recovery target\n"
        with open(os.path.join(d, "wal", "00000002.history"), "w") as f:
            f.write(text)
        start(d)
        load(d, "k", 2 * SEG)
        end = switch(d)
        wait_for("the archive to catch up", lambda: caught_up(d, aname(end - SEG)))
        check("history: the history file is archived under its name",
              open(os.path.join(arc, "00000002.history")).read() == text)
        check("history: and marked .done",
              os.path.exists(os.path.join(d, "wal", "archive_status", "00000002.history.done")))
        check("history: counted with the segments",
              stats(d)["archiver"]["archived_count"] == 1 + len(range(SEG, end, SEG)))
    finally:
        stop(d)


def scenario_injection(root):
    """A file in DIR/wal named like a history file with shell syntax in it is
    ignored (one WARNING), never pasted into archive_command, and archiving
    goes on; %p is relative to the data directory, where the command runs."""
    d, arc = os.path.join(root, "d"), os.path.join(root, "arc")
    os.mkdir(arc)
    write_conf(d, {"archive_mode": "on", "archive_command": f"cp %p '{arc}/%f'"})
    try:
        start(d)
        stop(d)
        bad = "$(id>zz).history"
        with open(os.path.join(d, "wal", bad), "w") as f:
            f.write("1\t0/00020000\tno recovery target\n")
        start(d)
        load(d, "k", 2 * SEG)
        end = switch(d)
        wait_for("the archive to catch up", lambda: caught_up(d, aname(end - SEG)))
        made = [os.path.join(dp, "zz") for dp, _, fs in os.walk(root) if "zz" in fs]
        check("injection: the file's name ran nothing", not made, made)
        check("injection: every segment archived past the stray file",
              all(os.path.exists(os.path.join(arc, aname(s))) for s in range(SEG, end, SEG)),
              sorted(os.listdir(arc)))
        text = log_text(d)
        check("injection: one WARNING names it",
              text.count("archiver: ignoring \"$(id>zz).history\"") == 1, text[-1500:])
    finally:
        stop(d)


def failing_then_ok(root, tag, bad_cmd, expect):
    d, arc = os.path.join(root, "d"), os.path.join(root, "arc")
    flag = os.path.join(root, "flag")
    os.mkdir(arc)
    open(flag, "w").close()
    cmd = (f"if [ -e '{flag}' ]; then {bad_cmd}; else cp %p '{arc}/%f.tmp' && "
           f"mv '{arc}/%f.tmp' '{arc}/%f'; fi")
    write_conf(d, {"archive_mode": "on", "archive_command": cmd})
    try:
        start(d)
        load(d, "k", 10 * SEG)
        end = switch(d)
        wait_for("a failure", lambda: arch(d)["failed_count"] >= 2)
        must(d, "checkpoint")
        load(d, "m", 2 * SEG)
        must(d, "checkpoint")
        st = stats(d)
        a = st["archiver"]
        check(f"{tag}: nothing archived while failing",
              a["archived_count"] == 0 and os.listdir(arc) == [], a)
        check(f"{tag}: the failed segment is the first", a["last_failed"] == aname(SEG), a)
        check(f"{tag}: the WAL held back is counted",
              wait_for("archive_pending_bytes", lambda: arch(d)["archive_pending_bytes"] >=
                       end - SEG), a)
        redo = parse_lsn(st["checkpoints"]["last"]["redo_lsn"])
        kept = [s for s in range(SEG, end, SEG)
                if not os.path.exists(os.path.join(d, "wal", f"{s:016X}"))]
        check(f"{tag}: checkpoints past them recycled no unarchived segment",
              redo > end and not kept, f"redo {redo:X}, missing {kept}")
        text = log_text(d)
        check(f"{tag}: WARNING naming the segment and the cause",
              re.search(rf'WARNING:  could not archive "{aname(SEG)}": archive_command exited '
                        rf'with code \d+: .*{re.escape(expect)}', text) is not None,
              text[-2000:])
        os.unlink(flag)
        end2 = switch(d)
        wait_for("the archive to catch up", lambda: caught_up(d, aname(end2 - SEG)))
        check_archive(tag, d, arc, SEG, end2)
        must(d, "checkpoint")
        gone = not os.path.exists(os.path.join(d, "wal", f"{SEG:016X}"))
        done = os.path.exists(os.path.join(d, "wal", "archive_status", f"{SEG:016X}.done"))
        check(f"{tag}: once archived, the next checkpoint recycles (and forgets .done)",
              gone and not done, f"segment gone {gone}, .done left {done}")
    finally:
        if os.path.exists(flag):
            os.unlink(flag)
        stop(d)


def scenario_failing(root):
    failing_then_ok(root, "failing", "echo archive host unreachable >&2; exit 3",
                    "archive host unreachable")


def scenario_enospc(root):
    failing_then_ok(root, "enospc", "cat %p > /dev/full", "No space left on device")


def scenario_shutdown(root):
    d, arc = os.path.join(root, "d"), os.path.join(root, "arc")
    flag = os.path.join(root, "flag")
    os.mkdir(arc)
    open(flag, "w").close()
    cmd = f"test ! -e '{flag}' && cp %p '{arc}/%f'"
    write_conf(d, {"archive_mode": "on", "archive_command": cmd})
    stopper = None
    try:
        start(d)
        load(d, "k", 6 * SEG)
        wait_for("a failure", lambda: arch(d)["failed_count"] >= 1)
        stopper = subprocess.Popen([WALRUS, "-D", d, "stop", "--wait"],
                                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        wait_for("the shutdown checkpoint",
                 lambda: "checkpoint complete (shutdown)" in log_text(d))
        check("shutdown: the instance waits for the archiver", stopper.poll() is None)
        os.unlink(flag)
        check("shutdown: stop returns once archived", stopper.wait(timeout=WAIT_S) == 0)
        wait_stopped(d, 30)
        m = re.search(r"^Latest checkpoint location:\s+(\S+)", must(d, "controldata"), re.M)
        ckpt = parse_lsn(m.group(1))
        names = sorted(os.listdir(arc))
        want = [aname(s) for s in range(SEG, ckpt - ckpt % SEG, SEG)]
        check("shutdown: every segment completed before the shutdown is archived",
              names[:len(want)] == want and len(want) >= 5, f"{names} vs {want}")
        status = os.listdir(os.path.join(d, "wal", "archive_status"))
        check("shutdown: no .ready left", not [s for s in status if s.endswith(".ready")],
              status)
        check("shutdown: said so in the log",
              "every completed WAL segment is archived" in log_text(d))
    finally:
        if os.path.exists(flag):
            os.unlink(flag)
        if stopper is not None and stopper.poll() is None:
            stopper.wait(timeout=90)
        stop(d)


def scenario_timeout(root):
    d, arc = os.path.join(root, "d"), os.path.join(root, "arc")
    os.mkdir(arc)
    write_conf(d, {"archive_mode": "on", "archive_dir": arc, "archive_timeout": "1s"})
    try:
        start(d)
        must(d, "put", "lonely", "value")
        seg = parse_lsn(stats(d)["wal"]["insert_lsn"]) // SEG * SEG
        wait_for("archive_timeout's switch", lambda: aname(seg) in os.listdir(arc))
        st = stats(d)
        check("timeout: the segment was switched (the insert position moved on)",
              parse_lsn(st["wal"]["insert_lsn"]) >= seg + SEG, st["wal"])
        check("timeout: its bytes are DIR/wal's",
              open(os.path.join(arc, aname(seg)), "rb").read() ==
              open(os.path.join(d, "wal", f"{seg:016X}"), "rb").read())
    finally:
        stop(d)


def scenario_options(root):
    d = os.path.join(root, "d")
    write_conf(d, {})
    # archive_command with blanks and quotes, through config set (quoted in the file)
    cmd = """cp %p "/tmp/x y/%f" && echo 'it''s' \\done"""
    rc, out, err = run(d, "config", "set", "archive_command", cmd)
    check("options: config set takes a command with blanks and quotes", rc == 0, err)
    rc, out, err = run(d, "config", "get", "archive_command")
    check("options: config get reads it back verbatim", out.rstrip("\n") == cmd, repr(out))
    line = [ln for ln in open(os.path.join(d, "walrus.conf")) if ln.startswith("archive_command")]
    check("options: walrus.conf holds it single-quoted",
          line == [f"archive_command = {conf_quote(cmd)}\n"], line)
    rc, out, err = run(d, "config", "set", "archive_dir", "x" * 1100)
    check("options: too long a value is refused naming the option",
          rc != 0 and "archive_dir" in err, err)
    rc, out, err = run(d, "config", "set", "archive_mode", "on")
    check("options: archive_mode=on with a command is accepted", rc == 0, err)
    rc, out, err = run(d, "-o", "archive_dir=/tmp", "-o", "create_if_missing=on", "put", "x", "1")
    check("options: archive_dir and archive_command both set: refused naming both",
          rc != 0 and "archive_dir" in err and "archive_command" in err, err)
    rc, out, err = run(d, "config", "set", "archive_command", "")
    check("options: a file with archive_mode=on and no way to archive is refused",
          rc != 0 and "archive_dir" in err and "archive_command" in err, err)
    rc, out, err = run(d, "-o", "archive_dir=relative/dir", "-o", "archive_command=", "-o",
                       "create_if_missing=on", "put", "x", "1")
    check("options: a relative archive_dir is refused", rc != 0 and "absolute" in err, err)
    rc, out, err = run(d, "-o", "archive_mode=on", "-o", "archive_command=", "-o",
                       "create_if_missing=on", "put", "x", "1")
    check("options: -o archive_mode=on with neither set: the start fails",
          rc != 0 and "archive_dir" in err and "archive_command" in err, err)
    try:
        # the file's command (with quotes) is in force: stats stays valid JSON
        rc, out, err = run(d, "-o", "create_if_missing=on", "put", "x", "1")
        check("options: starts with the file's settings", rc == 0, err)
        st = stats(d)
        check("options: stats --json shows the command as set",
              st["settings"]["archive_command"]["value"] == cmd and
              st["settings"]["archive_command"]["source"] == "file", st["settings"].get(
                  "archive_command"))
        check("options: stats has the archiver's figures",
              set(st["archiver"]) >= {"archived_count", "last_archived", "last_archived_time",
                                      "failed_count", "last_failed", "last_failed_time",
                                      "archive_pending_bytes"}, st["archiver"])
        rc, out, err = run(d, "config", "list")
        check("options: config list shows it",
              re.search(r"^archive_command\s+" + re.escape(cmd), out, re.M) is not None, out)
    finally:
        stop(d)


SCENARIOS = {n[len("scenario_"):]: f for n, f in globals().items() if n.startswith("scenario_")}


def main():
    name = sys.argv[2] if len(sys.argv) > 2 else ""
    if name not in SCENARIOS:
        print(f"usage: test_archive.py WALRUS {{{','.join(SCENARIOS)}}}")
        return 2
    root = tempfile.mkdtemp(prefix=f"walrus-archive-{name}-")
    try:
        SCENARIOS[name](root)
    except (RuntimeError, TimeoutError, subprocess.TimeoutExpired, OSError) as e:
        check(f"{name}: ran to the end", False, str(e))
    finally:
        shutil.rmtree(root, ignore_errors=True)
    return summary()


if __name__ == "__main__":
    sys.exit(main())

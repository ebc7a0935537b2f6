#!/usr/bin/env python3
"""A standby in one command: `walrus -D DIR standby --primary ADDR` on a
missing or empty DIR takes a base backup over the replication connection
(BASE_BACKUP), then streams as any standby:

- a missing DIR, while a writer keeps committing on the primary: the
  standby comes up consistent, every key acknowledged before then is on
  it, a later write arrives by streaming; promoted, it verifies clean;
- an empty existing DIR works the same; the progress lines on stderr
  advance and end at 100%;
- refused, with DIR untouched or removed/emptied again and an error naming
  the cause: a non-empty directory that is not walrus's, a missing DIR
  without --primary (usage), a wrong password, a standby given as the
  primary (it refuses, saying it is a standby), and a WAL sender killed in
  the middle of the transfer, after which a local `walrus backup` of the
  primary works (the supervisor ended the forced full-page writes the
  sender held);
- a primary that does not listen yet: the base backup says it retries, and
  completes once the primary is up."""
import argparse, os, re, signal, subprocess, threading

import sb
import wtest
from wtest import check, log

OPTS = ["wal_segment_size=1MB", "min_wal_size=2MB", "max_wal_size=4MB"]


def write(p, tag, n=50):
    lines = "".join(f"{tag}{i:04d}\tvalue-{tag}-{i}\n" for i in range(n))
    sb.must(p.run("load", "--sync", input=lines.encode()), f"load {tag}")


class Writer:
    """`walrus load --sync --ack` fed without end until stopped: its acks
    say which keys the primary made durable."""

    def __init__(self, p, tag):
        self.proc = subprocess.Popen(p.argv("load", "--sync", "--ack"), stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                                     env=p.env())
        self.acked, self.stop, self.tag = [], threading.Event(), tag
        self.cond = threading.Condition()
        threading.Thread(target=self._feed, daemon=True).start()
        threading.Thread(target=self._read, daemon=True).start()

    def _feed(self):
        i = 0
        try:
            while not self.stop.is_set():
                self.proc.stdin.write(f"{self.tag}{i:06d}\tv{i}\n".encode())
                self.proc.stdin.flush()
                i += 1
        except BrokenPipeError:
            pass
        finally:
            self.proc.stdin.close()

    def _read(self):
        for line in self.proc.stdout:
            with self.cond:
                self.acked.append(line.decode().split(" ", 1)[1].strip())
                self.cond.notify_all()

    def wait_acked(self, n):
        with self.cond:
            check(self.cond.wait_for(lambda: len(self.acked) >= n, 60),
                  f"the writer acknowledged only {len(self.acked)} keys")

    def snapshot(self):
        with self.cond:
            return list(self.acked)

    def finish(self):
        self.stop.set()
        check(self.proc.wait(60) == 0, f"the writer exited with {self.proc.returncode}")


def standby_cmd(s, *args, password="secret"):
    env = s.env()
    env["WALRUS_REPLICATION_PASSWORD"] = password
    return subprocess.run(s.argv("standby", *args), capture_output=True, env=env, timeout=120)


def refused(r, code, what, pattern):
    err = r.stderr.decode(errors="replace")
    check(r.returncode == code, f"{what}: exit {r.returncode}, not {code}: {err}")
    check(pattern in err, f"{what}: the error does not say {pattern!r}: {err}")
    log(f"  {what}: {err.strip().splitlines()[-1][:200]}")


def caught_up(p, s):
    sb.wait_replayed(s, sb.lsn(sb.stats(p)["wal"]["flush_lsn"]))


def check_progress(err, sdir):
    """The progress lines of SDIR's base backup advance and end at 100%, the
    whole received (a backup shorter than the first interval used to show
    one line only, "0.0 of N MiB received (0%)")."""
    end = err.find(f'base backup from the primary complete in "{sdir}"')
    begin = err.rfind("standby: taking a base backup from", 0, end)
    stop = err.find("standby: base backup complete", end)
    lines = re.findall(r"standby: base backup: ([\d.]+) of ([\d.]+) MiB received \((\d+)%\)",
                       err[begin:stop])
    done = [float(d) for d, _, _ in lines]
    check(lines and done == sorted(done) and lines[-1][2] == "100" and done[-1] > 0
          and lines[-1][0] == lines[-1][1], f"progress of {sdir}: {lines}")


def one_command_standby(cleanup, a, p, sock, sdir, writer_tag=None):
    """walrus standby --primary on SDIR: ready, same data, streaming; (Walrus, Standby)."""
    s = wtest.Walrus(a.walrus, sdir, OPTS)
    s.register(cleanup)
    w = None
    if writer_tag:
        w = Writer(p, writer_tag)
        w.wait_acked(20)  # writing before the backup begins, and on through it
    os.environ["WALRUS_REPLICATION_PASSWORD"] = "secret"
    st = sb.Standby(s, ["--primary", sock])
    st.start()
    if w is not None:
        acked = w.snapshot()  # all acknowledged before the standby was consistent
        w.finish()
        caught_up(p, s)
        on_standby = dict(sb.scan(s))
        missing = [k for k in acked if k not in on_standby]
        check(not missing, f"{len(missing)} acknowledged keys missing, e.g. {missing[:3]}")
        log(f"  {len(acked)} keys acknowledged during the backup are on the standby")
    # Before the supervisor starts its log file, messages go to stderr.
    with open(os.path.join(os.path.dirname(sdir), "standby.stderr"), errors="replace") as f:
        err = f.read()
    check(f'base backup from the primary complete in "{sdir}"' in err,
          "walrus standby's output does not show the base backup")
    check_progress(err, sdir)
    write(p, "after-" + os.path.basename(sdir) + "-")
    caught_up(p, s)
    check(sb.scan(s) == sb.scan(p), "the standby's data differ from the primary's")
    check(sb.stats(s)["replication"]["receiver"]["state"] == "streaming", "not streaming")
    return s, st


def slow_checkpoint(cleanup, a, p, sock, sdir):
    """The primary's checkpointer stopped (SIGSTOP) while a standby with
    wal_sender_timeout=1s and checkpoint_timeout=1s waits for the backup's
    checkpoint: the primary's KEEPALIVEs keep it waiting (it says so), and
    the backup completes once the checkpointer goes on.  The standby used to
    give up after its own two timeouts, whatever the primary's checkpoint
    needed."""
    ckpt = wtest.named(wtest.instance_pids(p.dir), "walrus-ckpt")
    check(len(ckpt) == 1, f"the primary's checkpointer: {ckpt}")
    s = wtest.Walrus(a.walrus, sdir, OPTS + ["wal_sender_timeout=1s", "checkpoint_timeout=1s"])
    s.register(cleanup)
    err_path = sdir + ".stderr"
    err = open(err_path, "wb")
    os.kill(ckpt[0], signal.SIGSTOP)
    cleanup.add(lambda: wtest.kill_pids(ckpt, signal.SIGCONT))
    env = s.env()
    env["WALRUS_REPLICATION_PASSWORD"] = "secret"
    proc = subprocess.Popen(s.argv("standby", "--primary", sock), stdin=subprocess.DEVNULL,
                            stdout=err, stderr=err, env=env)
    err.close()
    s.serve_proc = proc  # killed with the instance at cleanup

    def said(text):
        with open(err_path, errors="replace") as f:
            return text in f.read()

    def waiting():
        check(proc.poll() is None or said("still waiting"),
              f"walrus standby gave up while the primary checkpointed: exit {proc.poll()}: "
              f"{open(err_path, errors='replace').read()[-600:]}")
        return said("still waiting for the primary's checkpoint")
    check(wtest.wait_for(waiting, 60), "walrus standby does not say it waits")
    wtest.kill_pids(ckpt, signal.SIGCONT)
    check(wtest.wait_for(lambda: said("base backup from the primary complete"), 60),
          f"the backup did not complete: {open(err_path, errors='replace').read()[-600:]}")
    check(wtest.wait_for(lambda: s.log_has(r"instance is ready"), 60), "the standby is not ready")
    sb.must(s.run("stop", "--wait"), "stop the standby")
    check(proc.wait(60) == 0, f"walrus standby exited with {proc.returncode}")
    log("  the standby waited through the primary's stopped checkpoint")


def primary_not_up_yet(cleanup, a, p, sock, sdir):
    """`walrus standby --primary` started before its primary: the connection
    is refused, the base backup retries with a back-off and says so, and it
    completes once the primary listens (it used to fail at once)."""
    p.kill_instance()
    s = wtest.Walrus(a.walrus, sdir, OPTS)
    s.register(cleanup)
    err_path = sdir + ".stderr"
    err = open(err_path, "wb")
    env = s.env()
    env["WALRUS_REPLICATION_PASSWORD"] = "secret"
    proc = subprocess.Popen(s.argv("standby", "--primary", sock), stdin=subprocess.DEVNULL,
                            stdout=err, stderr=err, env=env)
    err.close()
    s.serve_proc = proc

    def said(text):
        with open(err_path, errors="replace") as f:
            return text in f.read()

    def retrying():
        check(proc.poll() is None, f"walrus standby gave up on a primary not up yet: exit "
              f"{proc.poll()}: {open(err_path, errors='replace').read()[-600:]}")
        return said("retrying in") and said("(attempt 2)")
    check(wtest.wait_for(retrying, 60), "walrus standby does not say it retries")
    p.serve()
    check(wtest.wait_for(lambda: said("base backup from the primary complete"), 90),
          f"the backup did not complete: {open(err_path, errors='replace').read()[-600:]}")
    check(wtest.wait_for(lambda: s.log_has(r"instance is ready"), 60), "the standby is not ready")
    caught_up(p, s)
    check(sb.scan(s) == sb.scan(p), "the standby's data differ from the primary's")
    sb.must(s.run("stop", "--wait"), "stop the standby")
    check(proc.wait(60) == 0, f"walrus standby exited with {proc.returncode}")


def main(cleanup):
    ap = argparse.ArgumentParser()
    ap.add_argument("--walrus", default=wtest.default_walrus())
    a = ap.parse_args()
    root = wtest.tempdir(cleanup, "walrus-standby-basebackup-")
    p, sock = sb.listening_primary(cleanup, a.walrus, root, OPTS)
    write(p, "a", 500)
    sb.must(p.run("stop", "--wait"), "stop")
    p.serve()

    log("a missing directory, a writer committing throughout")
    s1, st1 = one_command_standby(cleanup, a, p, sock, os.path.join(root, "s1"), "w")

    log("an empty directory")
    s2dir = os.path.join(root, "s2")
    os.mkdir(s2dir, 0o700)
    s2, st2 = one_command_standby(cleanup, a, p, sock, s2dir)
    st2.stop()

    log("a primary's checkpoint longer than the standby's timeouts")
    slow_checkpoint(cleanup, a, p, sock, os.path.join(root, "s3"))

    log("the copy of walrus.conf carries no password and no primary's settings")
    for sdir in (s1.dir, s2dir):
        with open(os.path.join(sdir, "walrus.conf")) as f:
            conf = f.read()
        for name in ("replication_password", "listen_replication"):
            check(f"# {name}: not copied by the base backup" in conf and
                  f"\n{name} =" not in "\n" + conf, f"{sdir}/walrus.conf:\n{conf}")
        for dirpath, _, files in os.walk(sdir):
            # walrus.standby holds the password the standby itself was given
            # (WALRUS_REPLICATION_PASSWORD) to connect with: its own
            for fn in (f for f in files if f != "walrus.standby"):
                if not os.path.isfile(os.path.join(dirpath, fn)):
                    continue  # the instance's sockets
                with open(os.path.join(dirpath, fn), "rb") as f:
                    check(b"secret" not in f.read(),
                          f"the primary's password is in {os.path.join(dirpath, fn)}")
    with open(os.path.join(p.dir, "walrus.conf")) as f:
        check("replication_password = 'secret'" in f.read(), "the primary's file changed")
    check(not [n for n in os.listdir(p.dir) if ".sent-" in n], "the sent copy was left")

    log("promoted, the standby made in one command verifies clean")
    sb.must(s1.run("promote"), "promote")
    check(sb.log_matches(s1, r"durable writes wait for no standby"), "promotion's log")
    st1.stop()
    # A primary now: it listens where its operator says, with its own password.
    with open(os.path.join(s1.dir, "walrus.conf"), "a") as f:
        f.write(f"listen_replication = '{os.path.join(root, 'repl1.sock')}'\n"
                "replication_password = 'its own'\n")
    sb.must(s1.run("verify"), "verify the promoted standby")
    s1.wait_stopped()

    log("refusals")
    junk = os.path.join(root, "junk")
    os.mkdir(junk, 0o700)
    with open(os.path.join(junk, "mine.txt"), "w") as f:
        f.write("not walrus\n")
    refused(standby_cmd(wtest.Walrus(a.walrus, junk), "--primary", sock), 2,
            "a non-empty non-walrus directory", "not a walrus directory")
    check(os.listdir(junk) == ["mine.txt"], f"the directory was touched: {os.listdir(junk)}")
    gone = os.path.join(root, "gone")
    refused(standby_cmd(wtest.Walrus(a.walrus, gone)), 2, "no --primary", "--primary")
    check(not os.path.exists(gone), "the directory was created without --primary")
    refused(standby_cmd(wtest.Walrus(a.walrus, gone), "--primary", sock, password="wrong"), 3,
            "a wrong password", "authentication failed")
    check(not os.path.exists(gone), "the directory is left after a wrong password")
    os.mkdir(gone, 0o700)
    refused(standby_cmd(wtest.Walrus(a.walrus, gone), "--primary", sock, password="wrong"), 3,
            "a wrong password, empty directory", "authentication failed")
    check(os.listdir(gone) == [], f"the directory is not empty again: {os.listdir(gone)}")
    os.rmdir(gone)
    # s2 is a standby: its walrus.conf (the primary's copy) names the primary's
    # socket, which it never listens on; give it its own: a standby serves no WAL.
    sock2 = os.path.join(root, "repl2.sock")
    with open(os.path.join(s2dir, "walrus.conf"), "a") as f:
        f.write(f"listen_replication = '{sock2}'\nreplication_password = 'its own'\n")
    st2 = sb.Standby(s2)
    st2.start()
    refused(standby_cmd(wtest.Walrus(a.walrus, gone), "--primary", sock2), 3,
            "a standby as the primary", "is a standby: point the standby at its primary")
    check(not os.path.exists(gone), "the directory is left after a refused connection")
    st2.stop()

    log("a primary that ends the transfer without the WAL the backup needs")
    p.kill_instance()
    p.serve(failpoints="backup:ENODATA:send-wal*0")
    refused(standby_cmd(wtest.Walrus(a.walrus, gone), "--primary", sock), 3,
            "the WAL left out", "without the WAL it needs")
    check(not os.path.exists(gone), "the directory is left after a transfer without WAL")

    log("the WAL sender killed in the middle of the transfer")
    p.kill_instance()
    p.serve(failpoints="backup:KILL:send-data")
    refused(standby_cmd(wtest.Walrus(a.walrus, gone), "--primary", sock), 3,
            "a sender killed mid-transfer", "base backup from")
    check(not os.path.exists(gone), "the directory is left after a failed transfer")
    check(wtest.wait_for(lambda: sb.log_matches(p, r"ended during a base backup"), 30),
          "the supervisor did not end the backup of the dead sender")
    dest = os.path.join(root, "local-backup")
    sb.must(p.run("backup", dest, "--checkpoint", "fast"),
            "a local backup after the killed sender")
    with open(os.path.join(dest, "walrus.conf")) as f:
        conf = f.read()
    check("secret" not in conf and "# replication_password: not copied" in conf,
          f"a local backup's walrus.conf:\n{conf}")

    log("a primary that does not listen yet")
    primary_not_up_yet(cleanup, a, p, sock, os.path.join(root, "s4"))
    return 0


if __name__ == "__main__":
    wtest.guarded(main)

#!/usr/bin/env python3
"""`walrus config` and DIR/walrus.conf, black-box: set/get/list, a bad value
or an unknown option refused with the option's name (exit 2, file
unchanged), the running instance's settings and their sources in `status`
and `stats --json` (default, file, command line), a setting changed while an
instance runs taking effect at its next start, a malformed walrus.conf
failing the start with file:line, and an open asking other instance options
warned (stderr and log) or, with strict_options=on, refused.  Instances are
stopped by their last detach with supervisor_linger=0 and waited for on
their directory lock.  Prints 'N passed, N failed' last."""
import json, os, shutil, subprocess, sys, tempfile

sys.dont_write_bytecode = True  # no __pycache__ in the source tree
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from clitest import WALRUS, check, summary, wait_stopped  # noqa: E402

LINGER = ("-o", "supervisor_linger=0")


def run(d, *args, opts=LINGER):
    r = subprocess.run([WALRUS, "-D", d, *opts, *args], capture_output=True, timeout=120)
    return r.returncode, r.stdout.decode(), r.stderr.decode()


def conf_text(d):
    with open(os.path.join(d, "walrus.conf")) as f:
        return f.read()


def settings(d):
    """The running (or a freshly started) instance's settings from stats --json."""
    rc, out, err = run(d, "stats", "--json")
    return json.loads(out)["settings"] if rc == 0 else {"error": err}


def attached_loader(d, *opts):
    """A `load --ack` process attached to d's instance (started by it), holding
    it up until its stdin closes."""
    p = subprocess.Popen([WALRUS, "-D", d, *LINGER, *opts, "load", "--ack"],
                         stdin=subprocess.PIPE, stdout=subprocess.PIPE)
    p.stdin.write(b"k\tv\n")
    p.stdin.flush()
    return p, p.stdout.readline()


def edit_and_read(d):
    rc, out, err = run(d, "config", "set", "shared_buffers", "2MB")
    check("config set on a new directory", rc == 0 and "shared_buffers = 2MB" in out,
          (rc, out, err))
    check("it writes walrus.conf", conf_text(d) == "shared_buffers = 2MB\n", conf_text(d))
    rc, out, _ = run(d, "config", "get", "shared_buffers")
    check("config get: the file's value", rc == 0 and out == "2MB\n", (rc, out))
    rc, out, _ = run(d, "config", "get", "wal_buffers")
    check("config get: the default, marked", rc == 0 and out == "4MB (default)\n", (rc, out))
    before = conf_text(d)
    rc, _, err = run(d, "config", "set", "shared_buffers", "lots")
    check("a bad value refused with the option's name", rc == 2 and "shared_buffers" in err,
          (rc, err))
    rc, _, err = run(d, "config", "set", "no_such_option", "1")
    check("an unknown option refused", rc == 2 and 'unrecognized option "no_such_option"' in err,
          (rc, err))
    rc, _, err = run(d, "config", "set", "synchronous_commit", "off")
    check("a session option refused", rc == 2 and "synchronous_commit" in err, (rc, err))
    rc, _, err = run(d, "config", "get", "no_such_option")
    check("config get of an unknown option", rc == 2 and "no_such_option" in err, (rc, err))
    check("refusals leave walrus.conf unchanged", conf_text(d) == before, conf_text(d))
    rc, out, _ = run(d, "config", "list", opts=(*LINGER, "-o", "wal_buffers=1MB"))
    rows = {l.split()[0]: l.split(None, 2)[1:] for l in out.splitlines()}
    check("config list: sources", rc == 0 and rows.get("shared_buffers") == ["2MB", "file"]
          and rows.get("wal_buffers") == ["1MB", "command line"]
          and rows.get("max_wal_size") == ["1GB", "default"], out)


def running_instance(d):
    p, ack = attached_loader(d, "-o", "wal_buffers=1MB")
    check("an instance starts with walrus.conf", ack == b"ack k\n", ack)
    s = settings(d)
    check("stats --json: a setting from the file",
          s.get("shared_buffers") == {"value": "2MB", "source": "file"}, s)
    check("stats --json: a setting from the command line",
          s.get("wal_buffers") == {"value": "1MB", "source": "command line"}, s)
    check("stats --json: a default", s.get("max_wal_size") == {"value": "1GB", "source": "default"},
          s)
    rc, out, _ = run(d, "status")
    lines = [l.split() for l in out.splitlines()]
    check("status shows settings and sources", rc == 0 and ["shared_buffers", "2MB", "file"] in lines
          and ["supervisor_linger", "0", "command", "line"] in lines
          and ["max_wal_size", "1GB", "default"] in lines, out)
    rc, out, err = run(d, "config", "set", "shared_buffers", "4MB")
    check("config set while running: at the next start",
          rc == 0 and "takes effect at the next start" in out, (rc, out, err))
    check("the running instance keeps its value", settings(d).get("shared_buffers", {}).get("value")
          == "2MB")
    conflicts(d)
    p.stdin.close()
    check("the loader exits", p.wait(timeout=120) == 0)
    check("the instance stops after the last detach", wait_stopped(d))
    s = settings(d)
    check("after a restart the new value is in force",
          s.get("shared_buffers") == {"value": "4MB", "source": "file"}, s)
    check("that instance stops too", wait_stopped(d))


def conflicts(d):
    rc, out, err = run(d, "get", "k", opts=(*LINGER, "-o", "shared_buffers=1MB"))
    check("a conflicting option: the open still works", rc == 0 and out == "v\n", (rc, out, err))
    check("... with a warning naming the option and both values",
          "WARNING" in err and "shared_buffers=1MB" in err and "uses 2MB" in err, err)
    with open(os.path.join(d, "log", "walrus.log")) as f:
        log = f.read()
    check("... which the log has too", "shared_buffers=1MB (the running instance uses 2MB)" in log,
          log[-2000:])
    rc, out, err = run(d, "get", "k",
                       opts=(*LINGER, "-o", "shared_buffers=1MB", "-o", "strict_options=on"))
    check("strict_options=on refuses it", rc == 2 and out == "" and "strict_options" in err
          and "shared_buffers=1MB" in err, (rc, out, err))
    rc, out, err = run(d, "get", "k", opts=(*LINGER, "-o", "strict_options=on"))
    check("strict_options=on without a conflict", rc == 0 and err == "", (rc, err))


def malformed(d):
    good = conf_text(d)
    with open(os.path.join(d, "walrus.conf"), "w") as f:
        f.write("# mine\nshared_buffers = 4MB\nbogus_option = 1\n")
    rc, _, err = run(d, "get", "k")
    check("a malformed walrus.conf fails the start with file:line",
          rc == 2 and "walrus.conf:3:" in err and "bogus_option" in err, (rc, err))
    with open(os.path.join(d, "walrus.conf"), "w") as f:
        f.write("shared_buffers = 'unterminated\n")
    rc, _, err = run(d, "stats")
    check("an unterminated quote too", rc == 2 and "walrus.conf:1:" in err, (rc, err))
    check("no instance left by a failed start", wait_stopped(d, timeout=5))
    with open(os.path.join(d, "walrus.conf"), "w") as f:
        f.write(good)


def usage(d):
    rc, out, _ = run(d, "config", "--help")
    check("config --help", rc == 0 and "usage" in out and "walrus.conf" in out, (rc, out))
    rc, _, _ = run(d, "config", "frob")
    check("config with an unknown verb", rc == 2, rc)
    rc, _, _ = run(d, "config", "set", "shared_buffers")
    check("config set without a value", rc == 2, rc)


def refused_leaves_nothing(base):
    """config set on a missing directory that refuses the setting creates nothing."""
    gone = os.path.join(base, "new", "deeper")
    rc, _, err = run(gone, "config", "set", "no_such_option", "1")
    check("config set of an unknown option on a missing directory fails", rc != 0, (rc, err))
    check("and leaves no directory behind", not os.path.exists(os.path.join(base, "new")),
          os.listdir(base))
    rc, _, err = run(gone, "config", "set", "shared_buffers", "1MB")
    check("an accepted one creates it", rc == 0 and os.path.exists(gone), (rc, err))


def main():
    base = tempfile.mkdtemp(prefix="walrus-config-")
    d = os.path.join(base, "db")
    try:
        refused_leaves_nothing(base)
        edit_and_read(d)
        running_instance(d)
        malformed(d)
        usage(d)
    finally:
        if not wait_stopped(d):
            print("FAIL an instance of the test did not stop")
        shutil.rmtree(base, ignore_errors=True)
    return summary()


if __name__ == "__main__":
    sys.exit(main())

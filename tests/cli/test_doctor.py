#!/usr/bin/env python3
"""`walrus doctor`, black-box: every check runs on /tmp, on the repository's
file system (the build directory) and on a walrus data directory (-D) without
changing a byte of it; a tmpfs (/dev/shm) and unsafe -o settings are warned
about; --json is one parsable line with the documented keys; bad inputs give
their exit codes (1 missing directory, 2 not a directory / usage, 3 the
checks could not run: read-only directory); the scratch file is gone after
every run, SIGINT and SIGTERM included.  Leaves nothing behind.  Prints
'N passed, N failed' last."""
import hashlib, json, os, shutil, signal, subprocess, sys, tempfile

sys.dont_write_bytecode = True  # no __pycache__ in the source tree
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from clitest import WALRUS, check, stop_instance, summary  # noqa: E402
KEYS = {"dir", "data_directory", "fs", "device", "o_direct", "sync_file_range", "speed",
        "options", "warnings", "notes", "recommendation", "error", "exit"}
SPEED = {"append_fdatasync", "overwrite_fdatasync", "overwrite_fsync", "odsync_write",
         "direct_fdatasync", "direct_odsync", "dir_fsync"}


def doctor(*args, env=None, pre=()):
    r = subprocess.run([WALRUS, *pre, "doctor", *args], capture_output=True, timeout=120,
                       env=env)
    return r.returncode, r.stdout.decode(errors="replace"), r.stderr.decode(errors="replace")


def scratch_left(d):
    return [n for n in os.listdir(d) if n.startswith(".walrus-doctor-")]


def doctor_json(name, d, *args, pre=(), positional=True):
    """Runs doctor --quick --json on d; checks the object's shape; returns (rc, obj)."""
    rc, out, err = doctor("--quick", "--json", *args, *([d] if positional else []), pre=pre)
    try:
        obj = json.loads(out)
    except ValueError:
        check(f"{name}: --json parses", False, (rc, out[:300], err[-300:]))
        return rc, {}
    check(f"{name}: --json is one line", out.count("\n") == 1 and out.endswith("}\n"), out[-80:])
    check(f"{name}: --json keys", set(obj) == KEYS, sorted(set(obj) ^ KEYS))
    check(f"{name}: exit code in the object", obj.get("exit") == rc, (obj.get("exit"), rc))
    check(f"{name}: no scratch file left", scratch_left(d) == [], scratch_left(d))
    return rc, obj


def check_all_ran(name, d, obj, rc):
    """Every check ran: fs type, O_DIRECT and sync_file_range probed, all seven timings."""
    check(f"{name}: no error", obj.get("error") is None and rc in (0, 2), (rc, obj.get("error")))
    check(f"{name}: warnings <=> exit 2", (rc == 2) == bool(obj.get("warnings")),
          (rc, obj.get("warnings")))
    fs = obj.get("fs", {})
    check(f"{name}: file system named", fs.get("type") not in (None, "", "unknown") and
          fs.get("mount_point") is not None, fs)
    check(f"{name}: O_DIRECT probed", isinstance(obj.get("o_direct"), dict) and
          isinstance(obj["o_direct"].get("supported"), bool), obj.get("o_direct"))
    od = obj.get("o_direct") or {}
    check(f"{name}: O_DIRECT alignment", not od.get("supported") or od.get("align") in
          (512, 4096, 8192), od)
    check(f"{name}: sync_file_range probed", isinstance(obj.get("sync_file_range"), dict),
          obj.get("sync_file_range"))
    sp = obj.get("speed", {})
    check(f"{name}: speed keys", set(sp) == SPEED, sorted(sp))
    direct = {"direct_fdatasync", "direct_odsync"}
    for k in SPEED:
        v = sp.get(k)
        if k in direct and not od.get("supported"):
            check(f"{name}: {k} skipped without O_DIRECT", v is None, v)
            continue
        check(f"{name}: {k} measured", isinstance(v, dict) and v.get("ops", 0) >= 3 and
              0 < v.get("median_us", 0) <= v.get("p99_us", 0) and v.get("ops_per_s", 0) > 0, v)
    check(f"{name}: a recommendation", isinstance(obj.get("recommendation"), str), obj)


def tree_snapshot(d):
    """Names, modes, sizes, mtimes and contents of everything under d."""
    snap = {}
    for root, dirs, files in os.walk(d):
        for n in dirs + files:
            p = os.path.join(root, n)
            st = os.lstat(p)
            h = None
            if os.path.isfile(p) and not os.path.islink(p):
                h = hashlib.sha256(open(p, "rb").read()).hexdigest()
            snap[os.path.relpath(p, d)] = (st.st_mode, st.st_size, st.st_mtime_ns, h)
    return snap


def interrupted(name, d, sig):
    """doctor killed by sig while its scratch file exists: the file must be gone."""
    for _ in range(5):
        p = subprocess.Popen([WALRUS, "doctor", d], stdout=subprocess.DEVNULL,
                             stderr=subprocess.DEVNULL)
        seen = False
        while p.poll() is None and not seen:
            seen = bool(scratch_left(d))
        if seen:
            p.send_signal(sig)
        rc = p.wait(timeout=60)
        if seen:
            check(f"{name}: died of the signal", rc == -sig, rc)
            check(f"{name}: scratch file removed", scratch_left(d) == [], scratch_left(d))
            return
    check(f"{name}: caught a run with its scratch file", False, "the runs ended too fast")


def read_only(base):
    """A read-only directory: as root a read-only bind mount (root ignores modes)."""
    d = os.path.join(base, "ro")
    os.mkdir(d)
    mounted = False
    try:
        if os.geteuid() == 0:
            r = subprocess.run(["mount", "--bind", d, d], capture_output=True)
            if r.returncode != 0:
                print(f"SKIP read-only directory: cannot bind-mount as root: {r.stderr!r}")
                return
            mounted = True
            r = subprocess.run(["mount", "-o", "remount,ro,bind", d], capture_output=True)
            if r.returncode != 0:
                print(f"SKIP read-only directory: cannot remount read-only: {r.stderr!r}")
                return
            word = "Read-only"
        else:
            os.chmod(d, 0o500)
            word = "Permission denied"
        rc, out, err = doctor("--quick", d)
        check("read-only directory: exit 3 with the reason", rc == 3 and word in err and
              "scratch file" in err, (rc, err))
        check("read-only directory: the report says why", "ERROR:" in out, out)
        rc, out, err = doctor("--quick", "--json", d)
        obj = json.loads(out) if out else {}
        check("read-only directory: --json error", rc == 3 and word in (obj.get("error") or ""),
              (rc, out[:300]))
        if mounted:
            check("read-only mount warned", any("read-only" in w for w in obj.get("warnings", [])),
                  obj.get("warnings"))
    finally:
        if mounted:
            subprocess.run(["umount", d], check=False)
        os.chmod(d, 0o700)


def main():
    base = tempfile.mkdtemp(prefix="walrus-doctor-", dir="/tmp")
    repo = tempfile.mkdtemp(prefix="walrus-doctor-", dir=os.path.dirname(os.path.abspath(WALRUS)))
    shm = tempfile.mkdtemp(prefix="walrus-doctor-", dir="/dev/shm") \
        if os.path.isdir("/dev/shm") else None
    db = os.path.join(base, "db")
    try:
        rc, out, _ = doctor("--help")
        check("--help", rc == 0 and "usage" in out and "exit codes" in out and "--json" in out,
              (rc, out))
        tmp = os.path.join(base, "t")
        os.mkdir(tmp)
        rc, out, err = doctor("--quick", tmp)
        check("/tmp: human report", rc in (0, 2) and "file system" in out and "O_DIRECT" in out
              and "fsync of the directory" in out and "result:" in out, (rc, out, err))
        check("/tmp: WARNING lines <=> exit 2", (rc == 2) == ("WARNING:" in out), (rc, out))
        check("/tmp: no scratch file left", scratch_left(tmp) == [], scratch_left(tmp))
        rc, obj = doctor_json("/tmp", tmp)
        check_all_ran("/tmp", tmp, obj, rc)
        rc, obj = doctor_json("repository file system", repo)
        check_all_ran("repository file system", repo, obj, rc)
        # DIR given as -D (as the other subcommands) and as an argument that wins over -D.
        rc2, out, err = doctor("--quick", pre=("-D", tmp))
        check("-D DIR", rc2 in (0, 2) and f'"{os.path.realpath(tmp)}"' in out, (rc2, out, err))
        rc2, out, err = doctor("--quick", tmp, pre=("-D", os.path.join(base, "nonexistent")))
        check("DIR argument wins over -D", rc2 in (0, 2), (rc2, err))
        # Unsafe settings given with -o.
        rc, obj = doctor_json("unsafe -o", tmp, pre=("-o", "synchronous_commit=off", "-o",
                                                     "full_page_writes=off"))
        w = " ".join(obj.get("warnings", []))
        check("synchronous_commit=off warned", "synchronous_commit=off" in w and
              "acknowledged writes can be lost" in w, w)
        check("full_page_writes=off warned", "full_page_writes=off" in w, w)
        check("unsafe -o: exit 2", rc == 2, rc)
        check("unsafe -o: options reported", obj.get("options", {}).get("synchronous_commit") ==
              "off" and obj["options"].get("full_page_writes") == "off", obj.get("options"))
        # mmap_reads=on: a note (its error model), not a warning.
        rc, obj = doctor_json("mmap_reads=on", tmp, pre=("-o", "mmap_reads=on"))
        n = " ".join(obj.get("notes", []))
        check("mmap_reads=on noted", "mmap_reads=on" in n and "SIGBUS" in n, n)
        check("mmap_reads=on: not a warning",
              not any("mmap_reads" in x for x in obj.get("warnings", [])), obj.get("warnings"))
        check("mmap_reads=on: option reported",
              obj.get("options", {}).get("mmap_reads") == "on", obj.get("options"))
        rc, obj = doctor_json("wal_direct_io=on", tmp, pre=("-o", "wal_direct_io=on"))
        od = (obj.get("o_direct") or {}).get("supported")
        warned = any("wal_direct_io=on" in x for x in obj.get("warnings", []))
        check("wal_direct_io=on warned iff O_DIRECT failed", warned == (od is False), (od, warned))
        # A tmpfs: fsync is a no-op there.
        if shm:
            rc, obj = doctor_json("tmpfs", shm)
            check("tmpfs recognised", obj.get("fs", {}).get("type") == "tmpfs", obj.get("fs"))
            check("tmpfs warned, exit 2", rc == 2 and any("tmpfs" in x and "power" in x
                                                          for x in obj.get("warnings", [])),
                  (rc, obj.get("warnings")))
            check("tmpfs: no sync method recommended",
                  (obj.get("recommendation") or "").startswith("none"), obj.get("recommendation"))
        else:
            print("SKIP tmpfs: no /dev/shm")
        # A walrus data directory: doctor works beside its files and changes none of them.
        r = subprocess.run([WALRUS, "-D", db, "-o", "supervisor_linger=0", "-o",
                            "create_if_missing=on", "put", "k", "v"], capture_output=True,
                           timeout=120)
        check("data directory created", r.returncode == 0, r.stderr)
        stop_instance(db)
        before = tree_snapshot(db)
        rc, obj = doctor_json("data directory", db, pre=("-D", db), positional=False)
        check_all_ran("data directory", db, obj, rc)
        check("data directory recognised", obj.get("data_directory") is True, obj)
        check("data directory unchanged", tree_snapshot(db) == before,
              set(tree_snapshot(db).items()) ^ set(before.items()))
        r = subprocess.run([WALRUS, "-D", db, "-o", "supervisor_linger=0", "get", "k"],
                           capture_output=True, timeout=120)
        check("data intact", r.returncode == 0 and r.stdout == b"v\n", (r.returncode, r.stdout))
        stop_instance(db)
        # Bad inputs.
        rc, out, err = doctor(os.path.join(base, "missing"))
        check("missing directory: exit 1", rc == 1 and "No such file" in err and out == "",
              (rc, err))
        f = os.path.join(base, "file")
        open(f, "w").write("x")
        rc, out, err = doctor(f)
        check("a file: exit 2", rc == 2 and "not a directory" in err, (rc, err))
        check("the file untouched", open(f).read() == "x")
        rc, out, err = doctor("--frobnicate", tmp)
        check("unknown option: exit 2", rc == 2 and "--frobnicate" in err, (rc, err))
        rc, out, err = doctor(tmp, tmp)
        check("two directories: exit 2", rc == 2, (rc, err))
        env = {k: v for k, v in os.environ.items() if k != "WALRUS_DATA"}
        rc, out, err = doctor(env=env)
        check("no directory: exit 2", rc == 2 and "-D" in err, (rc, err))
        read_only(base)
        # Interrupted: the signal handler removes the scratch file.
        interrupted("SIGINT", tmp, signal.SIGINT)
        interrupted("SIGTERM", tmp, signal.SIGTERM)
        for d in (tmp, repo, db) + ((shm,) if shm else ()):
            check(f"nothing left in {d}", scratch_left(d) == [], scratch_left(d))
    finally:
        stop_instance(db)
        for d in (base, repo, shm):
            if d:
                shutil.rmtree(d, ignore_errors=True)
    return summary()


if __name__ == "__main__":
    sys.exit(main())

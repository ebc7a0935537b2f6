"""Processes: several open the same directory; a child of fork() cannot use
its parent's handle (walrus.Misuse) but opens its own; a multiprocessing
worker that ends with a handle still open detaches it (not a crash)."""
import multiprocessing
import os
import subprocess
import sys

import walrus

from conftest import child_env

WAIT = 120


def in_child(fn):
    """Runs fn() in a forked child; returns its exit status (fn's return
    value, 99 for an exception).  The child leaves with os._exit: pytest's
    own teardown must not run there."""
    pid = os.fork()
    if pid == 0:
        code = 99
        try:
            code = fn()
        finally:
            os._exit(code)
    _, status = os.waitpid(pid, 0)
    return os.waitstatus_to_exitcode(status)


def test_fork_child_cannot_use_the_parents_handle(db):
    db.put(b"k", b"v")
    it = db.keys()

    def child():
        try:
            db.get(b"k")
        except walrus.Misuse as e:
            if "fork" not in e.message or e.code != walrus.CODES["Misuse"]:
                return 2
        else:
            return 1
        try:
            next(it)
        except walrus.Misuse:
            pass
        else:
            return 3
        db.close()  # frees the child's copy only
        return 0

    assert in_child(child) == 0
    assert db[b"k"] == b"v" and list(it) == [b"k"]  # the parent's handle is untouched
    assert db.stats()["instance"]["crash_restarts"] == 0


def test_fork_child_opens_its_own(data_dir, db):
    db.put(b"parent", b"1")

    def child():
        with walrus.open(data_dir) as mine:
            if mine.get(b"parent") != b"1":
                return 1
            mine.put(b"child", b"2")
        return 0

    assert in_child(child) == 0
    assert db[b"child"] == b"2"
    assert db.stats()["instance"]["crash_restarts"] == 0


_worker_db = None


def worker_put(args):
    """A pool worker's task: its handle opened once and never closed."""
    global _worker_db
    path, i = args
    if _worker_db is None:
        _worker_db = walrus.open(path)
    _worker_db.put(b"w%03d" % i, b"%d" % os.getpid())
    return os.getpid()


def test_multiprocessing_workers(data_dir, db):
    ctx = multiprocessing.get_context("fork")
    pool = ctx.Pool(2)
    try:
        pids = pool.map(worker_put, [(data_dir, i) for i in range(40)])
    finally:
        pool.close()  # the workers end on their own: exit functions run
        pool.join()
    assert len(set(pids)) >= 1
    assert len(list(db.keys(b"w", b"x"))) == 40
    # Each worker left with os._exit, its handle still open: had the handle
    # not been closed first, that would have been a crash of the instance.
    assert db.stats()["instance"]["crash_restarts"] == 0
    db.put(b"after", b"ok")


CHILD = """
import sys, walrus
path, name, n = sys.argv[1], sys.argv[2].encode(), int(sys.argv[3])
with walrus.open(path) as db:
    with db.batch() as b:
        for i in range(n):
            b.put(name + b"-b%04d" % i, b"x")
    for i in range(n):
        db.put(name + b"-%04d" % i, b"%d" % i)
"""


def test_processes_write_concurrently(data_dir, db):
    n = 200
    procs = [subprocess.Popen([sys.executable, "-c", CHILD, data_dir, "p%d" % i, str(n)],
                              env=child_env(), stderr=subprocess.PIPE) for i in range(4)]
    try:
        for p in procs:
            _, err = p.communicate(timeout=WAIT)
            assert p.returncode == 0, err.decode(errors="replace")
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()
    for i in range(4):
        assert len(list(db.keys(b"p%d-" % i, b"p%d." % i))) == 2 * n
    assert db.stats()["instance"]["crash_restarts"] == 0

"""Threads: a handle per thread runs concurrently with the others (calls
release the GIL); a handle entered by a second thread, or closed under
another thread's call, raises walrus.Misuse and stays sound."""
import gc
import os
import signal
import threading

import pytest

import walrus
import wtest

from conftest import walrus_bin

WAIT = 60  # s: a wait on another thread's state that takes longer is a hang


def run_threads(fns):
    """Runs each fn in a thread of its own; re-raises the first failure."""
    errors = []

    def wrap(fn):
        try:
            fn()
        except BaseException as e:  # noqa: BLE001 - reported below
            errors.append(e)

    threads = [threading.Thread(target=wrap, args=(fn,)) for fn in fns]
    for t in threads:
        t.start()
    for t in threads:
        t.join(WAIT * 5)
        assert not t.is_alive(), "a thread did not finish: a hang?"
    if errors:
        raise errors[0]


def test_library_releases_the_gil():
    # ctypes.CDLL (not PyDLL) releases the GIL around every foreign call.
    import ctypes
    assert type(walrus._lib.lib) is ctypes.CDLL


def test_handle_per_thread(data_dir):
    walrus.open(data_dir, create_if_missing=True).close()
    n, per = 4, 200

    def writer(i):
        def run():
            with walrus.open(data_dir) as db:
                for j in range(per):
                    db.put(b"t%d-%04d" % (i, j), b"%d" % j)
                assert len(list(db.keys(b"t%d-" % i, b"t%d." % i))) == per
        return run

    run_threads([writer(i) for i in range(n)])
    with walrus.open(data_dir) as db:
        assert len(list(db.keys())) == n * per


def test_counter_in_transactions_from_threads(data_dir):
    with walrus.open(data_dir, create_if_missing=True) as db:
        db.put(b"n", b"0")
    n, per = 4, 50
    runs = [0] * n

    def incr(i):
        def body(txn):
            runs[i] += 1
            txn.put(b"n", b"%d" % (int(txn[b"n"]) + 1))

        def run():
            with walrus.open(data_dir) as db:
                for _ in range(per):
                    db.run_transaction(body, retries=1000)
        return run

    run_threads([incr(i) for i in range(n)])
    with walrus.open(data_dir) as db:
        assert int(db[b"n"]) == n * per  # no increment lost, none applied twice
    assert sum(runs) >= n * per


@pytest.mark.skipif(os.environ.get("WALRUS_TEST_HOOKS") != "1",
                    reason="needs a build with -Dtest_hooks=true (failpoints)")
def test_threads_run_during_a_blocked_call(cleanup, data_dir):
    """Thread A waits inside walrus_checkpoint for a checkpointer held
    stopped (a failpoint stops it before it fsyncs a data file); meanwhile
    the main thread, with its own handle, makes writes: the GIL is free
    while A is in the library.  Were it held, the main thread could not
    run at all, and the checkpointer would never be let go."""
    w = wtest.Walrus(walrus_bin(), data_dir)
    w.register(cleanup)
    w.create()
    w.serve(failpoints="fsync:STOP:/base/")
    ckpt = None
    try:
        with walrus.open(data_dir) as a, walrus.open(data_dir) as b:
            for i in range(50):
                b.put(b"before%d" % i, b"x")  # dirty pages: the checkpoint fsyncs base/
            requested = b.stats()["checkpoints"]["requested"]
            done = threading.Event()
            failure = []

            def checkpoint():
                try:
                    a.checkpoint()
                except BaseException as e:  # noqa: BLE001
                    failure.append(e)
                done.set()

            t = threading.Thread(target=checkpoint)
            t.start()
            # The checkpointer has begun A's requested checkpoint and stopped
            # in it: A is inside the call, which cannot return meanwhile.
            assert wtest.wait_for(lambda: b.stats()["checkpoints"]["requested"] > requested,
                                  WAIT)
            pids = wtest.named(wtest.instance_pids(data_dir), "walrus-ckpt")
            assert len(pids) == 1
            ckpt = pids[0]
            assert wtest.wait_for(lambda: wtest.stopped(ckpt), WAIT)
            writes = 0
            for i in range(200):
                b.put(b"during%d" % i, b"x")
                writes += 1
            assert writes == 200 and not done.is_set()
            os.kill(ckpt, signal.SIGCONT)
            ckpt = None
            assert done.wait(WAIT) and not failure
            t.join()
            assert b.stats()["checkpoints"]["completed"] >= 1
    finally:
        if ckpt is not None:
            os.kill(ckpt, signal.SIGCONT)
        walrus.stop(data_dir)
        w.wait_serve_exit(WAIT)


def hold_handle(db, tmp, while_held):
    """Runs while_held() in this thread while another thread is inside a
    call on @db (a backup, held in its progress callback)."""
    for i in range(20):
        db.put(b"fill%d" % i, os.urandom(128 << 10))
    inside, finished = threading.Event(), threading.Event()

    def progress(done, total):
        if not inside.is_set():
            inside.set()
            assert finished.wait(WAIT)

    def backup():
        db.backup(os.path.join(tmp, "backup"), fast=True, progress=progress)

    t = threading.Thread(target=backup)
    errors = []
    t.start()
    try:
        assert inside.wait(WAIT)
        while_held()
    except BaseException as e:  # noqa: BLE001
        errors.append(e)
    finally:
        finished.set()
        t.join(WAIT)
    if errors:
        raise errors[0]
    assert not t.is_alive()


def test_second_thread_gets_misuse(db, tmp):
    def attempt():
        with pytest.raises(walrus.Misuse) as e:
            db.get(b"k")
        assert e.value.code == walrus.CODES["Misuse"] and "another thread" in e.value.message
        with pytest.raises(walrus.Misuse):
            db.put(b"k", b"v")
        with pytest.raises(walrus.Misuse):
            db.close()  # would pull the handle away from under the backup

    hold_handle(db, tmp, attempt)
    db.put(b"k", b"v")  # the handle is sound
    assert db[b"k"] == b"v" and not db.closed


def test_collected_in_another_thread(db, tmp):
    db.put(b"k", b"v")
    it = db.keys()
    snap = db.snapshot()
    n = len(db._children)

    def drop():
        nonlocal it, snap
        it = snap = None
        gc.collect()  # their finalizers run here, with the handle busy: queued

    hold_handle(db, tmp, drop)
    assert len(db._pending) == 2
    assert db.get(b"k") == b"v"  # the next call frees them
    assert len(db._children) == n - 2 and not db._pending


def test_spaces_from_threads_with_a_handle_each(data_dir):
    """Each thread opens its own handle and its own Space objects (a Space
    is its handle's): they create the same space at once, write batches
    across two spaces and count in a shared space with transactions."""
    walrus.open(data_dir, create_if_missing=True).close()
    n, per = 4, 50

    def worker(i):
        def body(txn, shared):
            txn.put(b"n", b"%d" % (int(txn.get(b"n", b"0", space=shared)) + 1), space=shared)

        def run():
            with walrus.open(data_dir) as db:
                shared, mine = db.space("shared"), db.space("t%d" % i)
                for j in range(per):
                    with db.batch() as b:
                        b.put(b"%d-%04d" % (i, j), b"x", space=shared)
                        b.put(b"%04d" % j, b"x", space=mine)
                    db.run_transaction(lambda txn: body(txn, shared), retries=1000)
        return run

    run_threads([worker(i) for i in range(n)])
    with walrus.open(data_dir) as db:
        assert db.spaces() == ["shared"] + ["t%d" % i for i in range(n)]
        shared = db.space("shared", create=False)
        assert int(shared[b"n"]) == n * per  # no increment lost, none applied twice
        assert len(list(shared.keys())) == n * per + 1
        for i in range(n):
            assert len(list(db.space("t%d" % i).keys())) == per
        assert list(db.keys()) == []


def test_space_of_a_handle_in_use_gets_misuse(db, tmp):
    a = db.space("a")
    a.put(b"k", b"v")
    batch = walrus.Batch()

    def attempt():
        for call in (lambda: a.get(b"k"), lambda: a.put(b"k", b"w"), lambda: a.keys(),
                     lambda: batch.put(b"k", b"w", space=a), lambda: db.space("b"),
                     db.spaces):
            with pytest.raises(walrus.Misuse) as e:
                call()
            assert "another thread" in e.value.message

    hold_handle(db, tmp, attempt)
    batch.close()
    assert a[b"k"] == b"v" and db.spaces() == ["a"]


def test_one_handle_many_threads_never_crashes(db):
    db.put(b"k", b"v")
    counts = {"ok": 0, "misuse": 0}
    lock = threading.Lock()

    def hammer():
        for i in range(300):
            try:
                if i % 3 == 0:
                    db.put(b"k", b"v")
                elif i % 3 == 1:
                    assert db.get(b"k") == b"v"
                else:
                    assert list(db.keys()) == [b"k"]
                what = "ok"
            except walrus.Misuse:
                what = "misuse"
            with lock:
                counts[what] += 1

    run_threads([hammer] * 4)
    assert counts["ok"] + counts["misuse"] == 4 * 300 and counts["ok"] > 0
    assert db[b"k"] == b"v"


def test_handle_passed_on_by_a_thread_that_ended(db):
    """A thread uses the handle and ends; right after its join, another
    thread uses it.  The library's exit hook of the ended thread may still
    hold the handle then (it gives back its slot): the binding waits for
    that thread to be gone instead of reporting a misuse that is not one."""
    db.put(b"k", b"v")
    misuses = []

    def get():
        try:
            db.get(b"k")
        except walrus.Misuse as e:
            misuses.append(e)

    for _ in range(2000):
        t = threading.Thread(target=get)
        t.start()
        t.join()
        get()
    assert misuses == []

"""The binding's API on one thread: reads and writes, batches, iterators,
snapshots, transactions, maintenance calls, backup and restore."""
import os

import pytest

import walrus


def test_put_get_delete(db):
    db.put(b"k", b"v")
    assert db.get(b"k") == b"v"
    assert db.get(b"absent") is None
    assert db.get(b"absent", b"dflt") == b"dflt"
    assert db.delete(b"k") is True
    assert db.delete(b"k") is False
    assert db.get(b"k") is None
    db.put(b"empty", b"")
    assert db.get(b"empty") == b""
    db.put(b"async", b"1", sync=False)
    db.put(b"sync", b"1", sync=True)
    db.sync()
    assert db.get(b"async") == b"1"


def test_mapping_protocol(db):
    db[b"a"] = b"1"
    assert db[b"a"] == b"1"
    assert b"a" in db and b"b" not in db
    with pytest.raises(KeyError):
        db[b"b"]
    with pytest.raises(walrus.NotFound) as e:
        del db[b"b"]
    assert e.value.code == walrus.CODES["NotFound"]
    del db[b"a"]
    assert b"a" not in db


def test_bytes_like_in_bytes_out(db):
    db.put(bytearray(b"ba"), memoryview(b"mv"))
    v = db.get(memoryview(b"ba"))
    assert v == b"mv" and type(v) is bytes
    db.put(b"\x00\xff\x00", b"\x00binary\xff")
    assert db[bytearray(b"\x00\xff\x00")] == b"\x00binary\xff"


@pytest.mark.parametrize("size", [16383, 16384, 16385, 1 << 20])
def test_values_around_the_read_buffer(db, size):
    v = os.urandom(size)
    db.put(b"big", v)
    assert db.get(b"big") == v
    with db.snapshot() as s:
        assert s.get(b"big") == v
    with db.transaction() as t:
        assert t.get(b"big") == v


def test_batch(db):
    db.put(b"gone", b"x")
    with db.batch() as b:
        b.put(b"a", b"1")
        b.put(b"b", b"2")
        b.delete(b"gone")
        assert len(b) == 3
    assert (db.get(b"a"), db.get(b"b"), db.get(b"gone")) == (b"1", b"2", None)

    with pytest.raises(RuntimeError):
        with db.batch() as b:
            b.put(b"never", b"1")
            raise RuntimeError("the block failed: nothing applied")
    assert db.get(b"never") is None

    b = walrus.Batch()
    b.put(b"c", b"3")
    db.write(b, sync=True)
    db.write(b)  # left as it was: applied again
    b.clear()
    assert len(b) == 0
    b.close()
    with pytest.raises(walrus.Misuse):
        b.put(b"d", b"4")


def fill(db, n=20):
    for i in range(n):
        db.put(b"k%02d" % i, b"v%02d" % i)
    return [b"k%02d" % i for i in range(n)]


def test_iterators_ranges_and_reverse(db):
    keys = fill(db)
    assert list(db.keys()) == keys
    assert list(db) == keys
    assert list(db.keys(b"k05", b"k09")) == keys[5:9]
    assert list(db.keys(b"k05", b"k09", reverse=True)) == keys[8:4:-1]
    assert list(db.keys(reverse=True)) == keys[::-1]
    assert list(db.keys(lo=b"k18")) == keys[18:]
    assert list(db.keys(hi=b"k02")) == keys[:2]
    assert list(db.keys(b"k05", b"k05")) == []
    assert list(db.items(b"k03", b"k05")) == [(b"k03", b"v03"), (b"k04", b"v04")]
    assert list(db.values(b"k03", b"k05", reverse=True)) == [b"v04", b"v03"]


def test_iterator_seek_and_close(db):
    keys = fill(db)
    it = db.keys()
    assert next(it) == keys[0]
    it.seek(b"k10")
    assert next(it) == b"k10" and next(it) == b"k11"
    it.close()
    assert list(it) == []  # a closed iterator is exhausted
    with db.keys() as it:
        assert next(it) == keys[0]
    assert list(it) == []


def test_iterators_end_with_their_owners(db):
    fill(db)
    n = len(db._children)
    it = db.keys()
    assert list(it) and len(db._children) == n  # freed when exhausted
    it = db.keys()
    next(it)
    del it  # collected: freed at the handle's next call
    db.get(b"k00")
    assert len(db._children) == n
    it = db.keys()
    db.close()  # a handle's close ends its iterators
    with pytest.raises(walrus.Misuse):
        next(it)


def test_snapshot(db):
    fill(db, 5)
    with db.snapshot() as s:
        db.put(b"k00", b"new")
        db.delete(b"k01")
        db.put(b"k99", b"added")
        assert s.get(b"k00") == b"v00" and s[b"k01"] == b"v01"
        assert b"k99" not in s
        assert list(s.keys()) == [b"k%02d" % i for i in range(5)]
        assert list(s.items(b"k00", b"k02", reverse=True)) == [(b"k01", b"v01"),
                                                                (b"k00", b"v00")]
        it = s.keys()
    assert db[b"k00"] == b"new"
    with pytest.raises(walrus.Misuse):
        s.get(b"k00")  # released at the end of the block
    with pytest.raises(walrus.Misuse):
        next(it)  # and its iterators with it


def test_transaction_commit_and_abort(db):
    db.put(b"a", b"1")
    with db.transaction() as t:
        assert t[b"a"] == b"1"
        t.put(b"b", b"2")
        t.delete(b"a")
        assert t.get(b"b") == b"2" and t.get(b"a") is None
        assert list(t.keys()) == [b"b"]  # its own writes over its snapshot
        assert db.get(b"b") is None  # nothing visible before the commit
    assert (db.get(b"a"), db.get(b"b")) == (None, b"2")
    assert not t.open

    with pytest.raises(ZeroDivisionError):
        with db.transaction() as t:
            t.put(b"c", b"3")
            1 / 0
    assert db.get(b"c") is None and not t.open

    t = db.transaction()
    t.put(b"d", b"4")
    t.abort()
    assert db.get(b"d") is None
    with pytest.raises(walrus.Misuse):
        t.commit()  # ended


def test_conflict_and_retries(data_dir, db):
    db.put(b"n", b"0")
    with walrus.open(data_dir) as other:
        t = db.transaction()
        t.get(b"n")
        other.put(b"n", b"5")
        t.put(b"n", b"1")
        with pytest.raises(walrus.Conflict) as e:
            t.commit()
        assert e.value.code == walrus.CODES["Conflict"] and not t.open
        assert db[b"n"] == b"5"

        runs = []

        def incr(txn):
            runs.append(1)
            n = int(txn.get(b"n"))
            if len(runs) == 1:
                other.put(b"n", b"10")  # a concurrent commit: this run conflicts
            txn.put(b"n", b"%d" % (n + 1))
            return n + 1

        assert db.run_transaction(incr) == 11
        assert len(runs) == 2 and db[b"n"] == b"11"

        attempts = 0
        with pytest.raises(walrus.Conflict):
            for txn in db.transactions(retries=2):
                with txn:
                    attempts += 1
                    txn.get(b"n")
                    other.put(b"n", b"%d" % attempts)
                    txn.put(b"n", b"x")
        assert attempts == 3


def test_snapshot_isolation_allows_write_skew(data_dir, db):
    db.put(b"x", b"0")
    with walrus.open(data_dir) as other:
        t = db.transaction(snapshot_isolation=True)
        t.get(b"x")
        other.put(b"x", b"1")
        t.put(b"y", b"1")  # read x, wrote y: only write-write conflicts count
        t.commit()
    assert db[b"y"] == b"1"


def test_maintenance(db):
    fill(db, 50)
    db.checkpoint()
    st = db.stats()
    assert st["checkpoints"]["completed"] >= 1
    assert st["instance"]["supervisor_pid"] == db.supervisor_pid
    assert db.verify() == []
    c = db.compact()
    assert set(c) >= {"blocks_before", "blocks_after"}
    assert db.switch_wal() >= 0
    assert db.restore_point("py-test") > 0


def test_backup_restore(db, data_dir, tmp):
    fill(db, 30)
    bk = os.path.join(tmp, "backup")
    seen = []
    db.backup(bk, fast=True, progress=lambda done, total: seen.append((done, total)))
    assert seen and not os.path.exists(os.path.join(bk, "walrus.backup-incomplete"))
    db.put(b"after", b"1")
    db.close()
    walrus.stop(data_dir)
    restored = os.path.join(tmp, "restored")
    walrus.restore(bk, restored)
    try:
        with walrus.open(restored) as r:
            assert list(r.items()) == [(b"k%02d" % i, b"v%02d" % i) for i in range(30)]
    finally:
        walrus.stop(restored)


def test_backup_stopped_by_its_progress_callback(db, tmp):
    for i in range(40):
        db.put(b"k%d" % i, os.urandom(64 << 10))  # several MiB: several progress calls

    def progress(done, total):
        raise KeyboardInterrupt

    bk = os.path.join(tmp, "backup")
    with pytest.raises(KeyboardInterrupt) as e:
        db.backup(bk, fast=True, progress=progress)
    assert isinstance(e.value.__cause__, walrus.Interrupted)
    assert os.path.exists(os.path.join(bk, "walrus.backup-incomplete"))
    db.put(b"still", b"usable")


def test_stop(data_dir):
    with walrus.open(data_dir, create_if_missing=True) as db:
        db.put(b"k", b"v")
        assert walrus.stop(data_dir, "fast") is True
        with pytest.raises(walrus.Shutdown):
            db.get(b"k")
    assert walrus.stop(data_dir) is False
    with walrus.open(data_dir) as db:
        assert db[b"k"] == b"v"

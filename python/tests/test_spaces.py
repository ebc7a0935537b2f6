"""Named key spaces: db.space(name) and its calls, create/drop/list and
their errors, batches, snapshots and transactions across spaces, a dropped
space's objects, and spaces of another or a closed handle."""
import pytest

import walrus


def test_spaces_are_apart_from_the_default_and_each_other(data_dir, db):
    a, b = db.space("a"), db.space("b")
    assert db.space("a") is a and a.name == "a" and a.db is db
    db.put(b"k", b"default")
    a.put(b"k", b"in a")
    b[b"k"] = b"in b"
    assert (db[b"k"], a[b"k"], b.get(b"k")) == (b"default", b"in a", b"in b")
    a.put(b"only-a", b"1")
    assert b"only-a" in a and b"only-a" not in b and b"only-a" not in db
    assert a.get(b"only-b") is None and a.get(b"only-b", b"dflt") == b"dflt"
    with pytest.raises(KeyError):
        b[b"only-a"]
    assert a.delete(b"k") is True and a.delete(b"k") is False
    assert (db[b"k"], a.get(b"k"), b[b"k"]) == (b"default", None, b"in b")
    with pytest.raises(walrus.NotFound):
        del a[b"k"]
    del b[b"k"]
    assert db[b"k"] == b"default" and list(db.keys()) == [b"k"]
    a.put(b"async", b"1", sync=False)
    db.sync()
    db.close()
    walrus.stop(data_dir)
    with walrus.open(data_dir) as again:  # durable, and named, across a restart
        assert again.spaces() == ["a", "b"]
        a = again.space("a", create=False)
        assert list(a.items()) == [(b"async", b"1"), (b"only-a", b"1")]
        assert again[b"k"] == b"default" and list(again.space("b")) == []


def test_create_drop_list_and_their_errors(db):
    assert db.spaces() == []
    users = db.create_space("users")
    assert isinstance(users, walrus.Space) and db.space("users") is users
    db.space("a.b-c_9")
    assert db.spaces() == ["a.b-c_9", "users"]  # in order
    with pytest.raises(walrus.Exists) as e:
        db.create_space("users")
    assert e.value.code == walrus.CODES["Exists"] == -25 and '"users"' in e.value.message
    assert walrus.CLASSES[-25] is walrus.Exists and walrus.strerror(-25)
    with pytest.raises(walrus.NotFound) as e:
        db.space("nobody", create=False)
    assert "nobody" in e.value.message
    with pytest.raises(walrus.NotFound) as e:
        db.drop_space("nobody")
    assert "nobody" in e.value.message
    for bad in ["", "a b", "a/b", "x" * 65, "caf\u00e9", "a\0b"]:
        for call in (db.space, db.create_space, db.drop_space):
            with pytest.raises(walrus.InvalidArgument):
                call(bad)
    with pytest.raises(TypeError):
        db.space(5)
    assert db.space("x" * 64).name == "x" * 64
    users.put(b"k", b"v")
    db.drop_space(users)  # a Space or its name
    assert db.spaces() == ["a.b-c_9", "x" * 64]
    again = db.space("users")  # a new space of the same name: empty
    assert again is not users and again.get(b"k") is None
    db.put(b"still", b"usable")


def test_batch_across_spaces_is_atomic(data_dir, db):
    a, b = db.space("a"), db.space("b")
    a.put(b"gone", b"x")
    batch = walrus.Batch()
    batch.put(b"k", b"0")
    batch.put(b"k", b"1", space=a)
    batch.put(b"k", b"2", space=b)
    batch.delete(b"gone", space=a)
    assert len(batch) == 4
    with walrus.open(data_dir) as other:
        oa, ob = other.space("a"), other.space("b")
        assert (other.get(b"k"), oa.get(b"k"), ob.get(b"k")) == (None, None, None)
        db.write(batch)
        assert (other[b"k"], oa[b"k"], ob[b"k"]) == (b"0", b"1", b"2")
        assert oa.get(b"gone") is None
    batch.close()

    with db.batch() as w:
        w.put(b"k", b"10")
        w.put(b"k", b"11", space=a)
    assert (db[b"k"], a[b"k"]) == (b"10", b"11")

    # A batch with a write to a space dropped before its commit applies
    # nothing, in the other spaces either.
    doomed = db.space("doomed")
    batch = walrus.Batch()
    batch.put(b"k", b"20")
    batch.put(b"k", b"21", space=a)
    batch.put(b"k", b"22", space=doomed)
    db.drop_space("doomed")
    with pytest.raises(walrus.NotFound) as e:
        db.write(batch)
    assert "dropped" in e.value.message
    assert (db[b"k"], a[b"k"]) == (b"10", b"11")
    batch.close()


def test_transaction_across_spaces_retried_on_a_conflict(data_dir, db):
    a, b = db.space("a"), db.space("b")
    a.put(b"n", b"0")
    with walrus.open(data_dir) as other:
        oa = other.space("a")
        runs = 0
        for txn in db.transactions(retries=3):
            with txn:
                runs += 1
                n = int(txn.get(b"n", space=a))
                if runs == 1:
                    oa.put(b"n", b"5")  # a concurrent commit to what it read: retried
                txn.put(b"n", b"%d" % (n + 1), space=a)
                txn.put(b"copy", b"%d" % (n + 1), space=b)
                txn.put(b"runs", b"%d" % runs)
        assert runs == 2
        assert (a[b"n"], b[b"copy"], db[b"runs"]) == (b"6", b"6", b"2")

        # The same key in another space is another key: no conflict.
        t = db.transaction()
        t.get(b"n", space=a)
        other.put(b"n", b"default")
        other.space("b").put(b"n", b"in b")
        t.put(b"n", b"7", space=a)
        t.commit()
        assert (a[b"n"], db[b"n"], b[b"n"]) == (b"7", b"default", b"in b")


def test_transaction_reads_its_writes_in_each_space(db):
    a = db.space("a")
    a.put(b"old", b"1")
    with db.transaction() as t:
        t.put(b"new", b"2", space=a)
        t.delete(b"old", space=a)
        t.put(b"new", b"default")
        assert t.get(b"new", space=a) == b"2" and t.get(b"old", space=a) is None
        assert t[b"new"] == b"default"
        assert list(t.items(space=a)) == [(b"new", b"2")]
        assert list(t.keys()) == [b"new"]
        assert a.get(b"new") is None  # nothing visible before the commit
    assert list(a.items()) == [(b"new", b"2")] and db[b"new"] == b"default"


def test_snapshot_reads_in_a_space(db):
    a = db.space("a")
    for i in range(5):
        a.put(b"k%d" % i, b"v%d" % i)
    with db.snapshot() as s:
        a.put(b"k0", b"new")
        a.delete(b"k1")
        a.put(b"k9", b"added")
        assert s.get(b"k0", space=a) == b"v0" and s.get(b"k1", space=a) == b"v1"
        assert s.get(b"k9", space=a) is None and s.get(b"k0") is None
        assert list(s.keys(space=a)) == [b"k%d" % i for i in range(5)]
        assert list(s.items(b"k1", b"k3", reverse=True, space=a)) == [(b"k2", b"v2"),
                                                                       (b"k1", b"v1")]
        assert list(s.keys()) == []
    assert a[b"k0"] == b"new"


def test_iterators_in_a_space(db):
    a = db.space("a")
    keys = [b"k%02d" % i for i in range(20)]
    for k in keys:
        a.put(k, k.upper())
    db.put(b"k05x", b"default")
    assert list(a) == keys and list(a.keys()) == keys
    assert list(a.keys(b"k05", b"k09")) == keys[5:9]
    assert list(a.keys(b"k05", b"k09", reverse=True)) == keys[8:4:-1]
    assert list(a.keys(reverse=True)) == keys[::-1]
    assert list(a.items(b"k03", b"k05")) == [(b"k03", b"K03"), (b"k04", b"K04")]
    assert list(a.values(hi=b"k02")) == [b"K00", b"K01"]
    with a.keys() as it:
        assert next(it) == b"k00"
        it.seek(b"k10")
        assert next(it) == b"k10" and next(it) == b"k11"
    assert list(db.keys()) == [b"k05x"]


def test_a_dropped_space_raises_not_found(data_dir, db):
    a = db.space("a")
    a.put(b"k", b"v")
    a.put(b"l", b"v")
    it = a.keys()
    assert next(it) == b"k"
    batch = walrus.Batch()
    batch.put(b"b", b"1", space=a)
    t = db.transaction()
    with walrus.open(data_dir) as other:
        other.drop_space("a")  # by another handle: seen by this one's next call
    calls = [lambda: a.get(b"k"), lambda: a.get(b"absent"), lambda: a[b"k"],
             lambda: b"k" in a, lambda: a.put(b"k", b"v"), lambda: a.delete(b"k"),
             lambda: a.keys(), lambda: list(it), lambda: db.write(batch),
             lambda: t.get(b"k", space=a), lambda: t.keys(space=a)]
    # (The iterator's steps within its private copy of a leaf make no call:
    # it raises once it needs the space's pages again, at the latest.)
    for call in calls:
        with pytest.raises(walrus.NotFound) as e:
            call()
        assert "dropped" in e.value.message
    with pytest.raises(walrus.NotFound) as e:
        a.get(b"k")
    assert e.value.message == 'key space "a" was dropped'
    t.put(b"default", b"1")
    t.delete(b"k", space=a)  # buffered: the commit finds the space gone
    with pytest.raises(walrus.NotFound):
        t.commit()
    assert db.get(b"default") is None
    batch.close()
    assert db.spaces() == [] and db.space("a").get(b"k") is None
    db.put(b"k", b"the handle goes on")


def test_space_of_another_handle_or_a_closed_one(data_dir, db):
    a = db.space("a")
    with walrus.open(data_dir) as other:
        theirs = other.space("a")
        assert theirs is not a
        calls = [lambda: db.snapshot().get(b"k", space=theirs),
                 lambda: db.transaction().put(b"k", b"v", space=theirs),
                 lambda: db.transaction().get(b"k", space=theirs),
                 lambda: db.transaction().keys(space=theirs)]
        for call in calls:
            with pytest.raises(walrus.Misuse) as e:
                call()
            assert "another walrus handle" in e.value.message
        batch = walrus.Batch()
        batch.put(b"k", b"theirs", space=theirs)
        with pytest.raises(walrus.Misuse):
            batch.put(b"k", b"mine", space=a)  # one handle's spaces per batch
        with pytest.raises(walrus.Misuse):
            db.write(batch)
        other.write(batch)
        batch.clear()
        batch.put(b"k", b"mine", space=a)  # cleared: any handle's again
        db.write(batch)
        batch.close()
    assert a[b"k"] == b"mine"
    for bad in ("a", b"a", 1):
        with pytest.raises(TypeError):
            db.transaction().get(b"k", space=bad)
        b = walrus.Batch()
        with pytest.raises(TypeError):
            b.put(b"k", b"v", space=bad)
        b.close()
    db.close()
    batch = walrus.Batch()
    for call in (lambda: a.get(b"k"), lambda: a.put(b"k", b"v"), lambda: a.keys(),
                 lambda: batch.put(b"k", b"v", space=a), db.spaces,
                 lambda: db.space("a"), lambda: db.drop_space("a")):
        with pytest.raises(walrus.Misuse) as e:
            call()
        assert "closed" in e.value.message
    batch.close()
    assert "'a'" in repr(a)

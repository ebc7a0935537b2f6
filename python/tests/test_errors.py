"""Bad input and misuse: each is an exception that says what was wrong
(a walrus.Error with the library's code and message, or TypeError for a
Python type), never a crash, and the handle stays usable after it."""
import os
import pickle

import pytest

import walrus


def test_error_carries_code_name_and_message(db):
    with pytest.raises(walrus.InvalidArgument) as e:
        db.put(b"", b"v")
    err = e.value
    assert err.code == -2 and err.code == walrus.InvalidArgument.code
    assert err.name == walrus.strerror(-2) and err.name
    assert "empty" in err.message
    assert str(err.code) in str(err) and err.message in str(err)
    assert isinstance(err, walrus.Error) and isinstance(err, ValueError)
    again = pickle.loads(pickle.dumps(err))  # crosses process boundaries
    assert (type(again), again.code, again.message) == (type(err), err.code, err.message)
    db.put(b"k", b"v")  # the handle goes on


def test_every_code_has_its_class():
    for code, cls in walrus.CLASSES.items():
        assert cls.code == code and issubclass(cls, walrus.Error)
        assert walrus.strerror(code)
    assert issubclass(walrus.NotFound, KeyError)
    assert issubclass(walrus.Panic, walrus.Restart)


@pytest.mark.parametrize("bad", ["text", 5, None, 1.5, ["k"]])
def test_keys_and_values_are_bytes(db, bad):
    with pytest.raises(TypeError):
        db.put(bad, b"v")
    with pytest.raises(TypeError):
        db.put(b"k", bad)
    with pytest.raises(TypeError):
        db.get(bad)
    with pytest.raises(TypeError):
        db.keys(lo=bad) if bad is not None else db.keys(hi=5)
    b = walrus.Batch()
    with pytest.raises(TypeError):
        b.put(bad, b"v")
    b.close()
    assert db.get(b"k") is None


def test_key_limits(db):
    db.put(b"x" * walrus.MAX_KEY, b"max")
    assert db[b"x" * walrus.MAX_KEY] == b"max"
    with pytest.raises(walrus.TooBig) as e:
        db.put(b"x" * (walrus.MAX_KEY + 1), b"v")
    # MAX_KEY is the library's: 1024, or 480 in a build with 4 KiB pages
    assert (str(walrus.MAX_KEY + 1) in e.value.message
            or str(walrus.MAX_KEY) in e.value.message)
    with pytest.raises(walrus.TooBig):
        db.get(b"x" * (walrus.MAX_KEY + 1))
    with pytest.raises(walrus.InvalidArgument):
        db.get(b"")
    with db.transaction() as t:
        with pytest.raises(walrus.TooBig):
            t.put(b"x" * (walrus.MAX_KEY + 1), b"v")
    b = walrus.Batch()
    with pytest.raises(walrus.InvalidArgument):
        b.put(b"", b"v")
    b.close()


def test_value_over_the_pool(data_dir):
    with walrus.open(data_dir, create_if_missing=True, shared_buffers="1MB") as db:
        with pytest.raises(walrus.TooBig) as e:
            db.put(b"k", b"v" * (4 << 20))
        assert "shared_buffers" in e.value.message
        assert db.get(b"k") is None


def test_bad_options(data_dir):
    with pytest.raises(walrus.InvalidArgument) as e:
        walrus.open(data_dir, create_if_missing=True, no_such_option=1)
    assert "no_such_option" in e.value.message
    with pytest.raises(walrus.InvalidArgument) as e:
        walrus.open(data_dir, create_if_missing=True, shared_buffers="lots")
    assert "shared_buffers" in e.value.message
    with pytest.raises(walrus.InvalidArgument):
        walrus.open(data_dir, create_if_missing="maybe")
    with pytest.raises(ValueError):
        walrus.stop(data_dir, "gently")


def test_open_errors(tmp):
    missing = os.path.join(tmp, "missing")
    with pytest.raises(walrus.Missing) as e:
        walrus.open(missing)
    assert missing in e.value.message
    plain = os.path.join(tmp, "plain")
    os.mkdir(plain, 0o700)
    with open(os.path.join(plain, "file"), "w") as f:
        f.write("not walrus")
    with pytest.raises(walrus.NotWalrus):
        walrus.open(plain)
    assert not os.path.exists(os.path.join(missing))


def test_an_option_the_instance_runs_otherwise(data_dir, db):
    with walrus.open(data_dir, shared_buffers="64MB") as other:
        assert other.warning and "shared_buffers" in other.warning
    assert db.warning is None
    with pytest.raises(walrus.InvalidArgument):
        walrus.open(data_dir, shared_buffers="64MB", strict_options=True)


def test_closed_handle(data_dir):
    db = walrus.open(data_dir, create_if_missing=True)
    db.put(b"k", b"v")
    s = db.snapshot()
    t = db.transaction()
    it = db.keys()
    db.close()
    assert db.closed
    db.close()  # twice: nothing
    for call in (lambda: db.get(b"k"), lambda: db.put(b"k", b"v"), lambda: db.keys(),
                 lambda: s.get(b"k"), lambda: t.get(b"k"), lambda: t.commit(),
                 lambda: next(it), db.snapshot, db.stats):
        with pytest.raises(walrus.Misuse):
            call()
    s.release()  # ending what the close ended: nothing
    it.close()
    assert "closed" in repr(db)


def test_ended_transaction(db):
    t = db.transaction()
    t.commit()
    with pytest.raises(walrus.Misuse):
        t.put(b"k", b"v")
    with pytest.raises(walrus.Misuse):
        t.abort()
    with pytest.raises(walrus.Misuse):
        t.keys()


def test_restore_arguments(tmp):
    with pytest.raises(ValueError):
        walrus.restore(tmp, os.path.join(tmp, "x"), target_lsn=1, target_name="n")
    with pytest.raises(walrus.Error):
        walrus.restore(os.path.join(tmp, "no-backup"), os.path.join(tmp, "x"))

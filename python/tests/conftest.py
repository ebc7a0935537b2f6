"""What the binding's tests share: a data directory per test whose instance
is stopped at the end, and whatever else a test starts undone on every path.

The binding under test is python/walrus of this tree (set
WALRUS_TEST_INSTALLED=1 to test an installed one instead); its library is
the one WALRUS_LIBRARY names (meson passes build/libwalrus.so), else what
walrus/_lib.py finds.  tests/durability/wtest.py does the cleanup: the data
directory's processes are SIGKILLed and its files removed even when this
process is killed (meson's timeout), by a watchdog process of its own.
"""
import gc
import os
import sys

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.dont_write_bytecode = True
if not os.environ.get("WALRUS_TEST_INSTALLED"):
    sys.path.insert(0, os.path.join(HERE, ".."))
sys.path.insert(0, os.path.join(HERE, "..", "..", "tests", "durability"))

import walrus  # noqa: E402
import wtest  # noqa: E402


@pytest.fixture
def cleanup():
    c = wtest.Cleanup()
    try:
        yield c
    finally:
        c.run()


def stop_quietly(path):
    try:
        walrus.stop(path, "fast", wait=True)
    except walrus.Error:
        pass


@pytest.fixture
def tmp(cleanup):
    """A temporary directory, removed at the end whatever happens."""
    return wtest.tempdir(cleanup, "walrus-py-")


@pytest.fixture
def data_dir(tmp, cleanup):
    """A data directory (not created) whose instance is stopped at the end."""
    d = os.path.join(tmp, "data")
    cleanup.add_durable("kill_dir", d)
    yield d
    # Handles a failed test dropped are closed first: a process has one
    # directory open at a time, and the next test opens another.
    gc.collect()
    stop_quietly(d)


@pytest.fixture
def db(data_dir):
    h = walrus.open(data_dir, create_if_missing=True)
    yield h
    h._close_quietly()


def walrus_bin():
    return wtest.default_walrus()


def child_env():
    """The environment for a Python child that imports this same binding."""
    env = dict(os.environ)
    pkg = os.path.dirname(os.path.dirname(os.path.abspath(walrus.__file__)))
    env["PYTHONPATH"] = os.pathsep.join([pkg] + [p for p in [env.get("PYTHONPATH")] if p])
    env["WALRUS_LIBRARY"] = walrus.library_path
    env["PYTHONDONTWRITEBYTECODE"] = "1"
    return env

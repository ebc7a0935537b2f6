"""Crashes: a process of the instance, the whole instance, or another
client killed while a handle is open.  The handle's next call raises
walrus.Restart; closing it is quiet; a new open works and finds every write
that was acknowledged as durable."""
import os
import signal
import subprocess
import sys

import pytest

import walrus
import wtest

from conftest import child_env

WAIT = 120


def raises_restart(db):
    """Whether a call on @db now raises walrus.Restart (None: not yet)."""
    try:
        db.get(b"probe")
    except walrus.Restart:
        return True
    return None


def fill(db, n=100):
    for i in range(n):
        db.put(b"k%03d" % i, b"v%03d" % i)  # durable when put returns


def check_intact(path, n=100):
    with walrus.open(path) as db:
        assert list(db.items(b"k", b"l")) == [(b"k%03d" % i, b"v%03d" % i) for i in range(n)]
        assert db.verify() == []


def kill(pids):
    wtest.kill_pids(pids)
    assert wtest.wait_gone(pids, WAIT)


@pytest.mark.parametrize("victim", ["walrus-ckpt", "walrus-walw", "walrus-super"])
def test_a_process_of_the_instance_killed(data_dir, db, victim):
    fill(db)
    t = db.transaction()
    s = db.snapshot()
    pids = wtest.named(wtest.instance_pids(data_dir), victim)
    assert len(pids) == 1
    kill(pids)
    assert wtest.wait_for(lambda: raises_restart(db), WAIT)
    with pytest.raises(walrus.Restart):
        db.put(b"k", b"v")
    with pytest.raises(walrus.Restart):
        t.commit()
    with pytest.raises(walrus.Restart):
        s.get(b"k000")
    db.close()  # quiet: the handle was dead already
    if victim == "walrus-super":
        kill(wtest.instance_pids(data_dir))  # its orphans go with it
    check_intact(data_dir)


def test_the_whole_instance_killed(data_dir, db):
    fill(db)
    kill(wtest.instance_pids(data_dir))
    with pytest.raises(walrus.Restart) as e:
        db.get(b"k000")
    assert "reopen" in e.value.message
    db.close()
    check_intact(data_dir)  # a new instance, recovered from the WAL


CLIENT = """
import sys, walrus
db = walrus.open(sys.argv[1])
db.put(b"client", b"1")
print("ready", flush=True)
sys.stdin.read()
"""


def test_another_client_killed(data_dir, db):
    fill(db)
    p = subprocess.Popen([sys.executable, "-c", CLIENT, data_dir], env=child_env(),
                         stdin=subprocess.PIPE, stdout=subprocess.PIPE)
    try:
        assert p.stdout.readline() == b"ready\n"
        p.send_signal(signal.SIGKILL)  # a backend that dies attached: a crash
        p.wait(WAIT)
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()
    assert wtest.wait_for(lambda: raises_restart(db), WAIT)
    db.close()
    check_intact(data_dir)
    with walrus.open(data_dir) as again:
        assert again[b"client"] == b"1"
        assert again.stats()["instance"]["crash_restarts"] == 1


def test_immediate_stop(data_dir, db):
    fill(db)
    assert walrus.stop(data_dir, "immediate")
    with pytest.raises((walrus.Shutdown, walrus.Restart)):
        db.get(b"k000")
    db.close()
    check_intact(data_dir)

"""walrus: a Python binding of the walrus storage engine (libwalrus.so).

    import walrus
    with walrus.open("/tmp/db", create_if_missing=True) as db:
        db.put(b"hello", b"world")          # durable when it returns
        print(db.get(b"hello"))             # b'world'

Keys and values are bytes.  A handle serves one thread at a time: open one
per thread (a second thread entering a handle in use gets walrus.Misuse).
Calls release the GIL.  Named key spaces: db.space("users") has the same
get/put/delete/items.  docs/python.md is the reference.
"""
import os

from . import _lib, errors
from .db import DB, Batch, Iterator, Snapshot, Space, Transaction
from .errors import (  # noqa: F401
    CLASSES, CODES, Busy, Conflict, Corrupt, Error, Exists, InternalError, Interrupted,
    InvalidArgument, IOFailure, LimitReached, Missing, Misuse, NoSpace, NotFound, NotRunning,
    NotWalrus, OutOfMemory, Panic, PermissionDenied, ProtocolError, ReadOnly, Restart,
    Shutdown, SnapshotTooOld, TooBig, VersionMismatch, strerror)

__version__ = "0.2.0"
library_path = _lib.path
MAX_KEY = _lib.MAX_KEY
MAX_VALUE = _lib.MAX_VALUE

open = DB  # noqa: A001 - walrus.open(path, **options), as dbm.open and lmdb.open


def _check(rc):
    if rc < 0:
        raise errors.last_error(rc)
    return rc


def stop(path, mode="fast", wait=True):
    """Stops the instance serving @path (`walrus -D DIR stop`): mode "smart"
    (waits for every handle to close), "fast" (open handles' new calls fail
    with walrus.Shutdown) or "immediate" (no checkpoint; the next open
    recovers from the WAL).  @wait: return once its processes have exited.
    Returns False when no instance was running."""
    if mode not in _lib.STOP_MODES:
        raise ValueError(f"walrus.stop: mode must be one of {', '.join(_lib.STOP_MODES)}")
    rc = _lib.lib.walrus_stop(os.fsencode(path), _lib.STOP_MODES[mode], 1 if wait else 0)
    if rc == CODES["NotRunning"]:
        return False
    _check(rc)
    return True


def promote(path):
    """Promotes the standby running on @path; returns when it accepts writes."""
    _check(_lib.lib.walrus_promote(os.fsencode(path)))


def _lsn_text(lsn):
    if isinstance(lsn, int):
        return f"{lsn >> 32:X}/{lsn & 0xFFFFFFFF:X}"
    return str(lsn)


def _time_text(t):
    if isinstance(t, (int, float)):
        return f"@{t:.3f}"
    if hasattr(t, "isoformat"):  # a datetime: naive ones are local time, as walrus reads them
        return t.isoformat(sep=" ", timespec="milliseconds")
    return str(t)


def restore(backup, newdir, wal_archive=None, target_lsn=None, target_time=None,
            target_name=None, timeline=None):
    """Restores base backup @backup into @newdir (absent or empty) and
    recovers it, replaying WAL from @wal_archive up to at most one target:
    @target_lsn (int or "X/Y"), @target_time (seconds since the epoch, a
    datetime, or walrus's text), @target_name (a restore point); none: all
    of it.  @timeline: None or "latest", "current", or a number.  @newdir is
    left an ordinary stopped data directory."""
    targets = [(k, v) for k, v in (("lsn", target_lsn), ("time", target_time),
                                   ("name", target_name)) if v is not None]
    if len(targets) > 1:
        raise ValueError("walrus.restore: at most one of target_lsn, target_time, target_name")
    kind, value = targets[0] if targets else ("end", None)
    if kind == "lsn":
        value = _lsn_text(value)
    elif kind == "time":
        value = _time_text(value)
    _check(_lib.lib.walrus_restore_timeline(
        os.fsencode(backup), None if wal_archive is None else os.fsencode(wal_archive),
        kind.encode(), None if value is None else str(value).encode(),
        None if timeline is None else str(timeline).encode(), os.fsencode(newdir)))


"""walrus errors as exceptions.

Every failure of a walrus call raises an Error carrying the call's WALRUS_E*
code (.code, a negative int), the library's name for it (.name, from
walrus_strerror) and the detailed message of walrus_errmsg (.message).  A
subclass per code lets callers catch what they can handle.
"""
from . import _lib


class Error(Exception):
    """A walrus call failed: .code (WALRUS_E*, negative), .name, .message."""

    code = None

    def __init__(self, code, message, name=None):
        self.code = code
        self.message = message
        self.name = name if name is not None else strerror(code)
        super().__init__(code, message)

    def __str__(self):
        if self.message:
            return f"{self.message} ({self.name}, {self.code})"
        return f"{self.name} ({self.code})"

    def __repr__(self):
        return f"{type(self).__name__}({self.code}, {self.message!r})"


class NotFound(Error, KeyError):
    """WALRUS_ENOTFOUND: the key is absent (db[key], del db[key])."""


class InvalidArgument(Error, ValueError):
    """WALRUS_EINVAL: a bad argument, option value or configuration."""


class IOFailure(Error):
    """WALRUS_EIO: an I/O error; the message names the file and errno."""


class NoSpace(Error):
    """WALRUS_ENOSPC: no space left on a device."""


class Corrupt(Error):
    """WALRUS_ECORRUPT: a checksum or structural check failed."""


class Busy(Error):
    """WALRUS_EBUSY: the directory is owned by another instance, or in use."""


class PermissionDenied(Error):
    """WALRUS_EPERM: permissions of the data directory or its files."""


class Missing(Error):
    """WALRUS_ENOENT: a missing directory or file."""


class Restart(Error):
    """WALRUS_ERESTART: the instance crashed and restarted from its WAL.
    The handle is dead: close it and open the directory again (data
    acknowledged as durable is safe)."""


class Panic(Restart):
    """WALRUS_EPANIC: this call hit a PANIC and the instance restarts; as for
    Restart, close the handle and open again."""


class OutOfMemory(Error):
    """WALRUS_ENOMEM."""


class VersionMismatch(Error):
    """WALRUS_EVERSION: data or WAL written by a walrus this one cannot read."""


class TooBig(Error, ValueError):
    """WALRUS_ETOOBIG: a key or value over its limit."""


class Shutdown(Error):
    """WALRUS_ESHUTDOWN: the instance is shutting down (walrus.stop)."""


class ProtocolError(Error):
    """WALRUS_EPROTO: an unexpected message from the supervisor."""


class NotWalrus(Error):
    """WALRUS_ENOTWALRUS: not a walrus data directory."""


class InternalError(Error):
    """WALRUS_EINTERNAL: a bug in walrus; please report it with the log."""


class LimitReached(Error):
    """WALRUS_ELIMIT: a configured limit (max_connections, snapshots, fds)."""


class Misuse(Error):
    """WALRUS_EMISUSE: a handle used by two threads at once, by a child of
    fork(), or after it was closed; a key space used with another handle."""


class NotRunning(Error):
    """WALRUS_ENOTRUNNING: no instance serves the directory (walrus.stop)."""


class ReadOnly(Error):
    """WALRUS_EREADONLY: a standby in recovery refuses writes."""


class Interrupted(Error):
    """WALRUS_EINTR: stopped by walrus_interrupt (a backup's progress
    callback raised, or Ctrl-C)."""


class Conflict(Error):
    """WALRUS_ECONFLICT: a transaction's commit met a concurrent change;
    nothing was applied: run the transaction again."""


class SnapshotTooOld(Error):
    """WALRUS_ESNAPSHOT: the versions this snapshot needs are gone."""


class Exists(Error):
    """WALRUS_EEXIST: a key space of that name exists (db.create_space)."""


EMISUSE = -19
CLASSES = {
    -1: NotFound, -2: InvalidArgument, -3: IOFailure, -4: NoSpace, -5: Corrupt, -6: Busy,
    -7: PermissionDenied, -8: Missing, -9: Restart, -10: Panic, -11: OutOfMemory,
    -12: VersionMismatch, -13: TooBig, -14: Shutdown, -15: ProtocolError, -16: NotWalrus,
    -17: InternalError, -18: LimitReached, -19: Misuse, -20: NotRunning, -21: ReadOnly,
    -22: Interrupted, -23: Conflict, -24: SnapshotTooOld, -25: Exists,
}
CODES = {cls.__name__: code for code, cls in CLASSES.items()}
for _code, _cls in CLASSES.items():
    _cls.code = _code


def strerror(code):
    """The library's short description of a WALRUS_E* code."""
    return _lib.lib.walrus_strerror(code).decode(errors="replace")


def last_error(code):
    """The exception for @code, with the calling thread's walrus_errmsg().
    Called right after the failing call, in the same thread: the message is
    the C library's thread-local record of that call."""
    msg = _lib.lib.walrus_errmsg().decode(errors="replace")
    return CLASSES.get(code, Error)(code, msg)


def check(rc):
    """@rc when it is not an error; raises its exception otherwise."""
    if rc < 0:
        raise last_error(rc)
    return rc


def misuse(message):
    return Misuse(EMISUSE, message)

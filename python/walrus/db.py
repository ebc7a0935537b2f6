"""Handles, batches, iterators, snapshots and transactions over libwalrus.

Thread rule (the C library's): a handle serves one thread at a time.  Each
DB keeps a lock that every call on it, or on its iterators, snapshots and
transactions, takes without waiting: a second thread entering a handle in
use gets walrus.Misuse at once, as the C library answers WALRUS_EMISUSE.
The lock also keeps close() from freeing a handle under another thread's
call, which the C library cannot see coming.

The C objects a handle owns (iterators, snapshots, transactions) are
registered with it under a token.  Closing one frees it under the handle's
lock; one that the garbage collector finds (possibly in another thread, or
in the middle of a call of this one) is only queued, and freed at the
handle's next call or close: a finalizer never calls into C, so it can
neither race a call on the handle nor overwrite the thread's walrus_errmsg.

Key spaces (Space, and DB's calls on them) are in space.py.
"""
import ctypes
import itertools
import json
import os
import sys
import threading
import time
import weakref

from ctypes import byref, c_size_t, c_uint64, c_void_p

from . import _lib
from .errors import Conflict, Interrupted, NotFound, check as _check, last_error, misuse
from .space import _ABSENT, Space, _Mapping, _SpaceCalls

lib = _lib.lib
_OK, _ENOTFOUND, _ETOOBIG, _EMISUSE = 0, -1, -13, -19
_QUIET_CLOSE = (-9, -10, -14)  # ERESTART, EPANIC, ESHUTDOWN: the handle was dead already
_GET_BUF = 16384  # values up to this size are read with one call, into the handle's buffer
_EXIT_WAIT = 10.0  # s: a thread's exit hooks that take longer than this are not waited for


def _bytes(x, what="key"):
    """@x as bytes: bytes, bytearray, memoryview or any buffer; never str."""
    if type(x) is bytes:
        return x
    if isinstance(x, str):
        raise TypeError(f"walrus {what}s are bytes, not str: encode it first")
    try:
        return bytes(memoryview(x))
    except TypeError:
        raise TypeError(f"walrus {what}s are bytes-like objects, not {type(x).__name__}") \
            from None


def _bound(x):
    """(pointer, length) of an optional range bound."""
    if x is None:
        return None, 0
    b = _bytes(x)
    return b, len(b)


def _flags(sync):
    """Durability of one write: None follows the handle's synchronous_commit."""
    if sync is None:
        return 0
    return _lib.SYNC if sync else _lib.ASYNC


def _opt_text(value):
    if value is True:
        return "on"
    if value is False:
        return "off"
    return str(value)


def _make_opts(options):
    opts = lib.walrus_opts_new()
    if not opts:
        raise MemoryError("walrus_opts_new: out of memory")
    try:
        for name, value in options.items():
            _check(lib.walrus_opts_set(opts, name.encode(), _opt_text(value).encode()))
    except BaseException:
        lib.walrus_opts_free(opts)
        raise
    return opts


def _await_exit(tid):
    """Whether thread @tid has left Python (its run() returned); if so,
    waits until it has left the kernel too: the C library's exit hook for a
    thread runs in between.  A thread still in Python is not waited for: it
    may go on for ever, and its hook does not take a handle that another
    thread has called since."""
    if tid is None or any(t.native_id == tid for t in threading.enumerate()):
        return False
    task = f"/proc/self/task/{tid}"
    deadline = time.monotonic() + _EXIT_WAIT
    while os.path.exists(task) and time.monotonic() < deadline:
        time.sleep(0.0005)  # the kernel says nothing else of a thread's end
    return True


def _exit_close(ref):
    db = ref()
    if db is not None:
        db._close_quietly()


class DB(_Mapping, _SpaceCalls):
    """A handle on a walrus data directory: a backend of its instance.

    walrus.open(path, **options) is the same.  Options are the engine's
    (walrus -o name=value): create_if_missing=True, synchronous_commit=False,
    shared_buffers="256MB", ...; True/False become on/off.
    """

    def __init__(self, path, **options):
        self.path = os.fspath(path)
        self._lock = threading.Lock()
        self._db = None
        self._pid = os.getpid()
        self._children = {}  # token -> (free function, C pointer, kind, parent token)
        self._pending = []   # tokens whose Python object was collected
        self._tokens = itertools.count()
        self._tid = threading.get_native_id()  # the thread of the last call
        self._prev_tid = None                  # and the one before it
        self._spaces = weakref.WeakValueDictionary()  # library pointer -> Space
        self._buf = ctypes.create_string_buffer(_GET_BUF)
        self._vlen = c_size_t()
        opts = _make_opts(options)
        db = c_void_p()
        try:
            rc = lib.walrus_open(os.fsencode(self.path), opts, byref(db))
        finally:
            lib.walrus_opts_free(opts)
        _check(rc)
        # An open that ran with the instance's value of an option it set
        # differently succeeds and leaves the warning here.
        self.warning = lib.walrus_errmsg().decode(errors="replace") or None
        self._db = db.value
        if "multiprocessing" in sys.modules:
            # A multiprocessing child ends with os._exit(), which a handle
            # still open would turn into a crash of the instance; its exit
            # function runs these finalizers first (only in this process).
            import multiprocessing.util
            multiprocessing.util.Finalize(self, _exit_close, args=(weakref.ref(self),),
                                          exitpriority=0)

    # ------------------------------------------------------------ the guard

    def _busy(self):
        if os.getpid() != self._pid:
            return misuse(f"this handle belongs to process {self._pid}; a child created by "
                          "fork() must open its own")
        return misuse("this walrus handle is in use by another thread: a handle serves one "
                      "thread at a time (open one handle per thread)")

    def _enter(self):
        if os.getpid() != self._pid:
            # The library refuses an inherited handle's calls, but not the
            # steps an iterator makes within its private copy: refused here.
            raise self._busy()
        if not self._lock.acquire(False):
            raise self._busy()
        if self._db is None:
            self._lock.release()
            raise misuse(f"the walrus handle on {self.path} is closed")
        self._note_thread()
        if self._pending:
            self._drain()
        return self._db

    def _note_thread(self):
        tid = threading.get_native_id()
        if tid != self._tid:
            self._prev_tid, self._tid = self._tid, tid
            _await_exit(self._prev_tid)

    def _c(self, fn, *args):
        """A call on the handle (under its lock).  When the thread that used
        the handle before this one has just ended, the library's exit hook
        for that thread may hold the handle for a moment (it gives the
        handle's slot back): the call then fails with WALRUS_EMISUSE though
        no thread uses the handle.  Once that thread is gone, the call is
        made again, once."""
        rc = fn(*args)
        if rc == _EMISUSE and _await_exit(self._prev_tid):
            rc = fn(*args)
        return rc

    def _leave(self):
        self._lock.release()

    def _drain(self):
        while self._pending:
            self._free_child(self._pending.pop())

    def _adopt(self, free, ptr, kind, parent=None):
        token = next(self._tokens)
        self._children[token] = (free, ptr, kind, parent)
        return token

    def _free_child(self, token):
        entry = self._children.pop(token, None)
        if entry is None:
            return
        if entry[2] != "iter":
            # Its iterators die with it (the library's calls on them would
            # say EMISUSE): freed now, so that theirs say so too.
            for t in [t for t, e in self._children.items() if e[3] == token]:
                self._free_child(t)
        entry[0](entry[1])

    def _close_child(self, token):
        """A child's explicit close: nothing left to do if the handle closed."""
        if token not in self._children:
            return
        self._enter()
        try:
            self._free_child(token)
        finally:
            self._leave()

    def _forget_child(self, token):
        """From a child's finalizer: freed at the handle's next call."""
        if token in self._children:
            self._pending.append(token)

    def _child_ptr(self, token, what):
        entry = self._children.get(token)
        if entry is None:
            if what == "iterator":
                raise misuse("this iterator has ended: its snapshot or transaction ended, or "
                             "its handle was closed")
            raise misuse(f"this {what} has ended")
        return entry[1]

    # ------------------------------------------------------------ life

    @property
    def closed(self):
        return self._db is None

    def close(self):
        """Ends the handle's iterators, snapshots and open transactions (the
        transactions are aborted), then detaches.  Closing a closed handle
        does nothing.  A handle the instance's crash or stop already killed
        closes quietly."""
        if self._db is None:
            return
        if not self._lock.acquire(False):
            raise self._busy()
        try:
            if self._db is None:
                return
            self._note_thread()
            order = {"iter": 0, "txn": 1, "snapshot": 2}
            for token in sorted(self._children, key=lambda t: order[self._children[t][2]]):
                self._free_child(token)
            self._pending.clear()
            rc = self._c(lib.walrus_close, self._db)
            if rc == _EMISUSE and os.getpid() == self._pid:
                raise last_error(rc)  # refused, and not freed: the handle stays open
            self._db = None
            if rc < 0 and rc not in _QUIET_CLOSE:
                raise last_error(rc)
        finally:
            self._lock.release()

    def _close_quietly(self):
        try:
            self.close()
        except Exception:  # noqa: BLE001 - a finalizer has nowhere to report
            pass

    def __del__(self):
        if getattr(self, "_db", None) is not None:
            self._close_quietly()

    def __enter__(self):
        return self

    def __exit__(self, exc_type, exc, tb):
        if exc_type is None:
            self.close()
        else:
            self._close_quietly()  # the exception under way is the one to see
        return False

    def __repr__(self):
        state = "closed" if self._db is None else "open"
        return f"<walrus.DB {self.path!r} {state}>"

    @property
    def supervisor_pid(self):
        """Pid of the instance's supervisor process."""
        db = self._enter()
        try:
            return _check(self._c(lib.walrus_supervisor_pid, db))
        finally:
            self._leave()

    # ------------------------------------------------------------ key-value

    def _read(self, into, alloc, args, key, default, space=None):
        """One read under the lock: into the handle's buffer, or (a value
        larger than it, or no @into call) a buffer the library allocates.
        @space: the Space read, None for the default one."""
        k = _bytes(key)
        if into is not None:
            rc = self._c(into, *args, k, len(k), self._buf, _GET_BUF, byref(self._vlen))
            if rc == _OK:
                return ctypes.string_at(self._buf, self._vlen.value)
            if rc == _ENOTFOUND:
                self._space_alive(space)
                return default
            if rc != _ETOOBIG or self._vlen.value <= _GET_BUF:
                raise last_error(rc)
        p, n = c_void_p(), c_size_t()
        rc = self._c(alloc, *args, k, len(k), byref(p), byref(n))
        if rc == _ENOTFOUND:
            self._space_alive(space)
            return default
        _check(rc)
        try:
            return ctypes.string_at(p, n.value)
        finally:
            lib.walrus_free(p)

    def get(self, key, default=None):
        """The value of @key (bytes), or @default when it is absent."""
        return self._get(None, key, default)

    def put(self, key, value, sync=None):
        """Writes @key = @value.  @sync None: as the handle's
        synchronous_commit (on by default: durable when it returns); True:
        durable when it returns; False: durable within wal_writer_delay."""
        self._put(None, key, value, sync)

    def delete(self, key, sync=None):
        """Deletes @key; returns whether it was there."""
        return self._delete(None, key, sync)

    def _get(self, space, key, default):
        sp = self._space_ptr(space)
        db = self._enter()
        try:
            if space is None:
                return self._read(lib.walrus_get_into, lib.walrus_get, (db,), key, default)
            return self._read(lib.walrus_get_into_in, lib.walrus_get_in, (db, sp), key, default,
                              space)
        finally:
            self._leave()

    def _put(self, space, key, value, sync):
        k, v = _bytes(key), _bytes(value, "value")
        sp = self._space_ptr(space)
        db = self._enter()
        try:
            if space is None:
                rc = self._c(lib.walrus_put, db, k, len(k), v, len(v), _flags(sync))
            else:
                rc = self._c(lib.walrus_put_in, db, sp, k, len(k), v, len(v), _flags(sync))
            _check(rc)
        finally:
            self._leave()

    def _delete(self, space, key, sync):
        k = _bytes(key)
        sp = self._space_ptr(space)
        db = self._enter()
        try:
            if space is None:
                rc = self._c(lib.walrus_delete, db, k, len(k), _flags(sync))
            else:
                rc = self._c(lib.walrus_delete_in, db, sp, k, len(k), _flags(sync))
            if rc == _ENOTFOUND:
                self._space_alive(space)
                return False
            _check(rc)
            return True
        finally:
            self._leave()

    # ------------------------------------------------------------ batches

    def write(self, batch, sync=None):
        """Applies @batch atomically (all of it or nothing, across crashes).
        The batch is left as it was: clear() it to reuse it."""
        b = batch._enter()
        try:
            batch._check_writer(self)
            db = self._enter()
            try:
                _check(self._c(lib.walrus_batch_commit, db, b, _flags(sync)))
            finally:
                self._leave()
        finally:
            batch._leave()

    def batch(self, sync=None):
        """with db.batch() as b: b.put(...); b.delete(...) -- applied
        atomically when the block ends without an exception."""
        return _BatchWriter(self, sync)

    # ------------------------------------------------------------ iteration

    def _iterator(self, source, parent, lo, hi, reverse, what, space=None):
        """An iterator over @space (None: the default space) of the handle
        (@source "handle", @parent None), or of the snapshot or transaction
        (@source "snapshot", "transaction") of token @parent."""
        lo, lol = _bound(lo)
        hi, hil = _bound(hi)
        sp = self._space_ptr(space)
        db = self._enter()
        try:
            if source == "handle":
                args = (db,)
                open_fn = lib.walrus_iter_open if space is None else lib.walrus_iter_open_in
            elif source == "snapshot":
                args = (db, self._child_ptr(parent, "snapshot"))
                open_fn = lib.walrus_iter_open_at if space is None else lib.walrus_iter_open_at_in
            else:
                args = (self._child_ptr(parent, "transaction"),)
                open_fn = lib.walrus_txn_iter_open if space is None else lib.walrus_txn_iter_open_in
            if space is not None:
                args += (sp,)
            it = c_void_p()
            rc = self._c(open_fn, *args, lo, lol, hi, hil, byref(it))
            if rc < 0:
                err = last_error(rc)
                lib.walrus_iter_close(it)  # a failed open still hands one back to free
                raise err
            token = self._adopt(lib.walrus_iter_close, it.value, "iter", parent)
            if reverse:
                _check(self._c(lib.walrus_iter_seek_last, it))
        finally:
            self._leave()
        return Iterator(self, token, what, reverse)

    def items(self, lo=None, hi=None, reverse=False):
        """(key, value) pairs of [lo, hi) in key order (bytewise), or in
        reverse order.  None: unbounded."""
        return self._iterator("handle", None, lo, hi, reverse, "items")

    def keys(self, lo=None, hi=None, reverse=False):
        """The keys of [lo, hi), as items()."""
        return self._iterator("handle", None, lo, hi, reverse, "keys")

    def values(self, lo=None, hi=None, reverse=False):
        """The values of [lo, hi), as items()."""
        return self._iterator("handle", None, lo, hi, reverse, "values")

    # ------------------------------------------------------------ snapshots, transactions

    def snapshot(self):
        """A consistent read-only view as of now: with db.snapshot() as s: ..."""
        db = self._enter()
        try:
            p = c_void_p()
            _check(self._c(lib.walrus_snapshot_take, db, byref(p)))
            token = self._adopt(lib.walrus_snapshot_release, p.value, "snapshot")
        finally:
            self._leave()
        return Snapshot(self, token)

    def transaction(self, snapshot_isolation=False, sync=None):
        """An optimistic transaction, serializable unless
        @snapshot_isolation.  As a context manager it commits when the block
        ends without an exception (walrus.Conflict if a concurrent commit
        got in its way) and aborts otherwise."""
        db = self._enter()
        try:
            p = c_void_p()
            flags = _lib.TXN_SNAPSHOT if snapshot_isolation else 0
            _check(self._c(lib.walrus_txn_begin, db, flags, byref(p)))
            token = self._adopt(lib.walrus_txn_free, p.value, "txn")
        finally:
            self._leave()
        return Transaction(self, token, sync)

    def transactions(self, retries=10, snapshot_isolation=False, sync=None):
        """Transactions to run one after the other until one commits:

            for txn in db.transactions():
                with txn:
                    n = int(txn.get(b"n", b"0"))
                    txn.put(b"n", b"%d" % (n + 1))

        A commit that meets a conflict ends its block quietly and the loop
        runs it again, up to @retries more times; then the last
        walrus.Conflict is raised.  Any other exception ends the loop."""
        conflict = None
        for _ in range(retries + 1):
            txn = self.transaction(snapshot_isolation, sync)
            txn._retrying = True
            yield txn
            if txn._conflict is None:
                if txn.open:
                    txn.abort()  # the body left it without committing: not ours to retry
                return
            conflict = txn._conflict
        raise conflict

    def run_transaction(self, fn, retries=10, snapshot_isolation=False, sync=None):
        """Runs fn(txn) in a transaction and commits it, again on a conflict
        (up to @retries more times); returns what the committed run of @fn
        returned."""
        result = None
        for txn in self.transactions(retries, snapshot_isolation, sync):
            with txn:
                result = fn(txn)
        return result

    # ------------------------------------------------------------ maintenance

    def _simple(self, fn, *args):
        db = self._enter()
        try:
            return _check(self._c(fn, db, *args))
        finally:
            self._leave()

    def sync(self):
        """Returns once every write acknowledged so far is durable."""
        self._simple(lib.walrus_sync)

    def checkpoint(self):
        """An immediate checkpoint; returns when it is complete."""
        self._simple(lib.walrus_checkpoint)

    def compact(self):
        """Gives back the space of a tree after random inserts or deletes;
        returns walrus_compact_stats as a dict."""
        st = _lib.CompactStats()
        self._simple(lib.walrus_compact, byref(st))
        return {name: getattr(st, name) for name, _ in st._fields_}

    def stats(self):
        """The instance's counters (walrus_stats' JSON) as a dict."""
        p = c_void_p()
        self._simple(lib.walrus_stats, byref(p))
        try:
            return json.loads(ctypes.string_at(p).decode())
        finally:
            lib.walrus_free(p)

    def verify(self):
        """Checks every page checksum and the tree's invariants; returns the
        problems found as [(block, message)], empty when clean."""
        problems = []

        def report(_arg, block, msg):
            problems.append((block, msg.decode(errors="replace")))

        cb = _lib.REPORT_FN(report)
        db = self._enter()
        try:
            rc = self._c(lib.walrus_verify, db, cb, None)
            if rc < 0 and not (rc == -5 and problems):  # ECORRUPT: reported above
                raise last_error(rc)
        finally:
            self._leave()
        return problems

    def backup(self, dest, fast=False, progress=None):
        """An online base backup into @dest (absent or empty).  @fast: an
        immediate checkpoint rather than a spread one.  @progress(done,
        total) is called after each MiB copied; an exception it raises (a
        KeyboardInterrupt included) stops the backup and is raised here,
        @dest left incomplete.  Other threads get walrus.Misuse on this
        handle until it returns."""
        failure = []

        def step(done, total, _arg):
            if failure:
                return
            try:
                progress(done, total)
            except BaseException as e:  # noqa: BLE001 - raised again after the call
                failure.append(e)
                lib.walrus_interrupt()

        cb = _lib.PROGRESS_FN(step) if progress is not None else _lib.PROGRESS_FN()
        db = self._enter()
        try:
            rc = self._c(lib.walrus_backup, db, os.fsencode(dest),
                         _lib.BACKUP_FAST if fast else 0, cb, None)
            err = last_error(rc) if rc < 0 else None
        finally:
            self._leave()
        if failure:
            if isinstance(err, Interrupted):
                raise failure[0] from err
            raise failure[0]
        if err is not None:
            raise err

    def switch_wal(self):
        """Ends the current WAL segment; returns its end LSN (0: no switch)."""
        lsn = c_uint64()
        self._simple(lib.walrus_switch_wal, byref(lsn))
        return lsn.value

    def restore_point(self, name):
        """Writes a named restore point into the WAL; returns its LSN."""
        lsn = c_uint64()
        self._simple(lib.walrus_restore_point, name.encode(), byref(lsn))
        return lsn.value

    def slot_create(self, name):
        self._simple(lib.walrus_slot_create, name.encode())

    def slot_drop(self, name):
        self._simple(lib.walrus_slot_drop, name.encode())


class _BatchWriter:
    """db.batch(): a Batch applied when the with-block ends cleanly."""

    def __init__(self, db, sync):
        self._db, self._sync = db, sync
        self.batch = Batch()

    def __enter__(self):
        return self.batch

    def __exit__(self, exc_type, exc, tb):
        try:
            if exc_type is None:
                self._db.write(self.batch, self._sync)
        finally:
            self.batch.close()
        return False


class Batch:
    """Writes to apply together with db.write(batch): all or nothing.  A
    batch copies keys and values; it belongs to no handle, but once it holds
    writes to a key space (space=) only that space's handle may write it."""

    def __init__(self):
        self._lock = threading.Lock()
        self._writer = None  # weak reference to the DB of the spaces it writes to
        self._b = lib.walrus_batch_new()
        if not self._b:
            raise MemoryError("walrus_batch_new: out of memory")

    def _enter(self):
        if not self._lock.acquire(False):
            raise misuse("this walrus batch is in use by another thread")
        if self._b is None:
            self._lock.release()
            raise misuse("this walrus batch is closed")
        return self._b

    def _leave(self):
        self._lock.release()

    def put(self, key, value, space=None):
        """Writes @key = @value in key space @space (None: the default one)."""
        k, v = _bytes(key), _bytes(value, "value")
        self._add(lib.walrus_batch_put, lib.walrus_batch_put_in, space, k, len(k), v, len(v))

    def delete(self, key, space=None):
        """Deletes @key (absent or not) in key space @space."""
        k = _bytes(key)
        self._add(lib.walrus_batch_delete, lib.walrus_batch_delete_in, space, k, len(k))

    def _add(self, fn, fn_in, space, *args):
        b = self._enter()
        try:
            if space is None:
                _check(fn(b, *args))
                return
            if not isinstance(space, Space):
                raise TypeError("space must be a walrus.Space (db.space(name)), not "
                                f"{type(space).__name__}")
            db = space._owner
            self._check_writer(db)
            # Under the handle's lock: its close frees the space's pointer.
            db._enter()
            try:
                _check(fn_in(b, space._sp, *args))
            finally:
                db._leave()
            self._writer = weakref.ref(db)
        finally:
            self._leave()

    def _check_writer(self, db):
        writer = self._writer() if self._writer is not None else None
        if self._writer is not None and writer is not db:
            where = "a closed handle" if writer is None else writer.path
            raise misuse(f"this batch holds writes to key spaces of another walrus handle "
                         f"({where}): only that handle may write it")

    def clear(self):
        b = self._enter()
        try:
            lib.walrus_batch_clear(b)
            self._writer = None
        finally:
            self._leave()

    def __len__(self):
        b = self._enter()
        try:
            return lib.walrus_batch_count(b)
        finally:
            self._leave()

    def close(self):
        if self._b is None:
            return
        self._enter()
        try:
            b, self._b = self._b, None
            lib.walrus_batch_free(b)
        finally:
            self._leave()

    def __del__(self):
        # A batch is the process's memory only: freeing it touches no handle.
        b, self._b = getattr(self, "_b", None), None
        if b:
            lib.walrus_batch_free(b)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
        return False


class _Child:
    """What an iterator, a snapshot and a transaction share: a token among
    its handle's children, freed by the garbage collector if not before."""

    def __del__(self):
        token = getattr(self, "_token", None)
        if token is not None:
            self._owner._forget_child(token)

    def __enter__(self):
        return self

    def _close_token(self):
        token, self._token = self._token, None
        if token is not None:
            self._owner._close_child(token)


class _Reads:
    """The mapping-style reads and the iterators of a snapshot or a
    transaction, over its get() and _iter(); space= reads a key space."""

    def __getitem__(self, key):
        v = self.get(key, _ABSENT)
        if v is _ABSENT:
            raise NotFound(_ENOTFOUND, f"key {key!r} not found")
        return v

    def __contains__(self, key):
        return self.get(key, _ABSENT) is not _ABSENT

    def items(self, lo=None, hi=None, reverse=False, space=None):
        return self._iter(lo, hi, reverse, "items", space)

    def keys(self, lo=None, hi=None, reverse=False, space=None):
        return self._iter(lo, hi, reverse, "keys", space)

    def values(self, lo=None, hi=None, reverse=False, space=None):
        return self._iter(lo, hi, reverse, "values", space)

    def __iter__(self):
        return self.keys()


class Iterator(_Child):
    """A Python iterator over a key range of a handle, a snapshot or a
    transaction.  Closed when exhausted, by close(), at the end of a
    with-block, or when the garbage collector finds it."""

    def __init__(self, db, token, what, reverse):
        self._owner = db
        self._token = token
        self._what = what
        self._reverse = reverse
        self._started = False

    def __iter__(self):
        return self

    def __next__(self):
        db = self._owner
        if self._token is None:
            raise StopIteration
        db._enter()
        try:
            it = db._child_ptr(self._token, "iterator")
            if self._started:
                _check(db._c(lib.walrus_iter_prev if self._reverse else lib.walrus_iter_next, it))
            self._started = True
            if not lib.walrus_iter_valid(it):
                db._free_child(self._token)
                self._token = None
                raise StopIteration
            return self._current(it)
        finally:
            db._leave()

    def _current(self, it):
        p, n = c_void_p(), c_size_t()
        if self._what != "values":
            lib.walrus_iter_key(it, byref(p), byref(n))
            key = ctypes.string_at(p, n.value)
            if self._what == "keys":
                return key
        lib.walrus_iter_value(it, byref(p), byref(n))
        value = ctypes.string_at(p, n.value)
        return value if self._what == "values" else (key, value)

    def seek(self, key):
        """Moves to the first key >= @key of the range: the next item is
        that one, and iteration goes on in the iterator's direction."""
        k = _bytes(key)
        db = self._owner
        db._enter()
        try:
            _check(db._c(lib.walrus_iter_seek, db._child_ptr(self._token, "iterator"), k, len(k)))
            self._started = False
        finally:
            db._leave()

    def close(self):
        self._close_token()

    def __exit__(self, *exc):
        self.close()
        return False


class Snapshot(_Child, _Reads):
    """Reads as of one commit: with db.snapshot() as s: s.get(k), s.items()."""

    def __init__(self, db, token):
        self._owner = db
        self._token = token

    def get(self, key, default=None, space=None):
        db = self._owner
        sp = db._space_ptr(space)
        h = db._enter()
        try:
            s = db._child_ptr(self._token, "snapshot")
            if space is None:
                return db._read(lib.walrus_get_into_at, lib.walrus_get_at, (h, s), key, default)
            return db._read(None, lib.walrus_get_at_in, (h, s, sp), key, default, space)
        finally:
            db._leave()

    def _iter(self, lo, hi, reverse, what, space):
        return self._owner._iterator("snapshot", self._live(), lo, hi, reverse, what, space)

    def _live(self):
        if self._token is None:
            raise misuse("this snapshot has been released")
        return self._token

    def release(self):
        """Ends the snapshot (its iterators end with it)."""
        self._close_token()

    close = release

    def __exit__(self, *exc):
        self.release()
        return False


class Transaction(_Child, _Reads):
    """An optimistic transaction: reads as of its start plus its own
    writes; commit() applies the writes atomically or raises
    walrus.Conflict (nothing applied)."""

    def __init__(self, db, token, sync):
        self._owner = db
        self._token = token
        self._sync = sync
        self._retrying = False
        self._conflict = None
        self.open = True

    def _call(self, fn, *args):
        db = self._owner
        db._enter()
        try:
            return _check(fn(db._child_ptr(self._token, "transaction"), *args))
        finally:
            db._leave()

    def get(self, key, default=None, space=None):
        db = self._owner
        sp = db._space_ptr(space)
        db._enter()
        try:
            t = db._child_ptr(self._token, "transaction")
            if space is None:
                return db._read(lib.walrus_txn_get_into, lib.walrus_txn_get, (t,), key, default)
            return db._read(None, lib.walrus_txn_get_in, (t, sp), key, default, space)
        finally:
            db._leave()

    def put(self, key, value, space=None):
        """Writes @key = @value in key space @space (None: the default
        one) when the transaction commits."""
        k, v = _bytes(key), _bytes(value, "value")
        if space is None:
            self._call(lib.walrus_txn_put, k, len(k), v, len(v))
        else:
            sp = self._owner._space_ptr(space)
            self._call(lib.walrus_txn_put_in, sp, k, len(k), v, len(v))

    def __setitem__(self, key, value):
        self.put(key, value)

    def delete(self, key, space=None):
        """Deletes @key in key space @space when the transaction commits
        (absent or not)."""
        k = _bytes(key)
        if space is None:
            self._call(lib.walrus_txn_delete, k, len(k))
        else:
            sp = self._owner._space_ptr(space)
            self._call(lib.walrus_txn_delete_in, sp, k, len(k))

    def _iter(self, lo, hi, reverse, what, space):
        if self._token is None:
            raise misuse("this transaction has ended")
        return self._owner._iterator("transaction", self._token, lo, hi, reverse, what, space)

    def _end(self, fn, *args):
        """commit or abort: the transaction ends whatever they return."""
        token = self._token
        if token is None:
            raise misuse("this transaction has ended")
        db = self._owner
        db._enter()
        try:
            if token not in db._children:  # its handle was closed
                self._token, self.open = None, False
                raise misuse("this transaction has ended: its handle was closed")
            rc = db._c(fn, db._children[token][1], *args)
            err = last_error(rc) if rc < 0 else None
            db._free_child(token)
            self._token, self.open = None, False
        finally:
            db._leave()
        if err is not None:
            raise err

    def commit(self, sync=None):
        """Applies the writes as one atomic batch; walrus.Conflict when a
        key it read or wrote, or a range it iterated, changed since it
        began (nothing applied).  Ends the transaction either way."""
        self._end(lib.walrus_txn_commit, _flags(self._sync if sync is None else sync))

    def abort(self):
        """Drops the writes; ends the transaction."""
        self._end(lib.walrus_txn_abort)

    def __exit__(self, exc_type, exc, tb):
        if not self.open:
            return False
        if exc_type is not None:
            try:
                self.abort()
            except Exception:  # noqa: BLE001 - the body's exception is the one to see
                pass
            return False
        try:
            self.commit()
        except Conflict as e:
            if not self._retrying:
                raise
            self._conflict = e
            return True
        return False


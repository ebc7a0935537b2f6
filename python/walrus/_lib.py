"""Loading libwalrus.so and declaring the C functions of include/walrus.h.

The library is loaded with ctypes.CDLL (not PyDLL): every call into it
releases the GIL for its duration, so threads with handles of their own
run in walrus at the same time.

Where the library comes from, first found wins:
  1. the environment variable WALRUS_LIBRARY (a path to libwalrus.so);
  2. ctypes.util.find_library("walrus"), then the dynamic loader's own
     search for "libwalrus.so.0" (LD_LIBRARY_PATH, the ldconfig cache);
  3. build/libwalrus.so of the source tree, when this package is imported
     from python/ of a clone (a build made by `make`).
"""
import ctypes
import ctypes.util
import os

from ctypes import POINTER, c_char_p, c_int, c_size_t, c_uint32, c_uint64, c_void_p

_HERE = os.path.dirname(os.path.abspath(__file__))
_SOURCE_BUILD = os.path.join(_HERE, "..", "..", "build", "libwalrus.so")


def _candidates():
    env = os.environ.get("WALRUS_LIBRARY")
    if env:
        return [env]  # named explicitly: nothing else is tried
    out = []
    found = ctypes.util.find_library("walrus")
    if found:
        out.append(found)
    out.append("libwalrus.so.0")
    if os.path.exists(_SOURCE_BUILD):
        out.append(os.path.normpath(_SOURCE_BUILD))
    return out


def _load():
    tried = []
    for name in _candidates():
        try:
            return ctypes.CDLL(name), name
        except OSError as e:
            tried.append(f"{name}: {e}")
    raise ImportError(
        "walrus: could not load libwalrus.so (tried " + "; ".join(tried) + "). Install "
        "walrus (meson install), or set WALRUS_LIBRARY to the path of libwalrus.so")


lib, path = _load()

PROGRESS_FN = ctypes.CFUNCTYPE(None, c_uint64, c_uint64, c_void_p)
REPORT_FN = ctypes.CFUNCTYPE(None, c_void_p, c_uint32, c_char_p)


class CompactStats(ctypes.Structure):
    _fields_ = [(name, c_uint64) for name in (
        "leaves_merged", "leaves_poured", "pages_moved", "blocks_before", "blocks_after",
        "blocks_given_back")]


_pp = POINTER(c_void_p)
_psize = POINTER(c_size_t)
_bytes = c_void_p  # keys and values: bytes objects are passed by address
_PROTOS = {
    "walrus_strerror": (c_char_p, [c_int]),
    "walrus_errmsg": (c_char_p, []),
    "walrus_max_key": (c_size_t, []),
    "walrus_opts_new": (c_void_p, []),
    "walrus_opts_free": (None, [c_void_p]),
    "walrus_opts_set": (c_int, [c_void_p, c_char_p, c_char_p]),
    "walrus_opts_get": (c_int, [c_void_p, c_char_p, c_char_p, c_size_t]),
    "walrus_open": (c_int, [c_char_p, c_void_p, _pp]),
    "walrus_close": (c_int, [c_void_p]),
    "walrus_supervisor_pid": (c_int, [c_void_p]),
    "walrus_stop": (c_int, [c_char_p, c_int, c_int]),
    "walrus_promote": (c_int, [c_char_p]),
    "walrus_put": (c_int, [c_void_p, _bytes, c_size_t, _bytes, c_size_t, c_int]),
    "walrus_get": (c_int, [c_void_p, _bytes, c_size_t, _pp, _psize]),
    "walrus_get_into": (c_int, [c_void_p, _bytes, c_size_t, c_void_p, c_size_t, _psize]),
    "walrus_delete": (c_int, [c_void_p, _bytes, c_size_t, c_int]),
    "walrus_free": (None, [c_void_p]),
    "walrus_batch_new": (c_void_p, []),
    "walrus_batch_put": (c_int, [c_void_p, _bytes, c_size_t, _bytes, c_size_t]),
    "walrus_batch_delete": (c_int, [c_void_p, _bytes, c_size_t]),
    "walrus_batch_count": (c_size_t, [c_void_p]),
    "walrus_batch_clear": (None, [c_void_p]),
    "walrus_batch_free": (None, [c_void_p]),
    "walrus_batch_commit": (c_int, [c_void_p, c_void_p, c_int]),
    "walrus_iter_open": (c_int, [c_void_p, _bytes, c_size_t, _bytes, c_size_t, _pp]),
    "walrus_iter_seek": (c_int, [c_void_p, _bytes, c_size_t]),
    "walrus_iter_seek_last": (c_int, [c_void_p]),
    "walrus_iter_next": (c_int, [c_void_p]),
    "walrus_iter_prev": (c_int, [c_void_p]),
    "walrus_iter_valid": (c_int, [c_void_p]),
    "walrus_iter_key": (None, [c_void_p, _pp, _psize]),
    "walrus_iter_value": (None, [c_void_p, _pp, _psize]),
    "walrus_iter_close": (None, [c_void_p]),
    "walrus_snapshot_take": (c_int, [c_void_p, _pp]),
    "walrus_snapshot_release": (None, [c_void_p]),
    "walrus_get_into_at": (c_int, [c_void_p, c_void_p, _bytes, c_size_t, c_void_p, c_size_t,
                                   _psize]),
    "walrus_get_at": (c_int, [c_void_p, c_void_p, _bytes, c_size_t, _pp, _psize]),
    "walrus_iter_open_at": (c_int, [c_void_p, c_void_p, _bytes, c_size_t, _bytes, c_size_t,
                                    _pp]),
    "walrus_txn_begin": (c_int, [c_void_p, c_int, _pp]),
    "walrus_txn_get": (c_int, [c_void_p, _bytes, c_size_t, _pp, _psize]),
    "walrus_txn_get_into": (c_int, [c_void_p, _bytes, c_size_t, c_void_p, c_size_t, _psize]),
    "walrus_txn_put": (c_int, [c_void_p, _bytes, c_size_t, _bytes, c_size_t]),
    "walrus_txn_delete": (c_int, [c_void_p, _bytes, c_size_t]),
    "walrus_txn_iter_open": (c_int, [c_void_p, _bytes, c_size_t, _bytes, c_size_t, _pp]),
    "walrus_txn_commit": (c_int, [c_void_p, c_int]),
    "walrus_txn_abort": (c_int, [c_void_p]),
    "walrus_txn_free": (None, [c_void_p]),
    "walrus_space_create": (c_int, [c_void_p, c_char_p]),
    "walrus_space_open": (c_int, [c_void_p, c_char_p, c_int, _pp]),
    "walrus_space_drop": (c_int, [c_void_p, c_char_p]),
    "walrus_space_list": (c_int, [c_void_p, _pp, _psize]),
    "walrus_put_in": (c_int, [c_void_p, c_void_p, _bytes, c_size_t, _bytes, c_size_t, c_int]),
    "walrus_get_in": (c_int, [c_void_p, c_void_p, _bytes, c_size_t, _pp, _psize]),
    "walrus_get_into_in": (c_int, [c_void_p, c_void_p, _bytes, c_size_t, c_void_p, c_size_t,
                                   _psize]),
    "walrus_delete_in": (c_int, [c_void_p, c_void_p, _bytes, c_size_t, c_int]),
    "walrus_batch_put_in": (c_int, [c_void_p, c_void_p, _bytes, c_size_t, _bytes, c_size_t]),
    "walrus_batch_delete_in": (c_int, [c_void_p, c_void_p, _bytes, c_size_t]),
    "walrus_iter_open_in": (c_int, [c_void_p, c_void_p, _bytes, c_size_t, _bytes, c_size_t,
                                    _pp]),
    "walrus_get_at_in": (c_int, [c_void_p, c_void_p, c_void_p, _bytes, c_size_t, _pp, _psize]),
    "walrus_iter_open_at_in": (c_int, [c_void_p, c_void_p, c_void_p, _bytes, c_size_t, _bytes,
                                       c_size_t, _pp]),
    "walrus_txn_get_in": (c_int, [c_void_p, c_void_p, _bytes, c_size_t, _pp, _psize]),
    "walrus_txn_put_in": (c_int, [c_void_p, c_void_p, _bytes, c_size_t, _bytes, c_size_t]),
    "walrus_txn_delete_in": (c_int, [c_void_p, c_void_p, _bytes, c_size_t]),
    "walrus_txn_iter_open_in": (c_int, [c_void_p, c_void_p, _bytes, c_size_t, _bytes, c_size_t,
                                        _pp]),
    "walrus_sync": (c_int, [c_void_p]),
    "walrus_switch_wal": (c_int, [c_void_p, POINTER(c_uint64)]),
    "walrus_restore_point": (c_int, [c_void_p, c_char_p, POINTER(c_uint64)]),
    "walrus_slot_create": (c_int, [c_void_p, c_char_p]),
    "walrus_slot_drop": (c_int, [c_void_p, c_char_p]),
    "walrus_backup": (c_int, [c_void_p, c_char_p, c_int, PROGRESS_FN, c_void_p]),
    "walrus_interrupt": (None, []),
    "walrus_restore_timeline": (c_int, [c_char_p, c_char_p, c_char_p, c_char_p, c_char_p,
                                        c_char_p]),
    "walrus_checkpoint": (c_int, [c_void_p]),
    "walrus_compact": (c_int, [c_void_p, POINTER(CompactStats)]),
    "walrus_stats": (c_int, [c_void_p, _pp]),
    "walrus_verify": (c_int, [c_void_p, REPORT_FN, c_void_p]),
}

for _name, (_res, _args) in _PROTOS.items():
    _fn = getattr(lib, _name)
    _fn.restype = _res
    _fn.argtypes = _args

# Constants of include/walrus.h.
SYNC = 0x1
ASYNC = 0x2
TXN_SNAPSHOT = 0x1
SPACE_CREATE = 0x1
BACKUP_FAST = 0x1
STOP_MODES = {"smart": 1, "fast": 2, "immediate": 3}
MAX_KEY = lib.walrus_max_key()  # 1024, or 480 with 4 KiB pages
MAX_VALUE = 64 << 20

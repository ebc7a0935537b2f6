"""Named key spaces: Space, the handle's calls that make, open, list and
drop them, and the mapping protocol a Space shares with DB.

A key space is its handle's: the C library frees a space's pointer when
the handle closes, so every call with one goes through that handle's lock
(DB._enter), and a space of another DB object is refused before the
library sees it.  The library answers a read or delete of an absent key
and any call on a dropped space with the same WALRUS_ENOTFOUND: after one,
the space is opened again by name, and only the same pointer means the key
was absent.
"""
import ctypes

from ctypes import byref, c_size_t, c_void_p

from . import _lib
from .errors import InvalidArgument, NotFound, check as _check, last_error, misuse

lib = _lib.lib
_OK, _ENOTFOUND, _EINVAL = 0, -1, -2
_ABSENT = object()


def _space_name(name):
    """A key space's name for the library: str (or bytes), no NUL (the
    library would see a shorter name)."""
    if isinstance(name, str):
        name = name.encode()
    elif not isinstance(name, bytes):
        raise TypeError(f"a walrus key space's name is a str, not {type(name).__name__}")
    if b"\0" in name:
        raise InvalidArgument(_EINVAL, f"key space name {name!r} has a NUL byte")
    return name


class _Mapping:
    """db[key], db[key] = value, del db[key], key in db, iter(db): of a
    handle's default key space and of a Space, over their get, put, delete
    and keys."""

    def __getitem__(self, key):
        v = self.get(key, _ABSENT)
        if v is _ABSENT:
            raise NotFound(_ENOTFOUND, f"key {key!r} not found")
        return v

    def __setitem__(self, key, value):
        self.put(key, value)

    def __delitem__(self, key):
        if not self.delete(key):
            raise NotFound(_ENOTFOUND, f"key {key!r} not found")

    def __contains__(self, key):
        return self.get(key, _ABSENT) is not _ABSENT

    def __iter__(self):
        return self.keys()


class _SpaceCalls:
    """The key-space calls of DB (a mixin of it)."""

    def space(self, name, create=True):
        """The key space @name as a Space, created first when missing and
        @create (walrus.NotFound when missing otherwise)."""
        cname = _space_name(name)
        p = c_void_p()
        db = self._enter()
        try:
            flags = _lib.SPACE_CREATE if create else 0
            _check(self._c(lib.walrus_space_open, db, cname, flags, byref(p)))
            return self._space_object(p.value, cname)
        finally:
            self._leave()

    def create_space(self, name):
        """Creates key space @name (durable when it returns) and returns it
        as a Space; walrus.Exists when there is one of that name."""
        cname = _space_name(name)
        p = c_void_p()
        db = self._enter()
        try:
            _check(self._c(lib.walrus_space_create, db, cname))
            _check(self._c(lib.walrus_space_open, db, cname, 0, byref(p)))
            return self._space_object(p.value, cname)
        finally:
            self._leave()

    def drop_space(self, name):
        """Drops key space @name (a name or a Space) and its keys, durable
        when it returns; walrus.NotFound when there is none.  Its Space
        objects, in every handle, raise walrus.NotFound from then on."""
        if isinstance(name, Space):
            name = name.name
        self._simple(lib.walrus_space_drop, _space_name(name))

    def spaces(self):
        """The names of the key spaces, in order (the default one is not
        named)."""
        p, n = c_void_p(), c_size_t()
        self._simple(lib.walrus_space_list, byref(p), byref(n))
        try:
            names = ctypes.cast(p, ctypes.POINTER(ctypes.c_char_p))
            return [names[i].decode() for i in range(n.value)]
        finally:
            lib.walrus_free(p)

    def _space_object(self, ptr, cname):
        """The Space of the library's pointer @ptr: the same object while
        one is alive (the library hands out one pointer per name and
        handle until a drop)."""
        sp = self._spaces.get(ptr)
        if sp is None:
            sp = Space(self, ptr, cname)
            self._spaces[ptr] = sp
        return sp

    def _space_ptr(self, space):
        """The library's pointer for @space in a call on this handle (None:
        the default space).  The pointer is valid while the handle is open,
        which _enter checks."""
        if space is None:
            return None
        if not isinstance(space, Space):
            raise TypeError("space must be a walrus.Space (db.space(name)), not "
                            f"{type(space).__name__}")
        if space._owner is not self:
            raise misuse(f"key space \"{space.name}\" belongs to another walrus handle "
                         f"({space._owner.path}): open it with this one, db.space(name)")
        return space._sp

    def _space_alive(self, space):
        """After WALRUS_ENOTFOUND from a read or a delete in @space (None:
        the default space): returns when it meant an absent key, raises
        walrus.NotFound when the space was dropped.  Under the lock."""
        if space is None:
            return
        p = c_void_p()
        rc = self._c(lib.walrus_space_open, self._db, space._cname, 0, byref(p))
        if rc == _OK and p.value == space._sp:
            return
        if rc not in (_OK, _ENOTFOUND):
            raise last_error(rc)
        raise NotFound(_ENOTFOUND, f"key space \"{space.name}\" was dropped")


class Space(_Mapping):
    """A named key space of a handle (db.space(name)): keys of its own,
    apart from the default space's and every other space's, with the
    handle's calls.  It belongs to its handle: another handle's batches,
    snapshots and transactions refuse it (walrus.Misuse), and it ends with
    its handle's close.  Once the space is dropped its calls raise
    walrus.NotFound."""

    def __init__(self, db, ptr, cname):
        self._owner = db
        self._sp = ptr
        self._cname = cname
        self.name = cname.decode()

    @property
    def db(self):
        """The handle it belongs to."""
        return self._owner

    def get(self, key, default=None):
        """The value of @key in the space, or @default when it is absent."""
        return self._owner._get(self, key, default)

    def put(self, key, value, sync=None):
        """Writes @key = @value in the space; @sync as in DB.put."""
        self._owner._put(self, key, value, sync)

    def delete(self, key, sync=None):
        """Deletes @key from the space; returns whether it was there."""
        return self._owner._delete(self, key, sync)

    def items(self, lo=None, hi=None, reverse=False):
        """(key, value) pairs of [lo, hi) of the space, as DB.items."""
        return self._owner._iterator("handle", None, lo, hi, reverse, "items", self)

    def keys(self, lo=None, hi=None, reverse=False):
        return self._owner._iterator("handle", None, lo, hi, reverse, "keys", self)

    def values(self, lo=None, hi=None, reverse=False):
        return self._owner._iterator("handle", None, lo, hi, reverse, "values", self)

    def __repr__(self):
        return f"<walrus.Space {self.name!r} of {self._owner.path!r}>"

"""Pickling as multiprocessing's ForkingPickler does (its reducers for connections, sockets,
pagepipe ends), without its per-call cost: ForkingPickler.dumps builds a new pickler and copies
copyreg's whole dispatch table on every call (about 3 us for a small object here); this keeps
one pickler per thread, whose dispatch table is a live view of the same two tables.

    >>> loads(dumps((1, "two")))
    (1, 'two')
"""

import collections
import copyreg
import io
import pickle
import threading

from multiprocessing.reduction import ForkingPickler

__all__ = ["dumps", "loads"]

loads = ForkingPickler.loads

# A message this large gets a pickler and buffer of its own (taken as is, not copied).
_LARGE = 64 << 10


class _Pickler(pickle.Pickler):
    # ForkingPickler's table: copyreg's, then its registered reducers over it; live.
    dispatch_table = collections.ChainMap(ForkingPickler._extra_reducers, copyreg.dispatch_table)


_local = threading.local()


def dumps(obj):
    """obj pickled as ForkingPickler.dumps(obj) pickles it (a bytes-like object)."""
    st = getattr(_local, "st", None)
    if st is None or st[2]:
        if st is not None:  # re-entered (a __reduce__ pickling): a pickler of its own
            buf = io.BytesIO()
            _Pickler(buf).dump(obj)
            return buf.getbuffer()
        buf = io.BytesIO()
        st = _local.st = [buf, _Pickler(buf), False]
    buf, p = st[0], st[1]
    st[2] = True
    try:
        buf.seek(0)
        buf.truncate()
        p.clear_memo()
        p.dump(obj)
        if buf.tell() < _LARGE:
            return buf.getvalue()
        data = buf.getbuffer()
        fresh = io.BytesIO()
        st[0], st[1] = fresh, _Pickler(fresh)
        return data
    finally:
        st[2] = False

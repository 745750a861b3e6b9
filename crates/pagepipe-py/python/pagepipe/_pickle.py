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

__all__ = ["dumps", "loads", "with_pickled", "recv_pickled"]

loads = ForkingPickler.loads

# A message this large gets a pickler and buffer of its own (taken as is, not copied).
_LARGE = 64 << 10
# The largest buffer a thread keeps between calls (with_pickled, recv_pickled): a fresh buffer
# the size of a large message faults in all its pages on every call.
_KEPT = 64 << 20


class _Pickler(pickle.Pickler):
    # ForkingPickler's table: copyreg's, then its registered reducers over it; live.
    dispatch_table = collections.ChainMap(ForkingPickler._extra_reducers, copyreg.dispatch_table)


_local = threading.local()


class _Sink:
    __slots__ = ("write",)


def _new_sink_pickler():
    """A pickler as dumps' (ForkingPickler's tables), whose file's write appends to the list
    returned with it: a small object's pickle is one bytes there, taken as is (the native
    side of pagepipe.Queue keeps one per thread; see src/pickle.rs)."""
    out = []
    sink = _Sink()
    sink.write = out.append
    return _Pickler(sink), out


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
        _local.large = True  # the next one goes to with_pickled's kept buffer
        data = buf.getbuffer()
        fresh = io.BytesIO()
        st[0], st[1] = fresh, _Pickler(fresh)
        return data
    finally:
        st[2] = False


def with_pickled(obj, use):
    """use(data) with obj pickled (as dumps). After a large message on this thread, data is a
    memoryview into this thread's kept buffer, valid only during the call (no new buffer, and
    no page faults, per large message); otherwise the bytes dumps returns."""
    if not getattr(_local, "large", False):
        return use(dumps(obj))
    st = getattr(_local, "big", None)
    if st is None or st[2]:
        if st is not None:  # re-entered: a buffer of its own
            return use(dumps(obj))
        buf = io.BytesIO()
        st = _local.big = [buf, _Pickler(buf), False]
    buf, p = st[0], st[1]
    st[2] = True
    try:
        buf.seek(0)  # no truncate: BytesIO would give its memory back
        p.clear_memo()
        p.dump(obj)
        n = buf.tell()
        _local.large = n >= _LARGE
        with buf.getbuffer() as whole, whole[:n] as view:
            return use(view)
    finally:
        st[2] = False
        if buf.getbuffer().nbytes > _KEPT:
            _local.big = None


def recv_pickled(reader):
    """The next message of a pagepipe Reader, unpickled. After a large message on this
    thread, read into this thread's kept buffer (a new one for a message larger than it, kept
    if at most 64 MiB); otherwise into a new bytes."""
    if not getattr(_local, "recv_large", False):
        data = reader._recv_message()
        if len(data) >= _LARGE:
            _local.recv_large = True
        return loads(data)
    scratch = getattr(_local, "scratch", None)
    if scratch is None:
        scratch = _local.scratch = bytearray(_LARGE)
    n, whole = reader._recv_message_into(scratch, 0)
    if whole is not None:
        if n <= _KEPT:
            _local.scratch = bytearray(n)
        return loads(whole)
    _local.recv_large = n >= _LARGE
    with memoryview(scratch) as m, m[:n] as part:
        return loads(part)

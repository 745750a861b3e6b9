"""pagepipe.Pipe() and pagepipe.Connection: multiprocessing.Pipe() over pagepipes.

    >>> import pagepipe
    >>> a, b = pagepipe.Pipe()
    >>> a.send({"x": 1}); b.recv()
    {'x': 1}
    >>> b.send_bytes(b"raw", 1); a.recv_bytes()
    b'aw'

A Connection has multiprocessing.connection.Connection's interface and behaviour: send/recv
pickle with multiprocessing's ForkingPickler; send_bytes/recv_bytes/recv_bytes_into keep
messages whole (a length header, then the bytes); recv raises EOFError once the other side is
closed everywhere and nothing is left; any call on a closed Connection raises OSError("handle
is closed"); a one-way Connection raises OSError on the other direction; recv_bytes_into raises
multiprocessing.BufferTooShort with the whole message when it does not fit. A duplex Pipe is
two pagepipes, one each way. Connections work with multiprocessing.connection.wait, select
and selectors (fileno() is the reading side's readiness descriptor: readable when a message
or end of file is there), and pass to children under fork, spawn and forkserver, and through
multiprocessing queues and connections, as multiprocessing's own do.

As with multiprocessing's, one process (or thread) at a time may send on a Connection, and
one may receive: use pagepipe.Queue for many.
"""

import io
import os

from multiprocessing import BufferTooShort, reduction
from multiprocessing.connection import wait as _wait

from ._native import Reader, Writer, pipe

__all__ = ["Pipe", "Connection", "PIPE_CAPACITY"]

from ._pickle import recv_pickled as _recv_pickled, with_pickled as _with_pickled

#: The capacity of each pagepipe of a Pipe(): 1 MiB, so that a message of up to that size is
#: written without waiting for the reader (memory is used only for what is queued).
PIPE_CAPACITY = 1 << 20


def Pipe(duplex=True, *, capacity=PIPE_CAPACITY):
    """Returns a pair (conn1, conn2) of Connections, as multiprocessing.Pipe does.

    With duplex (the default) both can send and receive; otherwise conn1 only receives and
    conn2 only sends. capacity is each underlying pipe's size in bytes.

        >>> r, w = Pipe(duplex=False)
        >>> w.send([1, 2]); r.recv()
        [1, 2]
        >>> r.send(1)
        Traceback (most recent call last):
        OSError: connection is read-only
    """
    w1, r1 = pipe(capacity)
    if not duplex:
        return Connection(r1, None), Connection(None, w1)
    w2, r2 = pipe(capacity)
    return Connection(r1, w2), Connection(r2, w1)


class Connection:
    """One end of a pagepipe.Pipe(): reads from `reader`, writes to `writer` (either may be
    None for a one-way connection). See the module's docstring."""

    __slots__ = ("_reader", "_writer", "_readable", "_writable", "_closed", "__weakref__")

    def __init__(self, reader, writer):
        if reader is None and writer is None:
            raise ValueError("at least one of `readable` and `writable` must be True")
        self._reader = reader
        self._writer = writer
        self._readable = reader is not None
        self._writable = writer is not None
        self._closed = False

    def __repr__(self):
        state = "closed" if self._closed else (
            "duplex" if self._readable and self._writable
            else "read-only" if self._readable else "write-only")
        return f"<pagepipe.Connection {state}>"

    def __del__(self):
        self.close()

    # -- state, as multiprocessing's --

    def _check_closed(self):
        if self._closed:
            raise OSError("handle is closed")

    def _check_readable(self):
        if not self._readable:
            raise OSError("connection is write-only")

    def _check_writable(self):
        if not self._writable:
            raise OSError("connection is read-only")

    def _bad_message_length(self):
        if self._writable:
            self._readable = False
        else:
            self.close()
        raise OSError("bad message length")

    @property
    def closed(self):
        """True if the connection is closed."""
        return self._closed

    @property
    def readable(self):
        """True if the connection is readable."""
        return self._readable

    @property
    def writable(self):
        """True if the connection is writable."""
        return self._writable

    def fileno(self):
        """A descriptor for select, selectors and multiprocessing.connection.wait: the
        reading side's readiness descriptor (the writing side's if write-only). It carries
        no data: do not read, write or close it."""
        self._check_closed()
        end = self._reader if self._reader is not None else self._writer
        return end.fileno()

    def close(self):
        """Closes the connection (both directions); closing twice does nothing."""
        if self._closed:
            return
        self._closed = True
        for end in (self._reader, self._writer):
            if end is not None:
                end.close()

    def __enter__(self):
        return self

    def __exit__(self, exc_type, exc_value, exc_tb):
        self.close()

    # -- sending --

    def send_bytes(self, buf, offset=0, size=None):
        """Sends the bytes of a bytes-like object (from offset, size bytes) as one message.

            >>> a, b = Pipe()
            >>> a.send_bytes(b"abcdef", 2, 3); b.recv_bytes()
            b'cde'
        """
        if type(buf) is bytes and offset == 0 and size is None and self._writable \
                and not self._closed:
            # The common call: the whole of a bytes object, through none of the checks below.
            self._writer._send_message(buf)
            return
        self._check_closed()
        self._check_writable()
        m = memoryview(buf)
        if m.itemsize > 1:
            m = m.cast("B")
        n = m.nbytes
        if offset < 0:
            raise ValueError("offset is negative")
        if n < offset:
            raise ValueError("buffer length < offset")
        if size is None:
            size = n - offset
        elif size < 0:
            raise ValueError("size is negative")
        elif offset + size > n:
            raise ValueError("buffer length < offset + size")
        self._writer._send_message(m[offset:offset + size])

    def send(self, obj):
        """Sends a picklable object (pickled with multiprocessing's ForkingPickler).

            >>> a, b = Pipe()
            >>> a.send(("tuple", 1)); b.recv()
            ('tuple', 1)
        """
        self._check_closed()
        self._check_writable()
        _with_pickled(obj, self._writer._send_message)

    # -- receiving --

    def recv_bytes(self, maxlength=None):
        """Receives one message as bytes. EOFError once nothing is left and the other side
        is closed; OSError("bad message length") if longer than maxlength.

            >>> a, b = Pipe()
            >>> a.send_bytes(b"hi"); b.recv_bytes()
            b'hi'
        """
        if maxlength is None and self._readable and not self._closed:
            # The common call: no limit, so no bad length (a message always fits).
            return self._reader._recv_message(None)
        self._check_closed()
        self._check_readable()
        if maxlength is not None and maxlength < 0:
            raise ValueError("negative maxlength")
        buf = self._reader._recv_message(maxlength)
        if buf is None:
            self._bad_message_length()
        return buf

    def recv_bytes_into(self, buf, offset=0):
        """Receives one message into a writable bytes-like object at byte offset; returns
        its length. multiprocessing.BufferTooShort (carrying the whole message) if it does
        not fit.

            >>> a, b = Pipe()
            >>> dst = bytearray(8)
            >>> a.send_bytes(b"abc"); b.recv_bytes_into(dst, 2), dst
            (3, bytearray(b'\\x00\\x00abc\\x00\\x00\\x00'))
        """
        self._check_closed()
        self._check_readable()
        with memoryview(buf) as m:
            bytesize = m.itemsize * len(m)
            if offset < 0:
                raise ValueError("negative offset")
            elif offset > bytesize:
                raise ValueError("offset too large")
            n, whole = self._reader._recv_message_into(m.cast("B") if m.ndim > 1 else m, offset)
        if whole is not None:
            raise BufferTooShort(whole)
        return n

    def recv(self):
        """Receives one picklable object. EOFError once nothing is left and the other side
        is closed."""
        self._check_closed()
        self._check_readable()
        return _recv_pickled(self._reader)

    def poll(self, timeout=0.0):
        """Whether a message (or end of file) is there to read, waiting at most timeout
        seconds for one (None: as long as it takes).

            >>> a, b = Pipe()
            >>> b.poll(0.01)
            False
            >>> a.send(1); b.poll()
            True
        """
        self._check_closed()
        self._check_readable()
        if self._reader.queued:
            return True
        if timeout is not None and timeout < 0:
            timeout = 0
        return bool(_wait([self._reader], timeout))


def _reduce_connection(conn):
    if conn._closed:
        raise OSError("handle is closed")
    return _rebuild_connection, (conn._reader, conn._writer)


def _rebuild_connection(reader, writer):
    return Connection(reader, writer)


reduction.register(Connection, _reduce_connection)

"""asyncio streams over pagepipe ends.

    >>> import asyncio, pagepipe, pagepipe.aio
    >>> async def main():
    ...     w, r = pagepipe.pipe()
    ...     reader = await pagepipe.aio.open_reader(r)
    ...     writer = await pagepipe.aio.open_writer(w)
    ...     writer.write(b"line\\n"); await writer.drain()
    ...     return await reader.readline()
    >>> asyncio.run(main())
    b'line\\n'

An end's fileno() is its readiness descriptor (a kernel pipe that carries wake-ups), not a
descriptor of the data. loop.connect_read_pipe / connect_write_pipe would read and write that
descriptor itself: given an end, a Connection, or any object whose fileno() is such a
descriptor, they raise ValueError saying so (this module wraps the two methods of asyncio's
Unix event loops to check; another loop, uvloop say, is not covered). Use open_reader and
open_writer: they watch the descriptor with add_reader / add_writer and move the data with
calls that wait at most 1 ms (timeout=), so they change nothing other holders of the end see
(set_blocking would, in every process).
"""

import asyncio
from asyncio import unix_events as _unix_events

from . import _native

__all__ = ["open_reader", "open_writer", "PipeStreamWriter"]

_CHUNK = 64 << 10
# The timeout of the calls made when the descriptor says ready: a passed deadline is looked at
# before end of file or a missing reader (timeout=0 would report TimeoutError there, and the
# still-ready descriptor would call again at once); readiness is exact, so this wait is only
# ever spent after another holder took the data or the room first.
_NOW = 0.001


class _ReadTransport(asyncio.ReadTransport):
    """Feeds a StreamReader from a pagepipe Reader; paused while the stream holds too much."""

    def __init__(self, loop, reader, stream):
        super().__init__()
        self._loop = loop
        self._end = reader
        self._stream = stream
        self._fd = reader.fileno()
        self._paused = False
        self._closing = False
        loop.add_reader(self._fd, self._on_readable)

    def _on_readable(self):
        try:
            data = self._end.read(_CHUNK, timeout=_NOW)
        except TimeoutError:  # woken without data (another holder took it)
            return
        except Exception as e:
            self._stop()
            self._stream.set_exception(e)
            return
        if not data:
            self._stop()
            self._stream.feed_eof()
            return
        self._stream.feed_data(data)

    def _stop(self):
        if not self._paused and not self._closing:
            self._loop.remove_reader(self._fd)
        self._closing = True

    def pause_reading(self):
        if not self._paused and not self._closing:
            self._paused = True
            self._loop.remove_reader(self._fd)

    def resume_reading(self):
        if self._paused and not self._closing:
            self._paused = False
            self._loop.add_reader(self._fd, self._on_readable)

    def is_reading(self):
        return not self._paused and not self._closing

    def is_closing(self):
        return self._closing

    def close(self):
        self._stop()
        self._end.close()


async def open_reader(reader, *, limit=2 ** 16):
    """An asyncio.StreamReader of the data of a pagepipe Reader (read(), readline(),
    readexactly(), at_eof() at end of file). Reading pauses while the stream holds more than
    2 * limit bytes. The stream's reader end is closed with its transport: `reader` belongs to
    the stream from now on."""
    loop = asyncio.get_running_loop()
    stream = asyncio.StreamReader(limit=limit, loop=loop)
    stream.set_transport(_ReadTransport(loop, reader, stream))
    return stream


class PipeStreamWriter:
    """The write side of an asyncio stream over a pagepipe Writer: write() queues, drain()
    waits until everything queued is in the pipe, close() closes the end once drained (or
    at once if nothing is queued); BrokenPipeError as the end raises it."""

    def __init__(self, loop, writer):
        self._loop = loop
        self._end = writer
        self._fd = writer.fileno()
        self._buf = bytearray()
        self._waiter = None
        self._closing = False
        self._error = None

    def write(self, data):
        if self._closing:
            raise RuntimeError("write() after close()")
        if self._error is not None:
            raise self._error
        if not self._buf:
            self._push(memoryview(data))
            return
        self._buf += data

    def writelines(self, lines):
        for line in lines:
            self.write(line)

    def _push(self, data):
        # As much as fits now; the rest waits for the descriptor to say there is room.
        n = 0
        try:
            if len(data):
                n = self._end.write(data, timeout=_NOW)
        except TimeoutError:
            n = 0
        except Exception as e:
            self._fail(e)
            return
        if n < len(data):
            was_empty = not self._buf
            self._buf += data[n:]
            if was_empty:
                self._loop.add_writer(self._fd, self._on_writable)

    def _on_writable(self):
        data, self._buf = self._buf, bytearray()
        self._loop.remove_writer(self._fd)
        self._push(memoryview(data))
        if not self._buf:
            self._wake()
            if self._closing:
                self._end.close()

    def _fail(self, e):
        self._error = e
        self._buf.clear()
        self._wake()

    def _wake(self):
        if self._waiter is not None and not self._waiter.done():
            if self._error is not None:
                self._waiter.set_exception(self._error)
            else:
                self._waiter.set_result(None)
        self._waiter = None

    async def drain(self):
        """Waits until everything written is in the pipe."""
        if self._error is not None:
            raise self._error
        if not self._buf:
            return
        if self._waiter is None:
            self._waiter = self._loop.create_future()
        await asyncio.shield(self._waiter)

    def close(self):
        """Closes the end once what is queued is in the pipe."""
        if self._closing:
            return
        self._closing = True
        if not self._buf:
            self._end.close()

    def is_closing(self):
        return self._closing

    async def wait_closed(self):
        await self.drain()


async def open_writer(writer):
    """A PipeStreamWriter over a pagepipe Writer (it belongs to the stream from now on)."""
    return PipeStreamWriter(asyncio.get_running_loop(), writer)


def _refuse_readiness(pipe):
    """ValueError if `pipe`'s fileno() is a pagepipe end's readiness descriptor."""
    try:
        fd = pipe.fileno()
    except Exception:
        return  # asyncio reports it as it would
    if isinstance(fd, int) and _native._is_readiness_fd(fd):
        raise ValueError(
            f"{pipe!r}'s fileno() is a pagepipe end's readiness descriptor: it carries "
            "wake-ups, not the data, so a pipe transport would read or write the wrong bytes. "
            "Use pagepipe.aio.open_reader(end) / open_writer(end) for asyncio streams, or "
            "loop.add_reader(end.fileno(), ...) with end.read(..., timeout=...).")


def _guard(make):
    def guarded(self, pipe, protocol, waiter=None, extra=None):
        _refuse_readiness(pipe)
        return make(self, pipe, protocol, waiter, extra)

    guarded._pagepipe_guard = True
    guarded.__wrapped__ = make
    guarded.__name__ = make.__name__
    guarded.__doc__ = make.__doc__
    return guarded


def _install_guards():
    loop_class = _unix_events._UnixSelectorEventLoop
    for name in ("_make_read_pipe_transport", "_make_write_pipe_transport"):
        make = getattr(loop_class, name, None)
        if make is not None and not getattr(make, "_pagepipe_guard", False):
            setattr(loop_class, name, _guard(make))


_install_guards()

"""pagepipe: Linux pipe semantics over a userspace ring of page slots.

    w, r = pagepipe.pipe()          # capacity=65536 bytes by default
    w.write(b"hello"); w.close()
    r.read()                        # b"hello" (all until end of file)

Ends behave like os.pipe()'s: a read returns what is queued and b"" at end of file, a write
to a pipe without readers raises BrokenPipeError, a non-blocking end raises BlockingIOError,
a closed end ValueError. The GIL is released while a call waits or copies. fileno() works
with select, selectors and asyncio. Ends survive os.fork() and can be passed to
multiprocessing.Process (fork, spawn, forkserver) and through multiprocessing queues and
connections, the way multiprocessing passes its own Connection objects.
"""

from multiprocessing import context as _context
from multiprocessing import reduction as _reduction
import os as _os

from ._native import DEFAULT_CAPACITY, PIPE_BUF, Reader, Writer, pipe

__all__ = ["pipe", "Writer", "Reader", "DEFAULT_CAPACITY", "PIPE_BUF"]


def _reduce_end(end):
    # As multiprocessing.connection reduces a Connection: each descriptor travels as a
    # reduction.DupFd. While a child is being started (spawn, forkserver) DupFd hands the
    # descriptor's number to the Popen, which passes it at start, so the end keeps those
    # descriptors open until it is closed; otherwise (a queue or connection to a running
    # process) DupFd duplicates it into the resource sharer at once, and ours are closed.
    starting = _context.get_spawning_popen() is not None
    fds = end._export_fds(starting)
    try:
        dup = tuple(_reduction.DupFd(fd) for fd in fds)
    finally:
        if not starting:
            for fd in fds:
                _os.close(fd)
    return _rebuild_end, (type(end), dup)


def _rebuild_end(cls, dup):
    return cls._from_fds(*(d.detach() for d in dup))


_reduction.register(Writer, _reduce_end)
_reduction.register(Reader, _reduce_end)

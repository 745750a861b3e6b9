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

On top of the ends, drop-in replacements of multiprocessing's:

    a, b = pagepipe.Pipe()          # multiprocessing.Pipe(): Connection objects
    a.send({"any": "object"}); b.recv()
    q = pagepipe.Queue()            # multiprocessing.Queue(): many producers and consumers
    q.put(1); q.get()
"""

from multiprocessing import reduction as _reduction

from ._native import DEFAULT_CAPACITY, PIPE_BUF, Reader, Writer, pipe
from . import _reduce
from .connection import PIPE_CAPACITY, Connection, Pipe
from .queues import QUEUE_CAPACITY, Queue
from . import aio

__all__ = ["pipe", "Writer", "Reader", "DEFAULT_CAPACITY", "PIPE_BUF", "aio",
           "Pipe", "Connection", "PIPE_CAPACITY", "Queue", "QUEUE_CAPACITY"]

_reduction.register(Writer, _reduce.reduce_end)
_reduction.register(Reader, _reduce.reduce_end)

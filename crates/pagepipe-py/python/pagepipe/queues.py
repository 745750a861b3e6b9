"""pagepipe.Queue: multiprocessing.Queue over a pagepipe.

    >>> import pagepipe
    >>> q = pagepipe.Queue()
    >>> q.put({"job": 1}); q.get(timeout=1)
    {'job': 1}
    >>> q.get_nowait()
    Traceback (most recent call last):
    _queue.Empty

Many producers and many consumers, in any processes, under fork, spawn and forkserver (pass
the queue to the child at its start, as with multiprocessing.Queue). Every message arrives
whole, once, whatever its size: a message is a run of 4 KiB packets written holding one side
lock of a second, tiny pipe and read holding the other (see src/packets.rs), and side locks
pass on when their holder dies, so a process killed in the middle of a put or a get blocks
nobody (its partial message is dropped by the next reader). A message that fits in the pipe
is written in one burst once there is room for all of it, so a get's timeout holds: it sees
all of a message or nothing of it. Ctrl-C in the middle of a message reads it to its end if it
keeps coming (kept for this process's next get) or gives it up after 1 s without a packet;
a timeout does not end a get in the middle of a message whose writer is stopped while writing
it (see the package README).

Differences from multiprocessing.Queue, all in the caller's favour or invisible to it:
- put() pickles the object at once (multiprocessing pickles it later, in its feeder thread, so
  a change made right after put may travel). An object that cannot be pickled is reported as
  multiprocessing's feeder reports it (the traceback on stderr, _on_queue_feeder_error), and
  put returns.
- A message that fits in the pipe now goes in from the calling thread, without the feeder
  thread's hand-off (one native call pickles and writes it); the feeder thread (started only
  when needed) takes over, in order, while the pipe is full or another writer holds it, so
  put never blocks on a full pipe unless maxsize says so; once the thread runs, put hands a
  message to it natively (under the queue's lock, notifying it only if it waits). The feeder
  writes all it holds in one native call, taking the write lock once per 256 messages or
  1 MiB, each message as put writes it.
- put_many and get_many, as faster-fifo's: a batch in one native call each (see their
  docstrings).
"""

import collections
import os
import threading
import time
import traceback
import weakref
from queue import Empty, Full

from multiprocessing import context as _context
from multiprocessing import get_context
from multiprocessing import util as _util

from . import _native

__all__ = ["Queue", "QUEUE_CAPACITY"]


#: The data pipe's capacity: 4 MiB, 1,024 packets (memory is used only for what is queued).
QUEUE_CAPACITY = 4 << 20

_sentinel = object()

# Message ids (unique among live writers) carry the process's id: a forked child's are its own.
os.register_at_fork(after_in_child=_native._after_fork_in_child)


class Queue:
    """A process-shared FIFO queue, as multiprocessing.Queue(maxsize). See the module's
    docstring; capacity is the pipe's size in bytes, ctx the multiprocessing context whose
    BoundedSemaphore counts the items (qsize, full, maxsize).

        >>> q = Queue(maxsize=1)
        >>> q.put(1); q.full(), q.qsize()
        (True, 1)
        >>> q.put(2, timeout=0.01)
        Traceback (most recent call last):
        _queue.Full
    """

    def __init__(self, maxsize=0, *, ctx=None, capacity=QUEUE_CAPACITY):
        if ctx is None:
            ctx = get_context()
        if maxsize <= 0:
            from multiprocessing.synchronize import SEM_VALUE_MAX as maxsize
        self._maxsize = maxsize
        (self._data_w, self._data_r, self._lock_w, self._lock_r) = _native._queue_pipes(capacity)
        self._sem = ctx.BoundedSemaphore(maxsize)
        self._ignore_epipe = False
        self._reset()
        _util.register_after_fork(self, Queue._after_fork)

    def __getstate__(self):
        _context.assert_spawning(self)
        return (self._ignore_epipe, self._maxsize, self._data_w, self._data_r,
                self._lock_w, self._lock_r, self._sem)

    def __setstate__(self, state):
        (self._ignore_epipe, self._maxsize, self._data_w, self._data_r,
         self._lock_w, self._lock_r, self._sem) = state
        self._reset()
        _util.register_after_fork(self, Queue._after_fork)

    def _after_fork(self):
        self._reset(after_fork=True)

    def _reset(self, after_fork=False):
        if after_fork:
            self._notempty._at_fork_reinit()  # and so self._lock, its lock
        else:
            # put() takes the lock itself: a Condition's `with` runs Python-level methods.
            self._lock = threading.Lock()
            self._notempty = threading.Condition(self._lock)
        # Pickled messages the feeder thread has still to write, and whether it is writing
        # one now: while either holds something, put() queues behind it (FIFO per process).
        self._buffer = collections.deque()
        # put and get, natively (and the flags `_feeding` and `_closed` they read): bound as
        # this object's own put and get unless a subclass overrides them, so that a put or a
        # get runs no Python-level frame (Queue.put and Queue.get call them too).
        self._ops = _native._QueueOps(self, self._data_w, self._data_r, self._lock_w,
                                      self._lock_r, self._sem, self._buffer, self._lock,
                                      self._notempty)
        cls = type(self)
        if cls.put is Queue.put:
            self.put = self._ops.put
        if cls.get is Queue.get:
            self.get = self._ops.get
        self._thread = None
        self._jointhread = None
        self._joincancelled = False
        self._close = None

    @property
    def _feeding(self):
        return self._ops.feeding

    @_feeding.setter
    def _feeding(self, value):
        self._ops.feeding = value

    @property
    def _closed(self):
        return self._ops.closed

    @_closed.setter
    def _closed(self, value):
        self._ops.closed = value

    def __repr__(self):
        return f"<pagepipe.Queue maxsize={self._maxsize}{' closed' if self._closed else ''}>"

    # -- put --

    def put(self, obj, block=True, timeout=None):
        """Puts obj in the queue. With maxsize, waits for a free place (at most timeout
        seconds if block, not at all if not: queue.Full).

        One native call (`_native._QueueOps.put`) takes the place (the semaphore), pickles
        obj and, unless something of this process's waits for the feeder thread (FIFO per
        process), writes it if it fits now; else it goes to the feeder (`_to_feeder`). An
        object that cannot be pickled is reported (`_report`) and its place given back, as on
        any error (KeyboardInterrupt included) before the message is in the pipe or the
        feeder's buffer."""
        return self._ops.put(obj, block, timeout)

    def put_many(self, objs, block=True, timeout=None):
        """Puts every object of the iterable objs in the queue, in order, as consecutive puts
        would (another process's messages may come between them). With maxsize, waits for
        a free place for each (timeout bounds the whole wait, for all of them): if they do
        not all get one, none is put, and queue.Full is raised. What fits in the pipe is
        written in one native call holding the write lock once, the rest by the feeder.

            >>> q = Queue()
            >>> q.put_many([1, "two", (3,)])
            >>> q.get_many(timeout=1)
            [1, 'two', (3,)]
        """
        if self._closed:
            raise ValueError(f"Queue {self!r} is closed")
        objs = list(objs)
        taken = 0
        queued = 0
        deadline = None if not block or timeout is None else time.monotonic() + max(timeout, 0)
        try:
            for _ in objs:
                if deadline is None:
                    ok = self._sem.acquire(block)
                else:
                    ok = self._sem.acquire(True, max(0.0, deadline - time.monotonic()))
                if not ok:
                    raise Full
                taken += 1
            done, batch, errors = self._data_w._put_objs(
                self._lock_w, objs, not self._buffer and not self._feeding)
            queued = done
            if done < len(batch):
                self._to_feeder(batch[done:])
            queued = len(batch)
            # The places of those that could not be pickled are given back (finally).
            for i, e in errors:
                self._report(e, objs[i])
        finally:
            for _ in range(taken - queued):
                self._sem.release()

    def _to_feeder(self, datas):
        with self._lock:
            if self._thread is None:
                self._start_thread()
            self._buffer.extend(datas)
            self._notempty.notify()

    def put_nowait(self, obj):
        """put(obj, False)."""
        return self.put(obj, False)

    def _report(self, e, obj):
        # As multiprocessing's feeder thread reports an object it cannot pickle.
        if _util.is_exiting():
            _util.info(f"error in queue thread: {e}")
            return
        traceback.print_exception(type(e), e, e.__traceback__)
        self._on_queue_feeder_error(e, obj)

    @staticmethod
    def _on_queue_feeder_error(e, obj):
        """Called with an exception raised while pickling obj for put (multiprocessing's
        hook of the same name): override it in a subclass to handle it."""

    # -- get --

    def get(self, block=True, timeout=None):
        """Removes and returns an item, waiting for one (at most timeout seconds if block,
        not at all if not: queue.Empty). One native call (`_native._QueueOps.get`)."""
        return self._ops.get(block, timeout)

    def get_many(self, block=True, timeout=None, max_messages_to_get=None):
        """Removes and returns a list of items, oldest first: waits for one as get() does
        (queue.Empty if none comes), then takes, in the same native call, those that are in
        the queue's pipe already, up to max_messages_to_get (None: no limit) in all.
        Another consumer may get the items between them.

            >>> q = Queue()
            >>> q.put_many(range(5))
            >>> q.get_many(timeout=1, max_messages_to_get=3)
            [0, 1, 2]
            >>> q.get_many(block=False)
            [3, 4]
        """
        if self._closed:
            raise ValueError(f"Queue {self!r} is closed")
        if not block:
            timeout = 0.0
        elif timeout is not None and timeout < 0:
            timeout = 0.0
        if max_messages_to_get is None:
            limit = 1 << 62
        else:
            limit = int(max_messages_to_get)
            if limit < 1:
                raise ValueError("max_messages_to_get must be at least 1")
        return self._data_r._get_objs(
            self._lock_r, self._lock_w, timeout, self._sem.release, limit)

    def get_nowait(self):
        """get(False)."""
        return self.get(False)

    # -- state --

    def qsize(self):
        """The approximate number of items in the queue (put and not yet got)."""
        return self._maxsize - self._sem._semlock._get_value()

    def empty(self):
        """True if no message is in the pipe now (a snapshot)."""
        return self._data_r.queued == 0

    def full(self):
        """True if maxsize items are in the queue now (a snapshot)."""
        return self._sem._semlock._is_zero()

    # -- closing, as multiprocessing's --

    def close(self):
        """No more put or get from this process; the feeder thread writes what it holds,
        then exits."""
        self._closed = True
        close = self._close
        if close:
            self._close = None
            close()

    def join_thread(self):
        """Waits for the feeder thread to write everything (after close())."""
        assert self._closed, f"Queue {self!r} not closed"
        if self._jointhread:
            self._jointhread()

    def cancel_join_thread(self):
        """Do not wait for the feeder thread at exit (items it holds may be lost)."""
        self._joincancelled = True
        try:
            self._jointhread.cancel()
        except AttributeError:
            pass

    # -- the feeder thread --

    def _start_thread(self):
        self._thread = threading.Thread(
            target=Queue._feed,
            args=(weakref.ref(self), self._buffer, self._notempty, self._data_w,
                  self._lock_w, self._ignore_epipe, self._on_queue_feeder_error, self._sem),
            name="pagepipeQueueFeederThread",
            daemon=True,
        )
        self._thread.start()
        self._ops.feeder_started = True
        if not self._joincancelled:
            self._jointhread = _util.Finalize(
                self._thread, Queue._finalize_join, [weakref.ref(self._thread)],
                exitpriority=-5)
        self._close = _util.Finalize(
            self, Queue._finalize_close, [self._buffer, self._notempty], exitpriority=10)

    @staticmethod
    def _finalize_join(twr):
        thread = twr()
        if thread is not None:
            thread.join()

    @staticmethod
    def _finalize_close(buffer, notempty):
        with notempty:
            buffer.append(_sentinel)
            notempty.notify()

    @staticmethod
    def _feed(qref, buffer, notempty, data_w, lock_w, ignore_epipe, onerror, sem):
        while True:
            # All the buffer holds (up to close()'s sentinel) is written in one native call,
            # which takes the write lock once per 256 messages or 1 MiB (once per message
            # cost the feeder more than the caller's put, and it fell behind whenever the
            # pipe had filled; and each trip back here waits for the GIL, which a busy
            # caller's thread gives up only every switch interval, 5 ms).
            with notempty:
                while not buffer:
                    # Under the lock: a put (natively) notifies only a feeder that waits.
                    q = qref()
                    if q is not None:
                        q._ops.feeder_waiting = True
                    q = None
                    notempty.wait()
                    q = qref()
                    if q is not None:
                        q._ops.feeder_waiting = False
                    q = None
                # Feeding before taking anything: put() checks the buffer and then this flag
                # without the lock, and must not see an empty buffer and a feeder not feeding
                # while it holds what it took (a put would overtake it).
                q = qref()
                if q is not None:
                    q._feeding = True
                q = None
                if buffer[-1] is not _sentinel:
                    batch = list(buffer)
                    buffer.clear()
                else:
                    batch = []
                    while buffer[0] is not _sentinel:
                        batch.append(buffer.popleft())
                if not batch:
                    return  # the sentinel: close() was called, all before it is written
            try:
                done = 0
                while done < len(batch):
                    try:
                        done += data_w._put_messages(lock_w, batch[done:], True)
                    except Exception as e:
                        if ignore_epipe and isinstance(e, BrokenPipeError):
                            return
                        if _util.is_exiting():
                            _util.info(f"error in queue thread: {e}")
                            return
                        # The message is not in the queue: its place is given back, as
                        # multiprocessing's feeder gives it back (the item silently left the
                        # queue); the next ones are still written.
                        sem.release()
                        traceback.print_exc()
                        done += 1
            finally:
                batch = None
                with notempty:
                    q = qref()
                    if q is not None:
                        q._feeding = False
                    q = None

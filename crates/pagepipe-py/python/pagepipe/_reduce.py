"""Pickling ends for multiprocessing, as it pickles its own Connection objects.

Each of an end's two descriptors travels as a multiprocessing.reduction.DupFd. While a child
is being started (spawn, forkserver) DupFd hands the descriptor's number to the Popen, which
passes it to the child at start; otherwise (a queue or connection to a running process) DupFd
duplicates it into the resource sharer at once, and ours are closed.

Unlike a Connection, which hands over its own descriptor, an end exports new ones each time
(pagepipe's Writer.to_fds: the pipe's memory file through a description of its own, which
holds the end as a clone does). Those handed to a starting child are closed as soon as the
child has them: when the Popen's _launch returns (spawn and forkserver: the descriptors have
been passed by then), which this module hooks; failing that (another Popen class), at the next
export once that Popen has launched, or when it is collected. So starting any number of
children leaves no descriptor open, and closing an end right after start() is end of file for
its peer once the child closes its copy (issue 39, break 7).
"""

import os
import threading
import weakref

from multiprocessing import context, reduction, util


class _Exported:
    """Descriptors exported for a child being started; closed once, by whoever comes first."""

    __slots__ = ("fds", "__weakref__")

    def __init__(self, fds):
        self.fds = list(fds)

    def close(self):
        fds, self.fds = self.fds, []
        for fd in fds:
            try:
                os.close(fd)
            except OSError:
                pass


# (weak reference to the Popen, _Exported) for children not yet known to have started.
_pending = []
_pending_lock = threading.Lock()


def _launched(popen):
    # Set by popen_spawn_posix and popen_forkserver after the descriptors were handed over.
    return popen is None or getattr(popen, "sentinel", None) is not None


def _release(popen):
    """Closes the descriptors exported for `popen`'s child (it has them now)."""
    with _pending_lock:
        mine = [(ref, ex) for ref, ex in _pending if ref() is popen]
        _pending[:] = [(ref, ex) for ref, ex in _pending if ref() is not popen]
    for _, ex in mine:
        ex.close()


def _hook_launch(cls):
    launch = cls._launch
    if getattr(launch, "_pagepipe_hook", False):
        return

    def _launch(self, process_obj):
        try:
            return launch(self, process_obj)
        finally:
            _release(self)

    _launch._pagepipe_hook = True
    cls._launch = _launch


def _hook_popen_classes():
    from multiprocessing import popen_spawn_posix
    _hook_launch(popen_spawn_posix.Popen)
    try:
        from multiprocessing import popen_forkserver
    except ImportError:  # no forkserver on this platform
        return
    _hook_launch(popen_forkserver.Popen)


def sweep():
    """Closes the descriptors of every child that has started by now (or whose Popen is gone)."""
    done, waiting = [], []
    with _pending_lock:
        for ref, ex in _pending:
            # Each entry looked at once: a child launched between two looks was once dropped
            # from the list without being closed.
            (done if _launched(ref()) else waiting).append((ref, ex))
        _pending[:] = waiting
    for _, ex in done:
        ex.close()


def _keep_until_launched(popen, fds):
    ex = _Exported(fds)
    try:
        ref = weakref.ref(popen)
    except TypeError:
        # A Popen without weak references: keep them with the Popen itself.
        popen.__dict__.setdefault("_pagepipe_exported", []).append(ex)
        return
    util.Finalize(popen, ex.close)
    with _pending_lock:
        _pending.append((ref, ex))


def reduce_end(end):
    sweep()
    popen = context.get_spawning_popen()
    fds = end._export_fds()
    dup = []
    try:
        for fd in fds:
            dup.append(reduction.DupFd(fd))
    except BaseException:
        # The first may have been handed over already (a duplicate registered with the
        # resource sharer, or a number listed for the child): take it back too.
        for d, fd in zip(dup, fds):
            _withdraw(d, fd, popen)
        for fd in fds:
            os.close(fd)
        raise
    dup = tuple(dup)
    if popen is not None:
        _keep_until_launched(popen, fds)
    else:
        for fd in fds:  # the resource sharer holds duplicates
            os.close(fd)
    return rebuild_end, (type(end), dup)


def _withdraw(dup, fd, popen):
    """Undoes reduction.DupFd(fd) (which gave `dup`) for an end that will not be pickled after
    all: the resource sharer's duplicate is unregistered and closed; a number listed for a
    starting child is taken off the list (it is about to be closed)."""
    if popen is not None:
        try:
            popen._fds.remove(fd)
        except (AttributeError, ValueError):
            pass
        return
    from multiprocessing import resource_sharer
    sharer = resource_sharer._resource_sharer
    try:
        _, key = dup._id
    except (AttributeError, TypeError, ValueError):
        return
    with sharer._lock:
        entry = sharer._cache.pop(key, None)
    if entry is not None:
        _, close = entry
        close()


def rebuild_end(cls, dup):
    return cls._from_fds(*(d.detach() for d in dup))


def _after_fork_in_child():
    # The child's copies of a parent's pending descriptors are its own to close; its parent
    # closes the parent's. The lock may have been held by a parent thread at the fork (a
    # thread that does not exist here): it is made anew, never waited for.
    global _pending_lock
    _pending_lock = threading.Lock()
    pending = list(_pending)
    _pending.clear()
    for _, ex in pending:
        ex.close()


os.register_at_fork(after_in_child=_after_fork_in_child)
_hook_popen_classes()

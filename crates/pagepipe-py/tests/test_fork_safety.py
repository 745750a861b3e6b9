"""Fork safety of the package's own bookkeeping (an adversarial review's findings)."""

import os
import threading
import time

import pagepipe  # noqa: F401  (installs the fork handler)
from pagepipe import _reduce


def test_a_fork_while_another_thread_holds_the_pending_lock_does_not_hang_the_child():
    held = threading.Event()
    release = threading.Event()

    def holder():
        with _reduce._pending_lock:
            held.set()
            release.wait(10)

    t = threading.Thread(target=holder)
    t.start()
    assert held.wait(10)
    pid = os.fork()
    if pid == 0:
        os._exit(0)  # the fork handler ran before this line, or the child hangs there
    deadline = time.monotonic() + 10
    status = None
    while time.monotonic() < deadline:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            break
        time.sleep(0.01)
    else:
        os.kill(pid, 9)
        os.waitpid(pid, 0)
        status = None
    release.set()
    t.join()
    assert status is not None and os.waitstatus_to_exitcode(status) == 0, "the child hung"


def test_sweep_closes_what_a_launched_child_has_and_keeps_the_rest():
    class Popen:
        sentinel = None

    class Exported:
        closed = 0

        def close(self):
            Exported.closed += 1

    import weakref

    launched, waiting = Popen(), Popen()
    launched.sentinel = 3
    with _reduce._pending_lock:
        saved = list(_reduce._pending)
        _reduce._pending[:] = [(weakref.ref(launched), Exported()), (weakref.ref(waiting), Exported())]
    try:
        _reduce.sweep()
        assert Exported.closed == 1
        assert [r() for r, _ in _reduce._pending] == [waiting]
    finally:
        with _reduce._pending_lock:
            _reduce._pending[:] = saved


def test_a_child_launched_while_sweep_looks_is_closed_or_kept_never_dropped():
    class Flipping:
        """A Popen whose child launches between two looks at it."""

        looks = 0

        @property
        def sentinel(self):
            Flipping.looks += 1
            return None if Flipping.looks == 1 else 3

    class Exported:
        closed = 0

        def close(self):
            Exported.closed += 1

    import weakref

    popen = Flipping()
    with _reduce._pending_lock:
        saved = list(_reduce._pending)
        _reduce._pending[:] = [(weakref.ref(popen), Exported())]
    try:
        _reduce.sweep()
        kept = [r() for r, _ in _reduce._pending]
        assert Exported.closed == 1 or kept == [popen], "dropped from the list without a close"
    finally:
        with _reduce._pending_lock:
            _reduce._pending[:] = saved

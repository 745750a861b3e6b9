"""CPython's own multiprocessing tests, run against pagepipe.Pipe and pagepipe.Queue.

    python cpython_mp.py                      # fork, spawn and forkserver, one process each
    python cpython_mp.py --method spawn -v    # one start method; unittest's arguments follow

Takes the test classes of test._test_multiprocessing (installed with CPython) that exercise
pipes, connections and queues, and runs them with pagepipe's classes in place of
multiprocessing's, the way CPython's test_multiprocessing_<method> modules run them: each
_TestX class becomes WithProcessesTestX over a mixin whose Pipe and Queue are pagepipe's. The
module-level names the tests also call (multiprocessing.Pipe, multiprocessing.Queue) are
replaced too, in this process and in every child (a spawned or forkserver child imports this
module again as its main module). multiprocessing.queues.Queue is not: multiprocessing's
JoinableQueue is built on it, so _TestQueue.test_queue_feeder_on_queue_feeder_error (which
subclasses it) tests multiprocessing's own queue; tests/test_queue.py covers that hook.

Every test that cannot apply is skipped with its reason (SKIPS below; the package README lists
them).
"""

import argparse
import subprocess
import sys
import unittest

import multiprocessing
from multiprocessing import util

import test._test_multiprocessing as mp_tests

import pagepipe

# Replace multiprocessing's classes by pagepipe's wherever a test names them.
multiprocessing.Pipe = pagepipe.Pipe
multiprocessing.Queue = pagepipe.Queue

CLASSES = ["_TestConnection", "_TestPoll", "_TestPicklingConnections", "_TestQueue",
           "TestWait", "TestIgnoreEINTR"]

_FD_PASSING = ("passes a descriptor with reduction.send_handle over the connection's own "
               "socket (SCM_RIGHTS): a pagepipe Connection is two pagepipes, not a socket; "
               "objects holding descriptors travel in send() instead (DupFd), which "
               "_TestPicklingConnections covers")
SKIPS = {
    "_TestConnection.test_fd_transfer": _FD_PASSING,
    "_TestConnection.test_large_fd_transfer": _FD_PASSING,
    "_TestConnection.test_missing_fd_transfer": _FD_PASSING,
    "_TestQueue.test_task_done": "needs JoinableQueue (task_done/join), which pagepipe does "
                                 "not provide",
    "TestWait.test_wait_socket": "sockets only: no Pipe or Queue in it",
    "TestWait.test_wait_socket_slow": "sockets only: no Pipe or Queue in it",
    "TestIgnoreEINTR.test_ignore_listener": "a Listener/Client connection: no Pipe or Queue "
                                            "in it",
}


class PagepipeMixin(mp_tests.ProcessesMixin):
    """multiprocessing's own process mixin, with pagepipe's Pipe and Queue."""
    Pipe = staticmethod(pagepipe.Pipe)
    Queue = staticmethod(pagepipe.Queue)


def _build():
    for name in CLASSES:
        base = getattr(mp_tests, name)
        if issubclass(base, mp_tests.BaseTestCase):
            new = "WithProcesses" + name[1:]
            cls = type(new, (base, PagepipeMixin, unittest.TestCase), {})
        else:
            new = name
            cls = type(new, (base,), {})
        cls.__qualname__ = new
        cls.__module__ = __name__
        for key, reason in SKIPS.items():
            owner, test = key.split(".")
            if owner == name:
                setattr(cls, test, unittest.skip(reason)(getattr(base, test)))
        globals()[new] = cls


_build()


def _run_one(method, argv):
    assert multiprocessing.Pipe is pagepipe.Pipe and multiprocessing.Queue is pagepipe.Queue
    multiprocessing.set_start_method(method, force=True)
    multiprocessing.set_forkserver_preload([])
    util.get_temp_dir()
    prog = f"{sys.argv[0]} --method {method}"
    result = unittest.main(module=__name__, argv=[prog] + argv, exit=False).result
    return 0 if result.wasSuccessful() else 1


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--method", choices=["fork", "spawn", "forkserver"])
    args, rest = parser.parse_known_args()
    if args.method:
        return _run_one(args.method, rest)
    failed = []
    for method in ("fork", "spawn", "forkserver"):
        print(f"== CPython's multiprocessing tests, pagepipe's Pipe and Queue, {method}",
              flush=True)
        rc = subprocess.call([sys.executable, __file__, "--method", method] + rest)
        if rc:
            failed.append(method)
    if failed:
        print(f"FAILED under: {', '.join(failed)}")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())

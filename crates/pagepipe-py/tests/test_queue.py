"""pagepipe.Queue against multiprocessing.Queue's behaviour, and its promises: no message
lost, torn or duplicated, whatever its size; no deadlock when a process dies holding a side."""
import multiprocessing
import os
import queue
import signal
import threading
import time

import pytest

import pagepipe
import helpers


def test_put_get_in_order_and_the_exceptions():
    q = pagepipe.Queue()
    for i in range(100):
        q.put(i)
    assert q.qsize() == 100 and not q.empty()
    assert [q.get() for _ in range(99)] == list(range(99))
    assert q.get_nowait() == 99
    assert q.empty() and q.qsize() == 0
    with pytest.raises(queue.Empty):
        q.get_nowait()
    start = time.monotonic()
    with pytest.raises(queue.Empty):
        q.get(True, 0.2)
    assert 0.15 < time.monotonic() - start < 2


def test_maxsize_blocks_and_raises_full():
    q = pagepipe.Queue(maxsize=2)
    q.put(1)
    q.put_nowait(2)
    assert q.full() and q.qsize() == 2
    with pytest.raises(queue.Full):
        q.put(3, False)
    start = time.monotonic()
    with pytest.raises(queue.Full):
        q.put(3, True, 0.2)
    assert 0.15 < time.monotonic() - start < 2
    assert q.get() == 1
    q.put(3)
    assert [q.get(), q.get()] == [2, 3]


def test_closed_queue_raises_value_error():
    q = pagepipe.Queue()
    q.close()
    with pytest.raises(ValueError, match="is closed"):
        q.put(1)
    with pytest.raises(ValueError, match="is closed"):
        q.get()
    q.join_thread()


def test_more_than_the_pipe_holds_does_not_block_put():
    # As multiprocessing's (unbounded) Queue: what does not fit goes to the feeder thread.
    q = pagepipe.Queue(capacity=64 << 10)
    big = helpers.pattern(300_000)
    for i in range(20):
        q.put((i, big))
    for i in range(20):
        assert q.get(timeout=10) == (i, big)
    q.close()
    q.join_thread()


def test_an_unpicklable_object_is_reported_and_put_goes_on(capsys):
    class NotSerializable:
        def __reduce__(self):
            raise AttributeError("no")

    q = pagepipe.Queue(maxsize=1)
    q.put(NotSerializable())
    q.put(True)
    assert q.qsize() == 1
    assert q.get(timeout=5) is True
    assert q.empty()
    assert "AttributeError" in capsys.readouterr().err


@pytest.mark.parametrize("method", ["fork", "spawn", "forkserver"])
def test_many_producers_and_consumers_lose_tear_and_duplicate_nothing(method):
    ctx = multiprocessing.get_context(method)
    q = pagepipe.Queue(ctx=ctx, capacity=1 << 20)
    # Small and large messages mixed, some larger than the pipe (1 MiB) itself.
    sizes = [10, 5000, 100, 3 << 20, 70_000, 1, 1_500_000, 4095, 4096, 300]
    producers = [ctx.Process(target=helpers.produce, args=(q, 100 * k, sizes))
                 for k in range(4)]
    pipes = [ctx.Pipe(duplex=False) for _ in range(4)]
    consumers = [ctx.Process(target=helpers.consume, args=(q, w)) for r, w in pipes]
    got = _run(producers, consumers, pipes, lambda: [q.put(None) for _ in consumers])
    assert sorted(got) == [100 * k + i for k in range(4) for i in range(len(sizes))]


def _run(producers, consumers, pipes, stop):
    """Starts every process, waits for the producers, calls `stop` (a sentinel per
    consumer), and returns what the consumers reported through `pipes`."""
    for p in producers + consumers:
        p.start()
    for p in producers:
        p.join(120)
        assert p.exitcode == 0
    stop()
    got = []
    for r, w in pipes:
        w.close()
        got += r.recv()
    for p in consumers:
        p.join(60)
        assert p.exitcode == 0
    return got


def _kill(p):
    os.kill(p.pid, signal.SIGKILL)
    p.join(10)
    assert p.exitcode == -signal.SIGKILL


@pytest.mark.parametrize("method", ["fork", "spawn"])
def test_a_writer_killed_in_the_middle_of_a_message_blocks_nobody(method):
    ctx = multiprocessing.get_context(method)
    q = pagepipe.Queue(ctx=ctx, capacity=1 << 20)
    ready = ctx.Event()
    p = ctx.Process(target=helpers.put_forever_big, args=(q, ready))
    p.start()
    ready.wait(30)
    time.sleep(0.5)  # its feeder has filled the pipe and waits, holding the write side
    assert not q.empty()
    _kill(p)
    start = time.monotonic()
    q.put("after")
    assert q.get(timeout=10) == "after"  # the torn message is dropped, not delivered
    assert time.monotonic() - start < 5
    with pytest.raises(queue.Empty):
        q.get(timeout=0.2)


@pytest.mark.parametrize("method", ["fork", "spawn"])
def test_a_reader_killed_while_it_waits_blocks_nobody(method):
    ctx = multiprocessing.get_context(method)
    q = pagepipe.Queue(ctx=ctx)
    ready = ctx.Event()
    p = ctx.Process(target=helpers.get_forever, args=(q, ready))
    p.start()
    ready.wait(30)
    time.sleep(0.3)  # it holds the read side, waiting for a message
    _kill(p)
    q.put("mine")
    assert q.get(timeout=5) == "mine"


def test_readers_killed_in_the_middle_of_messages_leave_only_whole_ones():
    ctx = multiprocessing.get_context("fork")
    q = pagepipe.Queue(ctx=ctx, capacity=256 << 10)
    n = 40
    for i in range(n):
        q.put(helpers.sized(i, 600_000))  # each larger than the pipe: read while written
    got = []
    for _ in range(3):
        p = ctx.Process(target=helpers.get_loop, args=(q,))
        p.start()
        time.sleep(0.15)
        _kill(p)  # most likely in the middle of a message
    while True:
        try:
            got.append(helpers.check_sized(q.get(timeout=2)))
        except queue.Empty:
            break
    # Some were taken by the killed readers; every one that arrives is whole, and once.
    assert got and set(got) <= set(range(n)) and len(set(got)) == len(got)
    q.close()
    q.join_thread()


def test_a_subclass_hook_sees_an_unpicklable_object():
    # CPython's test_queue_feeder_on_queue_feeder_error, on pagepipe.Queue (the CPython
    # runner cannot substitute it there: that test subclasses multiprocessing.queues.Queue).
    class NotSerializable:
        reduce_was_called = hook_was_called = False

        def __reduce__(self):
            self.reduce_was_called = True
            raise AttributeError

    class SafeQueue(pagepipe.Queue):
        @staticmethod
        def _on_queue_feeder_error(e, obj):
            if isinstance(e, AttributeError) and isinstance(obj, NotSerializable):
                obj.hook_was_called = True

    obj = NotSerializable()
    q = SafeQueue(ctx=multiprocessing.get_context())
    q.put(obj)
    q.put(True)
    assert q.get(timeout=5) is True
    assert obj.reduce_was_called and obj.hook_was_called


def _stopped_writer(ctx, target, q, size):
    ready = ctx.Event()
    p = ctx.Process(target=target, args=(q, size, ready))
    p.start()
    assert ready.wait(30)
    os.kill(p.pid, signal.SIGSTOP)
    return p


def _resume_later(p, after):
    # A watchdog: a get that ignores its deadline or Ctrl-C returns late instead of hanging.
    t = threading.Timer(after, os.kill, (p.pid, signal.SIGCONT))
    t.start()
    return t


def test_a_get_keeps_its_deadline_while_a_message_waits_for_room():
    # Review 41.1a: the second message did not fit; its writer (the feeder) wrote its first
    # packets as room came, and a get that took them waited for the rest past its deadline,
    # here for a writer that is stopped. Now a message that fits in the pipe goes in whole,
    # once there is room for all of it: a get sees all of it or none.
    ctx = multiprocessing.get_context("fork")
    q = pagepipe.Queue(ctx=ctx, capacity=64 << 10)
    p = _stopped_writer(ctx, helpers.put_two_and_stay, q, 48 << 10)
    watchdog = _resume_later(p, 4)
    try:
        first = q.get(timeout=5)
        assert first[0] == "first" and first[1] == helpers.pattern(48 << 10)
        start = time.monotonic()
        with pytest.raises(queue.Empty):
            q.get(timeout=0.5)
        assert time.monotonic() - start < 2
        os.kill(p.pid, signal.SIGCONT)
        second = q.get(timeout=10)  # whole, once its writer goes on
        assert second[0] == "second" and second[1] == helpers.pattern(48 << 10)
    finally:
        watchdog.cancel()
        os.kill(p.pid, signal.SIGCONT)
        _kill(p)


class _Interrupt:
    """SIGALRM after `after` seconds raises KeyboardInterrupt (as Ctrl-C's handler does),
    first calling `also` if given."""

    def __init__(self, after, also=None):
        self.after, self.also = after, also

    def __enter__(self):
        def handler(signum, frame):
            if self.also:
                self.also()
            raise KeyboardInterrupt

        self.old = signal.signal(signal.SIGALRM, handler)
        signal.setitimer(signal.ITIMER_REAL, self.after)

    def __exit__(self, *exc):
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, self.old)


def test_ctrl_c_ends_a_get_in_the_middle_of_a_message_whose_writer_stopped():
    # Review 41.1a: a get in the middle of a message (larger than the pipe, so its writer
    # streams it) looked at signals only before a message started: Ctrl-C waited for a
    # stopped writer. Now it ends the get once a second passes without a packet; that message
    # is given up (as a killed reader's), and the queue goes on whole.
    ctx = multiprocessing.get_context("fork")
    q = pagepipe.Queue(ctx=ctx, capacity=64 << 10)
    p = _stopped_writer(ctx, helpers.put_big_then_small_and_stay, q, 1 << 20)
    watchdog = _resume_later(p, 6)
    try:
        start = time.monotonic()
        with pytest.raises(KeyboardInterrupt):
            with _Interrupt(0.3):
                q.get(timeout=30)
        assert time.monotonic() - start < 3
        os.kill(p.pid, signal.SIGCONT)
        assert q.get(timeout=10) == ("small", b"x")
        with pytest.raises(queue.Empty):
            q.get(timeout=0.2)
    finally:
        watchdog.cancel()
        os.kill(p.pid, signal.SIGCONT)
        _kill(p)


def test_ctrl_c_in_the_middle_of_a_message_that_keeps_coming_keeps_it_for_the_next_get():
    # The message's writer goes on (the handler wakes it): the interrupted get reads the
    # message to its end, raises KeyboardInterrupt, and the next get returns the message.
    ctx = multiprocessing.get_context("fork")
    q = pagepipe.Queue(ctx=ctx, capacity=64 << 10)
    p = _stopped_writer(ctx, helpers.put_big_then_small_and_stay, q, 1 << 20)
    watchdog = _resume_later(p, 6)
    try:
        start = time.monotonic()
        with pytest.raises(KeyboardInterrupt):
            with _Interrupt(0.3, also=lambda: os.kill(p.pid, signal.SIGCONT)):
                q.get(timeout=30)
        assert time.monotonic() - start < 3
        big = q.get(timeout=10)
        assert big[0] == "big" and big[1] == helpers.pattern(1 << 20)
        assert q.get(timeout=10) == ("small", b"x")
        with pytest.raises(queue.Empty):
            q.get(timeout=0.2)
    finally:
        watchdog.cancel()
        os.kill(p.pid, signal.SIGCONT)
        _kill(p)


def test_keyboard_interrupt_in_put_gives_the_place_back():
    # Review 41.1c: an exception that is not an Exception (KeyboardInterrupt) between the
    # semaphore's acquire and the message's hand-off kept the place: maxsize shrank for good.
    class Interrupting:
        def __reduce__(self):
            raise KeyboardInterrupt

    q = pagepipe.Queue(maxsize=1)
    with pytest.raises(KeyboardInterrupt):
        q.put(Interrupting())
    assert q.qsize() == 0 and not q.full()
    q.put(1, timeout=0.5)  # queue.Full before the fix
    assert q.get(timeout=5) == 1


def test_a_feeder_that_cannot_write_gives_the_place_back(capsys):
    # Review 41.1c: the feeder's error path printed the error but kept the message's place.
    q = pagepipe.Queue(capacity=64 << 10)
    q.put(bytes(48 << 10))  # in the pipe now
    q.put(bytes(48 << 10))  # does not fit: to the feeder
    assert q.qsize() == 2
    q._data_r.close()  # no reader left anywhere: the feeder's write fails
    deadline = time.monotonic() + 10
    while q.qsize() == 2 and time.monotonic() < deadline:
        time.sleep(0.05)
    assert q.qsize() == 1
    assert "BrokenPipeError" in capsys.readouterr().err


def test_a_feeder_batch_that_cannot_be_written_gives_every_place_back(capsys):
    # The feeder writes its backlog in batches (one native call each): a batch that fails
    # gives back the place of each message it could not write, and reports each.
    q = pagepipe.Queue(capacity=64 << 10)
    q.put(bytes(48 << 10))  # in the pipe now
    for _ in range(3):
        q.put(bytes(48 << 10))  # does not fit: to the feeder, the next ones behind it
    assert q.qsize() == 4
    q._data_r.close()
    deadline = time.monotonic() + 10
    while q.qsize() > 1 and time.monotonic() < deadline:
        time.sleep(0.05)
    assert q.qsize() == 1
    assert capsys.readouterr().err.count("BrokenPipeError") >= 3


def test_the_feeders_batches_keep_order_and_wholeness():
    # A backlog of small and multi-packet messages (and some larger than the pipe), written by
    # the feeder in batches into a pipe of 16 packets, arrives in order, whole and once.
    q = pagepipe.Queue(capacity=64 << 10)
    sizes = [10, 5000, 100, 70_000, 3, 40_000] * 60
    for i, n in enumerate(sizes):
        q.put((i, helpers.pattern(n)))
    for i, n in enumerate(sizes):
        assert q.get(timeout=10) == (i, helpers.pattern(n))
    assert q.empty()
    q.close()
    q.join_thread()


def test_bad_timeouts_raise_as_multiprocessing_and_socket_do():
    # Review 41.1d: a huge timeout panicked in Duration::from_secs_f64.
    q = pagepipe.Queue()
    q.put(1)
    for huge in (1e300, float("inf")):
        with pytest.raises(OverflowError):
            q.get(timeout=huge)
    with pytest.raises(ValueError):
        q.get(timeout=float("nan"))
    assert q.get(timeout=1e9) == 1


def test_put_many_and_get_many_keep_order_and_limits():
    q = pagepipe.Queue()
    q.put_many([])  # nothing to do
    q.put_many(range(10))
    q.put(10)
    q.put_many(iter([11, 12]))
    assert q.qsize() == 13
    assert q.get_many(max_messages_to_get=4) == [0, 1, 2, 3]
    assert q.get() == 4
    assert q.get_many(timeout=1) == list(range(5, 13))
    assert q.empty() and q.qsize() == 0
    with pytest.raises(queue.Empty):
        q.get_many(block=False)
    start = time.monotonic()
    with pytest.raises(queue.Empty):
        q.get_many(timeout=0.2)
    assert 0.15 < time.monotonic() - start < 2
    with pytest.raises(ValueError):
        q.get_many(max_messages_to_get=0)
    q.close()
    with pytest.raises(ValueError, match="is closed"):
        q.put_many([1])
    with pytest.raises(ValueError, match="is closed"):
        q.get_many()


def test_put_many_and_get_many_of_every_size_through_a_small_pipe():
    # Messages of one packet, of many, and larger than the pipe (64 KiB), in one put_many:
    # what fits goes in at once, the rest through the feeder, in order, whole and once.
    q = pagepipe.Queue(capacity=64 << 10)
    sizes = [1, 4000, 4096, 100_000, 10, 3 << 20, 50_000, 7] * 3
    msgs = [(i, helpers.pattern(n)) for i, n in enumerate(sizes)]
    q.put_many(msgs)
    got = []
    while len(got) < len(msgs):
        got += q.get_many(timeout=10, max_messages_to_get=5)
    assert got == msgs
    assert q.empty()
    q.close()
    q.join_thread()


def test_put_many_with_maxsize_puts_all_or_nothing():
    q = pagepipe.Queue(maxsize=3)
    q.put(0)
    with pytest.raises(queue.Full):
        q.put_many([1, 2, 3], block=False)
    start = time.monotonic()
    with pytest.raises(queue.Full):
        q.put_many([1, 2, 3], timeout=0.2)
    assert 0.15 < time.monotonic() - start < 2
    assert q.qsize() == 1  # the places taken for a batch that did not fit are given back
    q.put_many([1, 2], timeout=0.5)
    assert q.full()
    assert q.get_many(timeout=1) == [0, 1, 2]
    assert q.qsize() == 0


def test_put_many_reports_an_unpicklable_object_and_puts_the_others(capsys):
    class NotSerializable:
        def __reduce__(self):
            raise AttributeError("no")

    q = pagepipe.Queue(maxsize=5)
    q.put_many([1, NotSerializable(), 3])
    assert q.qsize() == 2
    assert q.get_many(timeout=1) == [1, 3]
    assert "AttributeError" in capsys.readouterr().err


def test_a_message_that_cannot_be_unpickled_in_get_many_is_raised_by_the_next_get():
    # get_many returns what it unpickled before a message whose loads fails; that message's
    # error comes from the next call, and the messages after it are not lost.
    class Breaks:
        def __reduce__(self):
            return (_raise, ())

    q = pagepipe.Queue()
    q.put_many([1, Breaks(), 3])
    assert q.get_many(timeout=1) == [1]
    with pytest.raises(RuntimeError, match="cannot be loaded"):
        q.get_many(timeout=1)
    assert q.get(timeout=1) == 3
    assert q.qsize() == 0


def _raise():
    raise RuntimeError("cannot be loaded")


@pytest.mark.parametrize("method", ["fork", "spawn", "forkserver"])
def test_put_many_and_get_many_across_processes_lose_and_duplicate_nothing(method):
    # 4 producers with put_many, 4 consumers with get_many (and one with get), messages from
    # 10 B to 3 MiB through a 1 MiB pipe: every message arrives whole and once.
    ctx = multiprocessing.get_context(method)
    q = pagepipe.Queue(ctx=ctx, capacity=1 << 20)
    sizes = ([10, 5000, 100, 70_000, 1, 4095, 4096, 300] * 8
             + [3 << 20, 1_500_000])
    producers = [ctx.Process(target=helpers.produce_many, args=(q, 1000 * k, sizes, 7))
                 for k in range(4)]
    pipes = [ctx.Pipe(duplex=False) for _ in range(5)]
    consumers = [ctx.Process(target=helpers.consume_many, args=(q, w, 1 + 3 * j))
                 for j, (r, w) in enumerate(pipes[:4])]
    consumers.append(ctx.Process(target=helpers.consume, args=(q, pipes[4][1])))
    got = _run(producers, consumers, pipes, lambda: q.put_many([None] * len(consumers)))
    assert sorted(got) == [1000 * k + i for k in range(4) for i in range(len(sizes))]


def test_each_threads_puts_stay_in_order_through_the_pipe_and_the_feeder():
    # put writes directly while nothing of this process's waits for the feeder thread, else
    # hands over to it: with a 64 KiB pipe both happen all the time; each thread's messages
    # (put and put_many, small and multi-packet) still arrive in its order, once.
    q = pagepipe.Queue(capacity=64 << 10)
    n = 3000

    def produce(tag):
        for i in range(n):
            if i % 100 == 0:
                q.put_many([(tag, i, b"")])
            else:
                q.put((tag, i, b"x" * (9000 if i % 37 == 0 else i % 200)))

    threads = [threading.Thread(target=produce, args=(t,)) for t in range(3)]
    for t in threads:
        t.start()
    last = {}
    for _ in range(3 * n):
        tag, i, _ = q.get(timeout=30)
        assert last.get(tag, -1) == i - 1
        last[tag] = i
    for t in threads:
        t.join()
    assert q.empty()
    q.close()
    q.join_thread()


def test_put_and_get_are_native_unless_a_subclass_overrides_them():
    q = pagepipe.Queue()
    assert type(q.put).__name__ == "builtin_function_or_method"
    assert type(q.get).__name__ == "builtin_function_or_method"

    class Counting(pagepipe.Queue):
        puts = 0

        def put(self, obj, block=True, timeout=None):
            Counting.puts += 1
            return super().put(obj, block, timeout)

    c = Counting()
    c.put(1)
    c.put_nowait(2)
    assert Counting.puts == 2
    assert [c.get(timeout=1), c.get(timeout=1)] == [1, 2]


def test_a_dropped_queue_is_freed_at_once_and_its_feeder_ends():
    # Its native put/get hold it weakly: the last reference gone, it is freed (no cycle for
    # the collector to find), and the feeder thread ends, as multiprocessing's does once its
    # queue is gone.
    import gc
    import weakref

    q = pagepipe.Queue(capacity=64 << 10)
    for _ in range(4):
        q.put(bytes(40 << 10))  # the pipe fills: the feeder thread starts
    thread = q._thread
    assert thread is not None and thread.is_alive()
    ref = weakref.ref(q)
    # Its parts, to drain the pipe once it is gone.
    reader, lock_r, lock_w, release = q._data_r, q._lock_r, q._lock_w, q._sem.release
    gc.disable()
    try:
        del q
        assert ref() is None
    finally:
        gc.enable()
    # The feeder writes what it held (the close finalizer's sentinel comes after), then ends.
    for _ in range(3):
        reader._get_objs(lock_r, lock_w, 10, release, 1)
    thread.join(10)
    assert not thread.is_alive()

"""pagepipe.Queue against multiprocessing.Queue's behaviour, and its promises: no message
lost, torn or duplicated, whatever its size; no deadlock when a process dies holding a side."""
import multiprocessing
import os
import queue
import signal
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
    for p in producers + consumers:
        p.start()
    for p in producers:
        p.join(120)
        assert p.exitcode == 0
    for _ in consumers:
        q.put(None)
    got = []
    for r, w in pipes:
        w.close()
        got += r.recv()
    for p in consumers:
        p.join(60)
        assert p.exitcode == 0
    want = [100 * k + i for k in range(4) for i in range(len(sizes))]
    assert sorted(got) == want


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

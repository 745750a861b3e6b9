import array
import asyncio
import gc
import hashlib
import multiprocessing
import os
import pickle
import select
import selectors
import signal
import threading
import time

import pytest

import pagepipe
import helpers


def test_write_read_and_end_of_file():
    w, r = pagepipe.pipe()
    assert w.write(b"hello") == 5
    assert r.read(2) == b"he"
    assert r.read(100) == b"llo"
    w.close()
    assert r.read(10) == b""
    assert r.read() == b""
    r.close()


def test_read_all_until_end_of_file():
    w, r = pagepipe.pipe()
    t = threading.Thread(target=helpers.write_and_close, args=(w, helpers.pattern(1 << 20)))
    t.start()
    assert r.read() == helpers.pattern(1 << 20)
    t.join()


def test_any_buffer_is_written():
    w, r = pagepipe.pipe()
    assert w.write(bytearray(b"ab")) == 2
    assert w.write(memoryview(b"xcdx")[1:3]) == 2
    a = array.array("i", [1, 2])
    assert w.write(a) == a.itemsize * 2
    assert w.write(b"") == 0
    assert r.read(4) == b"abcd"
    assert r.read(100) == a.tobytes()


def test_readinto_fills_the_callers_buffer():
    w, r = pagepipe.pipe()
    w.write(b"0123456789")
    buf = bytearray(4)
    assert r.readinto(buf) == 4 and buf == b"0123"
    view = memoryview(bytearray(10))
    assert r.readinto(view[2:5]) == 3 and bytes(view[2:5]) == b"456"
    a = array.array("b", [0] * 8)
    assert r.readinto(a) == 3 and a.tobytes()[:3] == b"789"
    with pytest.raises(TypeError):
        r.readinto(b"read-only")
    w.close()
    assert r.readinto(bytearray(4)) == 0


def test_closed_ends_raise_value_error():
    w, r = pagepipe.pipe()
    with w, r:
        pass
    assert w.closed and r.closed
    for call in (lambda: w.write(b"x"), w.fileno, lambda: r.read(1), r.fileno,
                 lambda: r.readinto(bytearray(1)), lambda: w.set_blocking(False)):
        with pytest.raises(ValueError):
            call()
    w.close()  # closing twice is fine, as for files
    r.close()


def test_broken_pipe_error_without_readers():
    w, r = pagepipe.pipe()
    r.close()
    with pytest.raises(BrokenPipeError):
        w.write(b"x")
    with pytest.raises(BrokenPipeError):
        w.write(bytes(1 << 20))


def test_blocking_io_error_when_non_blocking():
    w, r = pagepipe.pipe()
    r.set_blocking(False)
    w.set_blocking(False)
    assert not r.get_blocking() and not w.get_blocking()
    with pytest.raises(BlockingIOError):
        r.read(10)
    assert w.write(bytes(100_000)) == 65536  # what fits
    with pytest.raises(BlockingIOError):
        w.write(b"x")
    assert len(r.read()) == 65536  # read(-1) on a non-blocking end: what is there
    w.close()
    assert r.read(10) == b""


def test_bad_arguments_raise_value_error():
    with pytest.raises(ValueError):
        pagepipe.pipe(0)
    with pytest.raises(ValueError):
        pagepipe.pipe(1 << 40)
    with pytest.raises(OverflowError):
        pagepipe.pipe(-1)
    w, r = pagepipe.pipe(100_000)
    assert w.capacity == 131072


def test_select_and_selectors_see_readiness():
    w, r = pagepipe.pipe()
    assert select.select([r], [], [], 0)[0] == []
    assert select.select([], [w], [], 0)[1] == [w]
    w.write(b"x")
    assert select.select([r], [], [], 1)[0] == [r]
    with selectors.DefaultSelector() as sel:
        sel.register(r, selectors.EVENT_READ)
        assert len(sel.select(1)) == 1
    r.read(1)
    w.close()
    assert select.select([r], [], [], 1)[0] == [r]  # end of file is readable
    assert r.read(1) == b""


def test_asyncio_add_reader():
    async def main():
        w, r = pagepipe.pipe()
        r.set_blocking(False)
        loop = asyncio.get_running_loop()
        got = loop.create_future()
        loop.add_reader(r.fileno(), lambda: got.done() or got.set_result(r.read(100)))
        loop.call_later(0.05, w.write, b"async")
        data = await asyncio.wait_for(got, 5)
        loop.remove_reader(r.fileno())
        return data

    assert asyncio.run(main()) == b"async"


def test_the_gil_is_released_while_waiting():
    w, r = pagepipe.pipe()
    got = []
    t = threading.Thread(target=lambda: got.append(r.read(5)))
    t.start()
    # The reader thread waits in read(); this thread must still run Python code.
    spins = 0
    deadline = time.monotonic() + 0.2
    while time.monotonic() < deadline:
        spins += 1
    w.write(b"wake!")
    t.join(5)
    assert got == [b"wake!"] and spins > 1000


@pytest.fixture
def sigint_raises():
    """Python's own SIGINT handler (KeyboardInterrupt) for the test: a shell that starts a
    job in the background without job control (as a CI script may) has it ignore SIGINT,
    and Python then installs no handler."""
    old = signal.signal(signal.SIGINT, signal.default_int_handler)
    yield
    signal.signal(signal.SIGINT, old)


def _sigint_after(seconds):
    """Sends this process SIGINT from another thread after `seconds` (Python runs the
    handler, KeyboardInterrupt by default, in the main thread)."""
    t = threading.Timer(seconds, lambda: os.kill(os.getpid(), signal.SIGINT))
    t.start()
    return t


@pytest.mark.parametrize("call", ["read", "read_all", "readinto", "write"])
def test_ctrl_c_interrupts_a_blocked_call(call, sigint_raises):
    # As a blocked os.read/os.write on a pipe: Ctrl-C raises KeyboardInterrupt at once.
    w, r = pagepipe.pipe(4096)
    if call == "write":
        w.write(b"x" * 4096)  # full: the next write waits for room
    ops = {
        "read": lambda: r.read(10),
        "read_all": lambda: r.read(),
        "readinto": lambda: r.readinto(bytearray(10)),
        "write": lambda: w.write(b"y" * 100),
    }
    _sigint_after(0.2)
    start = time.monotonic()
    with pytest.raises(KeyboardInterrupt):
        ops[call]()
    waited = time.monotonic() - start
    assert 0.15 < waited < 2, waited
    # The end still works afterwards.
    if call == "write":
        assert r.read(4096) == b"x" * 4096
    else:
        w.write(b"after")
        assert r.read(10) == b"after"


@pytest.mark.parametrize("call", ["read_all", "write"])
def test_ctrl_c_interrupts_a_call_that_keeps_making_progress(call, sigint_raises):
    # A slow but steady peer: every wait ends with some progress, never a timeout; Ctrl-C
    # must still end the call (as socket.sendall checks signals after each partial send).
    w, r = pagepipe.pipe(4096)
    stop = threading.Event()

    def trickle_in():
        while not stop.wait(0.01):
            w.write(b"x")

    def drain():
        buf = bytearray(1024)
        while not stop.wait(0.01):
            r.readinto(buf)

    t = threading.Thread(target=trickle_in if call == "read_all" else drain, daemon=True)
    t.start()
    _sigint_after(0.3)
    start = time.monotonic()
    try:
        with pytest.raises(KeyboardInterrupt):
            if call == "read_all":
                r.read()
            else:
                w.write(b"y" * (64 << 20))  # about an hour at 1 KiB per 10 ms
        assert time.monotonic() - start < 3
    finally:
        stop.set()
        t.join(5)


def test_a_signal_handler_that_returns_lets_the_call_go_on():
    # PEP 475: a handler that does not raise, and the call keeps waiting for its data.
    w, r = pagepipe.pipe()
    seen = []
    old = signal.signal(signal.SIGUSR1, lambda *a: seen.append(1))
    try:
        threading.Timer(0.1, lambda: os.kill(os.getpid(), signal.SIGUSR1)).start()
        threading.Timer(0.4, lambda: w.write(b"late")).start()
        assert r.read(10) == b"late"
        assert seen == [1]
    finally:
        signal.signal(signal.SIGUSR1, old)


def test_os_fork_inherits_the_ends():
    w, r = pagepipe.pipe()
    data = helpers.pattern(3 << 20)
    pid = os.fork()
    if pid == 0:
        try:
            r.close()
            w.write(data)
            w.close()
        finally:
            os._exit(0)
    w.close()
    assert r.read() == data  # end of file once the child's writer is gone
    assert os.waitpid(pid, 0)[1] == 0


def test_plain_pickle_refuses_an_end():
    w, r = pagepipe.pipe()
    with pytest.raises(TypeError):
        pickle.dumps(w)


@pytest.mark.parametrize("method", ["fork", "spawn", "forkserver"])
def test_multiprocessing_child_writes(method):
    ctx = multiprocessing.get_context(method)
    w, r = pagepipe.pipe()
    data = helpers.pattern(5 << 20)
    p = ctx.Process(target=helpers.write_and_close, args=(w, data))
    p.start()
    w.close()  # now only the child holds the writer
    got = bytearray(len(data))
    view = memoryview(got)
    n = 0
    while True:
        k = r.readinto(view[n:]) if n < len(got) else r.readinto(bytearray(1))
        if k == 0:
            break
        n += k
    p.join(30)
    assert p.exitcode == 0
    assert n == len(data) and got == data


@pytest.mark.parametrize("method", ["fork", "spawn", "forkserver"])
def test_multiprocessing_child_reads(method):
    ctx = multiprocessing.get_context(method)
    w, r = pagepipe.pipe()
    parent_conn, child_conn = ctx.Pipe(duplex=False)
    p = ctx.Process(target=helpers.read_all_and_report, args=(r, child_conn, w))
    p.start()
    r.close()
    child_conn.close()
    data = helpers.pattern(2 << 20)
    w.write(data)
    w.close()
    assert parent_conn.recv() == hashlib.sha256(data).hexdigest()
    p.join(30)
    assert p.exitcode == 0


def test_an_end_through_a_queue_to_a_running_process():
    ctx = multiprocessing.get_context("spawn")
    q = ctx.Queue()
    data = helpers.pattern(1 << 20)
    p = ctx.Process(target=helpers.write_from_queue, args=(q, data))
    p.start()
    w, r = pagepipe.pipe()
    q.put(w)  # pickled with the resource sharer, as multiprocessing passes a Connection
    time.sleep(0.1)
    w.close()
    assert r.read() == data
    p.join(30)
    assert p.exitcode == 0


def _open_fds():
    return len(os.listdir("/proc/self/fd"))


@pytest.mark.parametrize("method", ["spawn", "forkserver"])
def test_starting_children_with_an_end_leaves_no_descriptor_open(method):
    # Issue 39, break 7: each start that pickled an end left two descriptors open in the
    # parent until the end was closed (a long-lived end handed to recycled workers leaked
    # without bound).
    ctx = multiprocessing.get_context(method)
    w, r = pagepipe.pipe()

    def start_one():
        p = ctx.Process(target=helpers.nothing, args=(w, r))
        p.start()
        p.join(30)
        assert p.exitcode == 0
        p.close()  # multiprocessing's own descriptors (its sentinel) go with the Process

    start_one()  # the first start opens what stays (resource tracker, forkserver socket)
    gc.collect()
    before = _open_fds()
    for _ in range(10):
        start_one()
    gc.collect()
    assert _open_fds() == before
    # The end still works, and the children's copies are gone: end of file at once.
    w.write(b"still")
    w.close()
    assert r.read() == b"still"


def test_timeout_per_call_and_per_object():
    w, r = pagepipe.pipe(4096)
    start = time.monotonic()
    with pytest.raises(TimeoutError):
        r.read(10, timeout=0.1)
    with pytest.raises(TimeoutError):
        r.readinto(bytearray(10), timeout=0.1)
    assert 0.15 < time.monotonic() - start < 2
    r.settimeout(0.05)
    assert r.gettimeout() == 0.05
    with pytest.raises(TimeoutError):
        r.read(1)
    r.settimeout(None)
    assert r.gettimeout() is None
    assert w.write(bytes(10000), timeout=0.05) == 4096  # what fit, then the deadline
    with pytest.raises(TimeoutError):
        w.write(b"x", timeout=0.05)
    w.settimeout(0.05)
    with pytest.raises(TimeoutError):
        w.write(b"x")
    with pytest.raises(ValueError):
        w.settimeout(-1)
    with pytest.raises(ValueError):
        r.read(1, timeout=float("nan"))
    assert r.read(10000, timeout=1) == bytes(4096)


def test_a_write_timeout_bounds_the_whole_call_as_sendall_does():
    # Review 41.1b: the deadline started again after each part placed, so a reader that
    # takes a little now and then kept write(timeout=0.3) going for as long as it read.
    w, r = pagepipe.pipe(4096)
    stop = threading.Event()

    def trickle():
        while not stop.is_set():
            try:
                r.read(4096, timeout=0.5)
            except TimeoutError:
                pass
            time.sleep(0.02)

    t = threading.Thread(target=trickle)
    t.start()
    try:
        start = time.monotonic()
        n = w.write(bytes(1 << 20), timeout=0.3)
        elapsed = time.monotonic() - start
    finally:
        stop.set()
        t.join()
    assert 0 < n < 1 << 20
    assert 0.25 < elapsed < 1.5


def test_huge_nan_and_negative_timeouts_raise_as_socket_does():
    # Review 41.1d: a huge finite timeout panicked (Duration::from_secs_f64); infinity was a
    # ValueError. socket.settimeout raises OverflowError for both, ValueError for NaN and
    # negative numbers.
    w, r = pagepipe.pipe(4096)
    for huge in (1e300, float("inf"), 2.0 ** 63):
        with pytest.raises(OverflowError):
            w.write(b"x", timeout=huge)
        with pytest.raises(OverflowError):
            r.read(1, timeout=huge)
        with pytest.raises(OverflowError):
            r.settimeout(huge)
        with pytest.raises(OverflowError):
            w.settimeout(huge)
    for bad in (float("nan"), -1.0):
        with pytest.raises(ValueError):
            w.write(b"x", timeout=bad)
        with pytest.raises(ValueError):
            r.settimeout(bad)
    assert w.write(b"x", timeout=1e9) == 1  # large, but in range
    r.settimeout(1e9)
    assert r.gettimeout() == 1e9
    assert r.read(1) == b"x"


def test_an_end_whose_second_descriptor_fails_to_pickle_leaves_nothing_behind(monkeypatch):
    # Review 41.1e: when reduction.DupFd failed for the second descriptor, the first one's
    # duplicate stayed registered with the resource sharer (and open) for good.
    from multiprocessing import reduction, resource_sharer

    real, calls = reduction.DupFd, []

    def dup_fd(fd):
        calls.append(fd)
        if len(calls) == 2:
            raise OSError("no more descriptors")
        return real(fd)

    w, r = pagepipe.pipe()
    reduction.ForkingPickler.dumps(w)  # the sharer's thread and socket exist from now on
    sharer = resource_sharer._resource_sharer
    gc.collect()
    before_fds, before_cache = _open_fds(), dict(sharer._cache)
    monkeypatch.setattr(reduction, "DupFd", dup_fd)
    with pytest.raises(OSError, match="no more descriptors"):
        reduction.ForkingPickler.dumps(w)
    assert len(calls) == 2
    assert dict(sharer._cache) == before_cache
    assert _open_fds() == before_fds

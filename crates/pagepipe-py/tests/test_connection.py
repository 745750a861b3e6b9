"""pagepipe.Pipe() and Connection against multiprocessing.Pipe()'s behaviour."""
import array
import multiprocessing
import multiprocessing.connection
import os
import pickle
import threading
import time

import pytest

import pagepipe
import helpers


def test_objects_and_bytes_travel_whole_both_ways():
    a, b = pagepipe.Pipe()
    a.send([1, 2.25, None])
    assert b.recv() == [1, 2.25, None]
    b.send_bytes(b"")
    b.send_bytes(b"x" * 100_000)
    assert a.recv_bytes() == b""
    assert a.recv_bytes() == b"x" * 100_000
    for c in (a, b):
        assert c.readable and c.writable and not c.closed
        assert isinstance(c.fileno(), int)


def test_a_message_larger_than_the_pipe():
    a, b = pagepipe.Pipe(capacity=65536)
    big = helpers.pattern(16 << 20)
    t = threading.Thread(target=a.send_bytes, args=(big,))
    t.start()
    assert b.recv_bytes() == big
    t.join()


def test_send_bytes_offset_and_size_as_multiprocessing():
    a, b = pagepipe.Pipe()
    msg = b"abcdefghijklmnopqrstuvwxyz"
    for args, want in (((), msg), ((5,), msg[5:]), ((7, 8), msg[7:15]), ((26,), b""),
                       ((26, 0), b"")):
        a.send_bytes(msg, *args)
        assert b.recv_bytes() == want
    for args in ((27,), (22, 5), (26, 1), (-1,), (4, -1)):
        with pytest.raises(ValueError):
            a.send_bytes(msg, *args)
    arr = array.array("i", [1, 2, 3])
    a.send_bytes(arr, 4, 8)  # offsets in bytes, as multiprocessing's
    assert b.recv_bytes() == arr.tobytes()[4:]


def test_recv_bytes_into_and_buffer_too_short():
    a, b = pagepipe.Pipe()
    arr = array.array("i", range(4))
    buf = array.array("i", [0] * 10)
    a.send_bytes(arr)
    assert b.recv_bytes_into(buf) == 16 and list(buf) == [0, 1, 2, 3] + [0] * 6
    buf = array.array("i", [0] * 10)
    a.send_bytes(arr)
    assert b.recv_bytes_into(buf, 3 * 4) == 16 and list(buf) == [0] * 3 + [0, 1, 2, 3] + [0] * 3
    a.send_bytes(b"hello world" * 10)
    with pytest.raises(multiprocessing.BufferTooShort) as e:
        b.recv_bytes_into(bytearray(40))
    assert e.value.args == (b"hello world" * 10,)
    with pytest.raises(ValueError):
        b.recv_bytes_into(bytearray(4), 5)
    a.send(1)  # the stream is still in step
    assert b.recv() == 1


def test_maxlength_is_a_bad_message_length():
    r, w = pagepipe.Pipe(duplex=False)
    w.send_bytes(b"x" * 100)
    with pytest.raises(ValueError):
        r.recv_bytes(-1)
    with pytest.raises(OSError, match="bad message length"):
        r.recv_bytes(10)
    assert r.closed  # a read-only connection is closed then, as multiprocessing's


def test_poll_waits_and_eof_error_after_the_other_side_closes():
    a, b = pagepipe.Pipe()
    start = time.monotonic()
    assert b.poll() is False and b.poll(-1) is False
    assert b.poll(0.2) is False
    assert 0.15 < time.monotonic() - start < 2
    a.send(None)
    assert b.poll(5) is True and b.poll() is True
    assert b.recv() is None
    a.close()
    assert b.poll(5) is True  # end of file is readable
    with pytest.raises(EOFError):
        b.recv()
    with pytest.raises(EOFError):
        b.recv_bytes()


def test_closed_and_one_way_connections_raise_os_error():
    r, w = pagepipe.Pipe(duplex=False)
    assert r.readable and not r.writable and w.writable and not w.readable
    with pytest.raises(OSError):
        r.send(1)
    with pytest.raises(OSError):
        w.recv()
    with pytest.raises(OSError):
        w.poll()
    with r, w:
        pass
    assert r.closed and w.closed
    for call in (r.recv, r.recv_bytes, r.poll, r.fileno, lambda: w.send(1),
                 lambda: w.send_bytes(b"x")):
        with pytest.raises(OSError):
            call()
    r.close()  # twice is fine


def test_multiprocessing_connection_wait_sees_a_message():
    a, b = pagepipe.Pipe()
    c, d = pagepipe.Pipe()
    assert multiprocessing.connection.wait([b, d], 0.05) == []
    threading.Timer(0.1, c.send, args=("hi",)).start()
    assert multiprocessing.connection.wait([b, d], 5) == [d]
    assert d.recv() == "hi"


def test_plain_pickle_refuses_a_connection():
    a, b = pagepipe.Pipe()
    with pytest.raises(TypeError):
        pickle.dumps(a)


@pytest.mark.parametrize("method", ["fork", "spawn", "forkserver"])
def test_a_child_echoes_through_a_connection(method):
    ctx = multiprocessing.get_context(method)
    conn, child = pagepipe.Pipe()
    p = ctx.Process(target=helpers.echo, args=(child,))
    p.start()
    child.close()  # may happen before the child has it (multiprocessing's test_spawn_close)
    for msg in (b"hello", b"", helpers.pattern(3 << 20)):
        conn.send_bytes(msg)
        assert conn.recv_bytes() == msg
    conn.send_bytes(b"STOP")
    with pytest.raises(EOFError):
        conn.recv_bytes()  # the child closed its end and exited
    p.join(30)
    assert p.exitcode == 0


def test_a_connection_through_a_connection_to_a_running_process():
    ctx = multiprocessing.get_context("spawn")
    conn, child = pagepipe.Pipe()
    p = ctx.Process(target=helpers.object_echo, args=(child,))
    p.start()
    child.close()
    r, w = pagepipe.Pipe(duplex=False)
    conn.send(w)  # through the resource sharer, as multiprocessing passes its own
    w2 = conn.recv()
    w.close()
    w2.send("round trip")
    assert r.recv() == "round trip"
    conn.send(None)
    p.join(30)
    assert p.exitcode == 0

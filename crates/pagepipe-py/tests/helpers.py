"""Targets for child processes (importable under spawn and forkserver)."""

import hashlib
import time


def pattern(n):
    """n bytes of a pattern that differs at every offset in a 256-byte period and by block."""
    base = bytes(range(256)) * 256  # 64 KiB
    out = bytearray()
    block = 0
    while len(out) < n:
        out += bytes([block & 0xFF]) + base[1:]
        block += 1
    return bytes(out[:n])


def write_and_close(w, data):
    with w:
        w.write(data)


def read_all_and_report(r, conn, inherited_writer):
    # Under the fork start method the child also inherits the parent's writer (as it would
    # an os.pipe() descriptor): close it, or end of file never comes.
    inherited_writer.close()
    with r:
        data = r.read()
    conn.send(hashlib.sha256(data).hexdigest())
    conn.close()


def write_from_queue(q, data):
    w = q.get()
    with w:
        w.write(data)


def echo(conn):
    """Sends back every message until b"STOP" (multiprocessing's test idiom)."""
    for msg in iter(conn.recv_bytes, b"STOP"):
        conn.send_bytes(msg)
    conn.close()


def object_echo(conn):
    for obj in iter(conn.recv, None):
        conn.send(obj)
    conn.close()


def nothing(*args):
    pass


def sized(i, size):
    """Message i of `size` bytes, which says its own index and checksum (whole or not)."""
    body = pattern(size)
    return (i, hashlib.sha256(body).hexdigest(), body)


def check_sized(msg):
    i, digest, body = msg
    assert hashlib.sha256(body).hexdigest() == digest, f"message {i} is torn"
    return i


def produce(q, start, sizes):
    for k, size in enumerate(sizes):
        q.put(sized(start + k, size))


def consume(q, out, stop_after=None):
    """Gets until None; sends the indices it got (each checked whole) on `out`."""
    got = []
    while True:
        msg = q.get(timeout=60)
        if msg is None:
            break
        got.append(check_sized(msg))
    out.send(got)
    out.close()


def put_forever_big(q, ready):
    """Holds the queue's write side forever: a message larger than the pipe, no reader."""
    ready.set()
    q.put(bytes(10 << 20))
    q.close()
    q.join_thread()


def get_forever(q, ready):
    ready.set()
    q.get()


def get_loop(q):
    while True:
        check_sized(q.get())
        time.sleep(0.02)


def put_two_and_stay(q, size, ready):
    """Puts two messages of about `size` bytes; the second waits in the feeder for room."""
    q.put(("first", pattern(size)))
    q.put(("second", pattern(size)))
    time.sleep(0.5)  # the feeder has the second and waits for room for it
    ready.set()
    time.sleep(600)


def put_big_then_small_and_stay(q, size, ready):
    """A message larger than the pipe (its feeder streams it), then a small one."""
    q.put(("big", pattern(size)))
    q.put(("small", b"x"))
    time.sleep(0.5)  # the feeder has filled the pipe with the big one's first packets
    ready.set()
    time.sleep(600)


def produce_many(q, start, sizes, batch):
    """Puts sized messages start.. with put_many, `batch` at a time."""
    msgs = [sized(start + k, size) for k, size in enumerate(sizes)]
    for i in range(0, len(msgs), batch):
        q.put_many(msgs[i:i + batch])


def consume_many(q, out, most):
    """get_many (at most `most` each) until None; sends the indices it got on `out`."""
    got = []
    while True:
        msgs = q.get_many(timeout=60, max_messages_to_get=most)
        for k, msg in enumerate(msgs):
            if msg is None:
                # The Nones come after every message: those it took after its own are the
                # other consumers'.
                q.put_many(msgs[k + 1:])
                out.send(got)
                out.close()
                return
            got.append(check_sized(msg))

"""Targets for child processes (importable under spawn and forkserver)."""

import hashlib


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


def nothing(*args):
    pass

#!/usr/bin/env python3
"""64 KiB blocks from a spawned child to its parent through pagepipe, os.pipe,
multiprocessing.Pipe and faster-fifo, in one run, with the ratios.

    python bench.py [--mib 256] [--rounds 3] [--capacity 1048576]

The child (started with the spawn method) sends MIB MiB as 64 KiB blocks: 16 distinct
blocks in turn, each stamped with its sequence number. The parent receives each block into
one 64 KiB bytearray and compares every byte with what was sent (a mismatch or a short
stream fails the run):
  pagepipe             Reader.readinto (no intermediate copy)
  os.pipe              FileIO.readinto on the read descriptor (the write descriptor goes to
                       the child as a multiprocessing Connection object, used raw)
  multiprocessing.Pipe Connection.recv_bytes_into (the child: send_bytes)
  faster-fifo          Queue.get (a memoryview of its buffer; it has no readinto), with
                       identity loads/dumps, its fastest use (no pickling)
pagepipe's capacity, os.pipe's (F_SETPIPE_SZ) and faster-fifo's max_size_bytes are CAPACITY
(1 MiB by default; 65536 is both pipes' default; faster-fifo gets at least 1 MiB, so that a
64 KiB message fits); multiprocessing.Pipe is a socket pair.
MB/s counts from the first block's arrival to the last (the child's start-up excluded).
Transports alternate within each round; the medians over rounds give the ratios.
Needs faster-fifo (pip install faster-fifo); without it that transport is skipped.
"""

import argparse
import fcntl
import io
import multiprocessing as mp
import multiprocessing.connection
import os
import statistics
import struct
import time

import pagepipe

BLOCK = 64 * 1024
KINDS = 16


def blocks():
    """The 16 distinct blocks (each then stamped in its first 8 bytes)."""
    base = bytes(range(256)) * (BLOCK // 256)
    return [bytearray(bytes([k]) * 8 + base[8:]) for k in range(KINDS)]


def identity(x):
    return x


def senders(n):
    bl = blocks()
    for k in range(n):
        b = bl[k % KINDS]
        struct.pack_into("<Q", b, 0, k)
        yield b


def send_pagepipe(w, n):
    with w:
        for b in senders(n):
            w.write(b)


def send_os_pipe(conn, n):
    fd = conn.fileno()
    for b in senders(n):
        view = memoryview(b)
        while view:
            view = view[os.write(fd, view):]
    conn.close()


def send_mp_pipe(conn, n):
    for b in senders(n):
        conn.send_bytes(b)
    conn.close()


def send_faster_fifo(q, n):
    for b in senders(n):
        q.put(bytes(b), timeout=60)


class Check:
    """Compares each received block with the one sent; times first to last arrival."""

    def __init__(self, n):
        self.n = n
        self.k = 0
        self.expected = blocks()
        self.first = None

    def block(self, got):
        if self.first is None:
            self.first = time.perf_counter()
        exp = self.expected[self.k % KINDS]
        struct.pack_into("<Q", exp, 0, self.k)
        if exp != got:  # bytearray first: memcmp (a memoryview would compare item by item)
            raise SystemExit(f"block {self.k}: bytes differ")
        self.k += 1

    def rate(self):
        if self.k != self.n:
            raise SystemExit(f"received {self.k} blocks of {self.n}")
        return (self.n - 1) * BLOCK / (time.perf_counter() - self.first) / 1e6


def fill(readinto, view):
    """Reads until view is full; False at end of file before any byte."""
    got = 0
    while got < len(view):
        k = readinto(view[got:])
        if k == 0:
            if got == 0:
                return False
            raise SystemExit("end of file inside a block")
        got += k
    return True


def run_stream(ctx, n, target, send_end, readinto, close):
    buf = bytearray(BLOCK)
    view = memoryview(buf)
    check = Check(n)
    p = ctx.Process(target=target, args=(send_end, n))
    p.start()
    close()
    while fill(readinto, view):
        check.block(buf)
    p.join()
    assert p.exitcode == 0
    return check.rate()


def run_pagepipe(ctx, n, cap):
    w, r = pagepipe.pipe(cap)
    with r:
        return run_stream(ctx, n, send_pagepipe, w, r.readinto, w.close)


def run_os_pipe(ctx, n, cap):
    rfd, wfd = os.pipe()
    fcntl.fcntl(wfd, fcntl.F_SETPIPE_SZ, cap)
    conn = mp.connection.Connection(wfd, readable=False)  # passed by multiprocessing's DupFd
    with io.FileIO(rfd, "rb", closefd=True) as f:
        return run_stream(ctx, n, send_os_pipe, conn, f.readinto, conn.close)


def run_mp_pipe(ctx, n, cap):
    recv, send = ctx.Pipe(duplex=False)
    buf = bytearray(BLOCK)
    check = Check(n)
    p = ctx.Process(target=send_mp_pipe, args=(send, n))
    p.start()
    send.close()
    try:
        while True:
            if recv.recv_bytes_into(buf) != BLOCK:
                raise SystemExit("short message")
            check.block(buf)
    except EOFError:
        pass
    p.join()
    assert p.exitcode == 0
    return check.rate()


def run_faster_fifo(ctx, n, cap):
    import faster_fifo

    # A message must fit with its header: at least 1 MiB.
    q = faster_fifo.Queue(max_size_bytes=max(cap, 1 << 20), loads=identity, dumps=identity)
    check = Check(n)
    p = ctx.Process(target=send_faster_fifo, args=(q, n))
    p.start()
    for _ in range(n):
        check.block(q.get(timeout=60))
    p.join()
    assert p.exitcode == 0
    return check.rate()


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--mib", type=int, default=256)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--capacity", type=int, default=1 << 20)
    a = ap.parse_args()
    n = a.mib * (1 << 20) // BLOCK
    ctx = mp.get_context("spawn")
    runs = {
        "pagepipe": run_pagepipe,
        "os.pipe": run_os_pipe,
        "multiprocessing.Pipe": run_mp_pipe,
    }
    try:
        import faster_fifo  # noqa: F401

        runs["faster-fifo"] = run_faster_fifo
    except ImportError:
        print("faster-fifo is not installed: skipped")
    print(f"{a.mib} MiB as 64 KiB blocks from a spawned child, every byte compared, "
          f"{a.rounds} rounds, capacity {a.capacity} B")
    rates = {name: [] for name in runs}
    names = list(runs)
    for rnd in range(a.rounds):
        order = names if rnd % 2 == 0 else names[::-1]
        for name in order:
            mbs = runs[name](ctx, n, a.capacity)
            rates[name].append(mbs)
            print(f"  round {rnd + 1} {name:22} {mbs:8.0f} MB/s", flush=True)
    med = {name: statistics.median(v) for name, v in rates.items()}
    print("median MB/s: " + ", ".join(f"{k} {v:.0f}" for k, v in med.items()))
    for name in names[1:]:
        # Rounds pair the transports (each round runs all of them back to back): the range
        # of the per-round ratios says how far one round's ratio strays from the medians'.
        per = sorted(p / o for p, o in zip(rates["pagepipe"], rates[name]))
        print(f"pagepipe / {name}: {med['pagepipe'] / med[name]:.2f}x "
              f"(per round {per[0]:.2f}-{per[-1]:.2f}x)")


if __name__ == "__main__":
    main()

"""pagepipe.aio: asyncio streams over ends."""
import asyncio
import os
import threading

import pytest

import pagepipe
import pagepipe.aio
import helpers


def test_a_stream_reader_reads_the_data_and_end_of_file():
    async def main():
        w, r = pagepipe.pipe()
        reader = await pagepipe.aio.open_reader(r)
        data = helpers.pattern(3 << 20)
        t = threading.Thread(target=helpers.write_and_close, args=(w, data))
        t.start()
        got = await asyncio.wait_for(reader.read(), 30)
        t.join()
        assert reader.at_eof()
        return got == data

    assert asyncio.run(main())


def test_streams_both_ways_through_a_small_pipe():
    async def main():
        w, r = pagepipe.pipe(4096)
        reader = await pagepipe.aio.open_reader(r, limit=1024)
        writer = await pagepipe.aio.open_writer(w)
        data = helpers.pattern(2 << 20)

        async def send():
            for i in range(0, len(data), 100_000):
                writer.write(data[i:i + 100_000])
                await writer.drain()
            writer.close()
            await writer.wait_closed()

        sender = asyncio.create_task(send())
        got = await asyncio.wait_for(reader.readexactly(len(data)), 30)
        await sender
        assert await reader.read() == b""  # the writer closed: end of file
        return got == data

    assert asyncio.run(main())


def test_drain_raises_broken_pipe_without_readers():
    async def main():
        w, r = pagepipe.pipe(4096)
        writer = await pagepipe.aio.open_writer(w)
        r.close()
        writer.write(b"x" * 10)
        with pytest.raises(BrokenPipeError):
            await writer.drain()
            writer.write(b"y")

    asyncio.run(main())


class _Collect(asyncio.Protocol):
    def __init__(self):
        self.data = b""

    def data_received(self, data):
        self.data += data


@pytest.mark.parametrize("wrap", ["end", "file", "connection"])
def test_connect_read_pipe_refuses_an_end_instead_of_reading_wake_ups(wrap):
    # Review 41.2: connect_read_pipe(proto, reader) delivered the readiness pipe's b"\\x01"
    # wake-up bytes as if they were the data.
    async def main():
        w, r = pagepipe.pipe()
        a, b = pagepipe.Pipe()
        pipe = {"end": r, "file": open(r.fileno(), "rb", buffering=0, closefd=False),
                "connection": b}[wrap]
        w.write(b"data")
        a.send_bytes(b"data")
        loop = asyncio.get_running_loop()
        with pytest.raises(ValueError, match="readiness descriptor"):
            await loop.connect_read_pipe(_Collect, pipe)
        assert r.read(10, timeout=1) == b"data"  # untouched: the data is still there
        assert b.recv_bytes() == b"data"

    asyncio.run(main())


def test_connect_write_pipe_refuses_an_end():
    async def main():
        w, r = pagepipe.pipe()
        loop = asyncio.get_running_loop()
        with pytest.raises(ValueError, match="readiness descriptor"):
            await loop.connect_write_pipe(asyncio.Protocol, w)
        w.write(b"still")
        assert r.read(10, timeout=1) == b"still"

    asyncio.run(main())


def test_connect_read_pipe_still_takes_a_kernel_pipe():
    async def main():
        rfd, wfd = os.pipe()
        loop = asyncio.get_running_loop()
        transport, proto = await loop.connect_read_pipe(_Collect, open(rfd, "rb", buffering=0))
        os.write(wfd, b"kernel")
        for _ in range(100):
            if proto.data:
                break
            await asyncio.sleep(0.01)
        transport.close()
        os.close(wfd)
        assert proto.data == b"kernel"

    asyncio.run(main())

"""pagepipe.aio: asyncio streams over ends."""
import asyncio
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

//! `tcp`: a stream of length-prefixed frames split off the allocator's read buffer (see the
//! parent module).

use super::config::{NetConfig, READ_MAX, READ_MIN};
use super::outcome::{Outcome, ThreadCpu};
use super::queue::{raw_buf, LenBuf, Message, Queue};
use super::sender::{named, Sender};
use bytes::{Buf, BufMut, BytesMut};
use pagepipe::{Frag, FragCache};
use std::alloc::GlobalAlloc;
use std::io;
use std::net::{TcpListener, TcpStream};
use std::os::fd::{AsRawFd, RawFd};
use std::time::Instant;

/// Frames a `tcp` hand-off batch has room for before it grows (a 64 KiB read of the default
/// mix holds about 90).
const TCP_BATCH: usize = 256;

/// One way of taking frames off a TCP stream: read into its buffer, split frames off.
pub(super) trait Framer {
    type Msg: Message;
    /// Reads once from `fd`; `Ok(0)` at the end of the stream.
    fn read(&mut self, fd: RawFd) -> io::Result<usize>;
    /// The next whole frame read so far, header stripped or not (see [`Framed`]).
    fn next_frame(&mut self) -> Option<Self::Msg>;
}

/// Length of the frame at the front of `b` (header included) if it is all there.
fn whole_frame(b: &[u8]) -> Option<usize> {
    let hdr: [u8; 4] = b.get(..4)?.try_into().ok()?;
    let n = 4 + u32::from_le_bytes(hdr) as usize;
    (b.len() >= n).then_some(n)
}

/// read(2) into `buf`, retrying on EINTR.
fn read_into(fd: RawFd, buf: *mut u8, len: usize) -> io::Result<usize> {
    loop {
        // SAFETY: the caller passes `len` writable bytes at `buf`.
        let r = unsafe { libc::read(fd, buf.cast(), len) };
        if r >= 0 {
            return Ok(r as usize);
        }
        let e = io::Error::last_os_error();
        if e.kind() != io::ErrorKind::Interrupted {
            return Err(named("read the TCP stream", e));
        }
    }
}

/// A frame with its 4-byte header still in front: the worker checksums the payload.
pub(super) struct Framed<T>(T);

impl<T: Message> Message for Framed<T> {
    fn payload(&self) -> &[u8] {
        &self.0.payload()[4..]
    }
}

/// FragCache: read into `prepare(4 KiB, 64 KiB)` (the rest of the block), commit what was read,
/// split frames off with `Frag::split_to`.
pub(super) struct FragFramer {
    cache: FragCache,
    /// Read, not yet split off: a partial frame at most once a read is framed.
    pending: Frag,
}

impl FragFramer {
    pub(super) fn new(block: usize) -> FragFramer {
        FragFramer {
            cache: FragCache::with_block_size(block),
            pending: Frag::empty(),
        }
    }
}

impl Framer for FragFramer {
    type Msg = Framed<Frag>;
    fn read(&mut self, fd: RawFd) -> io::Result<usize> {
        let carry = self.pending.len();
        let mut room = self.cache.prepare(carry + READ_MIN, carry + READ_MAX);
        room[..carry].copy_from_slice(&self.pending);
        let len = room.len() - carry;
        let n = read_into(fd, room[carry..].as_mut_ptr(), len)?;
        self.pending = room.commit(carry + n);
        Ok(n)
    }
    fn next_frame(&mut self) -> Option<Framed<Frag>> {
        let n = whole_frame(&self.pending)?;
        Some(Framed(self.pending.split_to(n)))
    }
}

/// bytes::BytesMut: read into the spare capacity, `split_to(frame).freeze()`.
pub(super) struct BytesFramer(pub(super) BytesMut);

impl Framer for BytesFramer {
    type Msg = Framed<bytes::Bytes>;
    fn read(&mut self, fd: RawFd) -> io::Result<usize> {
        if self.0.capacity() - self.0.len() < READ_MIN {
            self.0.reserve(READ_MAX);
        }
        let spare = self.0.chunk_mut();
        let n = read_into(fd, spare.as_mut_ptr(), spare.len())?;
        // SAFETY: read(2) initialized the first n bytes of the spare capacity.
        unsafe { self.0.advance_mut(n) };
        Ok(n)
    }
    fn next_frame(&mut self) -> Option<Framed<bytes::Bytes>> {
        let n = whole_frame(&self.0)?;
        Some(Framed(self.0.split_to(n).freeze()))
    }
}

/// The system allocator or mimalloc: read into one reused buffer, copy each frame's payload
/// into a buffer of its own.
pub(super) struct CopyFramer<A: GlobalAlloc + 'static> {
    alloc: &'static A,
    buf: Vec<u8>,
    /// Framed up to here; read up to `buf.len()`.
    pos: usize,
}

impl<A: GlobalAlloc + Sync + 'static> CopyFramer<A> {
    pub(super) fn new(alloc: &'static A) -> CopyFramer<A> {
        CopyFramer {
            alloc,
            buf: Vec::with_capacity(READ_MAX),
            pos: 0,
        }
    }
}

impl<A: GlobalAlloc + Sync + 'static> Framer for CopyFramer<A> {
    type Msg = LenBuf<A>;
    fn read(&mut self, fd: RawFd) -> io::Result<usize> {
        // Move the partial frame to the front (as the other framers copy it into a new buffer).
        self.buf.drain(..self.pos);
        self.pos = 0;
        let have = self.buf.len();
        let spare = self.buf.spare_capacity_mut();
        let n = read_into(fd, spare.as_mut_ptr().cast(), spare.len())?;
        // SAFETY: read(2) initialized the n bytes after `have`.
        unsafe { self.buf.set_len(have + n) };
        Ok(n)
    }
    fn next_frame(&mut self) -> Option<LenBuf<A>> {
        let mut rest = &self.buf[self.pos..];
        let n = whole_frame(rest)?;
        self.pos += n;
        rest.advance(4);
        let payload = &rest[..n - 4];
        let raw = raw_buf(self.alloc, payload.len().max(1));
        // SAFETY: `raw` holds at least payload.len() bytes and is not `payload`'s memory.
        unsafe { std::ptr::copy_nonoverlapping(payload.as_ptr(), raw.ptr.as_ptr(), payload.len()) };
        Some(LenBuf {
            raw,
            len: payload.len(),
        })
    }
}

/// The `tcp` workload with `framer`, the sender writing `stream` over and over. Not inlined, so
/// a profile (callgrind) can count what the receiver executes.
#[inline(never)]
pub(super) fn tcp<F: Framer>(cfg: &NetConfig, stream: &[u8], mut framer: F) -> io::Result<Outcome> {
    let listener = TcpListener::bind("127.0.0.1:0").map_err(|e| named("bind TCP", e))?;
    let tx = TcpStream::connect(listener.local_addr()?).map_err(|e| named("connect TCP", e))?;
    let (rx, _) = listener.accept().map_err(|e| named("accept TCP", e))?;
    drop(listener);
    let reps = cfg.msgs.div_ceil(cfg.schedule.len());
    let sender = Sender::fork(|| write_stream(tx.as_raw_fd(), stream, reps))?;
    drop(tx); // the child's copy is the last: end of stream when it exits
    let (mut q, w) = Queue::<F::Msg>::start(cfg.queue, TCP_BATCH);
    let cpu0 = ThreadCpu::now();
    let start = Instant::now();
    let (mut delivered, mut bytes) = (0u64, 0u64);
    while framer.read(rx.as_raw_fd())? > 0 {
        while let Some(frame) = framer.next_frame() {
            bytes += frame.payload().len() as u64;
            delivered += 1;
            q.push(frame);
        }
        q.flush()?;
    }
    let elapsed = start.elapsed();
    let rx_cpu = ThreadCpu::now().since(cpu0);
    drop(q);
    let (seen, _sum, worker_cpu_s) = w.join().expect("worker panicked");
    debug_assert_eq!(seen, delivered);
    sender.wait()?;
    let expected = (reps * cfg.schedule.len()) as u64;
    if delivered != expected {
        return Err(io::Error::new(
            io::ErrorKind::InvalidData,
            format!("tcp: {delivered} frames received of {expected} sent"),
        ));
    }
    Ok(Outcome {
        delivered,
        bytes,
        elapsed,
        rx_cpu,
        worker_cpu_s,
        rcvbuf: 0,
    })
}

/// One cycle of the schedule as length-prefixed frames (u32 little-endian length, payload).
pub(super) fn frame_stream(schedule: &[usize]) -> Vec<u8> {
    let mut s = Vec::with_capacity(schedule.iter().map(|n| n + 4).sum());
    for (i, &n) in schedule.iter().enumerate() {
        s.put_u32_le(n as u32);
        s.extend((0..n).map(|j| (i + j) as u8));
    }
    s
}

/// The sender of `tcp` (in the forked child: syscalls only): writes `stream` `reps` times.
fn write_stream(fd: RawFd, stream: &[u8], reps: usize) -> i32 {
    for _ in 0..reps {
        let mut off = 0;
        while off < stream.len() {
            // SAFETY: `stream[off..]` is readable memory of the length passed (write(2)).
            let r = unsafe { libc::write(fd, stream[off..].as_ptr().cast(), stream.len() - off) };
            if r < 0 {
                if io::Error::last_os_error().raw_os_error() == Some(libc::EINTR) {
                    continue;
                }
                return 2;
            }
            off += r as usize;
        }
    }
    0
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn frames_split_whole_from_any_read_boundary() {
        let stream = frame_stream(&[3, 0, 70]);
        let mut f = FragFramer::new(4096);
        // Feed the stream in 5-byte reads through a pipe-less path: the framing alone.
        let mut frames = Vec::new();
        for piece in stream.chunks(5) {
            let carry = f.pending.len();
            let mut room = f.cache.prepare(carry + piece.len(), carry + piece.len());
            room[..carry].copy_from_slice(&f.pending);
            room[carry..carry + piece.len()].copy_from_slice(piece);
            f.pending = room.commit(carry + piece.len());
            while let Some(fr) = f.next_frame() {
                frames.push(fr.payload().to_vec());
            }
        }
        let lens: Vec<usize> = frames.iter().map(Vec::len).collect();
        assert_eq!(lens, [3, 0, 70]);
        assert_eq!(frames[2][..2], [2, 3]); // frame 2's payload starts at (2 + 0) as u8
    }
}

//! The byte transports benchmarks compare: the kernel pipe, an AF_UNIX socketpair, pagepipe
//! (through `read`/`write`, or in place through its chunk API), rtrb (a spinning byte ring,
//! threads only), a bare futex mailbox (the floor of any channel that sleeps), and with
//! `--features iceoryx2`, iceoryx2.

mod futex;
#[cfg(feature = "iceoryx2")]
mod iox;

use pagepipe::PoolPolicy;
use std::fs::File;
use std::io::{self, Read, Write};
use std::os::fd::{FromRawFd, OwnedFd};
use std::os::unix::net::UnixStream;

#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum Transport {
    /// The Linux pipe (pipe2 + F_SETPIPE_SZ).
    Kernel,
    /// An AF_UNIX stream socketpair (lmbench's bw_unix / lat_unix).
    Unix,
    /// pagepipe.
    Pagepipe,
    /// pagepipe through its zero-copy chunk API, no user buffer: the writer fills
    /// `write_chunk` pages in place (a memset), the reader touches one byte per slice of
    /// `read_chunk` and consumes (`bw` only: one pass over the data where the others make two).
    PagepipeChunk,
    /// rtrb, a lock-free single-producer single-consumer byte ring, both sides spinning
    /// (`push_partial_slice` / `pop_partial_slice`); threads only, one writer and one reader.
    Rtrb,
    /// The floor of a channel that sleeps: a mailbox filled and emptied in turn, each side
    /// sleeping on a bare futex at once when it must wait (no ring, no spin); one writer and
    /// one reader. Made for `lat`: under `bw` it is stop-and-wait.
    Futex,
    /// iceoryx2 publish-subscribe, the reader sleeping on an event (`--features iceoryx2`;
    /// one writer, one reader).
    Iceoryx2,
    /// iceoryx2 with a busy-polling reader, no event (`--features iceoryx2`).
    Iceoryx2Spin,
}

impl Transport {
    pub fn name(self) -> &'static str {
        match self {
            Transport::Kernel => "kernel",
            Transport::Unix => "unix",
            Transport::Pagepipe => "pagepipe",
            Transport::PagepipeChunk => "pagepipe-chunk",
            Transport::Rtrb => "rtrb",
            Transport::Futex => "futex",
            Transport::Iceoryx2 => "iceoryx2",
            Transport::Iceoryx2Spin => "iceoryx2-spin",
        }
    }
}

impl Transport {
    /// Whether the transport can connect a forked child: rtrb lives on the heap, which a
    /// child gets a disconnected copy of.
    pub fn works_between(self, between: crate::child::Between) -> bool {
        self != Transport::Rtrb || between == crate::child::Between::Threads
    }

    /// Whether the transport is a pagepipe (slot size and pool apply).
    pub fn is_pagepipe(self) -> bool {
        matches!(self, Transport::Pagepipe | Transport::PagepipeChunk)
    }
}

/// The transports of `ts` that work `between`; tells on stderr which it leaves out.
pub fn usable(ts: &[Transport], between: crate::child::Between) -> Vec<Transport> {
    let (ok, no): (Vec<Transport>, Vec<Transport>) =
        ts.iter().partition(|t| t.works_between(between));
    for t in no {
        eprintln!(
            "note: {} runs between threads only; left out of {}",
            t.name(),
            between.name()
        );
    }
    ok
}

/// How to build a pipe (ignored where a transport has no such knob).
#[derive(Clone, Copy, Debug)]
pub struct PipeConfig {
    pub pipe_size: usize,
    pub pool: PoolPolicy,
    pub slot_size: usize,
}

impl Default for PipeConfig {
    fn default() -> Self {
        PipeConfig {
            pipe_size: 64 * 1024,
            pool: PoolPolicy::default(),
            slot_size: 4096,
        }
    }
}

pub type W = Box<dyn Write + Send>;
pub type R = Box<dyn Read + Send>;

/// One writer and one reader of a new channel, and where the channel's ring starts.
pub struct Channel {
    pub w: W,
    pub r: R,
    /// Where the ring's first byte sits within its 4 KiB page, where it is known: 0 for
    /// page-aligned rings (the kernel's pipe pages, pagepipe's slots), wherever the heap put
    /// it for rtrb; `None` for a socket's or iceoryx2's buffers. Benchmarks place their copy
    /// buffers relative to it (`crate::buffer`).
    pub ring_offset: Option<usize>,
}

/// Opens one channel with one writer and one reader, and finds where its ring starts.
pub fn open_one(t: Transport, cfg: &PipeConfig) -> io::Result<Channel> {
    if t == Transport::Rtrb {
        let (mut p, c) = rtrb::RingBuffer::<u8>::new(cfg.pipe_size);
        // The empty ring's first free slot is its first byte; the chunk is dropped without a
        // commit, so nothing is written.
        let ring_offset = p
            .write_chunk_uninit(1)
            .ok()
            .map(|mut chunk| chunk.as_mut_slices().0.as_ptr() as usize % crate::buffer::ALIAS_SPAN);
        return Ok(Channel {
            w: Box::new(SpinWriter(p)),
            r: Box::new(SpinReader(c)),
            ring_offset,
        });
    }
    let (mut ws, mut rs) = open(t, cfg, 1, 1)?;
    let ring_offset = match t {
        Transport::Kernel | Transport::Pagepipe | Transport::PagepipeChunk => Some(0),
        _ => None,
    };
    Ok(Channel {
        w: ws.pop().expect("one writer"),
        r: rs.pop().expect("one reader"),
        ring_offset,
    })
}

/// Opens one channel with `writers` write handles and `readers` read handles.
pub fn open(
    t: Transport,
    cfg: &PipeConfig,
    writers: usize,
    readers: usize,
) -> io::Result<(Vec<W>, Vec<R>)> {
    match t {
        Transport::Kernel => {
            let (w, r) = kernel_pipe(cfg.pipe_size)?;
            Ok((
                dup_n(&w, writers, |f| Box::new(f) as W)?,
                dup_n(&r, readers, |f| Box::new(f) as R)?,
            ))
        }
        Transport::Unix => {
            let (a, b) = UnixStream::pair()?;
            let ws = (0..writers)
                .map(|_| a.try_clone().map(|s| Box::new(s) as W))
                .collect::<io::Result<_>>()?;
            let rs = (0..readers)
                .map(|_| b.try_clone().map(|s| Box::new(s) as R))
                .collect::<io::Result<_>>()?;
            Ok((ws, rs))
        }
        Transport::Pagepipe => {
            let (w, r) = pagepipe::Builder::new()
                .capacity(cfg.pipe_size)
                .pool(cfg.pool)
                .slot_size(cfg.slot_size)
                .build()?;
            let ws = (0..writers).map(|_| Box::new(w.clone()) as W).collect();
            let rs = (0..readers).map(|_| Box::new(r.clone()) as R).collect();
            Ok((ws, rs))
        }
        Transport::PagepipeChunk => {
            one_each(t, writers, readers)?;
            let (w, r) = pagepipe::Builder::new()
                .capacity(cfg.pipe_size)
                .pool(cfg.pool)
                .slot_size(cfg.slot_size)
                .build()?;
            Ok((
                vec![Box::new(ChunkWriter(w)) as W],
                vec![Box::new(ChunkReader(r)) as R],
            ))
        }
        Transport::Rtrb => {
            one_each(t, writers, readers)?;
            let (p, c) = rtrb::RingBuffer::<u8>::new(cfg.pipe_size);
            Ok((
                vec![Box::new(SpinWriter(p)) as W],
                vec![Box::new(SpinReader(c)) as R],
            ))
        }
        Transport::Futex => {
            one_each(t, writers, readers)?;
            let (w, r) = futex::channel(cfg.pipe_size)?;
            Ok((vec![Box::new(w) as W], vec![Box::new(r) as R]))
        }
        Transport::Iceoryx2 | Transport::Iceoryx2Spin => {
            iceoryx2(t == Transport::Iceoryx2Spin, cfg, writers, readers)
        }
    }
}

/// An iceoryx2 channel: one writer, one reader (publish-subscribe would give every reader
/// every byte, and the ports are not shared between handles).
fn iceoryx2(
    spin: bool,
    cfg: &PipeConfig,
    writers: usize,
    readers: usize,
) -> io::Result<(Vec<W>, Vec<R>)> {
    one_each(Transport::Iceoryx2, writers, readers)?;
    #[cfg(feature = "iceoryx2")]
    {
        let (w, r) = iox::channel(cfg.pipe_size, spin);
        Ok((vec![Box::new(w) as W], vec![Box::new(r) as R]))
    }
    #[cfg(not(feature = "iceoryx2"))]
    {
        let _ = (spin, cfg);
        Err(io::Error::new(
            io::ErrorKind::Unsupported,
            "built without iceoryx2 (cargo build --features iceoryx2)",
        ))
    }
}

/// Transports whose ends cannot be shared take one writer and one reader.
fn one_each(t: Transport, writers: usize, readers: usize) -> io::Result<()> {
    if (writers, readers) == (1, 1) {
        return Ok(());
    }
    Err(io::Error::new(
        io::ErrorKind::Unsupported,
        format!(
            "{} takes one writer and one reader, not {writers} and {readers}",
            t.name()
        ),
    ))
}

/// pagepipe's `vmsplice`: fills free ring pages in place (a memset of `buf.len()` bytes at
/// most; `buf`'s bytes are not copied), then commits them.
struct ChunkWriter(pagepipe::Writer);

impl Write for ChunkWriter {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        let mut chunk = self.0.write_chunk()?;
        let n = buf.len().min(chunk.len());
        // SAFETY: every process holding this pipe is this benchmark, running pagepipe
        // unmodified (the zero-copy arm measures the ring itself, not a copy of it).
        let (a, b) = unsafe { chunk.as_mut_slices_unchecked() };
        let na = n.min(a.len());
        a[..na].fill(0x5a);
        b[..n - na].fill(0x5a);
        Ok(chunk.commit(n))
    }
    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

/// Reads in place: touches one byte of every slice of a `read_chunk` (so every page is
/// looked at) and consumes up to `buf.len()` bytes without copying them into `buf`.
struct ChunkReader(pagepipe::Reader);

impl Read for ChunkReader {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let chunk = self.0.read_chunk()?;
        let mut n = 0;
        // SAFETY: as in ChunkWriter.
        for s in unsafe { chunk.slices_unchecked() } {
            if n == buf.len() {
                break;
            }
            std::hint::black_box(s[0]);
            n += s.len().min(buf.len() - n);
        }
        chunk.consume(n);
        Ok(n)
    }
}

/// Spins between two looks at whether a spinning rtrb end's peer is gone. A look on every spin
/// is not free: `is_empty` loads the index the peer writes, a second load of that line between
/// the peer's write and the read that sees it (a 1-byte ping-pong took 235 and 205 ns with a
/// look per spin against 219 and 185 without, measured here). The plain loops
/// (`examples/rtrb_*.rs`) spin on `read` / `write` alone; so does this, but for one look every
/// this many spins (microseconds, far below any wait for a dead peer).
const SPINS_PER_LOOK: u32 = 1024;

/// rtrb's producer as a blocking writer: spins (no sleeping, no yielding) while the ring is
/// full; `BrokenPipe` once the consumer is dropped. Aligned to 128 bytes, so its boxed state
/// (rtrb's cached indices, written on every call) shares no 128-byte block with the boxed end
/// another thread uses: unaligned, the heap put `lat`'s ends of its two rings 64 bytes apart
/// (the main thread's reader next to the echo thread's writer), and aligning them took the
/// round trip's median from 301 to 261 ns in the same minute (the plain loop: 246-251 ns).
#[repr(align(128))]
struct SpinWriter(rtrb::Producer<u8>);

impl Write for SpinWriter {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        let mut spins = 0u32;
        loop {
            match self.0.write(buf) {
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                    spins = spins.wrapping_add(1);
                    if spins.is_multiple_of(SPINS_PER_LOOK) && self.0.is_abandoned() {
                        return Err(io::ErrorKind::BrokenPipe.into());
                    }
                    std::hint::spin_loop();
                }
                r => return r,
            }
        }
    }
    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

/// rtrb's consumer as a blocking reader: spins while the ring is empty; end of file once the
/// producer is dropped and the ring drained. Aligned as [`SpinWriter`] is, for the same reason.
#[repr(align(128))]
struct SpinReader(rtrb::Consumer<u8>);

impl Read for SpinReader {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let mut spins = 0u32;
        loop {
            match self.0.read(buf) {
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                    spins = spins.wrapping_add(1);
                    // Abandoned, then empty once more: nothing can arrive any more.
                    if spins.is_multiple_of(SPINS_PER_LOOK)
                        && self.0.is_abandoned()
                        && self.0.is_empty()
                    {
                        return Ok(0);
                    }
                    std::hint::spin_loop();
                }
                r => return r,
            }
        }
    }
}

/// `n` duplicates (`dup(2)`) of a descriptor, as boxed handles.
fn dup_n<T>(f: &File, n: usize, boxed: impl Fn(File) -> T) -> io::Result<Vec<T>> {
    (0..n).map(|_| f.try_clone().map(&boxed)).collect()
}

/// A blocking kernel pipe of `size` bytes (`pipe2(2)`, `F_SETPIPE_SZ` in `fcntl(2)`).
pub fn kernel_pipe(size: usize) -> io::Result<(File, File)> {
    let mut fds = [0; 2];
    // SAFETY: fds is a valid array of two ints for pipe2 to fill.
    if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) } != 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: pipe2 just returned these descriptors; nothing else owns them.
    let (r, w) = unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) };
    // SAFETY: fcntl on a descriptor we own.
    if unsafe { libc::fcntl(fds[1], libc::F_SETPIPE_SZ, size as libc::c_int) } < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok((File::from(w), File::from(r)))
}

/// Parses a pool policy: `adaptive[:keep]`, `unified[:keep:burst]`, `tmppage`, `none`.
pub fn parse_pool(s: &str) -> Result<PoolPolicy, String> {
    let parts: Vec<&str> = s.split(':').collect();
    let num = |i: usize, default: usize| -> Result<usize, String> {
        parts.get(i).map_or(Ok(default), |p| {
            p.parse()
                .map_err(|e| format!("bad number {p:?} in pool {s:?}: {e}"))
        })
    };
    match parts[0] {
        "adaptive" => Ok(PoolPolicy::Adaptive { keep: num(1, 2)? }),
        "unified" => Ok(PoolPolicy::Unified {
            keep: num(1, 2)?,
            burst: num(2, 8)?,
        }),
        "tmppage" => Ok(PoolPolicy::TmpPage),
        "none" => Ok(PoolPolicy::None),
        other => Err(format!(
            "unknown pool policy {other:?} (adaptive, unified, tmppage, none)"
        )),
    }
}

/// The name of a pool policy as `--pool` takes it.
pub fn pool_name(p: PoolPolicy) -> String {
    match p {
        PoolPolicy::Adaptive { keep } => format!("adaptive:{keep}"),
        PoolPolicy::Unified { keep, burst } => format!("unified:{keep}:{burst}"),
        PoolPolicy::TmpPage => "tmppage".into(),
        PoolPolicy::None => "none".into(),
    }
}

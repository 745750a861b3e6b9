//! `udp`: datagrams of a size mix received with `recvmmsg` into receive slots of [`SLOT`]
//! bytes from the allocator under test (see the parent module).

use super::config::{NetConfig, MAX_MSG, SLOT};
use super::outcome::{Outcome, ThreadCpu};
use super::queue::{raw_buf, LenBuf, Message, Queue};
use super::sender::{named, Sender};
use bytes::{BufMut, BytesMut};
use pagepipe::{Frag, FragCache};
use std::alloc::GlobalAlloc;
use std::io;
use std::net::UdpSocket;
use std::os::fd::{AsRawFd, RawFd};
use std::time::{Duration, Instant};

/// How long the receiver waits for a datagram before it looks whether the sender is done.
const IDLE: Duration = Duration::from_millis(50);

/// Receive buffer asked for (`SO_RCVBUF`; the kernel caps it at `net.core.rmem_max`).
const RCVBUF: usize = 4 << 20;

/// Receive buffer asked for with `--udp-mode preload`: room for every datagram of a run
/// (`SO_RCVBUFFORCE`, which needs CAP_NET_ADMIN; without it the kernel caps the buffer and the
/// drops show in `drop_pct`).
const PRELOAD_RCVBUF: usize = 1 << 30;

/// One way of filling receive slots: a writable buffer of [`SLOT`] bytes, cut to the
/// datagram's length once it arrived.
pub(super) trait RxAlloc {
    type Buf: Message;
    /// A fresh receive buffer of at least [`SLOT`] writable bytes.
    fn slot(&mut self) -> Self::Buf;
    /// Where the kernel may write [`SLOT`] bytes.
    fn ptr(buf: &mut Self::Buf) -> *mut u8;
    /// Cuts the buffer to the `n` bytes the kernel wrote.
    ///
    /// # Safety
    /// The kernel wrote the first `n <= SLOT` bytes at `ptr(buf)`.
    unsafe fn set_len(buf: &mut Self::Buf, n: usize);
}

/// FragCache: a 2 KiB fragment per slot (a pointer bump), cut with `Frag::truncate`.
pub(super) struct FragRx(pub(super) FragCache);

impl RxAlloc for FragRx {
    type Buf = Frag;
    #[inline]
    fn slot(&mut self) -> Frag {
        self.0.alloc(SLOT)
    }
    fn ptr(buf: &mut Frag) -> *mut u8 {
        buf.as_mut_ptr()
    }
    unsafe fn set_len(buf: &mut Frag, n: usize) {
        buf.truncate(n);
    }
}

/// The system allocator or mimalloc: a `Box<[u8]>`-like buffer of 2 KiB per slot.
pub(super) struct RawRx<A: GlobalAlloc + 'static>(pub(super) &'static A);

impl<A: GlobalAlloc + Sync + 'static> RxAlloc for RawRx<A> {
    type Buf = LenBuf<A>;
    #[inline]
    fn slot(&mut self) -> LenBuf<A> {
        LenBuf {
            raw: raw_buf(self.0, SLOT),
            len: 0,
        }
    }
    fn ptr(buf: &mut LenBuf<A>) -> *mut u8 {
        buf.raw.ptr.as_ptr()
    }
    unsafe fn set_len(buf: &mut LenBuf<A>, n: usize) {
        debug_assert!(n <= buf.raw.layout.size());
        buf.len = n; // the caller's contract makes the first n bytes initialized
    }
}

/// bytes::BytesMut: one large buffer, a 2 KiB slot split off its front per datagram (the
/// `split_to` idiom of network code), taken back in place by `reserve` once every slot split off
/// it is gone.
pub(super) struct BytesRx(pub(super) BytesMut);

impl RxAlloc for BytesRx {
    type Buf = BytesMut;
    #[inline]
    fn slot(&mut self) -> BytesMut {
        if self.0.capacity() < SLOT {
            self.0.reserve(32 * SLOT);
        }
        let rest = self.0.split_off(SLOT);
        std::mem::replace(&mut self.0, rest) // capacity SLOT, length 0
    }
    fn ptr(buf: &mut BytesMut) -> *mut u8 {
        buf.chunk_mut().as_mut_ptr()
    }
    unsafe fn set_len(buf: &mut BytesMut, n: usize) {
        // SAFETY: the kernel initialized the first n bytes of the spare capacity (caller's
        // contract), which `chunk_mut` starts at since the length is 0.
        unsafe { buf.advance_mut(n) };
    }
}

/// A fresh slot; a function of its own so a profile (callgrind) shows what allocating costs.
#[inline(never)]
fn fresh_slot<A: RxAlloc>(a: &mut A) -> A::Buf {
    a.slot()
}

/// The `udp` workload with `alloc`. Not inlined, so a profile (callgrind) can count what the
/// receiver executes.
#[inline(never)]
pub(super) fn udp<A: RxAlloc>(cfg: &NetConfig, mut alloc: A) -> io::Result<Outcome> {
    let rx = UdpSocket::bind("127.0.0.1:0").map_err(|e| named("bind a UDP socket", e))?;
    let want = if cfg.preload { PRELOAD_RCVBUF } else { RCVBUF };
    let rcvbuf = set_rcvbuf(rx.as_raw_fd(), want);
    set_rcvtimeo(rx.as_raw_fd(), IDLE)?;
    let tx = UdpSocket::bind("127.0.0.1:0").map_err(|e| named("bind a UDP socket", e))?;
    tx.connect(rx.local_addr()?)
        .map_err(|e| named("connect a UDP socket", e))?;
    let payload: Vec<u8> = (0..MAX_MSG).map(|i| i as u8).collect();
    let mut sender = Sender::fork(|| send_datagrams(tx.as_raw_fd(), cfg, &payload))?;
    drop(tx);
    let mut sender_done = false;
    if cfg.preload {
        sender.join()?; // every datagram is in the socket buffer (or dropped) now
        sender_done = true;
    }
    let (mut q, w) = Queue::<A::Buf>::start(cfg.queue, cfg.batch);
    let batch = cfg.batch;
    let mut slots: Vec<A::Buf> = (0..batch).map(|_| fresh_slot(&mut alloc)).collect();
    // SAFETY: iovec and mmsghdr are plain data; all zeroes is a valid (empty) value.
    let mut iov: Vec<libc::iovec> = vec![unsafe { std::mem::zeroed() }; batch];
    // SAFETY: as above.
    let mut msgs: Vec<libc::mmsghdr> = vec![unsafe { std::mem::zeroed() }; batch];
    let cpu0 = ThreadCpu::now();
    let (mut delivered, mut bytes) = (0u64, 0u64);
    let (mut first, mut last) = (None, Instant::now());
    loop {
        for i in 0..batch {
            iov[i] = libc::iovec {
                iov_base: A::ptr(&mut slots[i]).cast(),
                iov_len: SLOT,
            };
            msgs[i].msg_hdr.msg_iov = &mut iov[i];
            msgs[i].msg_hdr.msg_iovlen = 1;
        }
        // SAFETY: `msgs[..batch]` are valid mmsghdrs whose single iovec points at SLOT
        // writable bytes of a live receive buffer (recvmmsg(2)).
        let got = unsafe {
            libc::recvmmsg(
                rx.as_raw_fd(),
                msgs.as_mut_ptr(),
                batch as libc::c_uint,
                libc::MSG_WAITFORONE,
                std::ptr::null_mut(),
            )
        };
        if got < 0 {
            let e = io::Error::last_os_error();
            match e.kind() {
                io::ErrorKind::Interrupted => continue,
                io::ErrorKind::WouldBlock if sender_done => break, // drained after the end
                io::ErrorKind::WouldBlock => {
                    sender_done = sender.exited()?;
                    continue;
                }
                _ => return Err(named("recvmmsg", e)),
            }
        }
        let now = Instant::now();
        first.get_or_insert(now);
        last = now;
        for (slot, m) in slots.iter_mut().zip(&msgs).take(got as usize) {
            let n = m.msg_len as usize;
            let mut buf = std::mem::replace(slot, fresh_slot(&mut alloc));
            // SAFETY: recvmmsg wrote msg_len <= SLOT bytes into this slot's buffer.
            unsafe { A::set_len(&mut buf, n.min(SLOT)) };
            bytes += n as u64;
            q.push(buf);
        }
        q.flush()?;
        delivered += got as u64;
    }
    let rx_cpu = ThreadCpu::now().since(cpu0);
    drop(q);
    let (seen, _sum, worker_cpu_s) = w.join().expect("worker panicked");
    debug_assert_eq!(seen, delivered);
    sender.wait()?;
    drop(slots);
    Ok(Outcome {
        delivered,
        bytes,
        elapsed: first.map_or(Duration::ZERO, |f| last - f),
        rx_cpu,
        worker_cpu_s,
        rcvbuf,
    })
}

/// The sender of `udp` (runs in the forked child: syscalls only, no allocation): `cfg.msgs`
/// datagrams in batches of 32 with `sendmmsg`, sizes from the schedule, paced to `cfg.rate`.
/// Returns the exit status.
fn send_datagrams(fd: RawFd, cfg: &NetConfig, payload: &[u8]) -> i32 {
    const B: usize = 32;
    // SAFETY: iovec and mmsghdr are plain data; all zeroes is a valid (empty) value.
    let mut iov: [libc::iovec; B] = unsafe { std::mem::zeroed() };
    // SAFETY: as above.
    let mut msgs: [libc::mmsghdr; B] = unsafe { std::mem::zeroed() };
    let start = Instant::now();
    let mut sent = 0usize;
    while sent < cfg.msgs {
        let b = B.min(cfg.msgs - sent);
        for i in 0..b {
            let len = cfg.schedule[(sent + i) % cfg.schedule.len()];
            iov[i] = libc::iovec {
                iov_base: payload.as_ptr() as *mut libc::c_void,
                iov_len: len,
            };
            msgs[i].msg_hdr.msg_iov = &mut iov[i];
            msgs[i].msg_hdr.msg_iovlen = 1;
        }
        // SAFETY: `msgs[..b]` are valid mmsghdrs, each with one iovec over `payload`, which
        // holds MAX_MSG >= len bytes (sendmmsg(2)).
        let r = unsafe { libc::sendmmsg(fd, msgs.as_mut_ptr(), b as libc::c_uint, 0) };
        if r < 0 {
            match io::Error::last_os_error().raw_os_error() {
                Some(libc::EINTR | libc::EAGAIN | libc::ENOBUFS | libc::ECONNREFUSED) => {
                    // SAFETY: sched_yield has no preconditions.
                    unsafe { libc::sched_yield() };
                    continue;
                }
                _ => return 2,
            }
        }
        sent += r as usize;
        if cfg.rate > 0 {
            let due = start + Duration::from_secs_f64(sent as f64 / cfg.rate as f64);
            let now = Instant::now();
            if due > now {
                std::thread::sleep(due - now);
            }
        }
    }
    0
}

/// Sets `SO_RCVBUF` (or `SO_RCVBUFFORCE` where allowed, past `rmem_max`); returns the size the
/// kernel reports (it doubles the request for its bookkeeping).
fn set_rcvbuf(fd: RawFd, bytes: usize) -> usize {
    let v = bytes as libc::c_int;
    let len = std::mem::size_of::<libc::c_int>() as libc::socklen_t;
    for opt in [libc::SO_RCVBUFFORCE, libc::SO_RCVBUF] {
        // SAFETY: `v` is a c_int of the size passed (setsockopt(2)).
        let r = unsafe {
            libc::setsockopt(
                fd,
                libc::SOL_SOCKET,
                opt,
                (&v as *const libc::c_int).cast(),
                len,
            )
        };
        if r == 0 {
            break;
        }
    }
    let mut got: libc::c_int = 0;
    let mut got_len = len;
    // SAFETY: `got` is a writable c_int and `got_len` its size (getsockopt(2)).
    unsafe {
        libc::getsockopt(
            fd,
            libc::SOL_SOCKET,
            libc::SO_RCVBUF,
            (&mut got as *mut libc::c_int).cast(),
            &mut got_len,
        )
    };
    got.max(0) as usize
}

/// Sets `SO_RCVTIMEO`, so a blocking receive returns `WouldBlock` after `d` without data.
fn set_rcvtimeo(fd: RawFd, d: Duration) -> io::Result<()> {
    let tv = libc::timeval {
        tv_sec: d.as_secs() as libc::time_t,
        tv_usec: d.subsec_micros() as libc::suseconds_t,
    };
    // SAFETY: `tv` is a timeval of the size passed (setsockopt(2), socket(7)).
    let r = unsafe {
        libc::setsockopt(
            fd,
            libc::SOL_SOCKET,
            libc::SO_RCVTIMEO,
            (&tv as *const libc::timeval).cast(),
            std::mem::size_of::<libc::timeval>() as libc::socklen_t,
        )
    };
    if r != 0 {
        return Err(named("setsockopt SO_RCVTIMEO", io::Error::last_os_error()));
    }
    Ok(())
}

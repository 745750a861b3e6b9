//! Edge-triggered epoll (EPOLLET) on pagepipe ends, with nothing but `libc`: readers and
//! writers that wait only in `epoll_wait` and then read or write until `WouldBlock`, across
//! threads and across processes. Every byte must arrive and nothing may hang; each wait is
//! bounded by a generous limit (a hang fails, a slow machine does not).

use std::io::{self, Write};
use std::os::fd::{AsRawFd, RawFd};
use std::time::{Duration, Instant};

#[path = "support/children.rs"]
mod children;
// One test at a time (`serial`): a child forked by one test keeps the ends of other tests'
// pipes until its `_exit`, which no close counter sees (see
// `try_read_after_a_writer_process_died_holding_its_end`): another test's reader would then
// miss its end of file.
use children::serial;

const LIMIT: Duration = Duration::from_secs(60);

/// An epoll instance watching one descriptor, edge-triggered.
struct Epoll(RawFd);

impl Epoll {
    fn new(fd: RawFd, events: u32) -> Epoll {
        // SAFETY: plain syscalls; `ev` lives across the call.
        unsafe {
            let ep = libc::epoll_create1(libc::EPOLL_CLOEXEC);
            assert!(ep >= 0, "epoll_create1: {}", io::Error::last_os_error());
            let mut ev = libc::epoll_event {
                events: events | libc::EPOLLET as u32,
                u64: 0,
            };
            let rc = libc::epoll_ctl(ep, libc::EPOLL_CTL_ADD, fd, &mut ev);
            assert_eq!(rc, 0, "epoll_ctl: {}", io::Error::last_os_error());
            Epoll(ep)
        }
    }

    /// Waits for an event (at most `LIMIT` in all from `start`); returns its mask.
    fn wait(&self, start: Instant) -> u32 {
        loop {
            let left = LIMIT.saturating_sub(start.elapsed());
            assert!(!left.is_zero(), "no edge within {LIMIT:?}: a missed wakeup");
            let mut ev = libc::epoll_event { events: 0, u64: 0 };
            // SAFETY: one event's room, as passed.
            let n = unsafe { libc::epoll_wait(self.0, &mut ev, 1, left.as_millis() as i32) };
            if n < 0 && io::Error::last_os_error().kind() == io::ErrorKind::Interrupted {
                continue;
            }
            assert!(n >= 0, "epoll_wait: {}", io::Error::last_os_error());
            if n == 1 {
                return ev.events;
            }
        }
    }
}

impl Drop for Epoll {
    fn drop(&mut self) {
        // SAFETY: our own descriptor.
        unsafe { libc::close(self.0) };
    }
}

fn record(writer: u8, seq: u32) -> [u8; 8] {
    let mut rec = [writer; 8];
    rec[..4].copy_from_slice(&seq.to_le_bytes());
    rec
}

/// Reads with `try_read` after each edge until `WouldBlock`, until end of file; checks that
/// every writer's 8-byte records (atomic writes) arrive complete and in order.
fn read_all_edge_triggered(r: &pagepipe::Reader, writers: usize, per_writer: u32) {
    let ep = Epoll::new(r.as_raw_fd(), libc::EPOLLIN as u32);
    let start = Instant::now();
    let mut next = vec![0u32; writers];
    let mut pending = Vec::new();
    let mut buf = vec![0u8; 3000]; // not a multiple of 8: records straddle reads
    let mut eof = false;
    let mut hup = false;
    while !eof {
        if !hup {
            hup = ep.wait(start) & libc::EPOLLHUP as u32 != 0;
        } else {
            // After POLLHUP (no writer left) the reads below drain the pipe to end of file:
            // a WouldBlock there would leave an edge-triggered reader with no further edge.
            panic!("POLLHUP, then WouldBlock instead of end of file");
        }
        loop {
            match r.try_read(&mut buf) {
                Ok(0) => {
                    eof = true;
                    break;
                }
                Ok(n) => pending.extend_from_slice(&buf[..n]),
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                Err(e) => panic!("read: {e}"),
            }
        }
        let whole = pending.len() / 8 * 8;
        for rec in pending[..whole].chunks_exact(8) {
            let w = rec[4] as usize;
            let seq = u32::from_le_bytes(rec[..4].try_into().unwrap());
            assert!(rec[4..].iter().all(|&b| b == rec[4]), "torn record");
            assert_eq!(seq, next[w], "writer {w}: lost or reordered");
            next[w] += 1;
        }
        pending.drain(..whole);
    }
    assert!(pending.is_empty());
    assert_eq!(next, vec![per_writer; writers], "bytes lost");
}

#[test]
fn edge_triggered_reader_with_writer_threads() {
    let _serial = serial();
    const WRITERS: usize = 4;
    const PER: u32 = 50_000;
    for cap in [4096, 64 * 1024] {
        let (w, r) = pagepipe::Builder::new().capacity(cap).build().unwrap();
        let threads: Vec<_> = (0..WRITERS)
            .map(|i| {
                let mut w = w.clone();
                std::thread::spawn(move || {
                    for seq in 0..PER {
                        w.write_all(&record(i as u8, seq)).unwrap();
                        if seq % 1000 == 0 {
                            std::thread::yield_now(); // let the pipe run empty now and then
                        }
                    }
                })
            })
            .collect();
        drop(w);
        read_all_edge_triggered(&r, WRITERS, PER);
        for t in threads {
            t.join().unwrap();
        }
    }
}

#[test]
fn edge_triggered_reader_with_writer_processes() {
    let _serial = serial();
    const WRITERS: usize = 3;
    const PER: u32 = 30_000;
    let (w, r) = pagepipe::Builder::new().capacity(8192).build().unwrap();
    let (mut w, mut r) = (Some(w), Some(r));
    let mut pids = Vec::new();
    for i in 0..WRITERS {
        let pid = children::fork_raw();
        if pid == 0 {
            children::child(|| {
                // A child holds every end its parent held, like pipe(2) descriptors: drop the
                // reader, or end of file would never come.
                drop(r.take());
                let mut w = w.take().unwrap();
                let ok = (0..PER).all(|seq| w.write_all(&record(i as u8, seq)).is_ok());
                drop(w);
                i32::from(!ok)
            });
        }
        pids.push(pid);
    }
    drop(w);
    read_all_edge_triggered(r.as_ref().unwrap(), WRITERS, PER);
    for pid in pids {
        assert_eq!(children::reap_within(pid, LIMIT), 0);
    }
}

#[test]
fn edge_triggered_writer_on_a_small_pipe() {
    let _serial = serial();
    const TOTAL: usize = 4 << 20;
    let (w, r) = pagepipe::Builder::new().capacity(4096).build().unwrap();
    let reader = std::thread::spawn(move || {
        let mut r = r;
        let mut got = 0usize;
        let mut sum = 0u64;
        let mut buf = [0u8; 1500];
        loop {
            let n = io::Read::read(&mut r, &mut buf).unwrap();
            if n == 0 {
                return (got, sum);
            }
            got += n;
            sum = buf[..n].iter().fold(sum, |s, &b| s + u64::from(b));
        }
    });
    let ep = Epoll::new(w.as_raw_fd(), libc::EPOLLOUT as u32);
    let start = Instant::now();
    let data: Vec<u8> = (0..TOTAL).map(|i| (i * 31 % 251) as u8).collect();
    let mut off = 0;
    while off < TOTAL {
        // Write until WouldBlock, then wait only in epoll for room.
        loop {
            let end = (off + 1000).min(TOTAL);
            match w.try_write(&data[off..end]) {
                Ok(n) => off += n,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                Err(e) => panic!("write: {e}"),
            }
            if off == TOTAL {
                break;
            }
        }
        if off < TOTAL {
            let ev = ep.wait(start);
            assert_eq!(ev & libc::EPOLLERR as u32, 0, "the reader is alive");
        }
    }
    drop(w);
    let (got, sum) = reader.join().unwrap();
    assert_eq!(got, TOTAL);
    assert_eq!(sum, data.iter().map(|&b| u64::from(b)).sum::<u64>());
}

/// A writer process that dies without dropping its writer (killed, or `_exit` with the end
/// still held) bumps no close counter, and a writer that closes cleanly closes its descriptors
/// (POLLHUP, the edge) before it bumps the counter. A non-blocking read therefore asks the
/// kernel before it answers `WouldBlock`: it must see end of file here, as a kernel pipe's
/// non-blocking read does (this test failed before that fix).
#[test]
fn try_read_after_a_writer_process_died_holding_its_end() {
    let _serial = serial();
    let (w, r) = pagepipe::pipe().unwrap();
    // The parent's writer is dropped when `fork` returns.
    let pid = children::fork(move || {
        std::thread::sleep(Duration::from_millis(100));
        // Leaves without dropping its writer, as a killed process would.
        std::mem::forget(w);
        0
    });
    let mut buf = [0u8; 8];
    // The writer is alive: WouldBlock (this call also asks the kernel once).
    assert_eq!(
        r.try_read(&mut buf).unwrap_err().kind(),
        io::ErrorKind::WouldBlock
    );
    assert_eq!(children::reap_within(pid, LIMIT), 0);
    let mut pfd = libc::pollfd {
        fd: r.as_raw_fd(),
        events: libc::POLLIN,
        revents: 0,
    };
    // SAFETY: one pollfd, as passed.
    unsafe { libc::poll(&mut pfd, 1, 0) };
    assert_ne!(
        pfd.revents & libc::POLLHUP,
        0,
        "the descriptor reports no writer left"
    );
    let start = Instant::now();
    let got = loop {
        match r.try_read(&mut buf) {
            Err(e)
                if e.kind() == io::ErrorKind::WouldBlock
                    && start.elapsed() < Duration::from_secs(2) =>
            {
                std::thread::sleep(Duration::from_millis(10));
            }
            other => break other.map_err(|e| e.kind()),
        }
    };
    assert_eq!(
        got,
        Ok(0),
        "a kernel pipe's non-blocking read returns end of file here"
    );
}

/// `poll(2)` of one descriptor, now, for `POLLIN | POLLOUT` (errors and hang-ups come anyway).
fn poll_mask(fd: RawFd) -> i16 {
    let mut p = libc::pollfd {
        fd,
        events: libc::POLLIN | libc::POLLOUT,
        revents: 0,
    };
    // SAFETY: one live pollfd.
    unsafe { libc::poll(&mut p, 1, 0) };
    p.revents
}

/// After `set_capacity` on a pipe whose reader is gone, the writer's descriptor polls as the
/// kernel pipe's write end does: growing a full pipe brings `POLLOUT` back next to `POLLERR`,
/// shrinking one into full takes it away. (Before the one signal pipe with a slot count either
/// end may set, the writer could not change the bit once the reader was gone.)
#[test]
fn poll_masks_after_a_resize_with_the_reader_gone() {
    let _serial = serial();
    let out_err = libc::POLLOUT | libc::POLLERR;
    for (first, second) in [(4096, 8192), (8192, 4096)] {
        let (w, r) = pagepipe::Builder::new().capacity(4096).build().unwrap();
        let (kr, kw) = kernel_pipe();
        for fd in [kr, kw] {
            // SAFETY: fcntl on our own descriptor.
            assert_eq!(unsafe { libc::fcntl(fd, libc::F_SETPIPE_SZ, 4096) }, 4096);
        }
        let _ = w.as_raw_fd(); // poll the writer from the start
        if first > 4096 {
            w.set_capacity(first).unwrap();
            // SAFETY: fcntl on our own descriptor.
            assert!(unsafe { libc::fcntl(kw, libc::F_SETPIPE_SZ, first as i32) } > 0);
        }
        // One slot's worth of data: full at 4 KiB, not at 8 KiB.
        w.try_write(&[7u8; 4096]).unwrap();
        // SAFETY: writes 4096 bytes from a live buffer to our own descriptor.
        assert_eq!(
            unsafe { libc::write(kw, [7u8; 4096].as_ptr().cast(), 4096) },
            4096
        );
        drop(r);
        // SAFETY: closes our own descriptor.
        unsafe { libc::close(kr) };
        assert_eq!(poll_mask(w.as_raw_fd()) & out_err, poll_mask(kw) & out_err);
        w.set_capacity(second).unwrap();
        // SAFETY: fcntl on our own descriptor.
        assert!(unsafe { libc::fcntl(kw, libc::F_SETPIPE_SZ, second as i32) } > 0);
        let (ours, kernel) = (poll_mask(w.as_raw_fd()) & out_err, poll_mask(kw) & out_err);
        assert_eq!(ours, kernel, "after set_capacity({first} -> {second})");
        let want = if second > 4096 {
            out_err
        } else {
            libc::POLLERR
        };
        assert_eq!(ours, want, "after set_capacity({first} -> {second})");
        // SAFETY: closes our own descriptor.
        unsafe { libc::close(kw) };
    }
}

/// A kernel pipe, `(read end, write end)`, non-blocking.
fn kernel_pipe() -> (RawFd, RawFd) {
    let mut fds = [0; 2];
    // SAFETY: `fds` has room for two descriptors.
    assert_eq!(
        unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC | libc::O_NONBLOCK) },
        0
    );
    (fds[0], fds[1])
}

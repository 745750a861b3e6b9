//! `futex`: the floor of a channel that sleeps. One mailbox in shared memory, filled by the
//! writer and emptied by the reader in turn, each side sleeping on a bare futex as soon as it
//! must wait (no spin) and woken by the other with one `FUTEX_WAKE` when it sleeps. There is no
//! ring, no pool and no readiness descriptor: what is left of a round trip is two wake-ups and
//! two sleeps, the scheduler's part, which any design that sleeps pays. `lat` measures it beside
//! the kernel pipe and pagepipe to show how much of a loaded round trip is that floor (issue
//! 38: the kernel pipe's wake-up carries the scheduler's *sync* hint, which a futex's cannot).
//!
//! The mailbox holds up to the pipe size; a writer waits until it is empty, so `bw` over it is
//! stop-and-wait. Shared futexes on a `MAP_SHARED` anonymous mapping (the kind of futex
//! pagepipe sleeps on), so the ends work in forked children too.
//!
//! Protocol. `seq` counts transitions: even while the mailbox is empty, odd while full. An end
//! that must wait sets `waiting` (SeqCst), rechecks `seq` (SeqCst) and sleeps on `seq` with
//! the value it saw; an end that advances `seq` (a SeqCst RMW) then swaps `waiting` to 0
//! (SeqCst) and wakes only if it was set. In the single total order either the recheck sees the
//! advance or the swap sees the flag. One writer and one reader: at most one of them can sleep
//! at a time (they wait for different parities of the same word). Closing an end sets its bit
//! in `closed` and adds 2 to `seq` (the parity stays; a sleeper's value does not), then wakes.
//!
//! Fork: a forked child gets copies of every end, and the benchmark drops the copies a process
//! does not use. So an end closes the mailbox on drop only in the process that first used it;
//! an end dropped unused never closes it, and a peer that never comes is reported after
//! [`STALL`] as `TimedOut`, never waited for forever.

use std::io::{self, Read, Write};
use std::ptr::NonNull;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// One futex sleep at most; a closed peer is rechecked after each.
const TICK: Duration = Duration::from_millis(100);
/// Waiting this long with no transition is an error (a peer killed before it closed).
pub const STALL: Duration = Duration::from_secs(60);

/// `closed` bits.
const WRITER_GONE: u32 = 1;
const READER_GONE: u32 = 2;

/// The mailbox's header, at the start of its mapping; the data follows at [`DATA`].
#[repr(C)]
struct Header {
    seq: AtomicU32,
    waiting: AtomicU32,
    closed: AtomicU32,
    len: AtomicU32,
}

/// Where the data starts in the mapping (a cache line after the header).
const DATA: usize = 64;
const _: () = assert!(std::mem::size_of::<Header>() <= DATA);

/// The shared mapping: header, then `cap` bytes of data.
struct Mailbox {
    base: NonNull<u8>,
    bytes: usize,
    cap: usize,
}

// SAFETY: the header is atomics; the data is written by the writer only while `seq` is even
// and read by the reader only while it is odd, handed over by the SeqCst RMW on `seq` (see the
// module docs), so the two never touch it at once.
unsafe impl Send for Mailbox {}
// SAFETY: as above.
unsafe impl Sync for Mailbox {}

impl Drop for Mailbox {
    fn drop(&mut self) {
        // SAFETY: our own mapping, unmapped once, by the last handle of this process.
        unsafe { libc::munmap(self.base.as_ptr().cast(), self.bytes) };
    }
}

impl Mailbox {
    fn new(cap: usize) -> io::Result<Mailbox> {
        let cap = cap.clamp(1, u32::MAX as usize);
        let bytes = DATA + cap;
        let base = crate::child::map_shared(bytes)?;
        Ok(Mailbox { base, bytes, cap })
    }

    fn header(&self) -> &Header {
        // SAFETY: the mapping is page-aligned, zeroed (a valid Header) and outlives `self`.
        unsafe { &*self.base.as_ptr().cast::<Header>() }
    }

    fn data(&self) -> *mut u8 {
        // SAFETY: DATA + cap bytes are mapped.
        unsafe { self.base.as_ptr().add(DATA) }
    }

    /// Waits until `seq` has parity `odd`; `Ok(false)` if the end `gone` closed first.
    fn wait(&self, odd: bool, gone: u32) -> io::Result<bool> {
        let h = self.header();
        // When the first sleep that nobody ended ran out: no clock is read before one, so the
        // floor's round trip pays for none.
        let mut stalled: Option<Instant> = None;
        loop {
            // Acquire: pairs with the other end's SeqCst advance, so its data (or its emptying
            // of the mailbox) is seen before we use it.
            let s = h.seq.load(Ordering::Acquire);
            if (s & 1 == 1) == odd {
                return Ok(true);
            }
            // Acquire: the closer set its bit before its SeqCst advance of `seq`.
            if h.closed.load(Ordering::Acquire) & gone != 0 {
                return Ok(false);
            }
            if stalled.is_some_and(|t| t.elapsed() > STALL) {
                return Err(io::Error::new(
                    io::ErrorKind::TimedOut,
                    "futex mailbox: no word from the peer in 60 s",
                ));
            }
            // SeqCst: the store half of the waiter's store-load pair (see the module docs).
            h.waiting.store(1, Ordering::SeqCst);
            // SeqCst: the load half; an advance before it is seen here, one after it sees the
            // flag.
            if h.seq.load(Ordering::SeqCst) != s {
                continue;
            }
            if futex(&h.seq, libc::FUTEX_WAIT, s, Some(TICK)) == -i64::from(libc::ETIMEDOUT) {
                stalled.get_or_insert_with(Instant::now);
            }
        }
    }

    /// Moves `seq` on by `by` and wakes the other end if it sleeps.
    fn advance(&self, by: u32) {
        let h = self.header();
        // SeqCst: publishes the data (or the room) and orders the flag's swap after it.
        h.seq.fetch_add(by, Ordering::SeqCst);
        // SeqCst: see the module docs.
        if h.waiting.swap(0, Ordering::SeqCst) != 0 {
            let _ = futex(&h.seq, libc::FUTEX_WAKE, 1, None);
        }
    }

    /// Closes the end `bit`: the other end sees it at its next look, asleep or not.
    fn close(&self, bit: u32) {
        // Release: seen by the other end's Acquire load after it sees `seq` move.
        self.header().closed.fetch_or(bit, Ordering::Release);
        self.advance(2);
    }
}

/// `futex(2)` on a shared (not private) word: `FUTEX_WAIT` while it holds `val` (for at most
/// `timeout`), or `FUTEX_WAKE` of up to `val` sleepers. Returns the result, or `-errno`: errors
/// (EAGAIN, EINTR, ETIMEDOUT) only send the waiter round its loop again.
fn futex(word: &AtomicU32, op: libc::c_int, val: u32, timeout: Option<Duration>) -> i64 {
    let ts = timeout.map(|t| libc::timespec {
        tv_sec: t.as_secs() as libc::time_t,
        tv_nsec: t.subsec_nanos() as libc::c_long,
    });
    let tp = ts
        .as_ref()
        .map_or(std::ptr::null(), |t| t as *const libc::timespec);
    // SAFETY: `word` is a live, aligned u32 in a shared mapping; `tp` is null or points to a
    // timespec on this stack frame.
    let r = unsafe {
        libc::syscall(
            libc::SYS_futex,
            word.as_ptr(),
            op,
            val,
            tp,
            std::ptr::null::<u32>(),
            0u32,
        )
    };
    if r < 0 {
        -i64::from(io::Error::last_os_error().raw_os_error().unwrap_or(0))
    } else {
        r as i64
    }
}

/// An end's note of the process that first used it: it closes the mailbox on drop only there.
#[derive(Default)]
struct UsedBy(libc::pid_t);

impl UsedBy {
    fn mark(&mut self) {
        if self.0 == 0 {
            self.0 = std::process::id() as libc::pid_t;
        }
    }

    fn here(&self) -> bool {
        self.0 != 0 && self.0 == std::process::id() as libc::pid_t
    }
}

/// The writing end.
pub struct FutexWriter {
    m: Arc<Mailbox>,
    used: UsedBy,
}

/// The reading end.
pub struct FutexReader {
    m: Arc<Mailbox>,
    used: UsedBy,
    /// How much of the full mailbox this end has read.
    taken: usize,
}

/// A mailbox of `cap` bytes: its writer and its reader.
///
/// # Errors
/// `mmap`'s error.
pub fn channel(cap: usize) -> io::Result<(FutexWriter, FutexReader)> {
    let m = Arc::new(Mailbox::new(cap)?);
    Ok((
        FutexWriter {
            m: m.clone(),
            used: UsedBy::default(),
        },
        FutexReader {
            m,
            used: UsedBy::default(),
            taken: 0,
        },
    ))
}

impl Write for FutexWriter {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        if buf.is_empty() {
            return Ok(0);
        }
        self.used.mark();
        // Acquire: as in `wait`. Checked first: an empty mailbox with no reader takes nothing,
        // as a pipe with no reader fails a write with EPIPE.
        let gone = self.m.header().closed.load(Ordering::Acquire) & READER_GONE != 0;
        if gone || !self.m.wait(false, READER_GONE)? {
            return Err(io::ErrorKind::BrokenPipe.into());
        }
        let n = buf.len().min(self.m.cap);
        // SAFETY: the mailbox is empty (even `seq`), so the reader does not touch the data
        // until our advance; n <= cap bytes are mapped at `data()`.
        unsafe { std::ptr::copy_nonoverlapping(buf.as_ptr(), self.m.data(), n) };
        // Relaxed: published by the SeqCst advance below.
        self.m.header().len.store(n as u32, Ordering::Relaxed);
        self.m.advance(1);
        Ok(n)
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

impl Read for FutexReader {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        if buf.is_empty() {
            return Ok(0);
        }
        self.used.mark();
        if !self.m.wait(true, WRITER_GONE)? {
            return Ok(0);
        }
        // Relaxed: written before the writer's SeqCst advance, which our Acquire load saw.
        // Clamped: the writer is our own benchmark, but a length is never trusted past `cap`.
        let len = (self.m.header().len.load(Ordering::Relaxed) as usize).min(self.m.cap);
        let n = (len - self.taken.min(len)).min(buf.len());
        // SAFETY: the mailbox is full (odd `seq`), so the writer does not touch the data until
        // our advance; taken + n <= len <= cap.
        unsafe {
            std::ptr::copy_nonoverlapping(self.m.data().add(self.taken), buf.as_mut_ptr(), n)
        };
        self.taken += n;
        if self.taken >= len {
            self.taken = 0;
            self.m.advance(1);
        }
        Ok(n)
    }
}

impl Drop for FutexWriter {
    fn drop(&mut self) {
        if self.used.here() {
            self.m.close(WRITER_GONE);
        }
    }
}

impl Drop for FutexReader {
    fn drop(&mut self) {
        if self.used.here() {
            self.m.close(READER_GONE);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bytes_arrive_in_order_and_the_ends_close() {
        let (mut w, mut r) = channel(7).unwrap();
        let t = std::thread::spawn(move || {
            let data: Vec<u8> = (0..10_000u32).map(|i| (i % 251) as u8).collect();
            w.write_all(&data).unwrap();
        });
        let mut got = Vec::new();
        r.read_to_end(&mut got).unwrap();
        t.join().unwrap();
        assert_eq!(got.len(), 10_000);
        assert!(got.iter().enumerate().all(|(i, &b)| b == (i % 251) as u8));
    }

    #[test]
    fn a_writer_whose_reader_is_gone_gets_broken_pipe() {
        let (mut w, mut r) = channel(1).unwrap();
        w.write_all(b"a").unwrap();
        let mut b = [0u8; 1];
        r.read_exact(&mut b).unwrap();
        drop(r);
        assert_eq!(
            w.write(b"b").unwrap_err().kind(),
            io::ErrorKind::BrokenPipe,
            "the empty mailbox takes nothing"
        );
    }

    #[test]
    fn an_unused_end_dropped_does_not_close() {
        let (w, mut r) = channel(4).unwrap();
        let mut w2 = FutexWriter {
            m: w.m.clone(),
            used: UsedBy::default(),
        };
        drop(w); // never used: as a forked process drops the copy it does not use
        w2.write_all(b"ok").unwrap();
        drop(w2);
        let mut got = Vec::new();
        r.read_to_end(&mut got).unwrap();
        assert_eq!(got, b"ok");
    }
}

//! The writing end: `io::Write`, Linux's merge and atomicity rules, and the in-place chunk API.

use super::{Geometry, Shared, Slot, WriteGuard, CAN_MERGE, DROPPED, END_MASK, PACKET, RELEASED};
use crate::ring::{self, ONE};
use crate::sync::{Arc, Ordering};
use std::io;

/// The writing end of a pipe.
///
/// Cloning a `Writer` is like `dup(2)`ing a pipe's write descriptor: every clone writes into the
/// same pipe, and readers see end of file once the last clone is dropped. Writes of at most
/// [`crate::PIPE_BUF`] bytes are atomic even with many concurrent writers.
///
/// ```
/// use std::io::{Read, Write};
/// let (mut w, mut r) = pagepipe::pipe()?;
/// w.write_all(b"hello")?;
/// drop(w);
/// let mut s = String::new();
/// r.read_to_string(&mut s)?;
/// assert_eq!(s, "hello");
/// # Ok::<(), std::io::Error>(())
/// ```
pub struct Writer {
    pub(crate) shared: Arc<Shared>,
}

impl Writer {
    /// Switches every clone of this writer to non-blocking mode (`O_NONBLOCK`) or back.
    ///
    /// In non-blocking mode a write that can place nothing fails with
    /// [`io::ErrorKind::WouldBlock`]; a larger write places what fits and returns the count.
    pub fn set_nonblocking(&self, nonblocking: bool) -> io::Result<()> {
        self.shared
            .write_nonblocking
            .store(nonblocking, Ordering::Relaxed);
        Ok(())
    }

    /// Whether writes are non-blocking.
    pub fn is_nonblocking(&self) -> bool {
        self.shared.write_nonblocking.load(Ordering::Relaxed)
    }

    /// The pipe's capacity in bytes (`F_GETPIPE_SZ`).
    pub fn capacity(&self) -> usize {
        self.shared.capacity()
    }

    /// Resizes the pipe (`F_SETPIPE_SZ`) and returns the new capacity.
    ///
    /// The request rounds up to a power-of-two number of 4 KiB pages (then to whole slots);
    /// queued data is kept.
    ///
    /// # Errors
    /// [`io::ErrorKind::InvalidInput`] for 0 or more than 1 GiB (where Linux would round 0 up to
    /// one page); [`io::ErrorKind::ResourceBusy`] (`EBUSY`) when more slots hold data than the new
    /// size has; an mmap failure as the OS reports it.
    ///
    /// ```
    /// let (w, _r) = pagepipe::pipe()?;
    /// assert_eq!(w.set_capacity(100_000)?, 131_072);
    /// assert_eq!(w.capacity(), 131_072);
    /// # Ok::<(), std::io::Error>(())
    /// ```
    pub fn set_capacity(&self, bytes: usize) -> io::Result<usize> {
        self.shared.set_capacity(bytes)
    }

    /// Spare pages the pipe's pool holds resident (pages at free slot positions that the next
    /// writes reuse without a page fault), as counted by the pool.
    pub fn spare_pages(&self) -> usize {
        self.shared.spare_pages()
    }

    /// Resident 4 KiB pages at free slot positions as the kernel reports them (`mincore(2)`).
    pub fn resident_spare_pages(&self) -> io::Result<usize> {
        self.shared.resident_spare_pages()
    }

    /// Borrows free slots of the ring to fill in place; see [`WriteChunk`].
    ///
    /// Blocks until at least one slot is free (in non-blocking mode fails with
    /// [`io::ErrorKind::WouldBlock`] instead). The chunk holds the write side: other writers, and
    /// `set_capacity`, wait until it is committed or dropped, so the thread holding it must not
    /// write to, resize or inspect the pool of this pipe meanwhile (that would deadlock).
    ///
    /// # Errors
    /// [`io::ErrorKind::BrokenPipe`] when every reader is gone.
    ///
    /// ```
    /// use std::io::Read;
    /// let (w, mut r) = pagepipe::pipe()?;
    /// let mut chunk = w.write_chunk()?;
    /// let (first, _) = chunk.as_mut_slices();
    /// first[..3].copy_from_slice(b"abc");
    /// chunk.commit(3);
    /// let mut buf = [0; 8];
    /// assert_eq!(r.read(&mut buf)?, 3);
    /// assert_eq!(&buf[..3], b"abc");
    /// # Ok::<(), std::io::Error>(())
    /// ```
    pub fn write_chunk(&self) -> io::Result<WriteChunk<'_>> {
        let sh = &*self.shared;
        let mut ws = sh.lock_write();
        loop {
            if sh.readers_gone() {
                return Err(broken_pipe());
            }
            let limit = sh.max_usage.load(Ordering::Relaxed) as u64;
            // Acquire: pairs with the reader's Release tail RMW (its last reads of freed pages).
            ws.cached_tail = ring::index(sh.tail.load(Ordering::Acquire));
            let free = limit - ring::occupancy(ws.head, ws.cached_tail).min(limit);
            if free > 0 {
                return Ok(WriteChunk {
                    shared: sh,
                    guard: ws,
                    free: free as usize,
                });
            }
            if self.is_nonblocking() {
                return Err(would_block());
            }
            drop(ws);
            sh.wait_writable();
            ws = sh.lock_write();
        }
    }

    fn write_impl(&self, buf: &[u8]) -> io::Result<usize> {
        if buf.is_empty() {
            return Ok(0); // a null write succeeds, even with no reader (as in Linux)
        }
        let sh = &*self.shared;
        let prefilled = sh.prefill(buf.len());
        let mut ws = sh.lock_write();
        sh.adopt_prefill(&ws, prefilled);
        let result = 'write: {
            if sh.readers_gone() {
                break 'write Err(broken_pipe());
            }
            let mut done = merge(sh, &ws, buf);
            loop {
                done += fill(sh, &mut ws, &buf[done..]);
                if done == buf.len() {
                    break 'write Ok(done);
                }
                if self.is_nonblocking() {
                    break 'write partial(done, would_block());
                }
                drop(ws);
                sh.wait_writable();
                ws = sh.lock_write();
                if sh.readers_gone() {
                    break 'write partial(done, broken_pipe());
                }
            }
        };
        if let Some(keep) = sh.config.policy.trim_after_write() {
            sh.trim_locked(&ws, keep);
        }
        result
    }
}

/// Linux's first step: the write's sub-slot remainder (`len % slot_size` bytes, from the front)
/// goes into the last slot when that slot can merge and has room. Returns the bytes merged.
fn merge(sh: &Shared, ws: &WriteGuard<'_>, buf: &[u8]) -> usize {
    let ss = sh.config.slot_size;
    let chars = buf.len() % ss;
    if chars == 0 || ws.head == ws.cached_tail {
        return 0; // nothing to merge, or certainly empty (cached_tail <= tail <= head)
    }
    let geo = sh.geo(ws);
    let (pos, slot) = geo.slot(ws.head - 1);
    let st = slot.state.load(Ordering::Relaxed);
    let end = (st & END_MASK) as usize;
    if st & (CAN_MERGE | RELEASED) != CAN_MERGE || end + chars > ss {
        return 0;
    }
    // SAFETY: end + chars <= slot_size, so the range is inside the page; bytes past `end` are
    // read by no one (readers stop at `end`) and written only by write-side holders (us).
    unsafe { std::ptr::copy_nonoverlapping(buf.as_ptr(), geo.page(pos).add(end), chars) };
    // Release: pairs with the reader's Acquire load of the slot state, publishing the bytes.
    // Failure means the reader released the drained slot first: then the pipe was empty and
    // Linux would not have merged either.
    match slot
        .state
        .compare_exchange(st, st + chars as u64, Ordering::Release, Ordering::Relaxed)
    {
        Ok(_) => chars,
        Err(now) => {
            if now & DROPPED != 0 {
                // The reader gave the page back before our copy faulted it in again: give it
                // back once more, so a DROPPED position really holds no page. Safe: the slot is
                // released and only write-side holders (us) reuse free positions.
                geo.arena.dontneed(pos * ss, ss);
            }
            0
        }
    }
}

/// Fills free slots with `buf`, one slot page at a time, publishing each as it is filled so the
/// reader overlaps with us. Returns the bytes placed (stops when the ring is full).
fn fill(sh: &Shared, ws: &mut WriteGuard<'_>, buf: &[u8]) -> usize {
    let (mut head, mut tail) = (ws.head, ws.cached_tail);
    let limit = sh.max_usage.load(Ordering::Relaxed) as u64; // changes only with both sides held
    let geo = sh.geo(ws);
    let mut done = 0;
    let mut staged = 0;
    while done < buf.len() {
        if ring::is_full(head, tail, limit) {
            // Acquire: pairs with the reader's Release tail RMW, so its reads of the freed pages
            // happen before we overwrite them.
            tail = ring::index(sh.tail.load(Ordering::Acquire));
            if ring::is_full(head, tail, limit) {
                break;
            }
        }
        let n = (buf.len() - done).min(geo.slot_size);
        // SAFETY: the position at `head` is free (head - tail < limit), so its page is ours
        // until published; n <= slot_size keeps the copy inside it; `buf` is a distinct borrow.
        unsafe { stage(sh, geo, head, buf[done..].as_ptr(), n) };
        head += 1;
        done += n;
        staged += 1;
        if staged == PUBLISH_BATCH {
            publish(sh, staged);
            staged = 0;
        }
    }
    publish(sh, staged);
    ws.head = head;
    ws.cached_tail = tail;
    done
}

/// Slots staged before one publication (and, on the reader side, released before one tail
/// update): one index RMW, one cache-line handoff to the other side, per this many pages.
pub(crate) const PUBLISH_BATCH: u64 = 4;

/// Copies `len` bytes from `src` (unless null: already in place) into the free slot `head` and
/// sets up its state; [`publish`] makes it visible.
///
/// # Safety
/// The caller holds the write side, slot `head` is free, `len <= slot_size`, and `src` (if not
/// null) is valid for `len` bytes and does not overlap the slot's page.
unsafe fn stage(sh: &Shared, geo: &Geometry, head: u64, src: *const u8, len: usize) {
    let (pos, slot): (usize, &Slot) = geo.slot(head);
    sh.claim(slot);
    if !src.is_null() {
        // SAFETY: guaranteed by the caller (free slot, len <= slot_size, valid source).
        unsafe { std::ptr::copy_nonoverlapping(src, geo.page(pos), len) };
    }
    let flags = if sh.config.packet { PACKET } else { CAN_MERGE };
    slot.start.store(0, Ordering::Relaxed);
    slot.state.store(len as u64 | flags, Ordering::Relaxed);
}

/// Publishes the next `n` staged slots and wakes a sleeping reader.
fn publish(sh: &Shared, n: u64) {
    if n == 0 {
        return;
    }
    // Release: pairs with the reader's Acquire load of head, publishing the pages and slots.
    let old = sh.head.fetch_add(n * ONE, Ordering::Release);
    sh.wake_readers_if_waiting(old);
}

/// Free slots of the ring, borrowed in place: fill them through [`WriteChunk::as_mut_slices`],
/// then [`WriteChunk::commit`] the bytes written. Dropping the chunk commits nothing.
///
/// Committed bytes form whole slots, never merged into earlier data; a later `write` may merge
/// into the last one, as with any write.
pub struct WriteChunk<'a> {
    shared: &'a Shared,
    guard: WriteGuard<'a>,
    /// Free slots from `guard.head` on, at least one.
    free: usize,
}

impl WriteChunk<'_> {
    /// Bytes the chunk can take.
    pub fn len(&self) -> usize {
        self.free * self.shared.config.slot_size
    }

    /// Never true: a chunk has at least one free slot.
    pub fn is_empty(&self) -> bool {
        self.free == 0
    }

    /// The free space as at most two contiguous runs (the ring wraps once); fill the first, then
    /// the second.
    pub fn as_mut_slices(&mut self) -> (&mut [u8], &mut [u8]) {
        let geo = self.shared.geo(&self.guard);
        let first = ring::slot(self.guard.head, geo.ring_size);
        let a = self.free.min(geo.ring_size - first);
        let (pa, pb) = (geo.page(first), geo.page(0));
        let (la, lb) = (a * geo.slot_size, (self.free - a) * geo.slot_size);
        // SAFETY: positions first..first+a and 0..free-a are free slots, contiguous in the arena
        // and disjoint (free <= ring_size); we hold the write side, so no one else touches them
        // while `self` is mutably borrowed.
        unsafe {
            (
                std::slice::from_raw_parts_mut(pa, la),
                std::slice::from_raw_parts_mut(pb, lb),
            )
        }
    }

    /// Publishes the first `n` bytes written through [`WriteChunk::as_mut_slices`] and returns `n`.
    ///
    /// # Panics
    /// If `n` exceeds [`WriteChunk::len`].
    pub fn commit(mut self, n: usize) -> usize {
        assert!(
            n <= self.len(),
            "commit of {n} bytes into a chunk of {} bytes",
            self.len()
        );
        let sh = self.shared;
        let ss = sh.config.slot_size;
        let mut head = self.guard.head;
        let geo = sh.geo(&self.guard);
        for off in (0..n).step_by(ss) {
            // SAFETY: slot `head` is one of the chunk's free slots; null means the bytes are
            // already in place; (n - off).min(ss) <= slot_size.
            unsafe { stage(sh, geo, head, std::ptr::null(), (n - off).min(ss)) };
            head += 1;
        }
        publish(sh, head - self.guard.head);
        self.guard.head = head;
        n
    }
}

fn partial(done: usize, err: io::Error) -> io::Result<usize> {
    if done > 0 {
        Ok(done)
    } else {
        Err(err)
    }
}

pub(crate) fn broken_pipe() -> io::Error {
    io::Error::new(io::ErrorKind::BrokenPipe, "pipe has no reader left")
}

pub(crate) fn would_block() -> io::Error {
    io::Error::from(io::ErrorKind::WouldBlock)
}

impl io::Write for Writer {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.write_impl(buf)
    }
    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

impl io::Write for &Writer {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.write_impl(buf)
    }
    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

impl Clone for Writer {
    fn clone(&self) -> Writer {
        self.shared.writers.fetch_add(1, Ordering::Relaxed);
        Writer {
            shared: self.shared.clone(),
        }
    }
}

impl Drop for Writer {
    fn drop(&mut self) {
        // AcqRel: Release pairs with the Acquire loads of the writer count in the reader, so a
        // reader that sees 0 sees every slot we published; Acquire orders the other clones' drops.
        if self.shared.writers.fetch_sub(1, Ordering::AcqRel) == 1 {
            self.shared.readable.wake_all();
        }
    }
}

impl std::fmt::Debug for Writer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Writer")
            .field("capacity", &self.capacity())
            .finish_non_exhaustive()
    }
}

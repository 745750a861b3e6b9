//! The reading end: `io::Read`, packet reads, and borrowing queued bytes in place.

use super::writer::{would_block, PUBLISH_BATCH};
use super::{Geometry, ReadGuard, Shared, Slot, DROPPED, END_MASK, PACKET, RELEASED};
use crate::ring::{self, ONE};
use crate::sync::{Arc, Ordering};
use std::io;

/// The reading end of a pipe.
///
/// Cloning a `Reader` is like `dup(2)`ing a pipe's read descriptor; writers get
/// [`io::ErrorKind::BrokenPipe`] once the last clone is dropped. A read returns what is queued
/// (up to the buffer's length) without waiting for more; it blocks only on an empty pipe, and
/// returns `Ok(0)` (end of file) once the pipe is empty and every writer is gone.
pub struct Reader {
    pub(crate) shared: Arc<Shared>,
}

impl Reader {
    /// Switches every clone of this reader to non-blocking mode (`O_NONBLOCK`) or back: a read
    /// of an empty pipe then fails with [`io::ErrorKind::WouldBlock`] while writers exist.
    pub fn set_nonblocking(&self, nonblocking: bool) -> io::Result<()> {
        self.shared
            .read_nonblocking
            .store(nonblocking, Ordering::Relaxed);
        Ok(())
    }

    /// Whether reads are non-blocking.
    pub fn is_nonblocking(&self) -> bool {
        self.shared.read_nonblocking.load(Ordering::Relaxed)
    }

    /// The pipe's capacity in bytes (`F_GETPIPE_SZ`).
    pub fn capacity(&self) -> usize {
        self.shared.capacity()
    }

    /// Resizes the pipe; see [`crate::Writer::set_capacity`].
    pub fn set_capacity(&self, bytes: usize) -> io::Result<usize> {
        self.shared.set_capacity(bytes)
    }

    /// Borrows the queued bytes in place; see [`ReadChunk`].
    ///
    /// Blocks until data is queued (in non-blocking mode fails with
    /// [`io::ErrorKind::WouldBlock`] instead); an empty chunk means end of file. Other readers
    /// wait until the chunk is dropped, and so does `set_capacity`: the thread holding it must
    /// not read from or resize this pipe meanwhile (that would deadlock).
    ///
    /// ```
    /// use std::io::Write;
    /// let (mut w, r) = pagepipe::pipe()?;
    /// w.write_all(b"in place")?;
    /// let chunk = r.read_chunk()?;
    /// let bytes: Vec<u8> = chunk.slices().flatten().copied().collect();
    /// assert_eq!(bytes, b"in place");
    /// chunk.consume(3);
    /// # Ok::<(), std::io::Error>(())
    /// ```
    pub fn read_chunk(&self) -> io::Result<ReadChunk<'_>> {
        let sh = &*self.shared;
        let mut rs = sh.lock_read();
        loop {
            // Checked before looking: seeing no writer means seeing every slot they published.
            let eof = sh.writers_gone();
            // Acquire: pairs with the writer's Release head RMW.
            rs.cached_head = ring::index(sh.head.load(Ordering::Acquire));
            if rs.cached_head != rs.tail || eof {
                return Ok(ReadChunk {
                    shared: sh,
                    guard: rs,
                });
            }
            if self.is_nonblocking() {
                return Err(would_block());
            }
            drop(rs);
            sh.wait_readable();
            rs = sh.lock_read();
        }
    }

    fn read_impl(&self, buf: &mut [u8]) -> io::Result<usize> {
        if buf.is_empty() {
            return Ok(0); // a null read succeeds (as in Linux)
        }
        let sh = &*self.shared;
        let mut rs = sh.lock_read();
        let max = buf.len();
        let mut copy = |off: usize, src: &[u8]| buf[off..off + src.len()].copy_from_slice(src);
        loop {
            let n = consume(sh, &mut rs, max, true, &mut copy);
            if n > 0 {
                return Ok(n);
            }
            // Seeing no writer means seeing every slot they published (see `writers_gone`): look
            // once more before reporting end of file.
            if sh.writers_gone() {
                return Ok(consume(sh, &mut rs, max, true, &mut copy));
            }
            if self.is_nonblocking() {
                return Err(would_block());
            }
            drop(rs);
            sh.wait_readable();
            rs = sh.lock_read();
        }
    }
}

/// Consumes up to `max` queued bytes from the tail, handing each run to `sink(offset, bytes)`,
/// and releases every slot it drains. With `packet_reads`, a packet slot is released after one
/// run whatever is left of it, and consumption stops there (a read returns at most one packet).
fn consume(
    sh: &Shared,
    rs: &mut ReadGuard<'_>,
    max: usize,
    packet_reads: bool,
    mut sink: impl FnMut(usize, &[u8]),
) -> usize {
    let (mut tail, mut head) = (rs.tail, rs.cached_head);
    let mut released = 0;
    let geo = sh.geo(rs);
    let mut n = 0;
    while n < max {
        if tail == head {
            // Acquire: pairs with the writer's Release head RMW, publishing the slot and page.
            head = ring::index(sh.head.load(Ordering::Acquire));
            if tail == head {
                break;
            }
        }
        let (pos, slot) = geo.slot(tail);
        // Acquire: pairs with the writer's Release merge CAS, publishing merged bytes.
        let st = slot.state.load(Ordering::Acquire);
        debug_assert!(
            st & (RELEASED | DROPPED) == 0,
            "slot {tail} is published but free"
        );
        let (start, end) = (
            slot.start.load(Ordering::Relaxed) as usize,
            (st & END_MASK) as usize,
        );
        debug_assert!(start <= end && end <= geo.slot_size);
        let c = (end - start).min(max - n);
        // SAFETY: start..start+c lies within the slot's data (end <= slot_size), published to us
        // by the Acquire loads above; writers only append past `end`, so nobody writes it now.
        sink(n, unsafe {
            std::slice::from_raw_parts(geo.page(pos).add(start), c)
        });
        n += c;
        let packet_done = st & PACKET != 0 && packet_reads;
        if start + c < end && !packet_done {
            slot.start.store((start + c) as u64, Ordering::Relaxed);
            break; // the caller's buffer is full
        }
        if release(sh, geo, (pos, slot, st), tail, head) {
            tail += 1;
            released += 1;
            if released == PUBLISH_BATCH {
                advance_tail(sh, released);
                released = 0;
            }
        } else {
            // A writer merged more bytes into this (last) slot: read on from where we stopped.
            slot.start.store((start + c) as u64, Ordering::Relaxed);
        }
        if packet_done {
            break;
        }
    }
    advance_tail(sh, released);
    rs.tail = tail;
    rs.cached_head = head;
    n
}

/// Releases the drained slot `tail` (at `pos`, seen with state `st`) unless a writer merged into
/// it meanwhile (then false); keeps its page as a spare or gives it back to the OS, as the pool
/// policy says. The caller advances the tail ([`advance_tail`]).
fn release(
    sh: &Shared,
    geo: &Geometry,
    (pos, slot, st): (usize, &Slot, u64),
    tail: u64,
    head: u64,
) -> bool {
    let keep = sh.config.policy.keep_on_release(|| sh.spare(head, tail));
    let freed = if keep {
        st | RELEASED
    } else {
        st | RELEASED | DROPPED
    };
    if tail + 1 == head {
        // The last slot: a writer may be merging into it. Relaxed: this CAS only decides between
        // us and the writer's CAS on the same `st`; reuse of the page is ordered by the tail RMW.
        if slot
            .state
            .compare_exchange(st, freed, Ordering::Relaxed, Ordering::Relaxed)
            .is_err()
        {
            return false;
        }
    } else if !keep {
        // Not the last slot (head is past it), so no writer touches its state until it is free.
        slot.state.store(freed, Ordering::Relaxed);
    }
    if !keep {
        sh.dropped.fetch_add(1, Ordering::Relaxed);
        geo.arena.dontneed(pos * geo.slot_size, geo.slot_size);
    }
    true
}

/// Hands `n` released slots back to the writer side and wakes a sleeping writer.
fn advance_tail(sh: &Shared, n: u64) {
    if n == 0 {
        return;
    }
    // Release: pairs with the writer's Acquire load of tail, so our reads of these pages (and
    // their DONTNEED) happen before the writer reuses the positions.
    let old = sh.tail.fetch_add(n * ONE, Ordering::Release);
    sh.wake_writers_if_waiting(old);
}

/// The queued bytes of a pipe, borrowed in place: look at them through [`ReadChunk::slices`],
/// then [`ReadChunk::consume`] what you used. Dropping the chunk consumes nothing.
///
/// An empty chunk means end of file. In packet mode each slice is one packet (or its unread
/// rest), and consuming part of a packet keeps the rest queued.
pub struct ReadChunk<'a> {
    shared: &'a Shared,
    guard: ReadGuard<'a>,
}

impl ReadChunk<'_> {
    /// The queued bytes, one slice per slot, oldest first.
    pub fn slices(&self) -> impl Iterator<Item = &[u8]> + '_ {
        let geo = self.shared.geo(&self.guard);
        (self.guard.tail..self.guard.cached_head).map(move |i| {
            let (pos, slot) = geo.slot(i);
            // Acquire: pairs with the writer's Release merge CAS (see `consume`).
            let end = (slot.state.load(Ordering::Acquire) & END_MASK) as usize;
            let start = slot.start.load(Ordering::Relaxed) as usize;
            // SAFETY: as in `consume`: published data, not written while we hold the read side.
            unsafe { std::slice::from_raw_parts(geo.page(pos).add(start), end - start) }
        })
    }

    /// Total bytes in [`ReadChunk::slices`].
    pub fn len(&self) -> usize {
        self.slices().map(<[u8]>::len).sum()
    }

    /// True at end of file (or, in non-blocking use, never: an empty pipe is `WouldBlock`).
    pub fn is_empty(&self) -> bool {
        self.guard.tail == self.guard.cached_head
    }

    /// Consumes the first `n` bytes of the chunk, freeing the slots they drain.
    ///
    /// # Panics
    /// If `n` exceeds [`ReadChunk::len`].
    pub fn consume(mut self, n: usize) {
        let len = self.len();
        assert!(n <= len, "consume of {n} bytes from a chunk of {len} bytes");
        let done = consume(self.shared, &mut self.guard, n, false, |_, _| {});
        debug_assert_eq!(done, n);
    }
}

impl io::Read for Reader {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        self.read_impl(buf)
    }
}

impl io::Read for &Reader {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        self.read_impl(buf)
    }
}

impl Clone for Reader {
    fn clone(&self) -> Reader {
        self.shared.readers.fetch_add(1, Ordering::Relaxed);
        Reader {
            shared: self.shared.clone(),
        }
    }
}

impl Drop for Reader {
    fn drop(&mut self) {
        // AcqRel: Release pairs with the writers' Acquire loads of the reader count.
        if self.shared.readers.fetch_sub(1, Ordering::AcqRel) == 1 {
            self.shared.writable.wake_all();
        }
    }
}

impl std::fmt::Debug for Reader {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Reader")
            .field("capacity", &self.capacity())
            .finish_non_exhaustive()
    }
}

//! The writing end: `io::Write`, Linux's merge and atomicity rules, and the in-place chunk API.

use crate::error::{broken_pipe, would_block};
use crate::pipe::end::End;
use crate::pipe::hint::note_next_write;
use crate::pipe::shared::{
    add_bytes, publish, publish_quiet, Ring, Shared, WriteGuard, COPY_RUN, PUBLISH_BATCH,
};
use crate::region::{Side, CAN_MERGE, DROPPED, END_MASK, PACKET, RELEASED};
use crate::ring;
use crate::sync::{Arc, Ordering};
use crate::wait::earliest;
use std::io::{self, IoSlice};
use std::time::{Duration, Instant};

/// Writes of at most this many bytes are atomic: they are never interleaved with other writes.
pub const PIPE_BUF: usize = 4096;

/// The writing end of a pipe.
///
/// Cloning a `Writer` is like `dup(2)`ing a pipe's write descriptor: every clone writes into the
/// same pipe, and readers see end of file once the last clone is dropped, in every process that
/// holds one (a forked child holds the ends its parent held; [`Writer::send_to`] and
/// [`Writer::pass_to`] hand one to another process). Writes of at most [`crate::PIPE_BUF`] bytes
/// are atomic even with many concurrent writers, in any number of processes, and even if the
/// writer is killed in the middle of one.
///
/// Its `AsFd` descriptor is for polling only, not a descriptor of the data (see the `AsFd` impl
/// on [`crate::Reader`]).
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
    pub(crate) end: Arc<End>,
}

impl Writer {
    fn shared(&self) -> &Shared {
        &self.end.shared
    }

    /// Switches this end to non-blocking mode (`O_NONBLOCK`) or back, for every holder of it in
    /// every process (like the flag of an open file description, shared by `dup` and `fork`).
    ///
    /// In non-blocking mode a write that can place nothing fails with
    /// [`io::ErrorKind::WouldBlock`], and so does one that finds the write side held (by a
    /// chunk or a resize); a larger write places what fits and returns the count.
    ///
    /// # Errors
    /// None today; the `Result` leaves room for one, as `UnixStream::set_nonblocking`'s.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::io::Write;
    /// let (w, _r) = pagepipe::pipe()?;
    /// w.set_nonblocking(true)?;
    /// assert!(w.is_nonblocking());
    /// let n = (&w).write(&vec![0u8; 100_000])?; // places what fits in 64 KiB
    /// assert_eq!(n, 65_536);
    /// assert_eq!((&w).write(b"x").unwrap_err().kind(), std::io::ErrorKind::WouldBlock);
    /// # Ok::<(), std::io::Error>(())
    /// ```
    pub fn set_nonblocking(&self, nonblocking: bool) -> io::Result<()> {
        self.end.set_nonblocking(nonblocking);
        Ok(())
    }

    /// Whether writes are non-blocking.
    ///
    /// # Examples
    /// See [`Writer::set_nonblocking`].
    pub fn is_nonblocking(&self) -> bool {
        self.end.is_nonblocking()
    }

    /// Bounds how long a write (and [`Writer::write_chunk`]) waits for room or for the write
    /// side, like `UnixStream::set_write_timeout`; `None` waits forever. An expired wait is
    /// [`io::ErrorKind::TimedOut`] (or the partial count of a larger write). Shared by every
    /// holder of this end.
    ///
    /// # Errors
    /// [`io::ErrorKind::InvalidInput`] for `Some(Duration::ZERO)`, as for sockets.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::io::Write;
    /// use std::time::Duration;
    /// let (w, _r) = pagepipe::pipe()?;
    /// w.set_write_timeout(Some(Duration::from_millis(10)))?;
    /// assert_eq!(w.write_timeout()?, Some(Duration::from_millis(10)));
    /// (&w).write_all(&vec![0u8; 65_536])?; // fills the pipe
    /// assert_eq!((&w).write(b"x").unwrap_err().kind(), std::io::ErrorKind::TimedOut);
    /// # Ok::<(), std::io::Error>(())
    /// ```
    pub fn set_write_timeout(&self, timeout: Option<Duration>) -> io::Result<()> {
        self.end.set_timeout(timeout)
    }

    /// The write timeout set by [`Writer::set_write_timeout`].
    ///
    /// # Errors
    /// None today; the `Result` matches `UnixStream::write_timeout`.
    ///
    /// # Examples
    /// See [`Writer::set_write_timeout`].
    pub fn write_timeout(&self) -> io::Result<Option<Duration>> {
        Ok(self.end.timeout())
    }

    /// The pipe's capacity in bytes (`F_GETPIPE_SZ`).
    ///
    /// # Examples
    ///
    /// ```
    /// let (w, _r) = pagepipe::Builder::new().capacity(1 << 20).build()?;
    /// assert_eq!(w.capacity(), 1 << 20);
    /// # Ok::<(), std::io::Error>(())
    /// ```
    pub fn capacity(&self) -> usize {
        self.shared().capacity()
    }

    /// Bytes of whole free slots: a write of this many bytes would not block now (a small
    /// write may fit in more, by merging into the last slot). Takes no lock: a snapshot.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::io::Write;
    /// let (mut w, _r) = pagepipe::pipe()?;
    /// w.write_all(&[0u8; 4096])?;
    /// assert_eq!(w.free(), 65_536 - 4096);
    /// # Ok::<(), std::io::Error>(())
    /// ```
    pub fn free(&self) -> usize {
        let sh = self.shared();
        let (h, t) = sh.indices();
        let limit = sh.capacity() / sh.config().slot_size;
        (limit as u64).saturating_sub(ring::occupancy(h, t)) as usize * sh.config().slot_size
    }

    /// Resizes the pipe (`F_SETPIPE_SZ`) and returns the new capacity.
    ///
    /// The request rounds up to a power-of-two number of 4 KiB pages (then to whole slots);
    /// queued data is kept. Waits for both sides of the pipe (so a thread holding a chunk of
    /// this pipe must not call it).
    ///
    /// # Errors
    /// [`io::ErrorKind::InvalidInput`] for 0 or more than 1 GiB (where Linux would round 0 up to
    /// one page); [`io::ErrorKind::PermissionDenied`] (`EPERM`, as Linux above
    /// `pipe-max-size`) above the pipe's maximum ([`Builder::max_capacity`](crate::Builder::max_capacity),
    /// 1 MiB by default); [`io::ErrorKind::ResourceBusy`] (`EBUSY`) when more slots hold
    /// data than the new size has; [`io::ErrorKind::InvalidData`] if the shared region is
    /// corrupt.
    ///
    /// ```
    /// let (w, _r) = pagepipe::pipe()?;
    /// assert_eq!(w.set_capacity(100_000)?, 131_072);
    /// assert_eq!(w.capacity(), 131_072);
    /// # Ok::<(), std::io::Error>(())
    /// ```
    pub fn set_capacity(&self, bytes: usize) -> io::Result<usize> {
        let cap = self
            .shared()
            .set_capacity(bytes, self.shared().deadline(Side::Write))?;
        self.shared().sync_local();
        Ok(cap)
    }

    /// Spare pages the pipe's pool holds resident (pages at free slot positions that the next
    /// writes reuse without a page fault), as counted by the pool.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::io::{Read, Write};
    /// let (mut w, mut r) = pagepipe::pipe()?;
    /// w.write_all(&[1u8; 8192])?;
    /// r.read_exact(&mut [0u8; 8192])?;
    /// assert!(w.spare_pages() <= 16); // the default pool keeps drained pages while busy
    /// # Ok::<(), std::io::Error>(())
    /// ```
    pub fn spare_pages(&self) -> usize {
        self.shared().spare_pages()
    }

    /// Resident 4 KiB pages at free slot positions as the kernel reports them (`mincore(2)`).
    ///
    /// # Errors
    /// The OS's error if `mincore(2)` fails.
    ///
    /// # Examples
    ///
    /// ```
    /// let (w, _r) = pagepipe::pipe()?;
    /// let resident = w.resident_spare_pages()?;
    /// assert!(resident <= 16);
    /// # Ok::<(), std::io::Error>(())
    /// ```
    #[cfg(not(loom))]
    pub fn resident_spare_pages(&self) -> io::Result<usize> {
        self.shared().resident_spare_pages()
    }

    /// Borrows free slots of the ring to fill in place; see [`WriteChunk`].
    ///
    /// Blocks until at least one slot is free (in non-blocking mode fails with
    /// [`io::ErrorKind::WouldBlock`] instead). The chunk holds the write side: other writers, in
    /// every process, and `set_capacity`, wait until it is committed or dropped; the thread
    /// holding it gets [`io::ErrorKind::Deadlock`] if it writes to this pipe meanwhile.
    ///
    /// # Errors
    /// [`io::ErrorKind::BrokenPipe`] when every reader is gone; `TimedOut` after the write
    /// timeout.
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
        let sh = self.shared();
        let deadline = sh.deadline(Side::Write);
        loop {
            if self.end.peer_gone(false) {
                return Err(broken_pipe());
            }
            let mut ws = sh.lock_write(sh.lock_wait(self.is_nonblocking(), deadline))?;
            let tail = sh.load_tail(ws.head, ws.ring_size)?;
            ws.cached_tail = tail;
            let free = ws.limit.saturating_sub(ring::occupancy(ws.head, tail));
            if free > 0 {
                return Ok(WriteChunk {
                    end: &self.end,
                    guard: ws,
                    free: free as usize,
                    staging: None,
                });
            }
            if self.is_nonblocking() {
                // Before WouldBlock, ask the kernel (a killed reader bumps no counter).
                return Err(if self.end.peer_gone(true) {
                    broken_pipe()
                } else {
                    would_block()
                });
            }
            drop(ws);
            self.end.wait_writable(deadline)?;
        }
    }

    /// Writes without blocking, whatever this end's mode: like `write` in non-blocking mode
    /// (`WouldBlock` when nothing fits or the write side is held; a large write places what
    /// fits). What async adapters and event loops use without changing the shared mode.
    ///
    /// # Errors
    /// [`io::ErrorKind::WouldBlock`] when nothing fits or the write side is held;
    /// [`io::ErrorKind::BrokenPipe`] when no reader is left in any process; `InvalidData` if the
    /// shared region is corrupt.
    ///
    /// # Examples
    ///
    /// ```
    /// let (w, _r) = pagepipe::pipe()?;
    /// assert_eq!(w.try_write(&vec![0u8; 100_000])?, 65_536);
    /// assert_eq!(w.try_write(b"x").unwrap_err().kind(), std::io::ErrorKind::WouldBlock);
    /// # Ok::<(), std::io::Error>(())
    /// ```
    pub fn try_write(&self, buf: &[u8]) -> io::Result<usize> {
        if let Some(r) = self.write_small(buf) {
            return r;
        }
        let one = [IoSlice::new(buf)];
        self.write_impl(&mut Source::new(&one), true, None)
    }

    /// [`Writer::try_write`] of several buffers as one write (atomic up to
    /// [`crate::PIPE_BUF`] bytes in all).
    ///
    /// # Errors
    /// As [`Writer::try_write`].
    ///
    /// # Examples
    ///
    /// ```
    /// use std::io::IoSlice;
    /// let (w, r) = pagepipe::pipe()?;
    /// assert_eq!(w.try_write_vectored(&[IoSlice::new(b"ab"), IoSlice::new(b"cd")])?, 4);
    /// assert_eq!(r.len(), 4);
    /// # Ok::<(), std::io::Error>(())
    /// ```
    pub fn try_write_vectored(&self, bufs: &[IoSlice<'_>]) -> io::Result<usize> {
        self.write_impl(&mut Source::new(bufs), true, None)
    }

    /// Writes as `write` does, but waits at most until `deadline` (and no longer than the
    /// write timeout, if one is set): a bound for this one call, where
    /// [`Writer::set_write_timeout`] sets one for every holder. A caller that must stay
    /// responsive while it waits (to a signal, a cancellation flag) writes in slices this way.
    /// What was placed before the deadline is reported as a count, as with a timeout.
    ///
    /// ```
    /// use std::time::{Duration, Instant};
    /// let (w, _r) = pagepipe::Builder::new().capacity(4096).build()?;
    /// let soon = Instant::now() + Duration::from_millis(10);
    /// assert_eq!(w.write_deadline(&[1u8; 6000], soon)?, 4096); // what fits, then the deadline
    /// let err = w.write_deadline(b"x", soon).unwrap_err();
    /// assert_eq!(err.kind(), std::io::ErrorKind::TimedOut);
    /// # Ok::<(), std::io::Error>(())
    /// ```
    ///
    /// # Errors
    /// As `write`'s, and [`io::ErrorKind::TimedOut`] when the deadline passes with nothing
    /// written (with a full pipe and a passed deadline, even if no reader is left: the
    /// deadline is looked at before the kernel is asked).
    pub fn write_deadline(&self, buf: &[u8], deadline: Instant) -> io::Result<usize> {
        let one = [IoSlice::new(buf)];
        self.write_impl(&mut Source::new(&one), false, Some(deadline))
    }

    /// The common small write: one buffer, shorter than a slot, to a byte-stream pipe whose
    /// write side is free and whose ring has room, under a pool policy that faults nothing in
    /// ahead. Merged into the last slot or placed in one new slot, as `write_impl` would,
    /// without its set-up (mode, deadline) or its loop; it never waits, so blocking and
    /// non-blocking writes share it. `None`, before changing anything, when any of that does
    /// not hold: the general path then waits or reports, as if it had been called first.
    #[inline]
    fn write_small(&self, buf: &[u8]) -> Option<io::Result<usize>> {
        let sh = self.shared();
        let cfg = sh.config();
        let len = buf.len();
        if len == 0
            || len >= cfg.slot_size
            || cfg.packet
            || cfg.policy.prefill(len, cfg.slot_size) != 0
            || self.end.peer_gone(false)
        {
            return None;
        }
        // The lines the merge check and the new slot touch travel while we take the side.
        sh.prefetch(Side::Write);
        let mut ws = sh.try_lock_write_unchecked()?;
        let one = [IoSlice::new(buf)];
        let mut src = Source::new(&one);
        let placed = match merge(sh, &ws, &mut src) {
            Ok(0) => place_small(sh, &mut ws, &mut src)?,
            merged => merged,
        };
        self.end.sync();
        if let Some(keep) = cfg.policy.trim_after_write() {
            sh.trim_locked(&ws, keep);
        }
        Some(placed)
    }

    /// Every byte-stream write but the small fast one: never waiting (`try_only`), or as the
    /// end's mode says, until `limit` at most besides the end's timeout.
    fn write_impl(
        &self,
        src: &mut Source<'_>,
        try_only: bool,
        limit: Option<Instant>,
    ) -> io::Result<usize> {
        let nonblocking = try_only || self.is_nonblocking();
        let total = src.len();
        if total == 0 {
            return Ok(0); // a null write succeeds, even with no reader (as in Linux)
        }
        if self.end.peer_gone(false) {
            return Err(broken_pipe());
        }
        let sh = self.shared();
        let deadline = earliest(sh.deadline(Side::Write), limit);
        #[cfg(not(loom))]
        let _call = crate::pipe::end::CallDeadline::set(deadline);
        let prefilled = sh.prefill(total);
        // The slots merge and fill will touch travel while we take the lock.
        sh.prefetch(Side::Write);
        let mut ws = sh.lock_write_unchecked(sh.lock_wait(nonblocking, deadline))?;
        sh.adopt_prefill(&ws, prefilled);
        let mut done = merge(sh, &ws, src)?;
        let result = loop {
            let filled = fill(sh, &mut ws, src);
            self.end.sync();
            done += filled?;
            if done == total {
                break Ok(done);
            }
            // The ring is full: before waiting for room (or reporting there is none), check
            // the head word we did not check when taking the side.
            if let Err(e) = ws.check_head() {
                break partial(done, e);
            }
            if nonblocking {
                // Before WouldBlock, ask the kernel (a killed reader bumps no counter).
                let e = if self.end.peer_gone(true) {
                    broken_pipe()
                } else {
                    would_block()
                };
                break partial(done, e);
            }
            drop(ws);
            let again = self
                .end
                .wait_writable(deadline)
                .and_then(|()| sh.lock_write_unchecked(sh.lock_wait(false, deadline)));
            ws = match again {
                Ok(ws) => ws,
                Err(e) => return partial(done, e),
            };
            if self.end.peer_gone(false) {
                break partial(done, broken_pipe());
            }
        };
        if let Some(keep) = sh.config().policy.trim_after_write() {
            sh.trim_locked(&ws, keep);
        }
        result
    }
}

/// The bytes of one write, from one buffer or several (`writev`), consumed front to back.
pub(crate) struct Source<'a> {
    bufs: &'a [IoSlice<'a>],
    /// The buffer and offset of the next byte.
    idx: usize,
    off: usize,
    left: usize,
}

impl<'a> Source<'a> {
    pub(crate) fn new(bufs: &'a [IoSlice<'a>]) -> Source<'a> {
        Source {
            bufs,
            idx: 0,
            off: 0,
            left: bufs.iter().map(|b| b.len()).sum(),
        }
    }

    /// Bytes not yet consumed.
    pub(crate) fn len(&self) -> usize {
        self.left
    }

    /// Copies the next `n` bytes to `dst` without consuming them.
    ///
    /// # Safety
    /// `dst` is valid for `n` bytes of writes and overlaps no source buffer; `n <= self.len()`.
    unsafe fn copy_to(&self, dst: *mut u8, n: usize) {
        debug_assert!(n <= self.left);
        let first = &self.bufs[self.idx];
        if first.len() - self.off >= n {
            // SAFETY: off + n <= first.len(); dst is valid for n bytes (caller's guarantee).
            unsafe { crate::pipe::copy::copy_to_ring(first.as_ptr().add(self.off), dst, n) };
            return; // the common case: the bytes lie in one buffer
        }
        let (mut idx, mut off, mut done) = (self.idx, self.off, 0);
        while done < n {
            let b = &self.bufs[idx];
            let c = (b.len() - off).min(n - done);
            // SAFETY: off + c <= b.len(); dst + done + c <= dst + n (caller's guarantee).
            unsafe { crate::pipe::copy::copy(b.as_ptr().add(off), dst.add(done), c) };
            done += c;
            off += c;
            if off == b.len() {
                idx += 1;
                off = 0;
            }
        }
    }

    /// Consumes the next `n` bytes.
    fn advance(&mut self, mut n: usize) {
        debug_assert!(n <= self.left);
        self.left -= n;
        while n > 0 {
            let c = (self.bufs[self.idx].len() - self.off).min(n);
            n -= c;
            self.off += c;
            if self.off == self.bufs[self.idx].len() {
                self.idx += 1;
                self.off = 0;
            }
        }
    }
}

/// Linux's first step: the write's sub-slot remainder (`len % slot_size` bytes, from the front)
/// goes into the last slot when that slot can merge and has room. Returns the bytes merged.
fn merge(sh: &Shared, ws: &WriteGuard<'_>, src: &mut Source<'_>) -> io::Result<usize> {
    let ring = ws.ring();
    let ss = ring.slot_size();
    // A mask, not `%` (a division on the path of every small write): slot sizes are powers of
    // two (`check_slot_size`, at creation and attach).
    let chars = src.len() & (ss - 1);
    if chars == 0 || ws.head == ws.cached_tail {
        return Ok(0); // nothing to merge, or certainly empty (cached_tail <= tail <= head)
    }
    let (pos, slot) = ring.slot(ws.head - 1);
    let st = slot.state.load(Ordering::Relaxed);
    let end = (st & END_MASK) as usize;
    if st & (CAN_MERGE | RELEASED) != CAN_MERGE || end + chars > ss {
        return Ok(0); // (an end past the slot, written by a peer, also lands here)
    }
    // SAFETY: end + chars <= slot_size, so the range is inside the page; bytes past `end` are
    // read by no one (readers stop at `end`) and written only by write-side holders (us).
    unsafe { src.copy_to(ring.page(pos).add(end), chars) };
    // Release: pairs with the reader's Acquire load of the slot state, publishing the bytes.
    // Failure means the reader released the drained slot first: then the pipe was empty and
    // Linux would not have merged either.
    match slot
        .state
        .compare_exchange(st, st + chars as u64, Ordering::Release, Ordering::Relaxed)
    {
        Ok(_) => {
            src.advance(chars);
            add_bytes(sh, chars);
            Ok(chars)
        }
        Err(now) => {
            if now & DROPPED != 0 {
                // The reader gave the page back before our copy faulted it in again: give it
                // back once more, so a DROPPED position really holds no page. Safe: the slot is
                // released and only write-side holders (us) reuse free positions.
                sh.region.drop_pages(pos, 1);
            }
            Ok(0)
        }
    }
}

/// [`Writer::write_small`]'s new slot: all of `src` (shorter than a slot) in the slot at head,
/// published. `None` when the ring is full (nothing changed).
fn place_small(
    sh: &Shared,
    ws: &mut WriteGuard<'_>,
    src: &mut Source<'_>,
) -> Option<io::Result<usize>> {
    let len = src.len();
    match slot_free(sh, ws.head, &mut ws.cached_tail, ws.limit, ws.ring_size) {
        Ok(true) => {}
        Ok(false) => return None,
        Err(e) => return Some(Err(e)),
    }
    // SAFETY: the position at head is free (the ring is not full), so its page is ours until
    // published; len < slot_size (write_small's condition); `src` holds len bytes.
    unsafe { stage(sh, ws.ring(), ws.head, 1, Some(src), len) };
    let published = publish(sh, ws.head, 1, len);
    ws.head += 1;
    note_next_write(ws.ring(), ws.head);
    Some(published.map(|()| len))
}

/// Whether slot `head` is free with `limit` slots usable in a ring of `ring_size`: by the cached
/// `tail` when that says so (the real tail is never behind it), else by the tail word, which
/// refreshes `tail`.
fn slot_free(
    sh: &Shared,
    head: u64,
    tail: &mut u64,
    limit: u64,
    ring_size: usize,
) -> io::Result<bool> {
    if ring::is_full(head, *tail, limit) {
        *tail = sh.load_tail(head, ring_size)?;
    }
    Ok(!ring::is_full(head, *tail, limit))
}

/// Fills free slots from `src`, a run of whole consecutive slots at a time (see [`COPY_RUN`]),
/// at most a quarter of the ring (so a reader woken early, see [`apart`], has the rest to
/// overlap with), publishing them in batches so the reader overlaps with us. Returns the bytes
/// placed (stops when the ring is full).
fn fill(sh: &Shared, ws: &mut WriteGuard<'_>, src: &mut Source<'_>) -> io::Result<usize> {
    let (mut head, mut tail, limit) = (ws.head, ws.cached_tail, ws.limit);
    let ring = ws.ring();
    let ss = ring.slot_size();
    let mut done = 0;
    let (mut staged, mut staged_bytes) = (0, 0);
    let mut sleepers = 0; // the head word's sleeper flag, as publications returned it
    let result = loop {
        if src.len() == 0 {
            break Ok(done);
        }
        match slot_free(sh, head, &mut tail, limit, ring.size) {
            Ok(true) => {}
            Ok(false) => break Ok(done),
            Err(e) => break Err(e),
        }
        // Whole slots the source fills, free by the cached tail (never ahead of the real one),
        // up to the ring's last position; at least the one `slot_free` found.
        let (pos, _) = ring.slot(head);
        let count = (src.len() / ss)
            .min(COPY_RUN / ss)
            .min((limit as usize / 4).max(PUBLISH_BATCH as usize))
            .min(limit.saturating_sub(ring::occupancy(head, tail)) as usize)
            .min(ring.size - pos)
            .max(1);
        let n = if count > 1 {
            count * ss
        } else {
            src.len().min(ss)
        };
        if n < src.len() {
            ring.prefetch(head + count as u64); // overlaps with this run's copy
        }
        // SAFETY: positions `head..head + count` are free (occupancy + count <= limit), so their
        // pages are ours until published, and contiguous (pos + count <= ring size); n fills
        // the count slots (count > 1) or is at most one slot.
        unsafe { stage(sh, ring, head, count, Some(&mut *src), n) };
        head += count as u64;
        done += n;
        staged += count as u64;
        staged_bytes += n;
        if staged >= PUBLISH_BATCH {
            match publish_quiet(sh, head - staged, staged, staged_bytes) {
                Ok(old) if old & ring::WAITING != 0 && src.len() > 0 && apart(sh) => {
                    sh.wake_readers_if_waiting(old);
                }
                Ok(old) => sleepers |= old,
                Err(e) => break Err(e),
            }
            (staged, staged_bytes) = (0, 0);
        }
    };
    let published = publish_quiet(sh, head - staged, staged, staged_bytes);
    // One wake-up for the whole fill (see `publish_quiet`).
    sh.wake_readers_if_waiting(sleepers | *published.as_ref().unwrap_or(&0));
    note_next_write(ring, head);
    ws.head = head;
    ws.cached_tail = tail;
    published.and(result)
}

/// Whether a write that finds a reader asleep after publishing part of itself wakes it then,
/// not once at its end (as Linux's `pipe_write` does): when the reader went to sleep on another
/// CPU than this one. Then it runs beside us, copying out the part while we copy in the rest.
/// On our CPU it would only preempt us, and we it, once per part.
///
/// In a pipe that one write fills (the default 64 KiB, 64 KiB writes) both sides otherwise sleep
/// and wake once per write. On the development VM, alternating with the build that woke at the
/// end only (threads, MB/s; docs/benchmarks.md): beside 2 busy loops 2308-4415 against 500-2790,
/// beside 4 loops 1067-2067 against 549-1457, beside 1 loop (where the two sides mostly share a
/// CPU) 4626-5483 against 4830-5591. A hint from the futex's `sleeper_cpu`: a wrong one costs a
/// wake-up early or late, never one lost (the end of the write wakes whoever is still asleep).
fn apart(sh: &Shared) -> bool {
    #[cfg(all(test, not(loom)))]
    if tests::FORCE_APART.with(std::cell::Cell::get) {
        return true;
    }
    sh.header().readable.sleeper_here() == Some(false)
}

/// Copies `len` bytes from `src` (unless `None`: already in place) into the `count` free slots
/// from `head`, filling all but the last, and sets up their states; [`publish`] makes them
/// visible.
///
/// # Safety
/// The caller holds the write side; slots `head..head + count` are free and their positions
/// contiguous (no wrap); `(count - 1) * slot_size < len <= count * slot_size`, or `count == 1`
/// and `len <= slot_size`; `src` (if any) holds at least `len` bytes.
unsafe fn stage(
    sh: &Shared,
    ring: Ring<'_>,
    head: u64,
    count: usize,
    src: Option<&mut Source<'_>>,
    len: usize,
) {
    let (pos, _) = ring.slot(head);
    for k in 0..count {
        sh.claim(ring.slot(head + k as u64).1);
    }
    if let Some(src) = src {
        // SAFETY: guaranteed by the caller (free contiguous slots, len <= count * slot_size,
        // enough source bytes).
        unsafe { src.copy_to(ring.run(pos, count), len) };
        src.advance(len);
    }
    let flags = if sh.config().packet {
        PACKET
    } else {
        CAN_MERGE
    };
    let ss = ring.slot_size();
    for k in 0..count {
        let slot = ring.slot(head + k as u64).1;
        let bytes = (len - k * ss).min(ss);
        slot.start.store(0, Ordering::Relaxed);
        slot.state.store(bytes as u64 | flags, Ordering::Relaxed);
    }
}

/// Free slots of the ring, borrowed in place: fill them through [`WriteChunk::as_mut_slices`],
/// then [`WriteChunk::commit`] the bytes written. Dropping the chunk commits nothing. This is
/// pagepipe's `vmsplice(2)`: the bytes are written once, where the reader will read them.
///
/// Committed bytes form whole slots, never merged into earlier data; a later `write` may merge
/// into the last one, as with any write.
///
/// **Zero copy, and when.** While the pipe is confined to this process (made here, no end
/// forked or sent away), [`WriteChunk::as_mut_slices`] are the ring's own free pages. Once
/// another process may hold an end, a peer could touch them while you hold a `&mut [u8]`,
/// which Rust's rules call undefined behaviour: the safe slices are then a buffer of this
/// process, copied into the ring by [`WriteChunk::commit`], and
/// [`WriteChunk::as_mut_slices_unchecked`] is the zero-copy escape for callers that trust every
/// process holding the pipe.
///
/// Like a [`ReadChunk`](crate::ReadChunk), a chunk stays on the thread that took it (it is not
/// `Send`: the side it holds is held in that thread's name).
///
/// ```compile_fail,E0277
/// fn on_another_thread<T: Send>(_: T) {}
/// let (w, _r) = pagepipe::pipe()?;
/// on_another_thread(w.write_chunk()?);
/// # Ok::<(), std::io::Error>(())
/// ```
pub struct WriteChunk<'a> {
    end: &'a End,
    guard: WriteGuard<'a>,
    /// Free slots from `guard.head` on, at least one.
    free: usize,
    /// The safe slices' buffer when another process may write the region (see the type's
    /// docs); `commit` copies from it.
    staging: Option<Vec<u8>>,
}

impl WriteChunk<'_> {
    /// Bytes the chunk can take.
    ///
    /// # Examples
    ///
    /// ```
    /// let (w, r) = pagepipe::pipe()?;
    /// let mut chunk = w.write_chunk()?;
    /// assert_eq!(chunk.len(), 65_536); // an empty pipe: all of it
    /// assert!(!chunk.is_empty());
    /// let (first, second) = chunk.as_mut_slices();
    /// assert_eq!(first.len() + second.len(), 65_536);
    /// first[..2].copy_from_slice(b"hi");
    /// assert_eq!(chunk.commit(2), 2);
    /// assert_eq!(r.len(), 2);
    /// # Ok::<(), std::io::Error>(())
    /// ```
    pub fn len(&self) -> usize {
        self.free * self.guard.ring().slot_size()
    }

    /// Never true: a chunk has at least one free slot.
    ///
    /// # Examples
    /// See [`WriteChunk::len`].
    pub fn is_empty(&self) -> bool {
        self.free == 0
    }

    /// The free space as at most two contiguous runs (the ring wraps once); fill the first, then
    /// the second.
    ///
    /// # Examples
    /// See [`WriteChunk::len`].
    pub fn as_mut_slices(&mut self) -> (&mut [u8], &mut [u8]) {
        if self.end.shared.private() && self.staging.is_none() {
            // SAFETY: no other process can touch the region (the pipe is confined to this
            // one), and no pagepipe code touches free slots while we hold the write side.
            return unsafe { self.as_mut_slices_unchecked() };
        }
        let (la, lb) = self.runs();
        let buf = self.staging.get_or_insert_with(|| vec![0; la + lb]);
        buf.split_at_mut(la)
    }

    /// [`WriteChunk::as_mut_slices`] as the ring's own free pages, always: no copy at
    /// [`WriteChunk::commit`], whichever processes hold the pipe. Use one or the other for a
    /// chunk: once the safe slices were taken, `commit` copies from their buffer.
    ///
    /// # Safety
    /// No other process may read or write these bytes while the returned slices live. Every
    /// process running pagepipe respects that (the chunk holds the write side; readers never
    /// look past the published head), so it holds when every process holding an end of the
    /// pipe is one you trust to run pagepipe unmodified.
    ///
    /// # Examples
    ///
    /// ```
    /// let (w, r) = pagepipe::pipe()?;
    /// let mut chunk = w.write_chunk()?;
    /// // SAFETY: both ends are in this process.
    /// let (first, _) = unsafe { chunk.as_mut_slices_unchecked() };
    /// first[..2].copy_from_slice(b"hi");
    /// chunk.commit(2);
    /// assert_eq!(r.len(), 2);
    /// # Ok::<(), std::io::Error>(())
    /// ```
    pub unsafe fn as_mut_slices_unchecked(&mut self) -> (&mut [u8], &mut [u8]) {
        let ring = self.guard.ring();
        let first = ring::slot(self.guard.head, ring.size);
        let (la, lb) = self.runs();
        let (pa, pb) = (ring.page(first), ring.page(0));
        // SAFETY: positions first..first+a and 0..free-a are free slots, contiguous in the arena
        // and disjoint (free <= ring_size); we hold the write side, so no pagepipe code in any
        // process touches them while `self` is mutably borrowed, and the caller vouches for
        // every other writer of the region.
        unsafe {
            (
                std::slice::from_raw_parts_mut(pa, la),
                std::slice::from_raw_parts_mut(pb, lb),
            )
        }
    }

    /// The chunk's two runs of free pages by address, for copies and system calls that must
    /// not form a reference to memory a peer may touch (splice, tee). Bytes placed there are
    /// published by `commit` as long as the safe slices were not taken.
    pub(crate) fn raw_runs(&self) -> [(*mut u8, usize); 2] {
        let ring = self.guard.ring();
        let first = ring::slot(self.guard.head, ring.size);
        let (la, lb) = self.runs();
        [(ring.page(first), la), (ring.page(0), lb)]
    }

    /// The lengths of the chunk's two runs of free pages (the ring wraps once).
    fn runs(&self) -> (usize, usize) {
        let ring = self.guard.ring();
        let first = ring::slot(self.guard.head, ring.size);
        let a = self.free.min(ring.size - first);
        (a * ring.slot_size(), (self.free - a) * ring.slot_size())
    }

    /// Publishes the first `n` bytes written through [`WriteChunk::as_mut_slices`] and returns `n`.
    ///
    /// # Panics
    /// If `n` exceeds [`WriteChunk::len`].
    ///
    /// # Examples
    /// See [`WriteChunk::len`].
    pub fn commit(mut self, n: usize) -> usize {
        assert!(
            n <= self.len(),
            "commit of {n} bytes into a chunk of {} bytes",
            self.len()
        );
        let sh = self.guard.sh;
        let ring = self.guard.ring();
        let ss = ring.slot_size();
        if let Some(buf) = self.staging.take() {
            // The safe slices' bytes, into the two runs of pages, through raw pointers only.
            let (la, _) = self.runs();
            let first = ring::slot(self.guard.head, ring.size);
            let (a, b) = (n.min(la), n.saturating_sub(la));
            // SAFETY: a <= la and b <= lb: inside the chunk's two runs of free pages (see
            // `as_mut_slices_unchecked`); `buf` is this process's memory of la + lb bytes.
            unsafe {
                std::ptr::copy_nonoverlapping(buf.as_ptr(), ring.page(first), a);
                std::ptr::copy_nonoverlapping(buf.as_ptr().add(la), ring.page(0), b);
            }
        }
        let mut head = self.guard.head;
        for off in (0..n).step_by(ss) {
            // SAFETY: slot `head` is one of the chunk's free slots; the bytes are already in
            // place; (n - off).min(ss) <= slot_size.
            unsafe { stage(sh, ring, head, 1, None, (n - off).min(ss)) };
            head += 1;
        }
        // The side was taken with its head checked; a peer that corrupted the word since is
        // reported by the next write (commit has no error to return).
        let _ = publish(sh, self.guard.head, head - self.guard.head, n);
        self.guard.head = head;
        self.end.sync();
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

impl Writer {
    fn write_one(&self, buf: &[u8]) -> io::Result<usize> {
        if let Some(r) = self.write_small(buf) {
            return r;
        }
        let one = [IoSlice::new(buf)];
        self.write_impl(&mut Source::new(&one), false, None)
    }
}

/// `writev(2)` semantics: the buffers are one write; if they hold at most [`crate::PIPE_BUF`]
/// bytes in all, it is atomic, done under one hold of the write side.
impl io::Write for Writer {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.write_one(buf)
    }
    fn write_vectored(&mut self, bufs: &[IoSlice<'_>]) -> io::Result<usize> {
        self.write_impl(&mut Source::new(bufs), false, None)
    }
    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

impl io::Write for &Writer {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.write_one(buf)
    }
    fn write_vectored(&mut self, bufs: &[IoSlice<'_>]) -> io::Result<usize> {
        self.write_impl(&mut Source::new(bufs), false, None)
    }
    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

impl Writer {
    /// Always true: [`io::Write::write_vectored`] writes every buffer in one call, atomically
    /// up to [`crate::PIPE_BUF`] bytes in all (`Write::is_write_vectored` is not yet stable).
    ///
    /// # Examples
    ///
    /// ```
    /// let (w, _r) = pagepipe::pipe()?;
    /// assert!(w.is_write_vectored());
    /// # Ok::<(), std::io::Error>(())
    /// ```
    pub fn is_write_vectored(&self) -> bool {
        true
    }
}

impl Clone for Writer {
    fn clone(&self) -> Writer {
        Writer {
            end: self.end.clone(),
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

#[cfg(all(test, not(loom)))]
mod tests {
    std::thread_local! {
        /// Makes [`super::apart`] say yes on this thread, whatever the CPUs.
        pub(super) static FORCE_APART: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
    }

    /// Writes larger than a small pipe, each waking the sleeping reader after its first part:
    /// every byte arrives in order, and no wake-up is lost (a lost one would leave the reader
    /// to its 1 s tick, and 400 of them to minutes).
    #[test]
    fn early_wake_ups_keep_every_byte_and_lose_none() {
        FORCE_APART.with(|f| f.set(true));
        let start = std::time::Instant::now();
        let sizes = [64 << 10, 200_000, 16 << 10, 5, 70_001];
        crate::pipe::pump_and_check(64 << 10, 400, &sizes, || {});
        assert!(
            start.elapsed() < std::time::Duration::from_secs(60),
            "a wake-up was lost: {:?}",
            start.elapsed()
        );
    }
}

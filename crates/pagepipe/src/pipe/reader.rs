//! The reading end: `io::Read`, packet reads, and borrowing queued bytes in place.

use crate::error::{invalid, would_block};
use crate::pipe::end::End;
use crate::pipe::shared::{ReadGuard, Ring, Shared, COPY_RUN, PUBLISH_BATCH};
use crate::region::{Side, Slot, DROPPED, END_MASK, PACKET, RELEASED};
use crate::sync::{Arc, Ordering};
use crate::wait::earliest;
use std::io;
use std::time::{Duration, Instant};

/// The reading end of a pipe.
///
/// Cloning a `Reader` is like `dup(2)`ing a pipe's read descriptor; writers get
/// [`io::ErrorKind::BrokenPipe`] once the last clone is dropped in every process that holds one.
/// A read returns what is queued (up to the buffer's length) without waiting for more; it blocks
/// only on an empty pipe, and returns `Ok(0)` (end of file) once the pipe is empty and no
/// writer is left in any process (dropped, exited or killed).
///
/// Its `AsFd` descriptor is for polling only, not a descriptor of the data (see the `AsFd` impl).
pub struct Reader {
    pub(crate) end: Arc<End>,
}

impl Reader {
    fn shared(&self) -> &Shared {
        &self.end.shared
    }

    /// Switches this end to non-blocking mode (`O_NONBLOCK`) or back, for every holder of it:
    /// a read of an empty pipe then fails with [`io::ErrorKind::WouldBlock`] while writers
    /// exist, and so does a read that finds the read side held (by a chunk or a resize).
    ///
    /// # Errors
    /// None today; the `Result` leaves room for one, as `UnixStream::set_nonblocking`'s.
    ///
    /// # Examples
    ///
    /// ```
    /// let (_w, r) = pagepipe::pipe()?;
    /// r.set_nonblocking(true)?;
    /// assert!(r.is_nonblocking());
    /// let err = std::io::Read::read(&mut &r, &mut [0u8; 8]).unwrap_err();
    /// assert_eq!(err.kind(), std::io::ErrorKind::WouldBlock);
    /// # Ok::<(), std::io::Error>(())
    /// ```
    pub fn set_nonblocking(&self, nonblocking: bool) -> io::Result<()> {
        self.end.set_nonblocking(nonblocking);
        Ok(())
    }

    /// Whether reads are non-blocking.
    ///
    /// # Examples
    ///
    /// ```
    /// let (_w, r) = pagepipe::pipe()?;
    /// assert!(!r.is_nonblocking()); // blocking, like a new pipe(2)
    /// # Ok::<(), std::io::Error>(())
    /// ```
    pub fn is_nonblocking(&self) -> bool {
        self.end.is_nonblocking()
    }

    /// Bounds how long a read (and [`Reader::read_chunk`]) waits for data or for the read
    /// side, like `UnixStream::set_read_timeout`; `None` waits forever. An expired wait is
    /// [`io::ErrorKind::TimedOut`]. Shared by every holder of this end.
    ///
    /// # Errors
    /// [`io::ErrorKind::InvalidInput`] for `Some(Duration::ZERO)`, as for sockets.
    ///
    /// ```
    /// use std::time::Duration;
    /// let (_w, r) = pagepipe::pipe()?;
    /// r.set_read_timeout(Some(Duration::from_millis(10)))?;
    /// let err = std::io::Read::read(&mut &r, &mut [0u8; 8]).unwrap_err();
    /// assert_eq!(err.kind(), std::io::ErrorKind::TimedOut);
    /// # Ok::<(), std::io::Error>(())
    /// ```
    pub fn set_read_timeout(&self, timeout: Option<Duration>) -> io::Result<()> {
        self.end.set_timeout(timeout)
    }

    /// The read timeout set by [`Reader::set_read_timeout`].
    ///
    /// # Errors
    /// None today; the `Result` matches `UnixStream::read_timeout`.
    ///
    /// # Examples
    ///
    /// ```
    /// let (_w, r) = pagepipe::pipe()?;
    /// assert_eq!(r.read_timeout()?, None);
    /// r.set_read_timeout(Some(std::time::Duration::from_secs(1)))?;
    /// assert_eq!(r.read_timeout()?, Some(std::time::Duration::from_secs(1)));
    /// # Ok::<(), std::io::Error>(())
    /// ```
    pub fn read_timeout(&self) -> io::Result<Option<Duration>> {
        Ok(self.end.timeout())
    }

    /// The pipe's capacity in bytes (`F_GETPIPE_SZ`).
    ///
    /// # Examples
    ///
    /// ```
    /// let (_w, r) = pagepipe::pipe()?;
    /// assert_eq!(r.capacity(), pagepipe::DEFAULT_CAPACITY);
    /// # Ok::<(), std::io::Error>(())
    /// ```
    pub fn capacity(&self) -> usize {
        self.shared().capacity()
    }

    /// Resizes the pipe; see [`crate::Writer::set_capacity`].
    ///
    /// # Errors
    /// As [`crate::Writer::set_capacity`].
    ///
    /// # Examples
    ///
    /// ```
    /// let (_w, r) = pagepipe::pipe()?;
    /// assert_eq!(r.set_capacity(1 << 20)?, 1 << 20);
    /// # Ok::<(), std::io::Error>(())
    /// ```
    pub fn set_capacity(&self, bytes: usize) -> io::Result<usize> {
        let cap = self
            .shared()
            .set_capacity(bytes, self.shared().deadline(Side::Read))?;
        self.shared().sync_local();
        Ok(cap)
    }

    /// Bytes queued (`FIONREAD`), without taking a lock: a snapshot.
    ///
    /// ```
    /// use std::io::Write;
    /// let (mut w, r) = pagepipe::pipe()?;
    /// w.write_all(b"12345")?;
    /// assert_eq!(r.len(), 5);
    /// # Ok::<(), std::io::Error>(())
    /// ```
    pub fn len(&self) -> usize {
        self.shared().queued_bytes()
    }

    /// Whether slots are queued, by the index words (not by the byte counters, which a peer may
    /// raise without publishing anything): what the async adapter waits on.
    #[cfg_attr(not(feature = "tokio"), allow(dead_code))]
    pub(crate) fn slots_queued(&self) -> bool {
        let (head, tail) = self.shared().indices();
        head != tail
    }

    /// True when no byte is queued (see [`Reader::len`]).
    ///
    /// # Examples
    ///
    /// ```
    /// let (_w, r) = pagepipe::pipe()?;
    /// assert!(r.is_empty());
    /// # Ok::<(), std::io::Error>(())
    /// ```
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Borrows the queued bytes in place; see [`ReadChunk`].
    ///
    /// Blocks until data is queued (in non-blocking mode fails with
    /// [`io::ErrorKind::WouldBlock`] instead); an empty chunk means end of file. Other readers,
    /// in every process, wait until the chunk is dropped, and so does `set_capacity`; the thread
    /// holding it gets [`io::ErrorKind::Deadlock`] if it reads this pipe meanwhile.
    ///
    /// # Errors
    /// `TimedOut` after the read timeout; `InvalidData` if the shared region is corrupt.
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
        let sh = self.shared();
        let deadline = sh.deadline(Side::Read);
        loop {
            // Checked before looking: seeing no writer means seeing every slot they published.
            // A non-blocking call asks the kernel before it could answer WouldBlock: a writer
            // that was killed (or is closing) has not bumped the close counter.
            let nonblocking = self.is_nonblocking();
            let eof = self.end.peer_gone(nonblocking);
            let mut rs = sh.lock_read(sh.lock_wait(nonblocking, deadline))?;
            rs.cached_head = sh.load_head(rs.tail, rs.ring_size)?;
            if rs.cached_head != rs.tail || eof {
                let ring = rs.ring();
                for i in rs.tail..rs.cached_head {
                    let (_, slot) = ring.slot(i);
                    slot_range(slot, i, ring)?;
                }
                return Ok(ReadChunk {
                    end: &self.end,
                    guard: rs,
                    copy: std::cell::OnceCell::new(),
                });
            }
            if nonblocking {
                return Err(would_block());
            }
            drop(rs);
            self.end.wait_readable(deadline)?;
        }
    }

    /// Reads without blocking, whatever this end's mode: like `read` in non-blocking mode
    /// (`WouldBlock` on an empty pipe while writers exist, or on a read side held by a chunk).
    /// What async adapters and event loops use without changing the mode every holder shares.
    ///
    /// ```
    /// use std::io::Write;
    /// let (mut w, r) = pagepipe::pipe()?;
    /// let mut buf = [0u8; 8];
    /// assert_eq!(r.try_read(&mut buf).unwrap_err().kind(), std::io::ErrorKind::WouldBlock);
    /// w.write_all(b"now")?;
    /// assert_eq!(r.try_read(&mut buf)?, 3);
    /// # Ok::<(), std::io::Error>(())
    /// ```
    ///
    /// # Errors
    /// [`io::ErrorKind::WouldBlock`] when nothing is queued while writers exist, or the read
    /// side is held; `InvalidData` if the shared region is corrupt. `Ok(0)` is end of file.
    pub fn try_read(&self, buf: &mut [u8]) -> io::Result<usize> {
        self.read_impl(buf, How::Now, None)
    }

    /// Reads as `read` does, but waits at most until `deadline` (and no longer than the read
    /// timeout, if one is set): a bound for this one call, where
    /// [`Reader::set_read_timeout`] sets one for every holder. A caller that must stay
    /// responsive while it waits (to a signal, a cancellation flag) reads in slices this way.
    ///
    /// ```
    /// use std::time::{Duration, Instant};
    /// let (w, r) = pagepipe::pipe()?;
    /// let mut buf = [0u8; 8];
    /// let soon = Instant::now() + Duration::from_millis(10);
    /// let err = r.read_deadline(&mut buf, soon).unwrap_err();
    /// assert_eq!(err.kind(), std::io::ErrorKind::TimedOut);
    /// std::io::Write::write_all(&mut &w, b"hi")?;
    /// assert_eq!(r.read_deadline(&mut buf, Instant::now() + Duration::from_secs(1))?, 2);
    /// # Ok::<(), std::io::Error>(())
    /// ```
    ///
    /// # Errors
    /// As `read`'s, and [`io::ErrorKind::TimedOut`] when the deadline passes with nothing
    /// read: at once if it has passed and the pipe is empty, even with no writer left (a
    /// passed deadline is looked at before end of file); queued bytes are still read.
    pub fn read_deadline(&self, buf: &mut [u8], deadline: Instant) -> io::Result<usize> {
        self.read_impl(buf, How::ByMode, Some(deadline))
    }

    /// [`Reader::try_read`] for a caller whose reactor watches this end's descriptor: an empty
    /// ring is `WouldBlock` without asking the kernel whether a writer is left (one system
    /// call less per empty try), as the reactor reports a killed writer's `POLLHUP` itself.
    #[cfg(feature = "tokio")]
    pub(crate) fn try_read_polled(&self, buf: &mut [u8]) -> io::Result<usize> {
        self.read_impl(buf, How::Polled, None)
    }

    /// Every byte-stream read: `how` it waits, and until when at most besides the end's
    /// timeout.
    fn read_impl(&self, buf: &mut [u8], how: How, limit: Option<Instant>) -> io::Result<usize> {
        if buf.is_empty() {
            return Ok(0); // a null read succeeds (as in Linux)
        }
        let nonblocking = how != How::ByMode || self.is_nonblocking();
        let sh = self.shared();
        let deadline = earliest(sh.deadline(Side::Read), limit);
        #[cfg(not(loom))]
        let _call = crate::pipe::end::CallDeadline::set(deadline);
        let max = buf.len();
        let dst = buf.as_mut_ptr();
        let copy = |off: usize, src: *const u8, len: usize| {
            debug_assert!(off + len <= max);
            // SAFETY: `consume` hands runs that fit in `max` bytes at offset `off` (it bounds
            // each by `max - n` whatever the region says), from inside one ring page (shared
            // memory, copied raw, never borrowed as a slice) into `buf`, which we borrow
            // mutably and which cannot overlap the region's mapping.
            unsafe { crate::pipe::copy::copy(src, dst.add(off), len) }
        };
        if !nonblocking {
            // A reader that waits for a reply usually finds the ring empty: wait for data
            // before taking the side, not after a lock, an empty consume and an unlock. (The
            // wait returns at once if data or end of file is there; the loop decides.)
            let (head, tail) = sh.indices();
            if head == tail {
                self.end.wait_readable(deadline)?;
            }
        }
        if let Some(r) = self.read_one_slot(buf) {
            return r;
        }
        loop {
            let mut rs = sh.lock_read(sh.lock_wait(nonblocking, deadline))?;
            let n = consume(sh, &mut rs, max, By::Read, copy)?;
            if n > 0 {
                self.end.sync();
                return Ok(n);
            }
            // Seeing no writer means seeing every slot they published (see `End::peer_gone`):
            // look once more before reporting end of file. Before answering WouldBlock, ask the
            // kernel: a killed writer bumps no counter, and an event loop woken by POLLHUP must
            // see end of file, not WouldBlock (unless that loop is ours and saw it itself).
            if self.end.peer_gone(nonblocking && how != How::Polled) {
                let n = consume(sh, &mut rs, max, By::Read, copy);
                self.end.sync();
                return n;
            }
            if nonblocking {
                return Err(would_block());
            }
            drop(rs);
            self.end.wait_readable(deadline)?;
        }
    }
}

/// How a read waits, and what an empty ring makes it ask.
#[derive(Clone, Copy, PartialEq, Eq)]
enum How {
    /// As the end's mode says (`read`).
    ByMode,
    /// Never waits; an empty ring asks the kernel whether a writer is left (`try_read`).
    Now,
    /// Never waits, and asks the kernel nothing: the caller's reactor watches the descriptor.
    #[cfg_attr(not(feature = "tokio"), allow(dead_code))]
    Polled,
}

impl Reader {
    /// The common read: the read side is free, and the first queued slot holds all the
    /// caller asked for or is the last one published. Copies from that one slot and releases
    /// it once drained, as `consume` would, without its loop. `None`, before consuming
    /// anything, when that does not hold (an empty ring, a packet, a read that spans slots,
    /// an empty slot, a held side, a corrupt saved state): the general path then waits or
    /// reports, as if it had been called first. Reached from every byte-stream read, with or
    /// without data, after a blocking read's wait.
    #[inline]
    fn read_one_slot(&self, buf: &mut [u8]) -> Option<io::Result<usize>> {
        let sh = self.shared();
        let mut rs = sh.try_lock_read()?;
        let ring = rs.ring();
        let (tail, mut head) = (rs.tail, rs.cached_head);
        if tail == head {
            head = match sh.load_head(tail, ring.size) {
                Ok(h) if h == tail => return None,
                Ok(h) => h,
                Err(e) => return Some(Err(e)),
            };
        }
        let (pos, slot) = ring.slot(tail);
        let (start, end, st) = match slot_range(slot, tail, ring) {
            Ok(r) => r,
            Err(e) => return Some(Err(e)),
        };
        let max = buf.len();
        if st & PACKET != 0 || start == end {
            return None;
        }
        if end - start < max {
            // A read takes every queued byte it has room for: this slot must be the last one
            // published, now, not only in our cached view.
            if tail + 1 == head {
                head = match sh.load_head(tail, ring.size) {
                    Ok(h) => h,
                    Err(e) => return Some(Err(e)),
                };
            }
            if tail + 1 != head {
                return None;
            }
        }
        let c = (end - start).min(max);
        // SAFETY: start + c <= end <= slot_size (slot_range checked them; `c` is bounded by
        // `buf`), so the run lies within the slot's page, published to us by the Acquire loads
        // above (writers only append past `end`); `buf` is ours and cannot overlap the
        // region's mapping.
        unsafe { crate::pipe::copy::copy(ring.page(pos).add(start), buf.as_mut_ptr(), c) };
        let drained = start + c == end && release(sh, (pos, slot, st), (tail, head), rs.limit);
        if !drained {
            // Part of the slot is left, or a writer merged more into it meanwhile.
            slot.start.store((start + c) as u64, Ordering::Relaxed);
        }
        add_consumed(sh, c);
        let released = u64::from(drained);
        sh.advance_tail(released);
        rs.tail = tail + released;
        rs.cached_head = head;
        self.end.sync();
        Some(Ok(c))
    }
}

/// The data range `(start, end)` of published slot `index`, validated: within the page, and a
/// state a writer publishes (no free-slot flag).
fn slot_range(slot: &Slot, index: u64, ring: Ring<'_>) -> io::Result<(usize, usize, u64)> {
    // Acquire: pairs with the writer's Release merge CAS (and, through the head word, its
    // publication), so the bytes up to `end` are visible.
    let st = slot.state.load(Ordering::Acquire);
    let start = slot.start.load(Ordering::Relaxed);
    let end = st & END_MASK;
    if st & (RELEASED | DROPPED) != 0 || end > ring.slot_size() as u64 || start > end {
        return Err(invalid(format!(
            "published slot {index} has state {st:#x} and start {start}"
        )));
    }
    Ok((start as usize, end as usize, st))
}

/// The run of published slots from `tail` (before `head`) that [`consume`] can copy at once,
/// given the state `first` of slot `tail`, already validated and full: each slot full (all of
/// its page, none read yet, no packet), their positions contiguous, at most `room` bytes and
/// [`COPY_RUN`]. Returns the states seen (validated), `first` included; fewer than two means
/// "go slot by slot".
fn full_run(ring: Ring<'_>, tail: u64, head: u64, room: usize, first: u64) -> RunStates {
    let ss = ring.slot_size();
    let (pos, _) = ring.slot(tail);
    let most = (room / ss)
        .min(COPY_RUN / ss)
        .min(ring.size - pos)
        .min(head.wrapping_sub(tail).min(MAX_RUN as u64) as usize);
    let mut states = RunStates::new();
    states.push(first);
    while states.len() < most {
        let index = tail + states.len() as u64;
        match slot_range(ring.slot(index).1, index, ring) {
            Ok((0, end, st)) if end == ss && st & PACKET == 0 => states.push(st),
            _ => break,
        }
    }
    states
}

/// Most slots in one run: [`COPY_RUN`] of the smallest slots.
const MAX_RUN: usize = COPY_RUN / crate::sys::mm::PAGE_SIZE;

/// The states of a run's slots, in order (at most [`MAX_RUN`]).
struct RunStates {
    states: [u64; MAX_RUN],
    len: usize,
}

impl RunStates {
    fn new() -> RunStates {
        RunStates {
            states: [0; MAX_RUN],
            len: 0,
        }
    }
    fn push(&mut self, st: u64) {
        self.states[self.len] = st;
        self.len += 1;
    }
    fn len(&self) -> usize {
        self.len
    }
    fn iter(&self) -> std::slice::Iter<'_, u64> {
        self.states[..self.len].iter()
    }
}

/// Who consumes, which decides how far [`consume`] goes.
#[derive(Clone, Copy, PartialEq, Eq)]
enum By {
    /// A read: takes what is queued, slots published meanwhile too, and at most one packet (a
    /// packet slot is released after one run whatever is left of it).
    Read,
    /// A chunk's `consume`: only the slots the chunk showed (up to the guard's `cached_head`),
    /// packets as plain bytes.
    Chunk,
}

/// Consumes up to `max` queued bytes from the tail, handing each run to
/// `sink(offset, first byte, length)`, and releases every slot it drains; how far it goes is
/// `by`'s (see [`By`]). A corrupt slot stops it: the bytes consumed before are returned, and
/// the error when there are none.
fn consume(
    sh: &Shared,
    rs: &mut ReadGuard<'_>,
    max: usize,
    by: By,
    mut sink: impl FnMut(usize, *const u8, usize),
) -> io::Result<usize> {
    let (mut tail, mut head) = (rs.tail, rs.cached_head);
    let mut released = 0;
    let mut sleepers = 0; // the tail word's sleeper flag, as releases returned it
    let ring = rs.ring();
    let mut n = 0;
    let mut error = None;
    let mut next_fetched = false; // whether the slot at `tail` was prefetched as the next one
                                  // Slots that gave no byte. A writer publishes none, but a peer writing the region can
                                  // publish empty slots as fast as we release them: the call ends after a ring's worth.
    let mut empty = 0;
    while n < max && empty <= ring.size {
        if tail == head {
            if by == By::Chunk {
                break;
            }
            head = sh.load_head(tail, ring.size).unwrap_or_else(|e| {
                error = Some(e);
                tail
            });
            if tail == head {
                break;
            }
        }
        // The slot's line and its data's first line travel together (and the next slot's
        // while this one is copied), rather than one miss after another; each slot once.
        if !next_fetched {
            ring.prefetch(tail);
        }
        next_fetched = tail + 1 != head;
        if next_fetched {
            ring.prefetch(tail + 1);
        }
        let (pos, slot) = ring.slot(tail);
        let (start, end, st) = match slot_range(slot, tail, ring) {
            Ok(r) => r,
            Err(e) => {
                error = Some(e);
                break;
            }
        };
        // Whole slots, queued one after the other in memory: one copy for the run.
        let ss = ring.slot_size();
        let runs = if start == 0 && end == ss && st & PACKET == 0 {
            full_run(ring, tail, head, max - n, st)
        } else {
            RunStates::new()
        };
        if runs.len() > 1 {
            sink(n, ring.run(pos, runs.len()), runs.len() * ss);
            n += runs.len() * ss;
            let mut raced = false;
            for (k, &st) in runs.iter().enumerate() {
                let slot = ring.slot(tail).1;
                if !release(sh, (pos + k, slot, st), (tail, head), rs.limit) {
                    // Its state changed under us (only a peer writing the region can change a
                    // full slot's): its bytes are consumed, the slot stays for the next call.
                    slot.start.store(ss as u64, Ordering::Relaxed);
                    raced = true;
                    break;
                }
                tail += 1;
                released += 1;
                if released >= PUBLISH_BATCH {
                    sleepers |= sh.advance_tail_quiet(released);
                    released = 0;
                }
            }
            if raced {
                break;
            }
            next_fetched = false;
            continue;
        }
        let c = (end - start).min(max - n);
        // start + c <= end <= slot_size: the run lies within the slot's page, published to us by
        // the Acquire loads above; writers only append past `end`, so nobody writes it now.
        sink(n, ring.page(pos).wrapping_add(start), c);
        n += c;
        empty += usize::from(c == 0);
        let packet_done = st & PACKET != 0 && by == By::Read;
        if start + c < end && !packet_done {
            slot.start.store((start + c) as u64, Ordering::Relaxed);
            break; // the caller's buffer is full
        }
        if release(sh, (pos, slot, st), (tail, head), rs.limit) {
            tail += 1;
            released += 1;
            if released == PUBLISH_BATCH {
                sleepers |= sh.advance_tail_quiet(released);
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
    add_consumed(sh, n);
    sleepers |= sh.advance_tail_quiet(released);
    sh.wake_writers_if_waiting(sleepers);
    rs.tail = tail;
    rs.cached_head = head;
    match error {
        Some(e) if n == 0 => Err(e),
        _ => Ok(n),
    }
}

/// Counts `n` more bytes consumed (for `Reader::len`); only read-side holders write it.
fn add_consumed(sh: &Shared, n: usize) {
    let out = &sh.header().tail.bytes;
    out.store(
        out.load(Ordering::Relaxed).wrapping_add(n as u64),
        Ordering::Relaxed,
    );
}

/// Releases the drained slot `tail` (at `pos`, seen with state `st`) unless a writer merged into
/// it meanwhile (then false); keeps its page as a spare or gives it back to the OS, as the pool
/// policy says. The caller advances the tail ([`Shared::advance_tail`]).
fn release(
    sh: &Shared,
    (pos, slot, st): (usize, &Slot, u64),
    (tail, head): (u64, u64),
    limit: u64,
) -> bool {
    let keep = sh
        .config()
        .policy
        .keep_on_release(|| sh.spare(limit, head, tail));
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
        sh.header().dropped.fetch_add(1, Ordering::Relaxed);
        sh.region.drop_pages(pos, 1);
    }
    true
}

/// The queued bytes of a pipe, borrowed in place: look at them through [`ReadChunk::slices`],
/// then [`ReadChunk::consume`] what you used. Dropping the chunk consumes nothing.
///
/// An empty chunk means end of file. In packet mode each slice is one packet (or its unread
/// rest), and consuming part of a packet keeps the rest queued.
///
/// **Zero copy, and when.** While the pipe is *confined* to this process (made here, and no
/// end has been forked or sent away), no other process can write its memory, and
/// [`ReadChunk::slices`] are the ring's own bytes. Once another process may hold an end, a
/// peer could write those bytes while you hold a `&[u8]` to them, which Rust's rules call
/// undefined behaviour whatever you do with them: the safe `slices` then copy the chunk into
/// memory of this process first (once, at the first call), and [`ReadChunk::slices_unchecked`]
/// is the zero-copy escape for callers that trust every process holding the pipe. pagepipe
/// itself checks every offset before it reads, copies or forms a slice.
///
/// A chunk stays on the thread that took it (it is not `Send`): the side it holds is held in
/// that thread's name, and a chunk moved to another thread would outlive it if the thread
/// exited (the side would then be taken over while still in use).
///
/// ```compile_fail,E0277
/// fn on_another_thread<T: Send>(_: T) {}
/// let (_w, r) = pagepipe::pipe()?;
/// on_another_thread(r.read_chunk()?);
/// # Ok::<(), std::io::Error>(())
/// ```
pub struct ReadChunk<'a> {
    end: &'a End,
    guard: ReadGuard<'a>,
    /// The chunk copied out of the shared region (bytes, and each slot's range in them), for a
    /// pipe another process may write (see the type's docs).
    copy: std::cell::OnceCell<(Vec<u8>, Vec<std::ops::Range<usize>>)>,
}

impl ReadChunk<'_> {
    /// The queued bytes, one slice per slot, oldest first.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::io::Write;
    /// let (mut w, r) = pagepipe::pipe()?;
    /// w.write_all(b"abc")?;
    /// let chunk = r.read_chunk()?;
    /// assert_eq!(chunk.len(), 3);
    /// assert!(!chunk.is_empty());
    /// assert_eq!(chunk.slices().next(), Some(&b"abc"[..]));
    /// chunk.consume(2); // "c" stays queued
    /// assert_eq!(r.len(), 1);
    /// # Ok::<(), std::io::Error>(())
    /// ```
    pub fn slices(&self) -> impl Iterator<Item = &[u8]> + '_ {
        let copied =
            (!self.end.shared.private()).then(|| self.copy.get_or_init(|| self.copy_out()));
        let ring = self.guard.ring();
        let tail = self.guard.tail;
        (0..self.guard.cached_head - tail).map(move |k| match copied {
            Some((bytes, ranges)) => &bytes[ranges[k as usize].clone()],
            None => {
                let (ptr, len) = self.slot_bytes(ring, tail + k);
                // SAFETY: `slot_bytes` keeps the range inside the slot's page; no other
                // process can write the region (the pipe is confined to this one) and no
                // pagepipe code writes published slots while we hold the read side.
                unsafe { std::slice::from_raw_parts(ptr, len) }
            }
        })
    }

    /// [`ReadChunk::slices`] as the ring's own bytes, always: no copy, whichever processes
    /// hold the pipe.
    ///
    /// # Safety
    /// No process may write these bytes while the returned slices live. Every process running
    /// pagepipe respects that (the chunk holds the read side; writers only append past a
    /// slot's end), so it holds when every process holding an end of the pipe is one you
    /// trust to run pagepipe unmodified; a process that writes the shared region by other
    /// means breaks it.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::io::Write;
    /// let (mut w, r) = pagepipe::pipe()?;
    /// w.write_all(b"abc")?;
    /// let chunk = r.read_chunk()?;
    /// // SAFETY: both ends are in this process.
    /// let first = unsafe { chunk.slices_unchecked() }.next();
    /// assert_eq!(first, Some(&b"abc"[..]));
    /// # Ok::<(), std::io::Error>(())
    /// ```
    pub unsafe fn slices_unchecked(&self) -> impl Iterator<Item = &[u8]> + '_ {
        // SAFETY: the caller's contract.
        unsafe { self.raw_slices() }
    }

    /// The slots' bytes in the region, one slice per slot.
    ///
    /// # Safety
    /// As [`ReadChunk::slices_unchecked`].
    unsafe fn raw_slices(&self) -> impl Iterator<Item = &[u8]> + '_ {
        let ring = self.guard.ring();
        (self.guard.tail..self.guard.cached_head).map(move |i| {
            let (ptr, len) = self.slot_bytes(ring, i);
            // SAFETY: `slot_bytes` keeps the range inside the slot's page; nobody writes it
            // while the slices live (the caller's contract).
            unsafe { std::slice::from_raw_parts(ptr, len) }
        })
    }

    /// Slot `i`'s published bytes: where they start and how many, clamped to its page whatever
    /// a peer changed since `read_chunk` checked the slot.
    fn slot_bytes(&self, ring: Ring<'_>, i: u64) -> (*const u8, usize) {
        let (pos, slot) = ring.slot(i);
        // Acquire: pairs with the writer's Release merge CAS (see `slot_range`).
        let end = ((slot.state.load(Ordering::Acquire) & END_MASK) as usize).min(ring.slot_size());
        let start = (slot.start.load(Ordering::Relaxed) as usize).min(end);
        // SAFETY: start <= end <= slot_size: inside position pos's page.
        (unsafe { ring.page(pos).add(start) }, end - start)
    }

    /// The chunk's bytes by address, one run per slot, for copies and system calls that must
    /// not form a reference to memory a peer may write (splice, tee).
    pub(crate) fn raw_runs(&self) -> impl Iterator<Item = (*const u8, usize)> + '_ {
        let ring = self.guard.ring();
        (self.guard.tail..self.guard.cached_head).map(move |i| self.slot_bytes(ring, i))
    }

    /// Copies the chunk out of the shared region, through raw pointers only (no reference to
    /// memory a peer may write is ever formed).
    fn copy_out(&self) -> (Vec<u8>, Vec<std::ops::Range<usize>>) {
        let ring = self.guard.ring();
        let mut bytes: Vec<u8> = Vec::new();
        let mut ranges = Vec::new();
        for i in self.guard.tail..self.guard.cached_head {
            let (ptr, len) = self.slot_bytes(ring, i);
            let at = bytes.len();
            bytes.reserve(len);
            // SAFETY: `ptr..ptr + len` lies in the slot's page (slot_bytes); `bytes` has room
            // for `len` more bytes past `at`, which we then mark initialized.
            unsafe {
                std::ptr::copy_nonoverlapping(ptr, bytes.as_mut_ptr().add(at), len);
                bytes.set_len(at + len);
            }
            ranges.push(at..at + len);
        }
        (bytes, ranges)
    }

    /// Total bytes in [`ReadChunk::slices`].
    ///
    /// # Examples
    /// See [`ReadChunk::slices`].
    pub fn len(&self) -> usize {
        self.slices().map(<[u8]>::len).sum()
    }

    /// True at end of file (or, in non-blocking use, never: an empty pipe is `WouldBlock`).
    ///
    /// # Examples
    /// See [`ReadChunk::slices`].
    pub fn is_empty(&self) -> bool {
        self.guard.tail == self.guard.cached_head
    }

    /// Consumes the first `n` bytes of the chunk, freeing the slots they drain; an `n` beyond
    /// what the chunk holds consumes all of it, and nothing published after the chunk was
    /// taken.
    ///
    /// The bounds are read from the shared region again here, not taken from an earlier
    /// [`ReadChunk::len`] or [`ReadChunk::slices`]: across processes a hostile peer may have
    /// changed them since, and a length computed from the region is never trusted twice (so
    /// this never panics on what a peer wrote). A slot a peer corrupted since [`Reader::read_chunk`]
    /// validated it stops the consumption early; the next read reports it.
    ///
    /// # Examples
    /// See [`ReadChunk::slices`].
    pub fn consume(mut self, n: usize) {
        let sh = self.guard.sh;
        let _ = consume(sh, &mut self.guard, n, By::Chunk, |_, _, _| {});
        self.end.sync();
    }
}

impl io::Read for Reader {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        self.read_impl(buf, How::ByMode, None)
    }
}

impl io::Read for &Reader {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        self.read_impl(buf, How::ByMode, None)
    }
}

impl Clone for Reader {
    fn clone(&self) -> Reader {
        Reader {
            end: self.end.clone(),
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

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;
    use crate::region::CAN_MERGE;
    use crate::ring::{self, ONE};

    /// A peer that publishes an empty slot each time the reader looks at one (here: from the
    /// reader's own sink, the most adversarial timing there is) cannot keep a read going: it
    /// ends after a ring's worth of empty slots.
    #[test]
    fn consume_ends_under_a_flood_of_empty_slots() {
        let (w, r) = crate::builder::pipe().unwrap();
        let sh = &*r.end.shared;
        let mut rs = sh.lock_read(crate::lock::Wait::Never).unwrap();
        let size = rs.ring_size;
        let publish_empty = || {
            let h = sh.header();
            let head = ring::index(h.head.word.load(Ordering::Relaxed));
            let (_, slot) = Ring::new(&sh.region, size).slot(head);
            slot.start.store(0, Ordering::Relaxed);
            slot.state.store(CAN_MERGE, Ordering::Relaxed);
            // Release: publishes the slot, as `publish` does (pairs with the read's Acquire
            // load of head).
            h.head.word.fetch_add(ONE, Ordering::Release);
        };
        publish_empty();
        let mut looked = 0;
        let n = consume(sh, &mut rs, 100, By::Read, |_, _, len| {
            assert_eq!(len, 0);
            looked += 1;
            assert!(looked < 10 * size, "a read kept consuming empty slots");
            publish_empty();
        })
        .unwrap();
        assert_eq!(n, 0);
        assert_eq!(looked, size + 1);
        drop(rs);
        drop(w);
    }

    /// A chunk consumes what it showed, never what was published after it was taken, however
    /// large the count.
    #[test]
    fn a_chunk_consumes_only_what_it_holds() {
        use std::io::Write;
        let (mut w, r) = crate::builder::Builder::new()
            .packet_mode(true)
            .build()
            .unwrap();
        w.write_all(b"hello").unwrap();
        let chunk = r.read_chunk().unwrap();
        let n = chunk.len();
        w.write_all(b"later").unwrap(); // a packet of its own, after the chunk's
        chunk.consume(n + 100);
        assert_eq!(r.len(), 5);
        let chunk = r.read_chunk().unwrap();
        assert_eq!(chunk.len(), 5);
        chunk.consume(usize::MAX);
        assert!(r.is_empty());
    }
}

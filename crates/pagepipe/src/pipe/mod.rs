//! The pipe: a ring of page slots in a shared region, a writing side and a reading side.
//!
//! Concurrency shape (one code path for threads and processes):
//! - Writers take the write side (a [`crate::lock::SideLock`] in the region, one writer at a time), readers
//!   the read side; the two sides run at the same time and meet only through the `head` and
//!   `tail` words and the slot states, as a single-producer single-consumer ring.
//! - A side reads the other side's index only when its own view says full (or empty).
//! - A side that must wait spins briefly, then registers in the other side's index word (see
//!   [`crate::ring`]) and sleeps on its futex, at most [`TICK`] at a time. The advancing side
//!   sees the registration in the result of the very read-modify-write that publishes, so an
//!   uncontended read or write makes no syscall and a live sleeper is never missed; a peer that
//!   died cannot wake anyone, so every tick a sleeper asks the kernel whether the other end
//!   still has a holder.
//! - Which processes hold an end is counted by the kernel, through two small kernel pipes per
//!   pagepipe, its *signal pipes*. Every process holding a [`Writer`] keeps the write ends of
//!   both open, every process holding a [`Reader`] their read ends; descriptors follow `fork`,
//!   `SCM_RIGHTS` and exec like the ends they stand for, and the kernel closes them when a
//!   process exits or is killed. So the *readable* pipe's read end polls `POLLHUP` exactly when
//!   no process holds a writer, and the *full* pipe's write end `POLLERR` when none holds a
//!   reader. A process that closes its last handle of an end bumps a counter in the region, so
//!   the other side knows when to ask the kernel.
//! - The same two descriptors are what [`Reader`] and [`Writer`] hand out as `AsFd`: once some
//!   process polls an end, the readable pipe holds one byte exactly while the ring holds data,
//!   and the full pipe (one page of capacity) one byte exactly while the ring is full, so
//!   `poll(2)` and `epoll(7)` see what they would see on a kernel pipe (see [`End::sync`]).
//! - The ring's geometry changes only in `set_capacity`, which holds both sides, in place.

#[cfg(all(test, loom))]
mod loom_tests;
pub(crate) mod notify;
#[cfg(not(loom))]
mod pass;
mod reader;
#[cfg(not(loom))]
mod ready;
#[cfg(not(loom))]
pub(crate) mod splice;
mod writer;

pub(crate) use notify::notes_ok;
pub use notify::{
    Filter, Notification, Notifier, LOSS_SUBTYPE, MAX_FILTERS, MAX_PAYLOAD, MAX_RECORDS, META_KIND,
};
pub use reader::{ReadChunk, Reader};
#[cfg(not(loom))]
pub use splice::{splice, tee};
pub use writer::{WriteChunk, Writer};

use crate::lock::{self, Taken, TICK};
use crate::region::{self, invalid, Config, Region, Slot, DROPPED, END_MASK, R, RELEASED, W};
use crate::ring::{self, ONE, WAITING};
use crate::sync::{Arc, AtomicU64, ColdBool, ColdU64, Futex, Ordering};
use crate::sys::mm::PAGE_SIZE;
use std::io;
use std::time::{Duration, Instant};

/// Everything one process knows of one pipe: its mapping of the region.
pub(crate) struct Shared {
    pub(crate) region: Region,
    /// `index(head)` seen by the idle trimmer's last tick.
    #[cfg(not(loom))]
    idle_mark: std::sync::atomic::AtomicU64,
    /// This process's end of each side of this mapping, if it has one: `set_capacity` changes
    /// state that either side may have to reflect in its descriptor.
    #[cfg(not(loom))]
    local: [std::sync::Mutex<std::sync::Weak<End>>; 2],
    /// Tasks of this process waiting in an async adapter, indexed like the signal pipes:
    /// `[FULL]` for room, `[READABLE]` for data (see [`Wakers`]).
    pub(crate) wakers: [Wakers; 2],
    /// [`FORKS`] when this process made or mapped the region (see [`Shared::confined`]).
    #[cfg(not(loom))]
    #[cfg_attr(not(feature = "tokio"), allow(dead_code))] // used by the tokio adapters
    born_forks: u64,
    /// An end of this pipe left this process (sent over a socket, passed to a command) or
    /// came from another (see [`Shared::confined`]).
    #[cfg(not(loom))]
    exposed: std::sync::atomic::AtomicBool,
    /// Ends open in this (only) process: loom's stand-in for the signal pipes.
    #[cfg(loom)]
    open: [crate::sync::AtomicUsize; 2],
}

/// A view of the ring with a validated size, for as long as a side is held.
#[derive(Clone, Copy)]
pub(crate) struct Ring<'a> {
    region: &'a Region,
    /// Slot count, a power of two of at most `region.max_ring`.
    pub(crate) size: usize,
}

impl<'a> Ring<'a> {
    /// Slot index `index`'s position and bookkeeping.
    pub(crate) fn slot(&self, index: u64) -> (usize, &'a Slot) {
        let pos = ring::slot(index, self.size);
        (pos, self.region.slot(pos))
    }

    /// The first byte of position `pos`'s page.
    pub(crate) fn page(&self, pos: usize) -> *mut u8 {
        self.region.page(pos)
    }

    pub(crate) fn slot_size(&self) -> usize {
        self.region.config.slot_size
    }

    /// Starts fetching, for writing, the bookkeeping line of slot `index` and the first line of
    /// its page, so that the misses a handoff between cores costs overlap instead of queueing
    /// one after the other (slot state, then the data it points at, then the upgrade for the
    /// state's update). A hint: no effect on what any load or store sees.
    #[inline]
    pub(crate) fn prefetch(&self, index: u64) {
        let (pos, slot) = self.slot(index);
        prefetch_write((slot as *const Slot).cast());
        prefetch_write(self.page(pos));
    }
}

#[cfg(not(loom))]
thread_local! {
    /// The lines this thread's next write to the pipe it wrote last will touch first (that
    /// pipe's last slot, and the free slot and page at its head), saved after each write that
    /// publishes. Raw addresses, used only as prefetch hints: the pipe may be gone, its ring
    /// resized or another thread may have written since, and all that costs is a useless
    /// prefetch.
    static NEXT_WRITE: std::cell::Cell<[*const u8; 3]> =
        const { std::cell::Cell::new([std::ptr::null(); 3]) };
}

/// Saves, for this thread, the lines a write at `head` of `ring` touches first (see
/// [`prefetch_next_write`]).
#[inline]
pub(crate) fn note_next_write(ring: Ring<'_>, head: u64) {
    #[cfg(not(loom))]
    {
        let (pos, slot) = ring.slot(head);
        let last = ring.slot(head.wrapping_sub(1)).1;
        let lines = [
            (last as *const Slot).cast(),
            (slot as *const Slot).cast(),
            ring.page(pos).cast_const(),
        ];
        NEXT_WRITE.with(|n| n.set(lines));
    }
    #[cfg(loom)]
    let _ = (ring, head);
}

/// Starts fetching the lines saved by [`note_next_write`], for a thread whose blocking read has
/// just found data: such a thread usually answers with a write (a request, then its reply), and
/// the lines that write touches first were last touched by the peer (the reader of our
/// replies, which released the slot before it wrote the request we are reading). Fetched now,
/// they travel with the lines the read needs instead of after the read returns: one
/// cache-line wait fewer on each hop of a round trip. The addresses may no longer be mapped:
/// `PREFETCHW` never faults.
#[inline]
pub(crate) fn prefetch_next_write() {
    #[cfg(not(loom))]
    NEXT_WRITE.with(|n| {
        for p in n.get() {
            if !p.is_null() {
                prefetch_write(p);
            }
        }
    });
}

/// Asks the CPU to bring the cache line of `p` in for writing (x86 `PREFETCHW`; nothing
/// elsewhere or under loom). A hint: it never faults, and orders nothing.
#[inline(always)]
fn prefetch_write(p: *const u8) {
    #[cfg(all(target_arch = "x86_64", not(loom)))]
    // SAFETY: PREFETCHW reads no memory architecturally and never faults, whatever the address;
    // it touches no register but its address operand and no flags.
    unsafe {
        std::arch::asm!("prefetchw byte ptr [{0}]", in(reg) p, options(nostack, preserves_flags, readonly));
    }
    #[cfg(not(all(target_arch = "x86_64", not(loom))))]
    let _ = p;
}

/// The write side, held: released on drop.
pub(crate) struct WriteGuard<'a> {
    sh: &'a Shared,
    /// `index(head)`: only write-side holders move head.
    pub(crate) head: u64,
    /// A possibly stale `index(tail)`; never ahead of the real tail.
    pub(crate) cached_tail: u64,
    /// Ring size and max_usage, validated when the side was taken (they change only with both
    /// sides held).
    pub(crate) ring_size: usize,
    pub(crate) limit: u64,
}

/// The read side, held: released on drop.
pub(crate) struct ReadGuard<'a> {
    sh: &'a Shared,
    /// `index(tail)`: only read-side holders move tail.
    pub(crate) tail: u64,
    /// A possibly stale `index(head)`; never ahead of the real head.
    pub(crate) cached_head: u64,
    pub(crate) ring_size: usize,
    pub(crate) limit: u64,
}

impl Drop for WriteGuard<'_> {
    fn drop(&mut self) {
        let h = self.sh.header();
        store_side_state(&h.write_side.state, self.head, self.cached_tail);
        h.write_side.lock.unlock();
    }
}

impl Drop for ReadGuard<'_> {
    fn drop(&mut self) {
        let h = self.sh.header();
        store_side_state(&h.read_side.state, self.tail, self.cached_head);
        h.read_side.lock.unlock();
    }
}

/// Saves a side's `(own index, cached other index)` for the next holder; the lock's Release
/// unlock orders it.
fn store_side_state(state: &[ColdU64; 2], own: u64, other: u64) {
    state[0].store(own, Ordering::Relaxed);
    state[1].store(other, Ordering::Relaxed);
}

/// The side state a holder left, or after a dead holder, the index words themselves: `own`
/// (head for writers, tail for readers: only this side moves it) and `other` (Acquire: pairs
/// with the other side's Release index RMW). With `check_own`, checks the saved copy against
/// the `own` word (see below); without, the caller checks it later.
///
/// On an error the side is released: a corrupt region must not keep it held (its holder would
/// get `Deadlock` on every later call, and everyone else would wait for a live holder).
fn load_side_state(
    side: &region::Side,
    taken: Taken,
    own: &AtomicU64,
    other: &AtomicU64,
    check_own: bool,
) -> io::Result<(u64, u64)> {
    let state = &side.state;
    let (mine, theirs) = match taken {
        // Relaxed: written by the previous holder before its Release unlock, which our lock's
        // Acquire pairs with.
        Taken::Clean => (
            state[0].load(Ordering::Relaxed),
            state[1].load(Ordering::Relaxed),
        ),
        // The dead holder may have moved its index without saving its copy. Relaxed for our own
        // index (nobody else moves it); Acquire for the other side's.
        Taken::FromDead => (
            ring::index(own.load(Ordering::Relaxed)),
            ring::index(other.load(Ordering::Acquire)),
        ),
    };
    // Between holders the copy equals the index word (only holders move it, and they save the
    // copy before releasing): a mismatch is a corrupt region, which would otherwise make a
    // sleeper see data (or room) that the side cannot find. Not in loom models: it validates
    // memory, not the protocol.
    #[cfg(loom)]
    let _ = check_own;
    #[cfg(not(loom))]
    if check_own && taken == Taken::Clean {
        if let Err(e) = check_saved_index(mine, own.load(Ordering::Relaxed)) {
            side.lock.unlock();
            return Err(e);
        }
    }
    Ok((mine, theirs))
}

/// A side's saved index against its index `word` (see [`load_side_state`]).
pub(crate) fn check_saved_index(saved: u64, word: u64) -> io::Result<()> {
    if ring::index(word) != saved {
        return Err(invalid(format!(
            "a side's saved index {saved} differs from its index word {}",
            ring::index(word)
        )));
    }
    Ok(())
}

impl WriteGuard<'_> {
    pub(crate) fn ring(&self) -> Ring<'_> {
        Ring {
            region: &self.sh.region,
            size: self.ring_size,
        }
    }

    /// Checks the head word against the saved head, for holders that took the side with
    /// [`Shared::lock_write_unchecked`] and are about to wait for room or report it missing.
    pub(crate) fn check_head(&self) -> io::Result<()> {
        check_saved_index(
            self.head,
            self.sh.header().head.word.load(Ordering::Relaxed),
        )
    }
}

impl ReadGuard<'_> {
    pub(crate) fn ring(&self) -> Ring<'_> {
        Ring {
            region: &self.sh.region,
            size: self.ring_size,
        }
    }
}

/// Checks that `head` and `tail` (indices) describe at most `ring` queued slots: `tail <= head
/// <= tail + ring`, both below 2^62 (an index word holds 63 bits, and 2^62 slots are never
/// reached), so index arithmetic on them cannot overflow.
#[inline]
pub(crate) fn check_indices(head: u64, tail: u64, ring: usize) -> io::Result<()> {
    const MAX_INDEX: u64 = 1 << 62;
    if head >= MAX_INDEX || tail > head || head - tail > ring as u64 {
        return Err(bad_indices(head, tail, ring));
    }
    Ok(())
}

#[cold]
#[inline(never)]
fn bad_indices(head: u64, tail: u64, ring: usize) -> io::Error {
    invalid(format!(
        "ring indices head {head} tail {tail} do not fit a ring of {ring} slots"
    ))
}

impl Shared {
    pub(crate) fn new(region: Region) -> Shared {
        Shared {
            region,
            #[cfg(not(loom))]
            idle_mark: std::sync::atomic::AtomicU64::new(0),
            #[cfg(not(loom))]
            local: Default::default(),
            wakers: Default::default(),
            #[cfg(not(loom))]
            born_forks: FORKS.load(std::sync::atomic::Ordering::Relaxed),
            #[cfg(not(loom))]
            exposed: std::sync::atomic::AtomicBool::new(false),
            #[cfg(loom)]
            open: [
                crate::sync::AtomicUsize::new(0),
                crate::sync::AtomicUsize::new(0),
            ],
        }
    }

    /// This process's handle on a region it made or attached: registered for idle trimming.
    pub(crate) fn open(region: Region) -> Arc<Shared> {
        let shared = Arc::new(Shared::new(region));
        #[cfg(not(loom))]
        {
            let weak: std::sync::Weak<dyn crate::pool::Trim> = Arc::downgrade(&shared) as _;
            crate::pool::register(weak);
        }
        shared
    }

    /// Whether every end of this pipe is in this process: it was made here, and neither did
    /// this process fork since, nor did an end come from or go to another process. While it is,
    /// the async adapters need no descriptor: every transition is made by this process, which
    /// wakes them through [`Shared::wakers`].
    #[cfg(not(loom))]
    #[cfg_attr(not(feature = "tokio"), allow(dead_code))] // used by the tokio adapters
    pub(crate) fn confined(&self) -> bool {
        !self.exposed.load(std::sync::atomic::Ordering::Relaxed)
            && FORKS.load(std::sync::atomic::Ordering::Relaxed) == self.born_forks
    }

    /// An end of this pipe is going to, or came from, another process: this process's async
    /// adapters on it switch to exact descriptors (see [`End::adapt`]).
    #[cfg(not(loom))]
    pub(crate) fn expose(self: &Arc<Shared>) {
        self.exposed
            .store(true, std::sync::atomic::Ordering::Relaxed);
        exact_adapted(|end| Arc::ptr_eq(&end.shared, self));
    }

    /// Notes `end` as this process's end of its side (see `local`).
    #[cfg(not(loom))]
    pub(crate) fn adopt(end: &Arc<End>) {
        let slot = &end.shared.local[end.side];
        *slot.lock().unwrap_or_else(|e| e.into_inner()) = Arc::downgrade(end);
    }

    /// Whether this process holds an end of `side` (a live handle of it, as far as `local`
    /// knows: an end this process dropped, or never had, is not held).
    #[cfg(all(not(loom), feature = "tokio"))]
    pub(crate) fn holds(&self, side: usize) -> bool {
        let slot = &self.local[side];
        slot.lock()
            .unwrap_or_else(|e| e.into_inner())
            .strong_count()
            > 0
    }

    /// After a change either side may have to reflect (a resize): syncs the descriptors of
    /// every end this process holds. A side held only by other processes catches up at its
    /// next operation.
    pub(crate) fn sync_local(&self) {
        #[cfg(not(loom))]
        for slot in &self.local {
            let end = slot.lock().unwrap_or_else(|e| e.into_inner()).upgrade();
            if let Some(end) = end {
                end.sync();
            }
        }
    }

    pub(crate) fn header(&self) -> &region::Header {
        self.region.header()
    }

    pub(crate) fn config(&self) -> Config {
        self.region.config
    }

    /// Takes the write side and reads its state from the region.
    pub(crate) fn lock_write(&self, wait: lock::Wait) -> io::Result<WriteGuard<'_>> {
        self.write_guard(self.header().write_side.lock.lock(wait)?, true)
    }

    /// [`Shared::lock_write`] without loading the head word to check the saved head against
    /// it, for `write`: a waiting reader polls that word, so loading it misses in the cache
    /// and waits for the line, on a round trip's critical path. The writer checks it where it
    /// touches the word anyway: the publication's RMW returns it ([`super::writer::publish`]),
    /// and a writer that finds the ring full checks before it waits or reports `WouldBlock`
    /// ([`WriteGuard::check_head`]), so a corrupt word never has it wait for room it cannot
    /// find. A write that only merges checks nothing: it touches the slot before the saved
    /// head, which is memory-safe whatever the word says.
    pub(crate) fn lock_write_unchecked(&self, wait: lock::Wait) -> io::Result<WriteGuard<'_>> {
        self.write_guard(self.header().write_side.lock.lock(wait)?, false)
    }

    /// [`Shared::lock_write_unchecked`] if the write side is free now, without waiting
    /// (`None`: it is held, or its saved state is corrupt), for fast paths that fall back to
    /// the general one, which waits or reports.
    #[inline]
    pub(crate) fn try_lock_write_unchecked(&self) -> Option<WriteGuard<'_>> {
        if !self.header().write_side.lock.try_lock() {
            return None;
        }
        self.write_guard(Taken::Clean, false).ok()
    }

    /// The guard of the write side just taken (`taken`): its state read from the region.
    #[inline]
    fn write_guard(&self, taken: Taken, check_head: bool) -> io::Result<WriteGuard<'_>> {
        let h = self.header();
        // A dead holder's unpublished slots are beyond head: nothing else to recover.
        let (head, cached_tail) =
            load_side_state(&h.write_side, taken, &h.head.word, &h.tail.word, check_head)?;
        let mut g = WriteGuard {
            sh: self,
            head,
            cached_tail,
            ring_size: 1,
            limit: 1,
        };
        g.ring_size = self.region.ring_size()?;
        g.limit = self.region.max_usage(g.ring_size)? as u64;
        check_indices(g.head, g.cached_tail, g.ring_size)?;
        Ok(g)
    }

    /// Takes the read side and reads its state from the region; after a reader that died
    /// holding it, skips the slots it had released but not yet handed back.
    pub(crate) fn lock_read(&self, wait: lock::Wait) -> io::Result<ReadGuard<'_>> {
        self.read_guard(self.header().read_side.lock.lock(wait)?)
    }

    /// [`Shared::lock_read`] if the read side is free now, without waiting (`None`: it is
    /// held, or its saved state is corrupt), for fast paths that fall back to the general
    /// one, which waits or reports.
    #[inline]
    pub(crate) fn try_lock_read(&self) -> Option<ReadGuard<'_>> {
        if !self.header().read_side.lock.try_lock() {
            return None;
        }
        self.read_guard(Taken::Clean).ok()
    }

    /// The guard of the read side just taken (`taken`): its state read from the region, and
    /// after a dead holder, the slots it released skipped.
    #[inline]
    fn read_guard(&self, taken: Taken) -> io::Result<ReadGuard<'_>> {
        let h = self.header();
        let (tail, cached_head) =
            load_side_state(&h.read_side, taken, &h.tail.word, &h.head.word, true)?;
        let mut g = ReadGuard {
            sh: self,
            tail,
            cached_head,
            ring_size: 1,
            limit: 1,
        };
        g.ring_size = self.region.ring_size()?;
        g.limit = self.region.max_usage(g.ring_size)? as u64;
        check_indices(g.cached_head, g.tail, g.ring_size)?;
        if taken == Taken::FromDead {
            self.skip_released(&mut g);
        }
        Ok(g)
    }

    /// After a reader that died holding the read side: skips the slots it had released but
    /// not yet handed back.
    #[cold]
    fn skip_released(&self, g: &mut ReadGuard<'_>) {
        let ring = g.ring();
        let mut skipped = 0;
        while g.tail + skipped != g.cached_head {
            let st = ring.slot(g.tail + skipped).1.state.load(Ordering::Relaxed);
            if st & RELEASED == 0 {
                break;
            }
            // A notification record the dead reader released after a poster flagged it (see
            // `notify`): its LOSS record is still owed.
            if st & region::LOSS != 0 {
                self.header().note_loss.store(1, Ordering::Relaxed);
            }
            skipped += 1;
        }
        self.advance_tail(skipped);
        g.tail += skipped;
    }

    // ----- waking -----

    /// Called after a slot was published with a `head` RMW that returned `old`.
    pub(crate) fn wake_readers_if_waiting(&self, old: u64) {
        let h = self.header();
        wake_if_waiting(&h.head.word, &h.readable, old);
    }

    /// Called after a slot was consumed with a `tail` RMW that returned `old`.
    fn wake_writers_if_waiting(&self, old: u64) {
        let h = self.header();
        wake_if_waiting(&h.tail.word, &h.writable, old);
    }

    /// Hands `n` released slots back to the writer side and wakes a sleeping writer.
    pub(crate) fn advance_tail(&self, n: u64) {
        if n == 0 {
            return;
        }
        // Release: pairs with the writer's Acquire load of tail, so our reads of these pages (and
        // their release) happen before the writer reuses the positions. SeqCst (free on x86,
        // where every RMW is a full barrier): the store half of the store-load pair with
        // End::enable_polling.
        let old = self.header().tail.word.fetch_add(n * ONE, Ordering::SeqCst);
        self.wake_writers_if_waiting(old);
    }

    /// The head index now, checked against the caller's `tail` in a ring of `ring` slots.
    /// Acquire: pairs with the writer's Release head RMW, publishing the slots and pages below
    /// it.
    pub(crate) fn load_head(&self, tail: u64, ring: usize) -> io::Result<u64> {
        let head = ring::index(self.header().head.word.load(Ordering::Acquire));
        check_indices(head, tail, ring)?;
        Ok(head)
    }

    /// The tail index now, checked against the caller's `head` in a ring of `ring` slots.
    /// Acquire: pairs with the reader's Release tail RMW, so its reads of the freed pages (and
    /// its release of their slots) happen before a writer reuses them.
    pub(crate) fn load_tail(&self, head: u64, ring: usize) -> io::Result<u64> {
        let tail = ring::index(self.header().tail.word.load(Ordering::Acquire));
        check_indices(head, tail, ring)?;
        Ok(tail)
    }

    // ----- waiting (no side held) -----

    /// A `(head, tail)` index snapshot: tail is read first, so the head read after it is never
    /// behind it (head only grows, and tail never passes it) unless a peer corrupted them.
    pub(crate) fn indices(&self) -> (u64, u64) {
        let h = self.header();
        // Acquire (both): pair with the Release RMWs that advance tail and head.
        let t = ring::index(h.tail.word.load(Ordering::Acquire));
        let hd = ring::index(h.head.word.load(Ordering::Acquire));
        (hd, t)
    }

    /// Starts fetching the lines the next operation of side `side` will touch first (see
    /// [`Ring::prefetch`]), before it takes its lock: the write side's last and first free slots
    /// at head, or the read side's slot at tail. A hint from unlocked loads: a stale or corrupt
    /// view only fetches the wrong lines. Nothing under loom: its loads would be more
    /// interleavings to explore for a hint that has no effect on what the model checks.
    #[cfg(loom)]
    pub(crate) fn prefetch(&self, _side: usize) {}

    /// See the loom version above.
    #[cfg(not(loom))]
    pub(crate) fn prefetch(&self, side: usize) {
        let Ok(size) = self.region.ring_size() else {
            return;
        };
        let ring = Ring {
            region: &self.region,
            size,
        };
        let h = self.header();
        if side == W {
            // The head the last writer saved, from the write side's own line, not the head
            // word: a waiting reader polls that one, and loading it would wait for the line.
            let head = h.write_side.state[0].load(Ordering::Relaxed);
            ring.prefetch(head);
            ring.prefetch(head.wrapping_sub(1));
        } else {
            ring.prefetch(ring::index(h.tail.word.load(Ordering::Relaxed)));
        }
    }

    /// Slots data may use now, for sleepers (a bad value reads as "full": they recheck every
    /// tick and the next operation reports it).
    fn limit_now(&self) -> u64 {
        self.region
            .ring_size()
            .and_then(|r| self.region.max_usage(r))
            .map_or(0, |l| l as u64)
    }

    /// The deadline of a blocking call on `side` that starts now, if a timeout is set.
    pub(crate) fn deadline(&self, side: usize) -> Option<Instant> {
        match self.header().timeout_ns[side].load(Ordering::Relaxed) {
            0 => None,
            ns => Instant::now().checked_add(Duration::from_nanos(ns)),
        }
    }

    pub(crate) fn nonblocking(&self, side: usize) -> bool {
        self.header().nonblocking[side].load(Ordering::Relaxed) != 0
    }

    /// How a call on `side` may wait for its side lock (`nonblocking`: the call's own mode).
    pub(crate) fn lock_wait(&self, nonblocking: bool, deadline: Option<Instant>) -> lock::Wait {
        if nonblocking {
            lock::Wait::Never
        } else {
            lock::Wait::Until(deadline)
        }
    }

    // ----- the pool (write side held) -----

    /// Accounts for a free position about to hold data: if its page was dropped, writing it
    /// faults a page in (the userspace `alloc_page()`).
    pub(crate) fn claim(&self, slot: &Slot) {
        if slot.state.load(Ordering::Relaxed) & DROPPED != 0 {
            self.header().dropped.fetch_sub(1, Ordering::Relaxed);
        }
    }

    /// Spare pages: free positions whose page is resident, given a view of the indices.
    pub(crate) fn spare(&self, limit: u64, head: u64, tail: u64) -> usize {
        let free = limit.saturating_sub(ring::occupancy(head, tail)) as usize;
        free.saturating_sub(self.header().dropped.load(Ordering::Relaxed) as usize)
    }

    /// Faults in the free pages the next `len` bytes will need, without holding the write side;
    /// returns the slot range faulted in, for [`Shared::adopt_prefill`]. The whole arena stays
    /// mapped for the region's life, so racing a resize can only populate a page for nothing.
    pub(crate) fn prefill(&self, len: usize) -> Option<(u64, u64)> {
        let pages = self.config().policy.prefill(len, self.config().slot_size);
        if pages == 0 {
            return None;
        }
        let ring = self.region.ring_size().ok()?;
        let (head, tail) = self.indices();
        check_indices(head, tail, ring).ok()?;
        // Only free positions: the pages of queued data are resident anyway.
        let end = (head + pages as u64).min(tail + ring as u64);
        let first = ring::slot(head, ring);
        for (start, count) in wrapped_runs(first, end.saturating_sub(head) as usize, ring) {
            self.region.populate(start, count);
        }
        Some((head, end))
    }

    /// Under the write side: marks the positions [`Shared::prefill`] faulted in as spare pages,
    /// if no other writer has used them meanwhile (else their accounting is left alone: a
    /// resident page marked dropped only costs an early trim, never data).
    pub(crate) fn adopt_prefill(&self, ws: &WriteGuard<'_>, range: Option<(u64, u64)>) {
        let Some((start, end)) = range else { return };
        if start != ws.head || end.wrapping_sub(start) > ws.ring_size as u64 {
            return;
        }
        let ring = ws.ring();
        for i in start..end {
            let (_, slot) = ring.slot(i);
            let st = slot.state.load(Ordering::Relaxed);
            if st & DROPPED != 0 {
                slot.state.store(st & !DROPPED, Ordering::Relaxed);
                self.header().dropped.fetch_sub(1, Ordering::Relaxed);
            }
        }
    }

    /// Gives spare pages beyond `keep` back to the OS; returns the bytes given back.
    pub(crate) fn trim_locked(&self, ws: &WriteGuard<'_>, keep: usize) -> usize {
        let Ok(tail) = self.load_tail(ws.head, ws.ring_size) else {
            return 0;
        };
        if self.spare(ws.limit, ws.head, tail) <= keep {
            return 0;
        }
        let ring = ws.ring();
        let mut kept = 0;
        let mut dropped = 0;
        let mut run: Option<(usize, usize)> = None; // (first position, pages)
        for i in ws.head..tail + ws.ring_size as u64 {
            let (pos, slot) = ring.slot(i);
            let st = slot.state.load(Ordering::Relaxed);
            if st & DROPPED != 0 {
                continue;
            }
            if kept < keep {
                kept += 1;
                continue;
            }
            slot.state.store(st | DROPPED, Ordering::Relaxed);
            dropped += 1;
            run = match run {
                Some((first, n)) if first + n == pos => Some((first, n + 1)),
                Some((first, n)) => {
                    self.region.drop_pages(first, n);
                    Some((pos, 1))
                }
                None => Some((pos, 1)),
            };
        }
        if let Some((first, n)) = run {
            self.region.drop_pages(first, n);
        }
        self.header()
            .dropped
            .fetch_add(dropped as u64, Ordering::Relaxed);
        dropped * ring.slot_size()
    }

    /// The idle trimmer's and `shrink`'s entry point.
    #[cfg(not(loom))]
    pub(crate) fn trim(&self, force: bool) -> usize {
        let keep = if force {
            0
        } else {
            self.config().policy.idle_keep()
        };
        let (h, t) = self.indices();
        if self.spare(self.limit_now(), h, t) <= keep {
            return 0;
        }
        if !force && self.idle_mark.swap(h, std::sync::atomic::Ordering::Relaxed) != h {
            return 0; // written since the last tick: busy, not idle
        }
        match self.lock_write(lock::Wait::Never) {
            Ok(ws) => self.trim_locked(&ws, keep),
            Err(_) => 0,
        }
    }

    /// Spare pages as the pool counts them (see `dropped`).
    pub(crate) fn spare_pages(&self) -> usize {
        let (h, t) = self.indices();
        self.spare(self.limit_now(), h, t)
    }

    /// Resident 4 KiB pages at free positions, counted with `mincore(2)`.
    #[cfg(not(loom))]
    pub(crate) fn resident_spare_pages(&self) -> io::Result<usize> {
        let ws = self.lock_write(lock::Wait::Until(None))?;
        let tail = self.load_tail(ws.head, ws.ring_size)?;
        let mut n = 0;
        for i in ws.head..tail + ws.ring_size as u64 {
            n += self.region.resident_pages(ring::slot(i, ws.ring_size))?;
        }
        Ok(n)
    }

    // ----- capacity -----

    pub(crate) fn capacity(&self) -> usize {
        self.limit_now() as usize * self.config().slot_size
    }

    /// `F_SETPIPE_SZ`: see [`Writer::set_capacity`]. Moves the queued slots to their positions in
    /// the new ring, in place (the region reserved the largest ring when it was made).
    pub(crate) fn set_capacity(
        &self,
        bytes: usize,
        deadline: Option<Instant>,
    ) -> io::Result<usize> {
        if self.config().notes != 0 {
            return Err(notify::ebusy()); // Linux: a notification pipe is not resized
        }
        let ss = self.config().slot_size;
        let new_ring = ring_size_for(bytes, ss)?;
        let wait = lock::Wait::Until(deadline);
        let mut ws = self.lock_write(wait)?;
        let mut rs = self.lock_read(wait)?;
        let (head, tail, old_ring) = (ws.head, rs.tail, ws.ring_size);
        // Holding both sides, each side's view of the other is exact: the cached indices stay
        // within the new ring.
        (ws.cached_tail, rs.cached_head) = (tail, head);
        check_indices(head, tail, old_ring)?;
        let queued = ring::occupancy(head, tail) as usize;
        if new_ring < queued {
            return Err(io::Error::new(
                io::ErrorKind::ResourceBusy,
                format!("cannot shrink the pipe to {new_ring} slots: {queued} slots hold data"),
            ));
        }
        if new_ring != old_ring {
            self.move_slots(&ws, tail, new_ring)?;
            let h = self.header();
            h.dropped
                .store((new_ring - queued) as u64, Ordering::Relaxed);
            // Release (both): pair with the Acquire loads in Region::ring_size / max_usage.
            h.max_usage.store(new_ring as u32, Ordering::Release);
            h.ring_size.store(new_ring as u32, Ordering::Release);
        }
        drop(rs);
        drop(ws);
        // Sleepers recheck against the new size.
        self.header().writable.wake_all();
        self.header().readable.wake_all();
        Ok(self.capacity())
    }

    /// Rewrites slots `tail..head` at their positions in a ring of `new_ring` slots; every other
    /// position of the new ring (and of the old one beyond it) becomes free with its page
    /// dropped. Both sides are held.
    fn move_slots(&self, ws: &WriteGuard<'_>, tail: u64, new_ring: usize) -> io::Result<()> {
        let old = ws.ring();
        let ss = old.slot_size();
        let queued: Vec<(u64, u64, Vec<u8>)> = (tail..ws.head)
            .map(|i| {
                let (pos, slot) = old.slot(i);
                let st = slot.state.load(Ordering::Relaxed);
                let start = slot.start.load(Ordering::Relaxed);
                let end = (st & END_MASK) as usize;
                if end > ss || start > end as u64 {
                    return Err(invalid(format!("bad slot {i}: start {start}, end {end}")));
                }
                let mut page = vec![0u8; end];
                // SAFETY: end <= slot_size, so the range is inside position pos's page; both
                // sides are held, so no one else touches it; `page` is a distinct allocation.
                unsafe { std::ptr::copy_nonoverlapping(old.page(pos), page.as_mut_ptr(), end) };
                Ok((st, start, page))
            })
            .collect::<io::Result<_>>()?;
        let span = old.size.max(new_ring);
        self.region.drop_pages(0, span);
        for pos in 0..span {
            self.region
                .slot(pos)
                .state
                .store(RELEASED | DROPPED, Ordering::Relaxed);
        }
        let new = Ring {
            region: &self.region,
            size: new_ring,
        };
        for (i, (st, start, page)) in (tail..).zip(queued) {
            let (pos, slot) = new.slot(i);
            // SAFETY: page.len() <= slot_size (checked above) and position pos < new_ring <=
            // max_ring; both sides are held.
            unsafe { std::ptr::copy_nonoverlapping(page.as_ptr(), new.page(pos), page.len()) };
            slot.start.store(start, Ordering::Relaxed);
            slot.state
                .store(st & !(RELEASED | DROPPED), Ordering::Relaxed);
        }
        Ok(())
    }
}

/// Async tasks of this process waiting for one transition of one pipe (data arriving, room
/// appearing): the in-process half of the adapters' wake-up. A side that makes the transition
/// in this process wakes them directly, with no system call and no trip through the reactor;
/// one in another process cannot, and charges the signal pipe the task's descriptor watches
/// (see [`End::sync`]), so the adapters wait for both.
///
/// Protocol (a store-load pair on each side): a waiter registers its waker, sets `waiting`
/// (SeqCst) and issues a SeqCst fence, then rechecks the ring; an advancer publishes with its
/// SeqCst index RMW, then loads `waiting` (SeqCst). In the single total order either the
/// recheck sees the advance or the load sees the flag. Waking takes every registered waker and
/// clears the flag under the list's lock, so a registration is consumed by exactly one wake.
#[derive(Default)]
pub(crate) struct Wakers {
    /// Some waker is registered (a hint read on every advance: only waiters write it).
    waiting: crate::sync::AtomicBool,
    list: crate::sync::Mutex<Vec<std::task::Waker>>,
}

impl Wakers {
    /// Registers `waker` (once, however often the same task registers) and raises the flag.
    /// The caller rechecks the ring afterwards.
    #[cfg_attr(not(any(feature = "tokio", loom)), allow(dead_code))] // the adapters' only
    pub(crate) fn register(&self, waker: &std::task::Waker) {
        let mut list = self.list.lock().unwrap_or_else(|e| e.into_inner());
        if !list.iter().any(|w| w.will_wake(waker)) {
            list.push(waker.clone());
        }
        // SeqCst: the store half of the waiter's store-load pair (see the type's docs).
        self.waiting.store(true, Ordering::SeqCst);
        // SeqCst fence: the caller's recheck loads the indices with Acquire only; after this
        // fence it sees any SeqCst advance that precedes the fence in the total order, and an
        // advance that follows it follows our store too, so its load of `waiting` sees it
        // (loom found the lost wake-up without it).
        crate::sync::fence(Ordering::SeqCst);
    }

    /// Wakes every registered task, if any. Called after the advance it announces: inlined,
    /// so that a pipe nobody waits on pays one load and a branch per transition.
    #[inline(always)]
    pub(crate) fn wake(&self) {
        // loom treats SeqCst accesses as AcqRel (its documented limitation), so it cannot see
        // the order between the advance's SeqCst RMW and this SeqCst load that the memory
        // model guarantees (and that x86's locked RMW, a full barrier, gives for free); this
        // fence stands in for it in the model only.
        #[cfg(loom)]
        crate::sync::fence(Ordering::SeqCst);
        // SeqCst: the load half of the advancer's store-load pair (see the type's docs).
        if self.waiting.load(Ordering::SeqCst) {
            self.wake_all();
        }
    }

    #[cold]
    #[inline(never)]
    fn wake_all(&self) {
        let list = {
            let mut list = self.list.lock().unwrap_or_else(|e| e.into_inner());
            self.waiting.store(false, Ordering::Relaxed); // under the lock
            std::mem::take(&mut *list)
        };
        for w in list {
            w.wake();
        }
    }
}

/// Forks this process made, or that made it (counted before each fork, so parent and child
/// both see the increment).
#[cfg(not(loom))]
static FORKS: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

/// Ends of this process that an async adapter ever wrapped (see [`End::adapt`]).
#[cfg(not(loom))]
static ADAPTED: std::sync::Mutex<Vec<std::sync::Weak<End>>> = std::sync::Mutex::new(Vec::new());

/// Makes the descriptors of the adapted ends that `which` selects exact (see [`End::adapt`]).
#[cfg(not(loom))]
fn exact_adapted(which: impl Fn(&End) -> bool) {
    let ends: Vec<Arc<End>> = {
        let mut list = ADAPTED.lock().unwrap_or_else(|e| e.into_inner());
        list.retain(|w| w.strong_count() > 0);
        list.iter().filter_map(std::sync::Weak::upgrade).collect()
    };
    for end in ends.iter().filter(|e| which(e)) {
        let _ = end.poll_fd();
    }
}

/// Run before `fork(2)` (pthread_atfork's prepare handler, in the forking thread): after the
/// fork a pipe may have ends in two processes, and an adapter's task parked in this one may
/// wait for the other, which can only reach it through its descriptor.
#[cfg(not(loom))]
pub(crate) fn before_fork() {
    FORKS.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    exact_adapted(|_| true);
}

/// One process's hold on one end of a pipe: the handles (`Writer`, `Reader` and their clones)
/// of that end in this process share it, and its drop is the process closing that end.
pub(crate) struct End {
    pub(crate) shared: Arc<Shared>,
    /// [`W`] or [`R`].
    pub(crate) side: usize,
    /// This process's descriptors of the signal pipes, `[full, readable]` (indexed by [`FULL`]
    /// and [`READABLE`]): their write ends for
    /// [`W`], their read ends for [`R`] (see the module docs). `None` only while dropping.
    #[cfg(not(loom))]
    signals: Option<[std::os::fd::OwnedFd; 2]>,
    /// `closes[other side]` when this end last asked the kernel about the other side.
    peer_seen: ColdU64,
    /// Sticky: the other end has no holder left (no new holder can appear: ends are only ever
    /// copied from live ones).
    peer_gone: ColdBool,
    /// This process has made the descriptor it hands out exact (see [`End::enable_polling`]).
    #[cfg(not(loom))]
    polling: std::sync::Once,
}

/// Index of the full signal pipe in `End::signals` and in the header's `polled` and `charged`
/// (the writer's descriptor: [`W`]).
const FULL: usize = W;
/// Index of the readable signal pipe (the reader's descriptor: [`R`]).
const READABLE: usize = R;

impl End {
    #[cfg(not(loom))]
    pub(crate) fn new(shared: Arc<Shared>, side: usize, signals: [std::os::fd::OwnedFd; 2]) -> End {
        End {
            shared,
            side,
            signals: Some(signals),
            peer_seen: ColdU64::new(u64::MAX),
            peer_gone: ColdBool::new(false),
            polling: std::sync::Once::new(),
        }
    }

    #[cfg(loom)]
    pub(crate) fn new(shared: Arc<Shared>, side: usize) -> End {
        shared.open[side].fetch_add(1, Ordering::Relaxed);
        End {
            shared,
            side,
            peer_seen: ColdU64::new(u64::MAX),
            peer_gone: ColdBool::new(false),
        }
    }

    /// Shares a new end among its handles.
    pub(crate) fn arc(end: End) -> Arc<End> {
        let end = Arc::new(end);
        #[cfg(not(loom))]
        Shared::adopt(&end);
        end
    }

    pub(crate) fn side(&self) -> usize {
        self.side
    }

    /// This end's descriptor of signal pipe `which` ([`READABLE`] or [`FULL`]).
    #[cfg(not(loom))]
    pub(crate) fn signal(&self, which: usize) -> std::os::fd::BorrowedFd<'_> {
        use std::os::fd::AsFd;
        self.signals
            .as_ref()
            .expect("an end keeps its descriptors until dropped")[which]
            .as_fd()
    }

    /// Which signal pipe stands for this end's readiness, and which wakers its waiting tasks
    /// use: [`READABLE`] for a reader, [`FULL`] for a writer.
    pub(crate) fn own(&self) -> usize {
        if self.side == R {
            READABLE
        } else {
            FULL
        }
    }

    /// Async tasks of this process waiting for this end to become ready.
    #[cfg_attr(not(any(feature = "tokio", loom)), allow(dead_code))] // the adapters' only
    pub(crate) fn waiters(&self) -> &Wakers {
        &self.shared.wakers[self.own()]
    }

    /// Wakes the tasks of this process waiting on the other end: this side's transitions (data
    /// for a writer, room for a reader, a close) are their wake-ups.
    #[inline]
    fn wake_peer_waiters(&self) {
        self.shared.wakers[if self.side == W { READABLE } else { FULL }].wake();
    }

    /// The descriptor this end hands out for polling (the readable pipe's read end for a
    /// reader, the full pipe's write end for a writer), made exact first.
    #[cfg(not(loom))]
    pub(crate) fn poll_fd(&self) -> std::os::fd::BorrowedFd<'_> {
        self.polling.call_once(|| self.enable_polling());
        self.signal(self.own())
    }

    /// Wraps this end in an async adapter. While its pipe is [confined](Shared::confined) to
    /// this process, transitions wake the adapter's tasks directly and its descriptor is
    /// left as it is (no system call per transition); otherwise, or as soon as the pipe stops
    /// being confined, the descriptor is made exact ([`End::poll_fd`]) and every process's
    /// transitions reach the adapter through the reactor as well.
    ///
    /// A pipe stops being confined only through this process (a fork, a send), and each way
    /// first notes it (`FORKS`, `exposed`) and then makes every end in `ADAPTED` exact; an
    /// adapter registers in `ADAPTED` and then looks at the notes. Both under `ADAPTED`'s lock,
    /// so one of the two sees the other.
    #[cfg(not(loom))]
    #[cfg_attr(not(feature = "tokio"), allow(dead_code))] // used by the tokio adapters
    pub(crate) fn adapt(end: &Arc<End>) {
        {
            let mut list = ADAPTED.lock().unwrap_or_else(|e| e.into_inner());
            list.retain(|w| w.strong_count() > 0);
            list.push(Arc::downgrade(end));
        }
        if !end.shared.confined() {
            let _ = end.poll_fd();
        }
    }

    /// Starts keeping this end's descriptor exact, in every process: sets the region's `polled`
    /// flag for this side and brings the descriptor to the ring's state. Only this side can:
    /// while nobody polls, the readable pipe holds its byte (a reader removes it if the ring is
    /// empty) and the full pipe is empty (a writer adds its byte if the ring is full).
    #[cfg(not(loom))]
    fn enable_polling(&self) {
        let h = self.shared.header();
        let Ok(taken) = h.sig_lock.lock(lock::Wait::Until(None)) else {
            return; // the region names this thread as holder: corrupt; nothing to make exact
        };
        self.recover_signals(taken);
        let which = self.own();
        // SeqCst: with the SeqCst index RMWs and flag loads in `sync` (a store-load pair on
        // each side): either a publisher or consumer sees the flag and syncs after us, or our
        // reading of the indices below sees its update.
        h.polled[which].store(1, Ordering::SeqCst);
        self.sync_locked();
        h.sig_lock.unlock();
    }

    /// After a state change by this side (a publication, a consumption, a resize): if some
    /// process polls, brings the signal pipes this side can change to the ring's state. A
    /// writer can only add the bytes (it holds the write ends), a reader only remove them, and
    /// each state change is made by the side that can reflect it: data appears and the ring
    /// fills only by writes, it empties and frees room only by reads. Transitions are
    /// serialized by `sig_lock` and each rereads the indices under it, so the last sync after
    /// the last change leaves both descriptors exact. At most one syscall per transition.
    #[cfg(not(loom))]
    #[inline]
    pub(crate) fn sync(&self) {
        self.wake_peer_waiters();
        let h = self.shared.header();
        // SeqCst: see enable_polling.
        if h.polled[R].load(Ordering::SeqCst) != 0 || h.polled[W].load(Ordering::SeqCst) != 0 {
            self.sync_polled();
        }
    }

    /// The rest of [`End::sync`], once some process polls.
    #[cfg(not(loom))]
    #[cold]
    #[inline(never)]
    fn sync_polled(&self) {
        let h = self.shared.header();
        let Ok(taken) = h.sig_lock.lock(lock::Wait::Until(None)) else {
            return;
        };
        self.recover_signals(taken);
        self.sync_locked();
        h.sig_lock.unlock();
    }

    #[cfg(loom)]
    pub(crate) fn sync(&self) {
        self.wake_peer_waiters();
    }

    /// The body of [`End::sync`], with `sig_lock` held.
    #[cfg(not(loom))]
    fn sync_locked(&self) {
        let sh = &*self.shared;
        let h = sh.header();
        let (head, tail) = sh.indices();
        let occupied = ring::occupancy(head, tail);
        let want = [
            occupied >= sh.limit_now(), // FULL
            occupied != 0,              // READABLE
        ];
        for which in [READABLE, FULL] {
            if h.polled[which].load(Ordering::Relaxed) == 0 {
                continue;
            }
            let charged = h.charged[which].load(Ordering::Relaxed) != 0;
            let fd = self.signal(which);
            let done = match (self.side, charged, want[which]) {
                (W, false, true) => crate::sys::pipe::write_byte(fd).map(|()| 1),
                (R, true, false) => crate::sys::pipe::read_byte(fd).map(|()| 0),
                _ => continue,
            };
            // A failure (a peer that lied about the state) is repaired by recover_signals on
            // the next takeover; the flag keeps what the pipe holds as far as we know.
            if let Ok(v) = done {
                h.charged[which].store(v, Ordering::Relaxed);
            }
        }
    }

    /// After taking `sig_lock` from a holder that died: the charged flags may not match the
    /// signal pipes; asks the kernel what they hold.
    #[cfg(not(loom))]
    fn recover_signals(&self, taken: Taken) {
        if taken != Taken::FromDead {
            return;
        }
        let h = self.shared.header();
        for which in [READABLE, FULL] {
            if let Ok(n) = crate::sys::pipe::fionread(self.signal(which)) {
                h.charged[which].store(u32::from(n > 0), Ordering::Relaxed);
            }
        }
    }

    /// Whether the other end has no holder left in any process. Without `force`, asks the
    /// kernel only when some process closed that end since we last asked (no syscall on the
    /// fast path); with it, always (sleepers, every tick: a killed process bumps nothing).
    pub(crate) fn peer_gone(&self, force: bool) -> bool {
        if self.peer_gone.load(Ordering::Relaxed) {
            return true;
        }
        let other = 1 - self.side;
        // Acquire: pairs with the Release bump in `End::drop`, made after that process
        // published its last slots (and closed its descriptor).
        let seen = self.shared.header().closes[other].load(Ordering::Acquire);
        if !force && seen == self.peer_seen.load(Ordering::Relaxed) {
            return false;
        }
        self.peer_seen.store(seen, Ordering::Relaxed);
        if self.ask_kernel() {
            self.peer_gone.store(true, Ordering::Relaxed);
            return true;
        }
        false
    }

    #[cfg(not(loom))]
    fn ask_kernel(&self) -> bool {
        if self.signals.is_none() {
            return false;
        }
        // A reader asks its readable pipe's read end (POLLHUP: no writer holds the write end);
        // a writer its full pipe's write end (POLLERR: no reader holds the read end).
        let (fd, gone) = if self.side == R {
            (self.signal(READABLE), libc::POLLHUP)
        } else {
            (self.signal(FULL), libc::POLLERR)
        };
        let gone = crate::sys::poll::poll_now(fd, 0) & gone != 0;
        if gone {
            // Acquire: the peers' last publications happened before their descriptors closed,
            // which the kernel's poll observed; our later loads of head/tail must see them.
            std::sync::atomic::fence(std::sync::atomic::Ordering::Acquire);
        }
        gone
    }

    #[cfg(loom)]
    fn ask_kernel(&self) -> bool {
        // Acquire: pairs with the AcqRel decrement in End::drop.
        self.shared.open[1 - self.side].load(Ordering::Acquire) == 0
    }

    /// Blocks until the ring may hold data or no writer is left; `TimedOut` at the deadline.
    pub(crate) fn wait_readable(&self, deadline: Option<Instant>) -> io::Result<()> {
        let sh = &*self.shared;
        let h = sh.header();
        sleep_until(
            &h.head.word,
            &h.readable,
            |force| {
                let (hd, t) = sh.indices();
                if hd != t {
                    sh.prefetch(R); // what the read will touch first travels meanwhile
                    prefetch_next_write(); // and what this thread's reply will touch
                    return true;
                }
                self.peer_gone(force)
            },
            deadline,
        )
    }

    /// Blocks until the ring may have a free slot or no reader is left; `TimedOut` at the
    /// deadline.
    pub(crate) fn wait_writable(&self, deadline: Option<Instant>) -> io::Result<()> {
        let sh = &*self.shared;
        let h = sh.header();
        sleep_until(
            &h.tail.word,
            &h.writable,
            |force| {
                let (hd, t) = sh.indices();
                !ring::is_full(hd, t, sh.limit_now()) || self.peer_gone(force)
            },
            deadline,
        )
    }
}

impl Drop for End {
    fn drop(&mut self) {
        // Close our descriptor of the end first: a peer that sees the bump below and asks the
        // kernel must not count us.
        #[cfg(not(loom))]
        drop(self.signals.take());
        #[cfg(loom)]
        // AcqRel: Release pairs with the Acquire load in ask_kernel (our publications happen
        // before a peer sees the end closed); Acquire orders other ends' drops.
        self.shared.open[self.side].fetch_sub(1, Ordering::AcqRel);
        let h = self.shared.header();
        // Release: pairs with the Acquire load in `peer_gone`.
        h.closes[self.side].fetch_add(1, Ordering::Release);
        if self.side == W {
            h.readable.wake_all();
        } else {
            h.writable.wake_all();
        }
        // Tasks of this process waiting on the other side see the close at once (those in
        // other processes by their descriptor's POLLHUP or POLLERR).
        self.wake_peer_waiters();
    }
}

/// Blocks until `ready(force)`: spins briefly, then registers as a sleeper in the other side's
/// index `word` (head for readers, tail for writers), rechecks and sleeps on `futex`, a tick at a
/// time; after a tick that nobody ended, rechecks with `force` (peers may have died).
fn sleep_until(
    word: &AtomicU64,
    futex: &Futex,
    ready: impl Fn(bool) -> bool,
    deadline: Option<Instant>,
) -> io::Result<()> {
    let timed_out = || io::Error::new(io::ErrorKind::TimedOut, "pipe operation timed out");
    if deadline.is_some_and(|d| Instant::now() >= d) {
        return Err(timed_out()); // also bounds a caller that keeps finding nothing to do
    }
    // After spinning, ask the kernel once before sleeping: a peer killed meanwhile bumped no
    // counter, and a sleeper should not wait a tick to see it gone.
    if spin_until(|| ready(false)) || ready(true) {
        return Ok(());
    }
    loop {
        let seq = futex.seq();
        // Acquire: pairs with the Release fetch_add that advances `word`; the RMW puts our
        // registration in its modification order, before or after that advance, so either the
        // recheck below sees the advance or the advancer sees our flag and wakes us.
        word.fetch_or(WAITING, Ordering::Acquire);
        if ready(false) {
            return Ok(());
        }
        let mut tick = TICK;
        if let Some(d) = deadline {
            let now = Instant::now();
            if now >= d {
                return Err(timed_out());
            }
            tick = tick.min(d - now);
        }
        if !futex.wait(seq, Some(tick)) && ready(true) {
            return Ok(());
        }
    }
}

/// After an RMW on an index `word` returned `old`: wakes every sleeper registered in it.
fn wake_if_waiting(word: &AtomicU64, futex: &Futex, old: u64) {
    if old & WAITING != 0 {
        // Relaxed: clearing the flag may erase a registration made after `old`; that sleeper
        // read the futex sequence before the bump in wake_all (Release), so its FUTEX_WAIT fails
        // or is woken by this wake_all: correct because we wake all, never one.
        word.fetch_and(!WAITING, Ordering::Relaxed);
        futex.wake_all();
    }
}

/// Splits `count` positions starting at `first` in a ring of `ring` into contiguous runs.
fn wrapped_runs(first: usize, count: usize, ring: usize) -> impl Iterator<Item = (usize, usize)> {
    let a = count.min(ring - first);
    [(first, a), (0, count - a)]
        .into_iter()
        .filter(|&(_, n)| n > 0)
}

/// Spins (bounded) until `ready`; false if it never became true. Under loom, never spins:
/// the model explores the sleeping path, where lost wakeups would hide.
#[cfg(loom)]
fn spin_until(_ready: impl Fn() -> bool) -> bool {
    false
}

/// Spins (bounded) until `ready`; false if it never became true.
#[cfg(not(loom))]
fn spin_until(ready: impl Fn() -> bool) -> bool {
    /// Spin iterations before a side registers and sleeps.
    const SPIN_LIMIT: u32 = 1 << 12;
    for i in 0..SPIN_LIMIT {
        if ready() {
            return true;
        }
        if i % 256 == 255 {
            std::thread::yield_now();
        } else {
            std::hint::spin_loop();
        }
    }
    false
}

/// The largest capacity a pipe may have: 1 GiB.
pub const MAX_CAPACITY: usize = 1 << 30;

/// The slot count for a requested capacity: `F_SETPIPE_SZ`'s rounding (up to a power-of-two
/// number of pages, at least one page), then divided into `slot_size` slots (at least one).
pub(crate) fn ring_size_for(bytes: usize, slot_size: usize) -> io::Result<usize> {
    if bytes == 0 || bytes > MAX_CAPACITY {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("pipe capacity {bytes} is outside 1..={MAX_CAPACITY} bytes"),
        ));
    }
    let rounded = bytes.div_ceil(PAGE_SIZE).next_power_of_two() * PAGE_SIZE;
    Ok((rounded / slot_size).max(1))
}

/// Checks a slot size: a power of two from 4 KiB to 1 GiB.
pub(crate) fn check_slot_size(slot_size: usize) -> io::Result<()> {
    if !slot_size.is_power_of_two() || !(PAGE_SIZE..=MAX_CAPACITY).contains(&slot_size) {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!(
                "slot size {slot_size} is not a power of two from {PAGE_SIZE} to {MAX_CAPACITY}"
            ),
        ));
    }
    Ok(())
}

/// Makes a new notification pipe for `records` records: its region (a ring of that many
/// slots, rounded up to a power of two) and its two ends.
pub(crate) fn create_notifications(
    records: usize,
    policy: crate::PoolPolicy,
) -> io::Result<(Notifier, Reader)> {
    let ring = notify::ring_for(records)?;
    let config = Config {
        policy,
        packet: false,
        slot_size: PAGE_SIZE,
        notes: ring,
    };
    let (w, r) = create(ring, config)?;
    Ok((Notifier { end: w.end.clone() }, r))
}

/// Makes a new pipe's region and its two ends in this process.
pub(crate) fn create(ring_size: usize, config: Config) -> io::Result<(Writer, Reader)> {
    let shared = Shared::open(Region::create(ring_size, config)?);
    #[cfg(not(loom))]
    let (w, r) = {
        use std::os::fd::AsFd;
        let (readable_r, readable_w) = crate::sys::pipe::os_pipe()?;
        let (full_r, full_w) = crate::sys::pipe::os_pipe()?;
        for fd in [&readable_r, &readable_w, &full_r, &full_w] {
            crate::sys::fd::set_fd_nonblocking(fd.as_fd())?;
        }
        // One byte fills it: the writer's descriptor polls POLLOUT exactly while it is empty.
        crate::sys::pipe::set_pipe_size(full_w.as_fd(), PAGE_SIZE)?;
        // Nobody polls yet: the readable pipe starts charged (see End::enable_polling).
        crate::sys::pipe::write_byte(readable_w.as_fd())?;
        // Indexed by FULL (0) and READABLE (1).
        (
            End::new(shared.clone(), W, [full_w, readable_w]),
            End::new(shared, R, [full_r, readable_r]),
        )
    };
    #[cfg(loom)]
    let (w, r) = (End::new(shared.clone(), W), End::new(shared, R));
    Ok((Writer { end: End::arc(w) }, Reader { end: End::arc(r) }))
}

#[cfg(not(loom))]
impl crate::pool::Trim for Shared {
    fn trim(&self, force: bool) -> usize {
        Shared::trim(self, force)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn capacity_rounds_like_f_setpipe_sz() {
        assert_eq!(ring_size_for(1, 4096).unwrap(), 1);
        assert_eq!(ring_size_for(4097, 4096).unwrap(), 2);
        assert_eq!(ring_size_for(65536, 4096).unwrap(), 16);
        assert_eq!(ring_size_for(65537, 4096).unwrap(), 32);
        assert_eq!(ring_size_for(65536, 65536).unwrap(), 1);
        assert_eq!(ring_size_for(4096, 65536).unwrap(), 1);
        assert_eq!(
            ring_size_for(0, 4096).unwrap_err().kind(),
            io::ErrorKind::InvalidInput
        );
        assert_eq!(
            ring_size_for(MAX_CAPACITY + 1, 4096).unwrap_err().kind(),
            io::ErrorKind::InvalidInput
        );
        assert!(check_slot_size(8192).is_ok());
        assert!(check_slot_size(6000).is_err());
        assert!(check_slot_size(2048).is_err());
    }

    #[test]
    fn wrapped_runs_split_at_the_end() {
        assert_eq!(
            wrapped_runs(14, 4, 16).collect::<Vec<_>>(),
            vec![(14, 2), (0, 2)]
        );
        assert_eq!(wrapped_runs(0, 4, 16).collect::<Vec<_>>(), vec![(0, 4)]);
        assert!(check_indices(10, 2, 8).is_ok());
        assert!(check_indices(11, 2, 8).is_err());
        assert!(check_indices(2, 3, 8).is_err());
    }

    /// The reply hint keeps raw addresses past the pipe's life: prefetching them once the
    /// region is unmapped must be harmless (`PREFETCHW` never faults).
    #[cfg(not(loom))]
    #[test]
    fn reply_hint_outlives_its_pipe() {
        use std::io::Write;
        let (mut w, r) = crate::pipe().unwrap();
        w.write_all(b"x").unwrap();
        let saved = NEXT_WRITE.with(|n| n.get());
        assert!(
            saved.iter().all(|p| !p.is_null()),
            "a publishing write saves its lines"
        );
        drop((w, r)); // unmaps the region
        prefetch_next_write();
        // A far-off, never-mapped address as well.
        NEXT_WRITE.with(|n| n.set([std::ptr::dangling::<u8>().wrapping_add(1 << 46); 3]));
        prefetch_next_write();
    }
}

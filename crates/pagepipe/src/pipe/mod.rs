//! The pipe: a ring of page slots shared by a writing side and a reading side.
//!
//! Concurrency shape:
//! - Writers take the write side (`Shared::write_side`, one writer at a time), readers the read
//!   side; the two sides run at the same time and meet only through the `head` and `tail` words
//!   and the slot states, as a single-producer single-consumer ring.
//! - Each side caches the other side's index and rereads it only when its copy says full (or
//!   empty), so streaming moves one cache line per page, not one per check.
//! - A side that must wait spins briefly, then registers in the other side's index word (see
//!   [`crate::ring`]) and sleeps on its futex. The advancing side sees the registration in the
//!   result of the very read-modify-write that publishes, so an uncontended read or write makes
//!   no syscall and a sleeper is never missed.
//! - The ring's geometry (slot table and arena) changes only in `set_capacity`, which holds both
//!   sides; each side touches it only while holding its own side.

#[cfg(all(test, loom))]
mod loom_tests;
mod reader;
mod writer;

pub use reader::{ReadChunk, Reader};
pub use writer::{WriteChunk, Writer};

use crate::pool::PoolPolicy;
use crate::ring::{self, WAITING};
use crate::sync::{AtomicBool, AtomicU64, AtomicUsize, Futex, Mutex, MutexGuard, Ordering, Padded};
use crate::sys::{Mapping, PAGE_SIZE};
use std::cell::UnsafeCell;
use std::io;
use std::sync::atomic::AtomicPtr;

/// Slot state bits above the 32-bit end offset.
pub(crate) const END_MASK: u64 = 0xffff_ffff;
/// The slot's data may be extended by a later write (Linux `PIPE_BUF_FLAG_CAN_MERGE`).
pub(crate) const CAN_MERGE: u64 = 1 << 32;
/// The slot is one packet: a read returns at most it and discards its rest (`PIPE_BUF_FLAG_PACKET`).
pub(crate) const PACKET: u64 = 1 << 33;
/// The reader released the slot while it was the last one (so a merge could have raced it).
/// A slot released while not the last needs no mark: no writer merges into it again, and index
/// arithmetic (`head <= i < tail + ring_size`) is what says a position is free.
pub(crate) const RELEASED: u64 = 1 << 34;
/// The position's page was given back to the OS (or never touched): writing there faults.
/// Meaningful only while the position is free; a free position without it holds a spare page.
pub(crate) const DROPPED: u64 = 1 << 35;

/// One slot: a page-sized buffer at a fixed position of the arena plus its bookkeeping.
///
/// Padded to a cache line so that the writer filling slot `i + 1` does not steal the line the
/// reader is draining slot `i` from.
#[repr(align(64))]
pub(crate) struct Slot {
    /// `end | flags`: `end` is the offset just past the slot's data. While the slot holds data,
    /// only the writer raises `end` (merging, with a CAS) and only the reader sets RELEASED (with
    /// a CAS), so a merge and a release of the last slot cannot both succeed.
    state: AtomicU64,
    /// Offset of the first unread byte; written only by the reader (or by `set_capacity`, which
    /// holds both sides), read by the writer only when a new slot is created there.
    start: AtomicU64,
}

const _: () = assert!(std::mem::size_of::<Slot>() == 64);

impl Slot {
    fn free() -> Slot {
        Slot {
            state: AtomicU64::new(RELEASED | DROPPED),
            start: AtomicU64::new(0),
        }
    }
}

/// The ring's memory: `ring_size` slots and one `slot_size` page each, at position `p` of the
/// arena for slot position `p`.
pub(crate) struct Geometry {
    /// Slot count, a power of two.
    ring_size: usize,
    /// Bytes per slot page: a power of two, at least [`PAGE_SIZE`].
    slot_size: usize,
    slots: Box<[Slot]>,
    arena: Mapping,
}

impl Geometry {
    fn new(ring_size: usize, slot_size: usize) -> io::Result<Geometry> {
        debug_assert!(ring_size.is_power_of_two() && slot_size.is_power_of_two());
        let arena = Mapping::anonymous(ring_size * slot_size)?;
        let slots = (0..ring_size).map(|_| Slot::free()).collect();
        Ok(Geometry {
            ring_size,
            slot_size,
            slots,
            arena,
        })
    }

    fn slot(&self, index: u64) -> (usize, &Slot) {
        let pos = ring::slot(index, self.ring_size);
        (pos, &self.slots[pos])
    }

    /// The first byte of position `pos`'s page.
    fn page(&self, pos: usize) -> *mut u8 {
        debug_assert!(pos < self.ring_size);
        // SAFETY: pos < ring_size, so the offset stays inside the arena of ring_size pages.
        unsafe { self.arena.as_ptr().add(pos * self.slot_size) }
    }
}

/// The write side's private state, guarded by `Shared::write_side`.
pub(crate) struct WriteSide {
    /// Our own copy of `index(head)`: only write-side holders move head.
    head: u64,
    /// A possibly stale `index(tail)`; never ahead of the real tail.
    cached_tail: u64,
}

/// The read side's private state, guarded by `Shared::read_side`.
pub(crate) struct ReadSide {
    /// Our own copy of `index(tail)`: only read-side holders move tail.
    tail: u64,
    /// A possibly stale `index(head)`; never ahead of the real head.
    cached_head: u64,
}

/// The state behind a side lock: what [`Shared::geo`] accepts as proof of holding a side.
trait Side {}
impl Side for WriteSide {}
impl Side for ReadSide {}

type WriteGuard<'a> = MutexGuard<'a, WriteSide>;
type ReadGuard<'a> = MutexGuard<'a, ReadSide>;

/// Immutable choices made at build time.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Config {
    pub(crate) policy: PoolPolicy,
    pub(crate) packet: bool,
    pub(crate) slot_size: usize,
}

/// Everything the handles of one pipe share.
pub(crate) struct Shared {
    /// `index << 1 | WAITING`: slots ever published; WAITING means a reader sleeps.
    head: Padded<AtomicU64>,
    /// `index << 1 | WAITING`: slots ever consumed; WAITING means a writer sleeps.
    tail: Padded<AtomicU64>,
    readable: Padded<Futex>,
    writable: Padded<Futex>,
    write_side: Padded<Mutex<WriteSide>>,
    read_side: Padded<Mutex<ReadSide>>,
    /// Written only while holding both sides; read while holding either.
    geo: UnsafeCell<Geometry>,
    /// Slots data may use; equal to the ring size (no reserved slots yet). Read by sleepers.
    max_usage: AtomicUsize,
    /// The arena and its ring size (0 while `set_capacity` replaces them), for faulting pages in
    /// ahead of a write without holding the write side (the Unified policy).
    prefill_arena: AtomicPtr<u8>,
    prefill_ring: AtomicUsize,
    /// Prefills in flight: `set_capacity` unmaps an arena only once none can still use it.
    prefilling: AtomicUsize,
    writers: AtomicUsize,
    readers: AtomicUsize,
    write_nonblocking: AtomicBool,
    read_nonblocking: AtomicBool,
    /// Free positions whose page is not resident (flag DROPPED). Changes only when a page goes
    /// back to the OS or a dropped one is written again, so steady streaming never writes it.
    /// Spare pages are derived: free positions minus this. Advisory: read Relaxed.
    dropped: AtomicUsize,
    /// `index(head)` seen by the idle trimmer's last tick.
    #[cfg(not(loom))]
    idle_mark: AtomicU64,
    config: Config,
}

// SAFETY: `geo` is the only non-Sync field; it is read only by holders of a side lock and
// replaced only by holders of both (see `geo` and `set_capacity`), which makes it race free.
unsafe impl Sync for Shared {}
// SAFETY: all fields are Send; the raw pointers in Geometry name memory the pipe owns.
unsafe impl Send for Shared {}

impl Shared {
    pub(crate) fn new(ring_size: usize, config: Config) -> io::Result<Shared> {
        let geo = Geometry::new(ring_size, config.slot_size)?;
        Ok(Shared {
            head: Padded(AtomicU64::new(0)),
            tail: Padded(AtomicU64::new(0)),
            readable: Padded(Futex::new()),
            writable: Padded(Futex::new()),
            write_side: Padded(Mutex::new(WriteSide {
                head: 0,
                cached_tail: 0,
            })),
            read_side: Padded(Mutex::new(ReadSide {
                tail: 0,
                cached_head: 0,
            })),
            prefill_arena: AtomicPtr::new(geo.arena.as_ptr()),
            prefill_ring: AtomicUsize::new(ring_size),
            geo: UnsafeCell::new(geo),
            max_usage: AtomicUsize::new(ring_size),
            prefilling: AtomicUsize::new(0),
            writers: AtomicUsize::new(1),
            readers: AtomicUsize::new(1),
            write_nonblocking: AtomicBool::new(false),
            read_nonblocking: AtomicBool::new(false),
            dropped: AtomicUsize::new(ring_size),
            #[cfg(not(loom))]
            idle_mark: AtomicU64::new(0),
            config,
        })
    }

    fn lock_write(&self) -> WriteGuard<'_> {
        // A side is poisoned by a panic in the caller's code while it held a chunk (nothing was
        // committed or consumed then, so the side state is consistent and the lock usable) or
        // by a failed debug assertion inside pagepipe (a bug, reported by that panic).
        self.write_side.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn lock_read(&self) -> ReadGuard<'_> {
        self.read_side.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The geometry, borrowed for as long as the caller holds a side (`_side` proves it).
    fn geo<'a, S: Side>(&'a self, _side: &'a MutexGuard<'_, S>) -> &'a Geometry {
        // SAFETY: the caller holds a side lock; `geo` is replaced only by `set_capacity`, which
        // holds both, so no `&mut` to it exists while this borrow (tied to the guard) lives.
        unsafe { &*self.geo.get() }
    }

    // ----- waking -----

    /// Called after a slot was published with a `head` RMW that returned `old`.
    fn wake_readers_if_waiting(&self, old: u64) {
        wake_if_waiting(&self.head, &self.readable, old);
    }

    /// Called after a slot was consumed with a `tail` RMW that returned `old`.
    fn wake_writers_if_waiting(&self, old: u64) {
        wake_if_waiting(&self.tail, &self.writable, old);
    }

    // ----- waiting (no side held) -----

    fn readable_now(&self) -> bool {
        let (h, t) = self.indices();
        h != t || self.writers_gone()
    }

    /// A consistent `(head, tail)` index snapshot: tail is read first, so the head read after
    /// it is never behind it (head only grows, and tail never passes it).
    fn indices(&self) -> (u64, u64) {
        // Acquire (both): pair with the Release RMWs that advance tail and head.
        let t = ring::index(self.tail.load(Ordering::Acquire));
        let h = ring::index(self.head.load(Ordering::Acquire));
        (h, t)
    }

    /// True once every writer handle is dropped.
    fn writers_gone(&self) -> bool {
        // Acquire: pairs with the AcqRel decrement in Writer::drop, so a caller that sees 0 also
        // sees every slot the writers published.
        self.writers.load(Ordering::Acquire) == 0
    }

    /// True once every reader handle is dropped.
    fn readers_gone(&self) -> bool {
        // Acquire: pairs with the AcqRel decrement in Reader::drop.
        self.readers.load(Ordering::Acquire) == 0
    }

    fn writable_now(&self) -> bool {
        let (h, t) = self.indices();
        !ring::is_full(h, t, self.max_usage.load(Ordering::Acquire) as u64) || self.readers_gone()
    }

    /// Blocks until the ring may hold data or every writer is gone.
    pub(crate) fn wait_readable(&self) {
        sleep_until(&self.head, &self.readable, || self.readable_now());
    }

    /// Blocks until the ring may have a free slot or every reader is gone.
    pub(crate) fn wait_writable(&self) {
        sleep_until(&self.tail, &self.writable, || self.writable_now());
    }

    // ----- the pool (write side held) -----

    /// Accounts for a free position about to hold data: if its page was dropped, writing it
    /// faults a page in (the userspace `alloc_page()`).
    fn claim(&self, slot: &Slot) {
        if slot.state.load(Ordering::Relaxed) & DROPPED != 0 {
            self.dropped.fetch_sub(1, Ordering::Relaxed);
        }
    }

    /// Spare pages: free positions whose page is resident, given a view of the indices.
    fn spare(&self, head: u64, tail: u64) -> usize {
        let free = self
            .max_usage
            .load(Ordering::Relaxed)
            .saturating_sub(ring::occupancy(head, tail) as usize);
        free.saturating_sub(self.dropped.load(Ordering::Relaxed))
    }

    /// Faults in the free pages the next `len` bytes will need, without holding the write side;
    /// returns the slot range faulted in, for [`Shared::adopt_prefill`].
    fn prefill(&self, len: usize) -> Option<(u64, u64)> {
        let pages = self.config.policy.prefill(len, self.config.slot_size);
        if pages == 0 {
            return None;
        }
        // SeqCst (this increment and the ring load below, with set_capacity's store of 0 and its
        // load of `prefilling`): a store-then-load handshake in each direction, which only
        // SeqCst orders. Either set_capacity sees us in flight and waits, or we see ring 0 (or
        // the new ring with its new arena) and never touch the old arena.
        self.prefilling.fetch_add(1, Ordering::SeqCst);
        let ring = self.prefill_ring.load(Ordering::SeqCst);
        // Acquire: pairs with the Release store of the arena in set_capacity (made before the
        // ring size we just read).
        let arena = self.prefill_arena.load(Ordering::Acquire);
        let mut range = None;
        if ring != 0 {
            let (head, tail) = self.indices();
            // Only free positions: the pages of queued data are resident anyway.
            let end = (head + pages as u64).min(tail + ring as u64);
            let ss = self.config.slot_size;
            let first = ring::slot(head, ring);
            for (start, count) in wrapped_runs(first, end.saturating_sub(head) as usize, ring) {
                // MADV_POPULATE_WRITE does not change contents, so racing another writer that
                // fills one of these pages is harmless.
                crate::sys::advise_raw_populate(arena, start * ss, count * ss);
            }
            range = Some((head, end));
        }
        // Release: pairs with the SeqCst load in set_capacity, so our madvise happens before
        // the arena is unmapped.
        self.prefilling.fetch_sub(1, Ordering::Release);
        range
    }

    /// Under the write side: marks the positions [`Shared::prefill`] faulted in as spare pages,
    /// if no other writer has used them meanwhile (else their accounting is left alone: a
    /// resident page marked dropped only costs an early trim, never data).
    fn adopt_prefill(&self, ws: &WriteGuard<'_>, range: Option<(u64, u64)>) {
        let Some((start, end)) = range else { return };
        if start != ws.head {
            return;
        }
        let geo = self.geo(ws);
        for i in start..end {
            let (_, slot) = geo.slot(i);
            let st = slot.state.load(Ordering::Relaxed);
            if st & DROPPED != 0 {
                slot.state.store(st & !DROPPED, Ordering::Relaxed);
                self.dropped.fetch_sub(1, Ordering::Relaxed);
            }
        }
    }

    /// Gives spare pages beyond `keep` back to the OS; returns the bytes given back.
    fn trim_locked(&self, ws: &WriteGuard<'_>, keep: usize) -> usize {
        // Acquire: pairs with the reader's Release tail RMW, so released slots' states (and the
        // reader's last use of their pages) are visible before we drop the pages.
        let tail = ring::index(self.tail.load(Ordering::Acquire));
        if self.spare(ws.head, tail) <= keep {
            return 0;
        }
        let geo = self.geo(ws);
        let mut kept = 0;
        let mut dropped = 0;
        let mut run: Option<(usize, usize)> = None; // (first position, pages)
        for i in ws.head..tail + geo.ring_size as u64 {
            let (pos, slot) = geo.slot(i);
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
                    geo.arena.dontneed(first * geo.slot_size, n * geo.slot_size);
                    Some((pos, 1))
                }
                None => Some((pos, 1)),
            };
        }
        if let Some((first, n)) = run {
            geo.arena.dontneed(first * geo.slot_size, n * geo.slot_size);
        }
        self.dropped.fetch_add(dropped, Ordering::Relaxed);
        dropped * geo.slot_size
    }

    /// The idle trimmer's and `shrink`'s entry point.
    #[cfg(not(loom))]
    pub(crate) fn trim(&self, force: bool) -> usize {
        let keep = if force {
            0
        } else {
            self.config.policy.idle_keep()
        };
        let (h, t) = self.indices();
        if self.spare(h, t) <= keep {
            return 0;
        }
        if !force && self.idle_mark.swap(h, Ordering::Relaxed) != h {
            return 0; // written since the last tick: busy, not idle
        }
        match self.write_side.try_lock() {
            Ok(ws) => self.trim_locked(&ws, keep),
            Err(std::sync::TryLockError::Poisoned(e)) => self.trim_locked(&e.into_inner(), keep),
            Err(std::sync::TryLockError::WouldBlock) => 0,
        }
    }

    /// Spare pages as the pool counts them (see `dropped`).
    pub(crate) fn spare_pages(&self) -> usize {
        let (h, t) = self.indices();
        self.spare(h, t)
    }

    /// Resident 4 KiB pages at free positions, counted with `mincore(2)`.
    pub(crate) fn resident_spare_pages(&self) -> io::Result<usize> {
        let ws = self.lock_write();
        let geo = self.geo(&ws);
        // Acquire: pairs with the reader's Release tail RMW (as in trim_locked).
        let tail = ring::index(self.tail.load(Ordering::Acquire));
        let mut n = 0;
        for i in ws.head..tail + geo.ring_size as u64 {
            let pos = ring::slot(i, geo.ring_size);
            n += geo
                .arena
                .resident_pages(pos * geo.slot_size, geo.slot_size)?;
        }
        Ok(n)
    }

    // ----- capacity -----

    /// Stops prefills from using the current arena and waits until none is using it.
    fn retire_prefill_arena(&self) {
        // SeqCst (store and loads): the other half of the handshake in `prefill`.
        self.prefill_ring.store(0, Ordering::SeqCst);
        while self.prefilling.load(Ordering::SeqCst) != 0 {
            std::thread::yield_now(); // a prefill is one madvise call: short
        }
    }

    pub(crate) fn capacity(&self) -> usize {
        self.max_usage.load(Ordering::Acquire) * self.config.slot_size
    }

    /// `F_SETPIPE_SZ`: see [`Writer::set_capacity`].
    pub(crate) fn set_capacity(&self, bytes: usize) -> io::Result<usize> {
        let ring_size = ring_size_for(bytes, self.config.slot_size)?;
        let ws = self.lock_write();
        let rs = self.lock_read();
        let queued = ring::occupancy(ws.head, rs.tail) as usize;
        if ring_size < queued {
            return Err(io::Error::new(
                io::ErrorKind::ResourceBusy,
                format!("cannot shrink the pipe to {ring_size} slots: {queued} slots hold data"),
            ));
        }
        let old = self.geo(&ws);
        if ring_size != old.ring_size {
            let new = Geometry::new(ring_size, self.config.slot_size)?;
            for i in rs.tail..ws.head {
                let ((opos, oslot), (npos, nslot)) = (old.slot(i), new.slot(i));
                let st = oslot.state.load(Ordering::Relaxed);
                nslot.state.store(st, Ordering::Relaxed);
                nslot
                    .start
                    .store(oslot.start.load(Ordering::Relaxed), Ordering::Relaxed);
                let end = (st & END_MASK) as usize;
                // SAFETY: both pages are slot_size long and end <= slot_size; the old and new
                // arenas are distinct mappings; both sides are held, so no one else touches them.
                unsafe { std::ptr::copy_nonoverlapping(old.page(opos), new.page(npos), end) };
            }
            self.retire_prefill_arena();
            // Release: pairs with the Acquire load of the arena in `prefill`.
            self.prefill_arena
                .store(new.arena.as_ptr(), Ordering::Release);
            // SAFETY: we hold both sides, so no reference from `geo()` is alive (each is tied to
            // a side guard other than ours) and nobody else can take one until we release them.
            let old = unsafe { std::ptr::replace(self.geo.get(), new) };
            // Unmaps the old arena: no prefill can be using it (see retire_prefill_arena).
            drop(old);
            // SeqCst: see `prefill`; a prefill that reads this size reads the new arena too.
            self.prefill_ring.store(ring_size, Ordering::SeqCst);
            // The new arena is untouched but for the data copied in: every free position is dropped.
            self.dropped.store(ring_size - queued, Ordering::Relaxed);
            // Release: pairs with the Acquire load in `writable_now`.
            self.max_usage.store(ring_size, Ordering::Release);
        }
        drop(rs);
        drop(ws);
        // Sleepers recheck against the new size.
        self.writable.wake_all();
        self.readable.wake_all();
        Ok(self.capacity())
    }
}

/// Blocks until `ready`: spins briefly, then registers as a sleeper in the other side's index
/// `word` (head for readers, tail for writers), rechecks and sleeps on `futex`.
fn sleep_until(word: &AtomicU64, futex: &Futex, ready: impl Fn() -> bool) {
    if spin_until(&ready) {
        return;
    }
    loop {
        let seq = futex.seq();
        // Acquire: pairs with the Release fetch_add that advances `word`; the RMW puts our
        // registration in its modification order, before or after that advance, so either the
        // recheck below sees the advance or the advancer sees our flag and wakes us.
        word.fetch_or(WAITING, Ordering::Acquire);
        if ready() {
            return;
        }
        futex.wait(seq, None);
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
    }
}

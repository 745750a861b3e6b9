//! A pipe's shared region: header and first slots | page arena | rest of the slot table, in one
//! sealed memory file.
//!
//! Every process holding an end maps the same memory file, at an address of its own: the region
//! holds offsets and indices, never pointers, and only fixed-width integers. The geometry is
//! reserved when the pipe is made: positions for twice the largest ring the pipe may have
//! ([`DEFAULT_MAX_CAPACITY`] unless its builder said otherwise; see [`positions_for`]), so
//! resizing never changes the file (a sparse memory file costs nothing until touched).
//!
//! A process maps a region in two parts. The *near* part, the header's page and the first
//! [`NEAR_BYTES`] of the arena (all of a default pipe's ring), lives in a cell of a shared
//! area (`crate::cells`), so idle pipes share page-table pages. The *far* part is the whole
//! file mapped once more, made the first time this process sees a ring larger than the near
//! part, or resizes (the staging positions lie past both rings; [`Region::ensure_far`]), and
//! kept until the region goes.
//! Once it exists every page is addressed through it, so the ring's positions are always
//! contiguous in the address space whichever part is used; the two map the same pages.
//!
//! Trust: a peer may write anything anywhere in the region at any time. The immutable words
//! (magic, version, slot size, reserved slot count, configuration) are loaded once when a process
//! attaches, validated, and kept in [`Region`]'s own fields; they are never read from the region
//! again. Every mutable word is loaded once per use into a local and checked before it sizes or
//! places any access (see `pipe::shared::Shared`); a bad one is `InvalidData`. Bytes of data are copied
//! with raw-pointer copies only.
//!
//! Under `cfg(loom)` the same header lives on the heap with loom's atomics, so the ring, wait and
//! lock protocols stay model-checked.

use crate::error::{invalid, invalid_input};
use crate::lock::SideLock;
use crate::pool::policy::PoolPolicy;
use crate::sync::{AtomicU64, ColdU32, ColdU64, Futex, Ordering, Padded};
use crate::sys::mm::PAGE_SIZE;
use std::io;
use std::ptr::NonNull;

/// `b"PAGEPIPE"` read as a little-endian u64: the first word of every region.
pub(crate) const MAGIC: u64 = u64::from_le_bytes(*b"PAGEPIPE");
/// The region layout's version; a region of another version is refused.
pub(crate) const VERSION: u32 = 5;
/// Bytes reserved for the header at the start of a region. Half a page: the slot table starts
/// in the header's page, so a small pipe's header and slots cost one page between them.
pub(crate) const HEADER_SIZE: usize = PAGE_SIZE / 2;

/// A side of a pipe: the writers' or the readers'. Each side has its lock and saved state in the
/// header ([`SideLine`]), and one entry in every per-side array (`nonblocking`, `timeout_ns`,
/// `closes`, ...), at [`Side::index`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Side {
    /// The writing side (writers and notifiers).
    Write = 0,
    /// The reading side.
    Read = 1,
}

impl Side {
    /// This side's entry in the header's per-side arrays.
    #[inline]
    pub(crate) const fn index(self) -> usize {
        self as usize
    }

    /// The other side.
    #[inline]
    pub(crate) const fn other(self) -> Side {
        match self {
            Side::Write => Side::Read,
            Side::Read => Side::Write,
        }
    }

    /// "writer" or "reader", for messages.
    pub(crate) const fn name(self) -> &'static str {
        match self {
            Side::Write => "writer",
            Side::Read => "reader",
        }
    }
}

/// Index of the writer's readiness ("the ring is full": no `POLLOUT`) in the header's `polled`
/// and in [`Wakers`](crate::wait::Wakers) arrays (see `pipe::end`).
pub(crate) const FULL: usize = 0;
/// Index of the reader's readiness ("the ring holds data": `POLLIN`).
pub(crate) const READABLE: usize = 1;
/// The signal pipe's slots while nothing calls for another count: one packet is "the ring holds
/// data", two "the ring is full".
pub(crate) const SIGNAL_SLOTS: u32 = 2;

/// An index word and the byte count that goes with it, on one line: the writer updates `bytes`
/// right before it publishes through `word`, so the two cost one cache-line transfer.
#[repr(C)]
pub(crate) struct IndexLine {
    /// `index << 1 | WAITING` (see [`crate::ring`]).
    pub(crate) word: AtomicU64,
    /// Bytes ever published (head) or consumed (tail): `Reader::len` is their difference.
    pub(crate) bytes: ColdU64,
}

/// One side's lock and the private state its holders pass on, on one line of their own: every
/// operation writes the state, so it must not share a line with anything the other side reads.
#[repr(C)]
pub(crate) struct SideLine {
    pub(crate) lock: SideLock,
    /// Read and written only by the lock's holder (the lock orders it): `[head, cached tail]`
    /// of the write side, `[tail, cached head]` of the read side. A holder that takes the side
    /// over from a dead one reloads it from the index words.
    pub(crate) state: [ColdU64; 2],
}

impl SideLine {
    #[cfg(loom)]
    fn new() -> SideLine {
        SideLine {
            lock: SideLock::new(),
            state: [ColdU64::new(0), ColdU64::new(0)],
        }
    }
}

/// The region's header. Field order is the layout; `const` asserts below pin every offset.
#[repr(C)]
pub(crate) struct Header {
    // Written once at creation, before any other process can see the region.
    magic: ColdU64,
    version: ColdU32,
    slot_size: ColdU32,
    max_ring: ColdU32,
    packet: ColdU32,
    /// [`PoolPolicy`] as (kind, keep, burst); see [`encode_policy`].
    policy: [ColdU32; 3],
    // Hot words, each on its own pair of cache lines.
    /// Slots ever published; WAITING: a reader sleeps.
    pub(crate) head: Padded<IndexLine>,
    /// Slots ever consumed; WAITING: a writer sleeps.
    pub(crate) tail: Padded<IndexLine>,
    /// Readers sleep here; bumped when data arrives or the last writer of a process goes.
    pub(crate) readable: Padded<Futex>,
    /// Writers sleep here; bumped when room appears or the last reader of a process goes.
    pub(crate) writable: Padded<Futex>,
    /// The write side: one writer at a time moves head.
    pub(crate) write_side: Padded<SideLine>,
    /// The read side: one reader at a time moves tail.
    pub(crate) read_side: Padded<SideLine>,
    // Cold words.
    /// Slots in the ring: a power of two, at most `max_ring`. Changes only with both sides held.
    pub(crate) ring_size: ColdU32,
    /// Slots data may use (Linux `max_usage`), at most `ring_size`.
    pub(crate) max_usage: ColdU32,
    /// Free positions whose page is not resident (see `Shared::spare` in `pool/pages.rs`). Advisory.
    pub(crate) dropped: ColdU64,
    /// `O_NONBLOCK` of each end (indexed by [`Side::index`]), shared by every holder like a file description's.
    pub(crate) nonblocking: [ColdU32; 2],
    /// Read and write timeouts in nanoseconds (0: none), like `SO_RCVTIMEO` / `SO_SNDTIMEO`.
    pub(crate) timeout_ns: [ColdU64; 2],
    /// Readiness: the side lock of the readiness state below, taken only while some process
    /// polls an end (see `End::sync` in `pipe/end.rs`).
    pub(crate) sig_lock: Padded<SideLock>,
    /// Someone polls the reader's descriptor ([`READABLE`]) or the writer's ([`FULL`]): from then on every
    /// transition keeps the descriptors' state exact. Sticky. SeqCst with the index RMWs (see
    /// `End::sync`).
    pub(crate) polled: [ColdU32; 2],
    /// Unused (where an earlier layout kept the signal pipes' state: a sync now asks the
    /// kernel, which a peer cannot lie to).
    _unused: [ColdU32; 2],
    /// Bumped (Release) after a process closed its last handle of an end (indexed by [`Side::index`]): the
    /// other side rechecks, with the kernel, whether any holder is left.
    pub(crate) closes: [AtomicU64; 2],
    /// Notification pipes only (see `pipe::notify`): the record slots (the ring size, 0 for a
    /// data pipe). Written once at creation, validated at attach, never read again.
    notes: ColdU32,
    /// The reader consumed a record flagged LOSS and has not yet handed out the LOSS record
    /// (Linux `pipe->note_loss`); read and written only under the read side's lock.
    pub(crate) note_loss: ColdU32,
    /// The reader's filters (`NotificationReader::set_filter`), a sequence lock: `filter_seq` is odd while
    /// a filter is being written (under the read side's lock), and bumped again after; posters
    /// read the table between two equal even values. Values are untrusted numbers, never sizes.
    pub(crate) filter_seq: ColdU32,
    /// Filters in use, at most `pipe::notify::MAX_FILTERS` (a larger value reads as that many).
    pub(crate) nr_filters: ColdU32,
    /// `[kind, info_filter, info_mask, subtypes]` per filter.
    pub(crate) filters: [[ColdU32; 4]; 16],
    /// A resize in progress (see `pipe/capacity.rs`): the queued slots have been copied to a
    /// staging area, so a resizer killed halfway leaves them for the next taker of a side.
    pub(crate) resize: ResizeJournal,
}

/// The journal of a resize: where the queued slots wait while the ring is rewritten. Written
/// with both sides held; `state` is [`STAGED`] from the moment the copy to staging is complete
/// until the ring is rewritten, 0 otherwise. Everything in it is validated before use.
#[repr(C)]
pub(crate) struct ResizeJournal {
    pub(crate) state: ColdU32,
    /// Queued slots, staged at positions `staging..staging + count`.
    pub(crate) count: ColdU32,
    pub(crate) old_ring: ColdU32,
    pub(crate) new_ring: ColdU32,
    /// First staging position: `max(old_ring, new_ring)`.
    pub(crate) staging: ColdU32,
    _pad: ColdU32,
    /// Index of the first queued slot (the ring's tail).
    pub(crate) tail: ColdU64,
}

/// [`ResizeJournal::state`] while the staged slots are the only complete copy.
pub(crate) const STAGED: u32 = 0x5354_4744;

#[cfg(loom)]
impl ResizeJournal {
    fn new() -> ResizeJournal {
        ResizeJournal {
            state: ColdU32::new(0),
            count: ColdU32::new(0),
            old_ring: ColdU32::new(0),
            new_ring: ColdU32::new(0),
            staging: ColdU32::new(0),
            _pad: ColdU32::new(0),
            tail: ColdU64::new(0),
        }
    }
}

#[cfg(not(loom))]
const _: () = {
    use std::mem::{align_of, offset_of, size_of};
    assert!(offset_of!(Header, magic) == 0);
    assert!(offset_of!(Header, version) == 8);
    assert!(offset_of!(Header, slot_size) == 12);
    assert!(offset_of!(Header, max_ring) == 16);
    assert!(offset_of!(Header, packet) == 20);
    assert!(offset_of!(Header, policy) == 24);
    assert!(offset_of!(Header, head) == 128);
    assert!(offset_of!(Header, tail) == 256);
    assert!(offset_of!(Header, readable) == 384);
    assert!(offset_of!(Header, writable) == 512);
    assert!(offset_of!(Header, write_side) == 640);
    assert!(offset_of!(Header, read_side) == 768);
    assert!(offset_of!(SideLine, state) == 8);
    assert!(offset_of!(Header, ring_size) == 896);
    assert!(offset_of!(Header, sig_lock) == 1024);
    assert!(offset_of!(Header, polled) == 1152);
    assert!(offset_of!(Header, closes) == 1168);
    assert!(offset_of!(Header, notes) == 1184);
    assert!(offset_of!(Header, filters) == 1200);
    assert!(offset_of!(Header, resize) == 1456);
    assert!(size_of::<ResizeJournal>() == 32);
    assert!(size_of::<Header>() <= HEADER_SIZE);
    assert!(align_of::<Header>() <= PAGE_SIZE);
    assert!(size_of::<Slot>() == 64);
};

/// Slot state bits above the 32-bit end offset.
pub(crate) const END_MASK: u64 = 0xffff_ffff;
/// The slot's data may be extended by a later write (Linux `PIPE_BUF_FLAG_CAN_MERGE`).
pub(crate) const CAN_MERGE: u64 = 1 << 32;
/// The slot is one packet: a read returns at most it and discards its rest (`PIPE_BUF_FLAG_PACKET`).
pub(crate) const PACKET: u64 = 1 << 33;
/// The reader released the slot (set with a CAS on the last slot, where a merge may race it; on
/// other slots only when the page is also dropped). A published slot never carries it, except
/// briefly between a reader's release and its tail update: a reader that died there leaves it
/// set, and the next reader skips such slots (`Shared::read_guard` in `pipe/shared.rs`).
pub(crate) const RELEASED: u64 = 1 << 34;
/// The position's page was given back to the OS (or never touched): writing there faults.
/// Meaningful only while the position is free; a free position without it holds a spare page.
pub(crate) const DROPPED: u64 = 1 << 35;
/// Notification pipes: records were lost after this one (Linux `PIPE_BUF_FLAG_LOSS`); set by a
/// poster with a CAS that fails once the reader released the slot (see `pipe::notify`).
pub(crate) const LOSS: u64 = 1 << 36;

/// One slot's bookkeeping; its page is at the same position of the arena.
///
/// Padded to a cache line so that the writer filling slot `i + 1` does not steal the line the
/// reader is draining slot `i` from.
#[repr(C, align(64))]
pub(crate) struct Slot {
    /// `end | flags`: `end` is the offset just past the slot's data. While the slot holds data,
    /// only the writer raises `end` (merging, with a CAS) and only the reader sets RELEASED (with
    /// a CAS), so a merge and a release of the last slot cannot both succeed.
    pub(crate) state: AtomicU64,
    /// Offset of the first unread byte; written only by the reader (or by `set_capacity`, which
    /// holds both sides), read by the writer only when a new slot is created there.
    pub(crate) start: AtomicU64,
}

impl Slot {
    #[cfg(loom)]
    fn free() -> Slot {
        Slot {
            state: AtomicU64::new(RELEASED | DROPPED),
            start: AtomicU64::new(0),
        }
    }
}

/// Bytes of the arena in a region's near part (see the module docs): a default pipe's ring.
pub(crate) const NEAR_BYTES: usize = 64 << 10;
/// Slots whose bookkeeping shares the header's page; the rest follow the arena.
pub(crate) const NEAR_SLOTS: usize = (PAGE_SIZE - HEADER_SIZE) / std::mem::size_of::<Slot>();
/// Where the arena starts: right after the header's page.
const ARENA: usize = PAGE_SIZE;
#[cfg(not(loom))]
const _: () = assert!(PAGE_SIZE + NEAR_BYTES <= crate::cells::CELL && NEAR_SLOTS == 32);

/// Where each part of a region lies, computed from its two sizes alone: the header's page
/// (header, then slots `0..NEAR_SLOTS`), the arena's `max_ring` pages, then the other slots.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Layout {
    /// Offset of slot `NEAR_SLOTS` (the slots past the header's page).
    far_slots: usize,
    total: usize,
    /// Positions whose page lies in the near part.
    near_positions: usize,
    /// Bytes of the near part: the header's page and `near_positions` pages.
    near_len: usize,
}

/// The offset of slot `NEAR_SLOTS` ([`Layout::far_slots`]): right after the arena.
fn far_slots(slot_size: usize, max_ring: usize) -> usize {
    ARENA + max_ring * slot_size
}

impl Layout {
    fn of(slot_size: usize, max_ring: usize) -> Layout {
        let far_slots = far_slots(slot_size, max_ring);
        let rest = max_ring.saturating_sub(NEAR_SLOTS) * std::mem::size_of::<Slot>();
        let near_positions = max_ring.min(NEAR_BYTES / slot_size);
        Layout {
            far_slots,
            total: far_slots + rest.next_multiple_of(PAGE_SIZE),
            near_positions,
            near_len: ARENA + near_positions * slot_size,
        }
    }
}

/// Immutable choices made when the pipe was built, kept by each process from its own
/// validated reading of the region.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Config {
    pub(crate) policy: PoolPolicy,
    pub(crate) packet: bool,
    pub(crate) slot_size: usize,
    /// Record slots of a notification pipe (its ring size), 0 for a data pipe.
    pub(crate) notes: usize,
}

/// This process's view of a pipe's region.
pub(crate) struct Region {
    header: NonNull<Header>,
    /// Slot 0, in the near part; slots `0..near_slots` are there.
    slots: NonNull<Slot>,
    near_slots: usize,
    /// Position 0's page, in the near part; positions `0..near_positions` are there.
    arena: NonNull<u8>,
    near_positions: usize,
    /// Validated at attach; the region's own copy is never read again.
    pub(crate) config: Config,
    /// Slot positions (and pages) reserved: the largest ring this region can hold.
    pub(crate) max_ring: usize,
    #[cfg(not(loom))]
    backing: Backing,
    #[cfg(loom)]
    _heap: (Box<Header>, Box<[Slot]>, Box<[std::cell::UnsafeCell<u8>]>),
}

/// The memory file and this process's mappings of it.
#[cfg(not(loom))]
struct Backing {
    /// The near part, in a cell.
    near: crate::cells::Cell,
    /// The whole file, mapped at the first need (see [`Region::ensure_far`]). Never unmapped
    /// while the region lives (callers hold pointers into it), except by [`Region::punch`],
    /// which no other user of the region can overlap.
    far: std::sync::OnceLock<crate::sys::mm::Mapping>,
    /// This process's descriptor of the memory file, -1 once a forked child could not reopen
    /// it (or its parent could not make its key real). Until the process takes a real key
    /// ([`KEYED`]) it names the description the mapping was made from; from then on a
    /// description of its own, opened again for the key's lock and never mapped (see
    /// [`Region::key_description`]). A pipe confined to this process has only a provisional
    /// key (see `Shared::take_key`), and so usually no second description.
    memfd: std::sync::atomic::AtomicI32,
    /// [`UNKEYED`], [`KEYING`] or [`KEYED`].
    keyed: std::sync::atomic::AtomicU8,
    /// Set by the prepare fork handler when this process's provisional key on the region could
    /// not be made real: a child forked now must not use the region (see
    /// [`Region::lose_in_forked_child`]). Written and read only by the fork handlers.
    lose_in_child: std::sync::atomic::AtomicBool,
}

/// `Backing::keyed`: the descriptor still names the mapped description.
#[cfg(not(loom))]
const UNKEYED: u8 = 0;
/// `Backing::keyed`: a thread is giving it a description of its own.
#[cfg(not(loom))]
const KEYING: u8 = 1;
/// `Backing::keyed`: it names a description of its own, which only locks use.
#[cfg(not(loom))]
const KEYED: u8 = 2;

#[cfg(not(loom))]
impl Backing {
    fn new(near: crate::cells::Cell, memfd: std::os::fd::OwnedFd) -> Backing {
        use std::os::fd::IntoRawFd;
        Backing {
            near,
            far: std::sync::OnceLock::new(),
            memfd: std::sync::atomic::AtomicI32::new(memfd.into_raw_fd()),
            keyed: std::sync::atomic::AtomicU8::new(UNKEYED),
            lose_in_child: std::sync::atomic::AtomicBool::new(false),
        }
    }
}

#[cfg(not(loom))]
impl Drop for Backing {
    fn drop(&mut self) {
        let raw = *self.memfd.get_mut();
        if raw >= 0 {
            crate::sys::fd::close_raw(raw);
        }
    }
}

// SAFETY: the region is memory shared by design; which thread touches which bytes is decided
// by the side locks and the ring protocol, and every access goes through atomics or raw copies.
unsafe impl Send for Region {}
// SAFETY: as for Send.
unsafe impl Sync for Region {}

/// Slot positions a region reserves for a data pipe whose ring may grow to `reach` slots: twice
/// as many, so that a resize always finds room to stage every queued slot past both rings (see
/// `pipe/capacity.rs`). Only address space: the memory file is sparse.
pub(crate) fn positions_for(reach: usize) -> usize {
    2 * reach
}

fn encode_policy(p: PoolPolicy) -> [u32; 3] {
    let c = |v: usize| u32::try_from(v).unwrap_or(u32::MAX);
    match p {
        PoolPolicy::Adaptive { keep } => [0, c(keep), 0],
        PoolPolicy::Unified { keep, burst } => [1, c(keep), c(burst)],
        PoolPolicy::TmpPage => [2, 0, 0],
        PoolPolicy::None => [3, 0, 0],
    }
}

fn decode_policy(v: [u32; 3]) -> io::Result<PoolPolicy> {
    Ok(match v[0] {
        0 => PoolPolicy::Adaptive {
            keep: v[1] as usize,
        },
        1 => PoolPolicy::Unified {
            keep: v[1] as usize,
            burst: v[2] as usize,
        },
        2 => PoolPolicy::TmpPage,
        3 => PoolPolicy::None,
        k => return Err(invalid(format!("unknown pool policy {k} in the region"))),
    })
}

/// A descriptor that always polls ready (`sys::poll::always_ready`: `POLLIN` and `POLLOUT`
/// whoever reads or writes it), handed to the poller of an end that lost every descriptor of
/// its own (a forked child at its descriptor limit, see [`Region::forget_in_forked_child`]):
/// the poller wakes and its call finds the end's error (`BrokenPipe`), never a wait with no
/// end. Made once per process on first need (a forked child inherits it); -1 until made. Every
/// such end of the process hands out this one number: an epoll instance takes it once.
#[cfg(not(loom))]
static READY_FD: std::sync::atomic::AtomicI32 = std::sync::atomic::AtomicI32::new(-1);

/// A region of this forked child lost its memory file (see [`Region::forget_in_forked_child`]).
#[cfg(not(loom))]
static LOST_IN_CHILD: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// In a forked child, after every region forgot its parent's key: if one lost its memory file,
/// make [`READY_FD`] now, with the descriptor number that closing it freed.
#[cfg(not(loom))]
pub(crate) fn after_forgets() {
    if LOST_IN_CHILD.swap(false, std::sync::atomic::Ordering::Relaxed) {
        let _ = ready_fd();
    }
}

/// [`READY_FD`], made if it was not yet; `None` if it cannot be (no descriptor, no memory).
#[cfg(not(loom))]
pub(crate) fn ready_fd() -> Option<std::os::fd::BorrowedFd<'static>> {
    use std::os::fd::IntoRawFd;
    use std::sync::atomic::Ordering as O;
    // Relaxed: the number is all there is to publish (the eventfd is complete when the CAS
    // below stores it; a reader only polls the number).
    let fd = READY_FD.load(O::Relaxed);
    let fd = if fd >= 0 {
        fd
    } else {
        let made = crate::sys::poll::always_ready().ok()?;
        let raw = std::os::fd::AsRawFd::as_raw_fd(&made);
        // Relaxed: as above; a thread that lost the race drops its own.
        match READY_FD.compare_exchange(-1, raw, O::Relaxed, O::Relaxed) {
            Ok(_) => made.into_raw_fd(),
            Err(other) => other,
        }
    };
    // SAFETY: once stored, READY_FD is never closed: it stays open for the process's life.
    Some(unsafe { std::os::fd::BorrowedFd::borrow_raw(fd) })
}

/// The largest capacity a pipe may have: 1 GiB.
pub const MAX_CAPACITY: usize = 1 << 30;

/// The capacity a pipe may grow to with `set_capacity` unless its builder says otherwise
/// ([`Builder::max_capacity`](crate::Builder::max_capacity)): 1 MiB, as far as Linux lets an
/// unprivileged process grow a pipe by default (`/proc/sys/fs/pipe-max-size`). A pipe reserves
/// address space for twice its maximum, and memory only for what it holds; the smaller the
/// maximum, the closer its slot table and its first pages lie (one page-table page and one
/// page-cache index node fewer per pipe than with 16 MiB).
pub const DEFAULT_MAX_CAPACITY: usize = 1 << 20;

/// The slot count for a requested capacity: `F_SETPIPE_SZ`'s rounding (up to a power-of-two
/// number of pages, at least one page), then divided into `slot_size` slots (at least one).
pub(crate) fn ring_size_for(bytes: usize, slot_size: usize) -> io::Result<usize> {
    if bytes == 0 || bytes > MAX_CAPACITY {
        return Err(invalid_input(format!(
            "pipe capacity {bytes} is outside 1..={MAX_CAPACITY} bytes"
        )));
    }
    let rounded = bytes.div_ceil(PAGE_SIZE).next_power_of_two() * PAGE_SIZE;
    Ok((rounded / slot_size).max(1))
}

/// Checks a slot size: a power of two from 4 KiB to 1 GiB.
pub(crate) fn check_slot_size(slot_size: usize) -> io::Result<()> {
    if !slot_size.is_power_of_two() || !(PAGE_SIZE..=MAX_CAPACITY).contains(&slot_size) {
        return Err(invalid_input(format!(
            "slot size {slot_size} is not a power of two from {PAGE_SIZE} to {MAX_CAPACITY}"
        )));
    }
    Ok(())
}

/// The most records a notification pipe holds (Linux: 512).
pub const MAX_RECORDS: usize = 512;

/// The ring size of a notification pipe of `records` records (Linux: 1..=512, rounded up to a
/// power of two, as `IOC_WATCH_QUEUE_SET_SIZE` sizes the ring).
pub(crate) fn notes_ring_for(records: usize) -> io::Result<usize> {
    if !(1..=MAX_RECORDS).contains(&records) {
        return Err(invalid_input(format!(
            "a notification pipe holds 1..={MAX_RECORDS} records, not {records}"
        )));
    }
    Ok(records.next_power_of_two())
}

/// Whether a record count fits a notification pipe as stored in its region: a power of two of at
/// most [`MAX_RECORDS`], in 4 KiB slots.
pub(crate) fn notes_ok(notes: usize, slot_size: usize) -> bool {
    notes.is_power_of_two() && notes <= MAX_RECORDS && slot_size == PAGE_SIZE
}

/// A copy of a region's header page, read before anything is mapped (see [`Region::attach`]):
/// its words in the layout [`Header`] pins, in this machine's byte order as the atomics store
/// them.
#[cfg(not(loom))]
struct HeaderCopy<'a>(&'a [u8]);

#[cfg(not(loom))]
impl HeaderCopy<'_> {
    fn u32_at(&self, off: usize) -> u32 {
        u32::from_ne_bytes(self.0[off..off + 4].try_into().expect("4 bytes"))
    }

    fn u64_at(&self, off: usize) -> u64 {
        u64::from_ne_bytes(self.0[off..off + 8].try_into().expect("8 bytes"))
    }
}

impl Region {
    /// A new region for a ring of `ring_size` slots that may grow to `reach` slots (reserving
    /// [`positions_for`] them; a notification pipe, never resized, exactly its ring).
    #[cfg(not(loom))]
    pub(crate) fn create(ring_size: usize, config: Config, reach: usize) -> io::Result<Region> {
        let max_ring = if config.notes != 0 {
            ring_size
        } else {
            positions_for(reach)
        };
        debug_assert!(ring_size <= reach && reach.is_power_of_two() && ring_size.is_power_of_two());
        let layout = Layout::of(config.slot_size, max_ring);
        let memfd = crate::sys::memfd::sealed_memfd(layout.total as u64)?;
        use std::os::fd::AsFd;
        let near = crate::cells::Cell::map(memfd.as_fd(), layout.near_len)?;
        let backing = Backing::new(near, memfd);
        let region = Region::from_backing(backing, layout, config, max_ring);
        region.init(ring_size)?;
        Ok(region)
    }

    /// A new region on the heap (loom models).
    #[cfg(loom)]
    pub(crate) fn create(ring_size: usize, config: Config, _reach: usize) -> io::Result<Region> {
        use crate::sync::Padded;
        let header = Box::new(Header {
            magic: ColdU64::new(0),
            version: ColdU32::new(0),
            slot_size: ColdU32::new(0),
            max_ring: ColdU32::new(0),
            packet: ColdU32::new(0),
            policy: [ColdU32::new(0), ColdU32::new(0), ColdU32::new(0)],
            head: Padded(IndexLine {
                word: AtomicU64::new(0),
                bytes: ColdU64::new(0),
            }),
            tail: Padded(IndexLine {
                word: AtomicU64::new(0),
                bytes: ColdU64::new(0),
            }),
            readable: Padded(Futex::new()),
            writable: Padded(Futex::new()),
            write_side: Padded(SideLine::new()),
            read_side: Padded(SideLine::new()),
            ring_size: ColdU32::new(0),
            max_usage: ColdU32::new(0),
            dropped: ColdU64::new(0),
            nonblocking: [ColdU32::new(0), ColdU32::new(0)],
            timeout_ns: [ColdU64::new(0), ColdU64::new(0)],
            sig_lock: Padded(SideLock::new()),
            polled: [ColdU32::new(0), ColdU32::new(0)],
            _unused: [ColdU32::new(0), ColdU32::new(0)],
            closes: [AtomicU64::new(0), AtomicU64::new(0)],
            notes: ColdU32::new(0),
            note_loss: ColdU32::new(0),
            filter_seq: ColdU32::new(0),
            nr_filters: ColdU32::new(0),
            filters: Default::default(),
            resize: ResizeJournal::new(),
        });
        let slots: Box<[Slot]> = (0..ring_size).map(|_| Slot::free()).collect();
        let arena: Box<[std::cell::UnsafeCell<u8>]> = (0..ring_size * config.slot_size)
            .map(|_| std::cell::UnsafeCell::new(0))
            .collect();
        let region = Region {
            header: NonNull::from(&*header),
            slots: NonNull::new(slots.as_ptr() as *mut Slot).unwrap(),
            near_slots: ring_size,
            arena: NonNull::new(arena.as_ptr() as *mut u8).unwrap(),
            near_positions: ring_size,
            config,
            max_ring: ring_size,
            _heap: (header, slots, arena),
        };
        region.init(ring_size)?;
        Ok(region)
    }

    #[cfg(not(loom))]
    fn from_backing(backing: Backing, layout: Layout, config: Config, max_ring: usize) -> Region {
        let base = backing.near.as_ptr();
        assert!(
            layout.near_len <= backing.near.len(),
            "the near part is not mapped"
        );
        // SAFETY: (all three) the offsets lie in the near part, which the cell's mapping covers
        // (asserted above: ARENA is the header's page, HEADER_SIZE is inside it), and a mapping
        // is never at address 0.
        let (header, slots, arena) = unsafe {
            (
                NonNull::new_unchecked(base.cast::<Header>()),
                NonNull::new_unchecked(base.add(HEADER_SIZE).cast::<Slot>()),
                NonNull::new_unchecked(base.add(ARENA)),
            )
        };
        Region {
            header,
            slots,
            near_slots: max_ring.min(NEAR_SLOTS),
            arena,
            near_positions: layout.near_positions,
            config,
            max_ring,
            backing,
        }
    }

    /// Writes the immutable words and the initial state; the region is not yet shared.
    ///
    /// # Errors
    /// As [`Region::ensure_far`], for a ring larger than the near part.
    fn init(&self, ring_size: usize) -> io::Result<()> {
        if !self.fits_near(ring_size) {
            self.ensure_far()?;
        }
        let h = self.header();
        let c = self.config;
        h.magic.store(MAGIC, Ordering::Relaxed);
        h.version.store(VERSION, Ordering::Relaxed);
        h.slot_size.store(c.slot_size as u32, Ordering::Relaxed);
        h.max_ring.store(self.max_ring as u32, Ordering::Relaxed);
        h.packet.store(u32::from(c.packet), Ordering::Relaxed);
        for (w, v) in h.policy.iter().zip(encode_policy(c.policy)) {
            w.store(v, Ordering::Relaxed);
        }
        h.notes.store(c.notes as u32, Ordering::Relaxed);
        h.ring_size.store(ring_size as u32, Ordering::Relaxed);
        h.max_usage.store(ring_size as u32, Ordering::Relaxed);
        h.dropped.store(ring_size as u64, Ordering::Relaxed);
        for pos in 0..ring_size {
            self.slot(pos)
                .state
                .store(RELEASED | DROPPED, Ordering::Relaxed);
        }
        Ok(())
    }

    /// Validates a region received from another process (or this one) and maps its near part.
    ///
    /// # Errors
    /// `InvalidData` naming what is wrong: not a memory file sealed against shrinking (or one
    /// sealed against writing, or of huge pages), a wrong size, magic or version, sizes out of
    /// range; the OS's error if it cannot be read or mapped.
    #[cfg(not(loom))]
    pub(crate) fn attach(memfd: std::os::fd::OwnedFd) -> io::Result<Region> {
        use std::os::fd::AsFd;
        let (size, seals) = crate::sys::memfd::memfd_info(memfd.as_fd())?;
        if seals & libc::F_SEAL_SHRINK == 0 {
            return Err(invalid(
                "the memory file is not sealed against shrinking (not a pagepipe region)",
            ));
        }
        if seals & (libc::F_SEAL_WRITE | libc::F_SEAL_FUTURE_WRITE) != 0 {
            return Err(invalid(
                "the memory file is sealed against writing (not a pagepipe region)",
            ));
        }
        let size = usize::try_from(size)
            .ok()
            .filter(|s| *s >= PAGE_SIZE && s % PAGE_SIZE == 0)
            .ok_or_else(|| invalid(format!("a memory file of {size} bytes is not a region")))?;
        // Validated from a copy read without a mapping: nothing is mapped at a fixed address
        // (a cell) until the file is known to be a region of exactly the size it describes.
        let mut page = vec![0u8; PAGE_SIZE];
        crate::sys::memfd::read_exact_at(memfd.as_fd(), &mut page, 0)?;
        let h = HeaderCopy(&page);
        let magic = h.u64_at(std::mem::offset_of!(Header, magic));
        if magic != MAGIC {
            return Err(invalid(format!("bad region magic {magic:#x}")));
        }
        let version = h.u32_at(std::mem::offset_of!(Header, version));
        if version != VERSION {
            return Err(invalid(format!(
                "region version {version}, this pagepipe speaks {VERSION}"
            )));
        }
        let slot_size = h.u32_at(std::mem::offset_of!(Header, slot_size)) as usize;
        if check_slot_size(slot_size).is_err() {
            return Err(invalid(format!("bad slot size {slot_size} in the region")));
        }
        let packet = match h.u32_at(std::mem::offset_of!(Header, packet)) {
            0 => false,
            1 => true,
            v => return Err(invalid(format!("bad packet flag {v} in the region"))),
        };
        let policy_at = std::mem::offset_of!(Header, policy);
        let policy = decode_policy([0, 1, 2].map(|i| h.u32_at(policy_at + 4 * i)))?;
        let notes = h.u32_at(std::mem::offset_of!(Header, notes)) as usize;
        if notes != 0 && !notes_ok(notes, slot_size) {
            return Err(invalid(format!(
                "bad notification record count {notes} for {slot_size}-byte slots in the region"
            )));
        }
        let max_ring = h.u32_at(std::mem::offset_of!(Header, max_ring)) as usize;
        let max_ok = if notes != 0 {
            max_ring == notes
        } else {
            max_ring >= 2
                && max_ring.is_power_of_two()
                && max_ring <= positions_for((MAX_CAPACITY / slot_size).max(1))
        };
        if !max_ok {
            return Err(invalid(format!(
                "region reserves {max_ring} slots of {slot_size} bytes, not a size pagepipe makes"
            )));
        }
        let layout = Layout::of(slot_size, max_ring);
        if layout.total != size {
            return Err(invalid(format!(
                "region of {size} bytes, its header describes {}",
                layout.total
            )));
        }
        let config = Config {
            policy,
            packet,
            slot_size,
            notes,
        };
        let near = crate::cells::Cell::map(memfd.as_fd(), layout.near_len)?;
        Ok(Region::from_backing(
            Backing::new(near, memfd),
            layout,
            config,
            max_ring,
        ))
    }

    /// Whether this region can be a new pipe of `config` that may grow to `reach` slots (see
    /// `pipe::cache`): a data pipe's, with the same slot size and reservation.
    #[cfg(not(loom))]
    pub(crate) fn fits(&self, config: &Config, reach: usize) -> bool {
        config.notes == 0
            && self.config.notes == 0
            && config.slot_size == self.config.slot_size
            && self.max_ring == positions_for(reach)
    }

    /// Gives every page of the memory file back (a hole over all of it): the region then reads
    /// as the zeros a new memory file holds, and costs no memory. For a region no other
    /// process maps (see `pipe::cache`). The far part, if it was mapped, is unmapped: the next
    /// pipe may not need it.
    #[cfg(not(loom))]
    pub(crate) fn punch(&mut self) {
        // `&mut self`: nothing points into the far part, which is unmapped when it goes.
        if let Some(far) = self.backing.far.take() {
            far.remove(0, far.len());
        } else {
            // Nothing in this process touched the far part, and no other process maps it.
            let near = &self.backing.near;
            crate::sys::mm::advise_raw_remove(near.as_ptr(), near.len());
        }
    }

    /// Makes a punched region ([`Region::punch`]) a new pipe's: `config`, a ring of
    /// `ring_size` slots, as [`Region::create`] would.
    ///
    /// # Errors
    /// As [`Region::ensure_far`], for a ring larger than the near part.
    #[cfg(not(loom))]
    pub(crate) fn reuse(&mut self, config: Config, ring_size: usize) -> io::Result<()> {
        debug_assert!(ring_size <= self.reach() && ring_size.is_power_of_two());
        self.config = config;
        self.init(ring_size)
    }

    /// The largest ring `set_capacity` may make: half the reserved positions (the other half
    /// stages a resize), or a notification pipe's ring.
    pub(crate) fn reach(&self) -> usize {
        if self.config.notes != 0 {
            self.max_ring
        } else {
            self.max_ring / 2
        }
    }

    /// This process's descriptor of the memory file (see [`Backing::memfd`]): for queries
    /// (`F_OFD_GETLK`, `fstat`) and to open it again for a peer.
    ///
    /// # Errors
    /// `BrokenPipe` in a forked child that could not reopen it (see
    /// [`Region::forget_in_forked_child`]).
    #[cfg(not(loom))]
    pub(crate) fn memfd(&self) -> io::Result<std::os::fd::BorrowedFd<'_>> {
        let raw = self
            .backing
            .memfd
            .load(std::sync::atomic::Ordering::Relaxed);
        if raw < 0 {
            return Err(io::Error::new(
                io::ErrorKind::BrokenPipe,
                "this process could not reopen the pipe's memory file after fork(2)",
            ));
        }
        // SAFETY: `raw` stays open while `self` lives: only Drop closes it; `key_description`
        // and a forked child's handler replace the description in place (dup3), and a child
        // that cannot stores -1 before it closes the number, with no other thread alive.
        Ok(unsafe { std::os::fd::BorrowedFd::borrow_raw(raw) })
    }

    /// The description this process's key lock lives on: the memory file opened again
    /// (through `/proc/self/fd`), in place of the descriptor's mapped one, the first time.
    /// Asked for only when the key is real: a pipe that stays in this process never opens it
    /// (its key is provisional, see `Shared::take_key`); one that leaves does on its way out.
    ///
    /// Never the description the region is mapped from: a mapping holds its description, and
    /// a forked child inherits the mapping, so a lock on it would outlive this process for as
    /// long as any child does. Nor one any other process holds: an end that travels gets a
    /// fresh description ([`Region::memfd`] opened again), and a forked child replaces its
    /// copy of this one ([`Region::forget_in_forked_child`]).
    ///
    /// # Errors
    /// The OS's error if the file cannot be opened again (no `/proc`, a full descriptor
    /// table); `BrokenPipe` as for [`Region::memfd`].
    #[cfg(not(loom))]
    pub(crate) fn key_description(&self) -> io::Result<std::os::fd::BorrowedFd<'_>> {
        use std::sync::atomic::Ordering as O;
        let keyed = &self.backing.keyed;
        loop {
            // No fork while KEYING (a child would inherit the state with nobody to finish it)
            // nor while the reopening's spare descriptor exists (a child would inherit it, and
            // with it a reference to our key description).
            let no_fork = crate::fork_gate::hold();
            // Acquire: pairs with the Release store of KEYED below (the dup3 is done).
            match keyed.compare_exchange(UNKEYED, KEYING, O::Acquire, O::Acquire) {
                Ok(_) => {
                    let done = self.memfd().and_then(|fd| {
                        crate::sys::fd::reopen_in_place(std::os::fd::AsRawFd::as_raw_fd(&fd))
                    });
                    // Release: the replaced description is in place for whoever sees KEYED.
                    keyed.store(if done.is_ok() { KEYED } else { UNKEYED }, O::Release);
                    drop(no_fork);
                    done?;
                    return self.memfd();
                }
                Err(KEYED) => return self.memfd(),
                Err(_) => {
                    drop(no_fork);
                    std::thread::yield_now(); // another thread is reopening it
                }
            }
        }
    }

    /// In the prepare fork handler: whether a child forked now must lose this region (`lose`:
    /// the parent's provisional key could not be made real, so the lock words the parent's
    /// threads write name a key whose byte nobody locks; a child that used the region would
    /// take their sides from them). See [`Region::forget_in_forked_child`].
    #[cfg(not(loom))]
    pub(crate) fn lose_in_forked_child(&self, lose: bool) {
        self.backing
            .lose_in_child
            .store(lose, std::sync::atomic::Ordering::Relaxed);
    }

    /// In a forked child (fork handler, one thread): if this process took its key, the
    /// inherited descriptor shares the parent's key description; the child gets a description
    /// of its own in its place, so the parent's key dies with the parent (the mapping the child
    /// inherited holds only the mapped description, which no lock uses). If that fails (no
    /// `/proc`, a full descriptor table), or the parent could not make its key real before the
    /// fork ([`Region::lose_in_forked_child`]), the child closes its copy and every call that
    /// needs the file fails with `BrokenPipe`: failing closed, never keeping the parent alive
    /// in the eyes of its peers nor taking a side from a live parent thread.
    #[cfg(not(loom))]
    pub(crate) fn forget_in_forked_child(&self) {
        use std::sync::atomic::Ordering as O;
        let raw = self.backing.memfd.load(O::Relaxed);
        let lose = self.backing.lose_in_child.swap(false, O::Relaxed);
        if raw < 0 || (!lose && self.backing.keyed.load(O::Relaxed) == UNKEYED) {
            return;
        }
        if !lose && crate::sys::fd::reopen_in_place(raw).is_ok() {
            self.backing.keyed.store(KEYED, O::Relaxed);
        } else {
            self.backing.memfd.store(-1, O::Relaxed);
            crate::sys::fd::close_raw(raw);
            // The number just closed is free, and stays free for the other regions' reopens;
            // the fork handler makes the stand-in for lost ends' descriptors after them all
            // (`after_forgets`), where later there may be none to spare.
            LOST_IN_CHILD.store(true, O::Relaxed);
        }
    }

    /// The header: all atomics, so a shared reference is sound whatever peers write.
    pub(crate) fn header(&self) -> &Header {
        // SAFETY: `header` points to a live, aligned Header for as long as `self` (the mapping or
        // box it is in is owned by `self`); every field is an atomic, valid for any bits.
        unsafe { self.header.as_ref() }
    }

    /// Slot position `pos`'s bookkeeping.
    ///
    /// # Panics
    /// If `pos >= max_ring` (callers derive positions from a validated ring size), or if the
    /// slot lies in the far part and this process has not mapped it: every position past the
    /// near part comes from a ring size [`Region::ring_size`] validated (which maps the far
    /// part first) or from a resize, which maps it before it stages ([`Region::ensure_far`]).
    #[inline]
    pub(crate) fn slot(&self, pos: usize) -> &Slot {
        assert!(pos < self.max_ring, "slot position {pos} out of the region");
        if pos < self.near_slots {
            // SAFETY: pos < near_slots: inside the header's page, which holds near_slots slots of
            // atomics after the header.
            return unsafe { &*self.slots.as_ptr().add(pos) };
        }
        let far = self.far();
        assert!(
            !far.is_null(),
            "slot {pos} is in the far part, not mapped here"
        );
        let off = far_slots(self.config.slot_size, self.max_ring)
            + (pos - self.near_slots) * std::mem::size_of::<Slot>();
        // SAFETY: the far part maps the whole file, whose slots past the header's page start
        // at `far_slots` and hold max_ring - near_slots slots (pos < max_ring); aligned to 64
        // (far_slots is a page multiple).
        unsafe { &*far.add(off).cast::<Slot>() }
    }

    /// The first byte of position `pos`'s page.
    ///
    /// # Panics
    /// As [`Region::slot`].
    #[inline]
    pub(crate) fn page(&self, pos: usize) -> *mut u8 {
        self.run(pos, 1)
    }

    /// The first byte of the `count` pages of positions `first..first + count`, which are
    /// contiguous: in the far part once it is mapped, else in the near part.
    ///
    /// # Panics
    /// If the positions pass `max_ring`, or the near part while the far part is not mapped.
    #[inline]
    fn run(&self, first: usize, count: usize) -> *mut u8 {
        let end = first.checked_add(count);
        assert!(
            end.is_some_and(|e| e <= self.max_ring),
            "page positions {first}+{count} out of the region"
        );
        let off = first * self.config.slot_size;
        let far = self.far();
        if far.is_null() {
            assert!(
                end.is_some_and(|e| e <= self.near_positions),
                "page positions {first}+{count} are in the far part, not mapped here"
            );
            // SAFETY: the positions lie in the near part's arena (asserted above).
            unsafe { self.arena.as_ptr().add(off) }
        } else {
            // SAFETY: the far part maps the whole file, whose arena of max_ring pages starts at
            // ARENA; the positions lie in it (asserted above).
            unsafe { far.add(ARENA + off) }
        }
    }

    /// The far part's first byte, or null while this process has not mapped it.
    #[inline]
    fn far(&self) -> *mut u8 {
        #[cfg(not(loom))]
        {
            // OnceLock::get: an Acquire load that pairs with its `set` in `map_far`.
            self.backing
                .far
                .get()
                .map_or(std::ptr::null_mut(), crate::sys::mm::Mapping::as_ptr)
        }
        #[cfg(loom)]
        {
            std::ptr::null_mut()
        }
    }

    /// Whether a ring of `ring` slots lies wholly in the near part.
    #[inline]
    fn fits_near(&self, ring: usize) -> bool {
        ring <= self.near_positions && ring <= self.near_slots
    }

    /// Maps the far part if this process has not yet: before any use of a slot or page past
    /// the near part.
    ///
    /// # Errors
    /// The OS's error if the file cannot be opened again (no `/proc`, a full descriptor table)
    /// or mapped (no address space); `BrokenPipe` as for [`Region::memfd`].
    pub(crate) fn ensure_far(&self) -> io::Result<()> {
        if self.far().is_null() {
            #[cfg(not(loom))]
            return self.map_far();
        }
        Ok(())
    }

    /// [`Region::ensure_far`]'s mapping. From a description of its own, opened again for it
    /// and closed after: never the key's (a mapping holds its description, and a forked child
    /// inherits the mapping, so the key's lock would outlive this process; see
    /// [`Region::key_description`]).
    #[cfg(not(loom))]
    #[cold]
    fn map_far(&self) -> io::Result<()> {
        // No fork while the spare descriptor is open or the mapping unowned: a child would
        // inherit them, unknown to it.
        let no_fork = crate::fork_gate::hold();
        let fd = crate::sys::fd::reopen(self.memfd()?)?;
        let total = Layout::of(self.config.slot_size, self.max_ring).total;
        let far = crate::sys::mm::Mapping::shared(std::os::fd::AsFd::as_fd(&fd), total);
        drop(fd);
        // A thread that lost the race drops (unmaps) its own, still under the gate.
        let _ = self.backing.far.set(far?);
        drop(no_fork);
        Ok(())
    }

    /// The current ring size, validated: a power of two of at most `max_ring` slots. A ring
    /// larger than the near part gets the far part mapped first, so every position derived
    /// from the size can be used.
    ///
    /// # Errors
    /// `InvalidData` for a bad size; as [`Region::ensure_far`].
    #[inline]
    pub(crate) fn ring_size(&self) -> io::Result<usize> {
        // Acquire: pairs with the Release store in set_capacity (made with both sides held).
        let v = self.header().ring_size.load(Ordering::Acquire) as usize;
        if v == 0 || !v.is_power_of_two() || v > self.max_ring {
            return Err(invalid(format!("bad ring size {v} in the region")));
        }
        if !self.fits_near(v) {
            self.ensure_far()?;
        }
        Ok(v)
    }

    /// Slots data may use, validated against `ring`.
    pub(crate) fn max_usage(&self, ring: usize) -> io::Result<usize> {
        // Acquire: pairs with the Release store in set_capacity.
        let v = self.header().max_usage.load(Ordering::Acquire) as usize;
        if v == 0 || v > ring {
            return Err(invalid(format!(
                "bad max_usage {v} for a ring of {ring} slots"
            )));
        }
        Ok(v)
    }

    /// Gives the pages of `count` positions from `first` back to the OS.
    ///
    /// # Panics
    /// As [`Region::run`].
    pub(crate) fn drop_pages(&self, first: usize, count: usize) {
        let run = self.run(first, count);
        #[cfg(not(loom))]
        crate::sys::mm::advise_raw_remove(run, count * self.config.slot_size);
        #[cfg(loom)]
        let _ = run;
    }

    /// Faults in the pages of `count` positions from `first` (contents unchanged).
    ///
    /// # Panics
    /// As [`Region::run`].
    pub(crate) fn populate(&self, first: usize, count: usize) {
        let run = self.run(first, count);
        #[cfg(not(loom))]
        crate::sys::mm::advise_raw_populate(run, 0, count * self.config.slot_size);
        #[cfg(loom)]
        let _ = run;
    }

    /// Resident 4 KiB pages of position `pos`'s page (`mincore(2)`).
    #[cfg(not(loom))]
    pub(crate) fn resident_pages(&self, pos: usize) -> io::Result<usize> {
        crate::sys::mm::resident_raw(self.page(pos), self.config.slot_size)
    }
}

#[cfg(all(test, not(loom)))]
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
    fn notification_rings_round_up() {
        assert_eq!(notes_ring_for(1).unwrap(), 1);
        assert_eq!(notes_ring_for(33).unwrap(), 64);
        assert_eq!(notes_ring_for(512).unwrap(), 512);
        assert!(notes_ring_for(0).is_err() && notes_ring_for(513).is_err());
    }

    /// A default pipe reserves room to grow to 1 MiB and to stage that much: 2 MiB and a slot
    /// table, well under issue 23's 64 MiB of address space for a 64 KiB pipe. Its whole
    /// 64 KiB ring is in the near part, a cell's worth.
    #[test]
    fn layout_reserves_twice_the_reach() {
        let reach = DEFAULT_MAX_CAPACITY / 4096;
        let max_ring = positions_for(reach);
        let l = Layout::of(4096, max_ring);
        assert_eq!(l.far_slots, 4096 + 2 * DEFAULT_MAX_CAPACITY);
        assert_eq!(
            l.total,
            l.far_slots + ((max_ring - 32) * 64).next_multiple_of(4096)
        );
        assert!(l.total <= 64 << 20);
        assert_eq!(l.near_positions, 16);
        assert_eq!(l.near_len, crate::cells::CELL);
        // Big slots: no page in the near part, only the header's.
        let big = Layout::of(1 << 20, 4);
        assert_eq!((big.near_positions, big.near_len), (0, 4096));
        assert_eq!(big.total, 4096 + (4 << 20));
    }

    /// A default pipe's region lives in a cell (its header and whole ring within one cell of
    /// a 2 MiB-aligned area); a ring larger than the near part maps the far part, through which
    /// the same pages read the same, and slots past the header's page become reachable.
    #[test]
    fn a_region_is_near_until_its_ring_outgrows_the_cell() {
        use crate::cells::{AREA, CELL};
        let config = Config {
            policy: PoolPolicy::default(),
            packet: false,
            slot_size: PAGE_SIZE,
            notes: 0,
        };
        let r = Region::create(16, config, 256).unwrap();
        let base = r.header() as *const Header as usize;
        assert_eq!(base % AREA % CELL, 0, "the header starts a cell");
        assert!(r.far().is_null(), "a default ring needs no far part");
        let last = r.page(15) as usize;
        assert!(last + PAGE_SIZE <= base + CELL, "the ring lies in the cell");
        // SAFETY: position 3's page is free and nothing else uses this region.
        unsafe { r.page(3).add(5).write(42) };
        r.header().ring_size.store(64, Ordering::Relaxed);
        assert_eq!(r.ring_size().unwrap(), 64);
        assert!(!r.far().is_null(), "a 64-slot ring maps the far part");
        assert_ne!(
            r.page(3) as usize,
            last - 12 * PAGE_SIZE,
            "pages now go through it"
        );
        // SAFETY: as above.
        assert_eq!(unsafe { r.page(3).add(5).read() }, 42, "the same page");
        r.slot(63).start.store(7, Ordering::Relaxed);
        assert_eq!(r.slot(63).start.load(Ordering::Relaxed), 7);
        assert_eq!(
            r.slot(31).state.load(Ordering::Relaxed),
            0,
            "slot 31: free, never used"
        );
    }

    #[test]
    fn policies_round_trip() {
        for p in [
            PoolPolicy::Adaptive { keep: 3 },
            PoolPolicy::Unified { keep: 2, burst: 8 },
            PoolPolicy::TmpPage,
            PoolPolicy::None,
        ] {
            assert_eq!(decode_policy(encode_policy(p)).unwrap(), p);
        }
        assert!(decode_policy([9, 0, 0]).is_err());
    }
}

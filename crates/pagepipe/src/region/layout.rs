//! The region's data model in one place: the header's words and their offsets, a slot's state
//! bits, and where each part of a region lies ([`Layout`]). Everything here is `#[repr(C)]`,
//! fixed-width and pinned by `const` asserts; nothing here reads a region.

use crate::lock::SideLock;
use crate::sync::{AtomicU64, ColdU32, ColdU64, Futex, Padded};
use crate::sys::mm::PAGE_SIZE;

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
    pub(crate) fn new() -> SideLine {
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
    pub(super) magic: ColdU64,
    pub(super) version: ColdU32,
    pub(super) slot_size: ColdU32,
    pub(super) max_ring: ColdU32,
    pub(super) packet: ColdU32,
    /// [`PoolPolicy`](crate::PoolPolicy) as (kind, keep, burst); see `encode_policy` in `map.rs`.
    pub(super) policy: [ColdU32; 3],
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
    /// Bit `1 << side.index()`: a sync of that side found `sig_lock` held past its patience
    /// and left its work to the next holder of its side (see `End::sync_delegating`). Only a
    /// hint: a peer that writes it costs a holder a sync, at most `MAX_SYNC_ROUNDS` per call.
    pub(crate) sig_pending: ColdU32,
    /// Unused (where an earlier layout kept the signal pipes' state: a sync now asks the
    /// kernel, which a peer cannot lie to).
    _unused: ColdU32,
    /// Bumped (Release) after a process closed its last handle of an end (indexed by [`Side::index`]): the
    /// other side rechecks, with the kernel, whether any holder is left.
    pub(crate) closes: [AtomicU64; 2],
    /// Notification pipes only (see `pipe::notify`): the record slots (the ring size, 0 for a
    /// data pipe). Written once at creation, validated at attach, never read again.
    pub(super) notes: ColdU32,
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

#[cfg(loom)]
impl Header {
    /// A header of zeroes, on the heap of a loom model (see `Region::create`).
    pub(crate) fn zeroed() -> Header {
        Header {
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
            sig_pending: ColdU32::new(0),
            _unused: ColdU32::new(0),
            closes: [AtomicU64::new(0), AtomicU64::new(0)],
            notes: ColdU32::new(0),
            note_loss: ColdU32::new(0),
            filter_seq: ColdU32::new(0),
            nr_filters: ColdU32::new(0),
            filters: Default::default(),
            resize: ResizeJournal::new(),
        }
    }
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
    pub(crate) fn new() -> ResizeJournal {
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
    assert!(offset_of!(Header, sig_pending) == 1160);
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
    pub(crate) fn free() -> Slot {
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
pub(crate) const ARENA: usize = PAGE_SIZE;
#[cfg(not(loom))]
const _: () = assert!(PAGE_SIZE + NEAR_BYTES <= crate::cells::CELL && NEAR_SLOTS == 32);

/// Where each part of a region lies, computed from its two sizes alone: the header's page
/// (header, then slots `0..NEAR_SLOTS`), the arena's `max_ring` pages, then the other slots.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Layout {
    /// Offset of slot `NEAR_SLOTS` (the slots past the header's page).
    pub(crate) far_slots: usize,
    pub(crate) total: usize,
    /// Positions whose page lies in the near part.
    pub(crate) near_positions: usize,
    /// Bytes of the near part: the header's page and `near_positions` pages.
    pub(crate) near_len: usize,
}

/// The offset of slot `NEAR_SLOTS` ([`Layout::far_slots`]): right after the arena.
pub(crate) fn far_slots(slot_size: usize, max_ring: usize) -> usize {
    ARENA + max_ring * slot_size
}

impl Layout {
    pub(crate) fn of(slot_size: usize, max_ring: usize) -> Layout {
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

//! [`FragCache`]: a page-fragment allocator (seed 004; the idea of Linux's page_frag cache).
//!
//! A cache carves large *blocks* (32 KiB by default) into small fragments by bumping an offset.
//! Each block has one atomic reference count, one reference per fragment handle (a [`Frag`], or
//! each clone of a [`FrozenFrag`]), whatever its length. When the cache takes a block it puts a
//! huge *bias* into the count at once (the kernel's `pagecnt_bias`) and keeps a private copy of
//! that bias; handing out a fragment only lowers the private copy by one, so the allocation path
//! has no atomic read-modify-write. Dropping a handle, on any thread, subtracts one from the
//! shared count. When the block is used up, the cache subtracts what is left of its bias: if the
//! count then reads zero every fragment is gone and the block is reused in place; otherwise the
//! last fragment to go parks the block on the cache's spare list (or frees it once the list is
//! full or the cache is gone).
//!
//! Spare blocks are the memory [`crate::shrink`] gives back to the OS.

use crate::sync::{fence, Arc, AtomicU64, AtomicUsize, Mutex, Ordering};
use crate::sys::mm::{Mapping, PAGE_SIZE};
use std::alloc::Layout;
use std::fmt;
use std::ops::{Deref, DerefMut};
use std::ptr::NonNull;

/// Block size of [`FragCache::new`]: 32 KiB, like the kernel's order-3 refill.
pub const DEFAULT_BLOCK_SIZE: usize = 32 * 1024;

/// Block size taken when a full-size block cannot be had: one page.
const FALLBACK_BLOCK_SIZE: usize = PAGE_SIZE;

/// Largest block size [`FragCache::with_block_size`] accepts (1 GiB; 256 MiB on 32-bit
/// targets, where the bias must still exceed it).
pub const MAX_BLOCK_SIZE: usize = if usize::BITS >= 64 { 1 << 30 } else { 1 << 28 };

/// The bias the cache puts into a block's count when it takes the block. It must exceed the
/// number of fragments the cache can hand out of one block (at most one per byte, so
/// [`MAX_BLOCK_SIZE`]) so the private bias never runs out; clones of frozen fragments add on top
/// of it, one each.
const BIAS: usize = usize::MAX / 4;
const _: () = assert!(
    BIAS > MAX_BLOCK_SIZE,
    "the bias must exceed what one block hands out"
);

/// A count above this means clones overflowed it: abort, as `Arc` does. Clones count one
/// reference each, so this takes over `usize::MAX / 4` clones (about 2^30 on 32-bit targets)
/// whatever the fragment's length.
const MAX_COUNT: usize = usize::MAX / 2;

/// Spare blocks a cache keeps at most: 2 MiB worth, and at least 4.
const MAX_SPARE_BYTES: usize = 2 << 20;

/// Spare blocks an idle cache keeps when the background trimmer visits it.
#[cfg_attr(loom, allow(dead_code))] // the registry and its trimmer do not exist under loom
const IDLE_KEEP: usize = 2;

/// Where a block's bytes live.
enum Memory {
    /// A block: anonymous pages, zero when first mapped.
    Mapped(Mapping),
    /// A dedicated allocation for one large request, zeroed, from the global allocator.
    ///
    /// Invariant: `ptr` came from `alloc_zeroed(layout)` and is freed only in `Drop`.
    Heap { ptr: NonNull<u8>, layout: Layout },
}

impl Memory {
    fn ptr(&self) -> *mut u8 {
        match self {
            Memory::Mapped(m) => m.as_ptr(),
            Memory::Heap { ptr, .. } => ptr.as_ptr(),
        }
    }

    fn len(&self) -> usize {
        match self {
            Memory::Mapped(m) => m.len(),
            Memory::Heap { layout, .. } => layout.size(),
        }
    }
}

impl Drop for Memory {
    fn drop(&mut self) {
        if let Memory::Heap { ptr, layout } = self {
            // SAFETY: `ptr` came from `alloc_zeroed(layout)` (variant invariant) and this is its
            // only free.
            unsafe { std::alloc::dealloc(ptr.as_ptr(), *layout) };
        }
    }
}

// SAFETY: Memory owns its bytes like a Box<[u8]>; who may touch which bytes is decided by the
// block's count (see `Block::count`), not by the thread that holds the value.
unsafe impl Send for Memory {}
// SAFETY: as for Send; `&Memory` only hands out a raw pointer and a length.
unsafe impl Sync for Memory {}

/// The header of one block (or of one dedicated large allocation), on its own cache lines so
/// that a consumer dropping fragments of one block does not disturb its neighbours.
#[repr(align(128))]
struct Block {
    /// In references: what is left of the cache's bias (while the cache carves this block) plus
    /// one for every live [`Frag`] and [`FrozenFrag`] handle on it.
    ///
    /// Invariant: the thread whose subtraction brings it to zero owns the block alone: the cache
    /// (which then reuses it in place or frees it) or the last fragment (which calls
    /// [`release`]). A block on the spare list has count zero.
    count: AtomicUsize,
    /// Bytes the cache carved out of this block (alignment padding included) before it let go
    /// of it; written by the cache before its Release subtraction in [`FragCache::let_go`], read
    /// by [`release`] after its Acquire fence. For a large allocation, the committed length.
    handed: AtomicUsize,
    /// Invariant: `mem.ptr()..mem.ptr() + mem.len()` is valid for as long as the header lives.
    mem: Memory,
    /// Whether `mem` is a dedicated large allocation (never recycled).
    large: bool,
    /// The cache's shared half: spare list and statistics.
    owner: Arc<CacheShared>,
    /// Under loom, a stand-in for the block's bytes: fragment owners and the recycling cache
    /// write it, so loom reports any reuse that is not ordered after the drops.
    #[cfg(loom)]
    probe: loom::cell::UnsafeCell<usize>,
}

/// A block pointer that may travel between threads (inside the spare list).
struct BlockPtr(NonNull<Block>);

// SAFETY: a block on the spare list has count zero and is owned by the list alone (see
// `Block::count`); the Mutex around the list hands it to one thread at a time.
unsafe impl Send for BlockPtr {}

/// Allocates a block header for `mem`, with `count` set to `count`.
fn new_block(mem: Memory, large: bool, count: usize, owner: &Arc<CacheShared>) -> NonNull<Block> {
    let header = Box::new(Block {
        count: AtomicUsize::new(count),
        handed: AtomicUsize::new(0),
        mem,
        large,
        owner: owner.clone(),
        #[cfg(loom)]
        probe: loom::cell::UnsafeCell::new(0),
    });
    NonNull::from(Box::leak(header))
}

/// Frees a block's header and memory; returns the bytes of memory given back.
///
/// # Safety
/// The caller owns `block` alone (its count reached zero in the caller's hands, or the caller
/// took it off the spare list) and never uses it again.
unsafe fn free_block(block: NonNull<Block>) -> usize {
    // SAFETY: the header came from `Box::leak` in `new_block`; the caller owns it alone.
    let header = unsafe { Box::from_raw(block.as_ptr()) };
    let len = header.mem.len();
    header.owner.mapped.fetch_sub(len, Ordering::Relaxed);
    len
}

/// Called by the thread whose subtraction brought the count of a block the cache had let go of
/// to zero: parks the block on the owner's spare list, or frees it.
///
/// # Safety
/// The caller's subtraction brought `block`'s count to zero after the cache let go of it.
#[cold]
#[inline(never)]
unsafe fn release(block: NonNull<Block>) {
    // Acquire: pairs with the Release subtractions in `Frag::drop`, `FrozenFrag::drop` and
    // `FragCache::let_go`, so every access through those handles (and the cache's store of
    // `handed`) happens before this thread recycles or frees the bytes.
    fence(Ordering::Acquire);
    // SAFETY: the block is ours alone now (caller's contract) and its header is live.
    let c = unsafe { block.as_ref() };
    // A strong handle of our own: once the block is on the spare list, the cache's drop may
    // free the block and its own handle while we are still unlocking `spare`.
    let owner = c.owner.clone();
    owner
        .released
        .fetch_add(c.handed.load(Ordering::Relaxed) as u64, Ordering::Relaxed);
    if !c.large {
        let mut spare = owner.spare.lock().unwrap_or_else(|e| e.into_inner());
        if !spare.closed && spare.blocks.len() < spare.max && c.mem.len() == spare.block_size {
            spare.blocks.push(BlockPtr(block));
            return;
        }
    }
    // SAFETY: ours alone (caller's contract), not parked above, never used again.
    unsafe { free_block(block) };
}

/// What a cache shares with its fragments and with the process-wide registry.
struct CacheShared {
    spare: Mutex<Spare>,
    /// Sum of `handed` over the let-go blocks whose last fragment is gone (statistics only).
    released: AtomicU64,
    /// Bytes of block memory (blocks and large allocations) currently allocated for this cache.
    mapped: AtomicUsize,
}

/// Blocks whose fragments are all gone, kept mapped for the cache's next refills.
struct Spare {
    /// Invariant: every entry has count zero and is referenced by nothing else.
    blocks: Vec<BlockPtr>,
    /// Set when the cache is dropped: blocks released afterwards are freed, not parked.
    closed: bool,
    /// Most entries kept; a block released beyond it is freed.
    max: usize,
    /// The cache's block size: only blocks of this size are parked (a one-page fallback block
    /// is freed, so the cache tries for full-size blocks again).
    block_size: usize,
    /// Bumped by every refill that looks at the list; lets the idle trimmer see activity.
    epoch: u64,
    /// `epoch` at the idle trimmer's previous visit.
    #[cfg_attr(loom, allow(dead_code))] // read only by the trimmer, absent under loom
    seen_epoch: u64,
}

#[cfg_attr(loom, allow(dead_code))] // the registry and its trimmer do not exist under loom
impl CacheShared {
    /// Takes the blocks to give back: all of them when `force`, else those beyond
    /// [`IDLE_KEEP`] when no refill happened since the previous call.
    fn take_trimmable(&self, force: bool) -> Vec<BlockPtr> {
        let mut spare = self.spare.lock().unwrap_or_else(|e| e.into_inner());
        let idle = spare.epoch == spare.seen_epoch;
        spare.seen_epoch = spare.epoch;
        let keep = if force {
            0
        } else if idle {
            IDLE_KEEP
        } else {
            return Vec::new();
        };
        let n = spare.blocks.len().saturating_sub(keep);
        let at = spare.blocks.len() - n;
        spare.blocks.split_off(at)
    }

    /// Gives spare blocks back to the OS (see [`CacheShared::take_trimmable`]); returns the bytes.
    fn trim(&self, force: bool) -> usize {
        let victims = self.take_trimmable(force);
        // SAFETY: spare blocks are owned by the list alone (`Spare::blocks` invariant) and we
        // just took them off it.
        victims
            .into_iter()
            .map(|c| unsafe { free_block(c.0) })
            .sum()
    }
}

#[cfg(not(loom))]
impl crate::pool::Trim for CacheShared {
    fn trim(&self, force: bool) -> usize {
        CacheShared::trim(self, force)
    }
}

/// A page-fragment allocator: hands out small buffers ([`Frag`]) carved from large blocks, with
/// no lock and no atomic read-modify-write on the allocation path.
///
/// One cache belongs to one thread at a time (methods take `&mut self`; the cache is `Send`);
/// its fragments may go to and be dropped on any thread.
///
/// **Contents.** Fragments are *not* zeroed in general: a fragment from a fresh block or a
/// dedicated large allocation reads as zeros, but one from a recycled block holds whatever
/// earlier fragments of this cache, all of them already dropped, left there. A fragment never
/// shares a byte with another live fragment.
///
/// **Sizes.** Requests larger than a block get a dedicated allocation (counted in
/// [`FragStats::large_allocations`]). A zero-length request returns an empty fragment that holds
/// no memory. Like `Box`, the cache aborts the process (`handle_alloc_error`) when the OS has
/// no memory left even for a one-page block.
///
/// ```
/// use pagepipe::FragCache;
///
/// let mut cache = FragCache::new();
/// let mut a = cache.alloc(2048);
/// a.copy_from_slice(&[7u8; 2048]);
/// let b = cache.alloc_aligned(100, 64);
/// assert_eq!(b.as_ptr() as usize % 64, 0);
/// // Fragments may be dropped on any thread.
/// std::thread::spawn(move || drop(a)).join().unwrap();
/// drop(b);
/// assert_eq!(cache.stats().bytes_outstanding, 0);
/// ```
pub struct FragCache {
    /// The block being carved. Invariant: when `Some`, the cache holds `bias` of its count, and
    /// `base..base + size` is its memory; when `None`, `size == offset == 0`.
    cur: Option<NonNull<Block>>,
    /// First byte of the current block (dangling when there is none).
    base: NonNull<u8>,
    /// Next free byte of the current block. Invariant: `offset <= size`; no live fragment
    /// holds a byte at or past `offset`.
    offset: usize,
    /// Length of the current block (0 when none).
    size: usize,
    /// What is left of the bias the cache put into the current block's count:
    /// `BIAS - fragments handed out of it since it was (re)taken`.
    bias: usize,
    /// Configured block size: a power of two from 4 KiB to [`MAX_BLOCK_SIZE`].
    block_size: usize,
    shared: Arc<CacheShared>,
    blocks_allocated: u64,
    blocks_reused: u64,
    large_allocations: u64,
    /// Sum of bytes handed out of blocks the cache let go of, and of large allocations.
    let_go_handed: u64,
}

// SAFETY: the raw pointers refer to the current block, on which the cache holds its bias, and
// whose unhanded bytes no one else touches; nothing in the cache is tied to a thread.
unsafe impl Send for FragCache {}

impl Default for FragCache {
    fn default() -> Self {
        FragCache::new()
    }
}

impl fmt::Debug for FragCache {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("FragCache")
            .field("block_size", &self.block_size)
            .field("offset", &self.offset)
            .field("size", &self.size)
            .field("stats", &self.stats())
            .finish()
    }
}

/// A snapshot of a [`FragCache`]'s counters (see [`FragCache::stats`]).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct FragStats {
    /// Blocks taken from the OS so far (full size or the one-page fallback).
    pub blocks_allocated: u64,
    /// Refills served without the OS: a used-up block reused in place, or a spare block.
    pub blocks_reused: u64,
    /// Bytes held by live fragments, counted per block: the bytes carved from a block
    /// (alignment padding included) count in full until its last fragment is gone, then not at
    /// all. Clones of a frozen fragment do not count again.
    pub bytes_outstanding: u64,
    /// Requests larger than a block, served by a dedicated allocation.
    pub large_allocations: u64,
    /// Spare blocks parked for reuse: what [`crate::shrink`] would give back.
    pub spare_blocks: usize,
    /// Bytes of block memory and large allocations currently allocated for this cache.
    pub bytes_mapped: usize,
}

impl FragCache {
    /// A cache with 32 KiB blocks ([`DEFAULT_BLOCK_SIZE`]). Takes no memory until the first
    /// allocation; registers the cache so [`crate::shrink`] can reach its spare blocks.
    pub fn new() -> FragCache {
        FragCache::with_block_size(DEFAULT_BLOCK_SIZE)
    }

    /// A cache whose blocks are `bytes` long.
    ///
    /// # Panics
    /// If `bytes` is not a power of two from 4096 to [`MAX_BLOCK_SIZE`].
    ///
    /// ```
    /// let mut cache = pagepipe::FragCache::with_block_size(64 * 1024);
    /// assert_eq!(cache.alloc(40_000).len(), 40_000);
    /// assert_eq!(cache.stats().large_allocations, 0);
    /// ```
    pub fn with_block_size(bytes: usize) -> FragCache {
        assert!(
            bytes.is_power_of_two() && (PAGE_SIZE..=MAX_BLOCK_SIZE).contains(&bytes),
            "FragCache block size {bytes} is not a power of two from {PAGE_SIZE} to {MAX_BLOCK_SIZE}"
        );
        let shared = Arc::new(CacheShared {
            spare: Mutex::new(Spare {
                blocks: Vec::new(),
                closed: false,
                max: (MAX_SPARE_BYTES / bytes).max(4),
                block_size: bytes,
                epoch: 0,
                seen_epoch: 0,
            }),
            released: AtomicU64::new(0),
            mapped: AtomicUsize::new(0),
        });
        #[cfg(not(loom))]
        {
            let weak: std::sync::Weak<dyn crate::pool::Trim> = Arc::downgrade(&shared) as _;
            crate::pool::register(weak);
        }
        FragCache {
            cur: None,
            base: NonNull::dangling(),
            offset: 0,
            size: 0,
            bias: 0,
            block_size: bytes,
            shared,
            blocks_allocated: 0,
            blocks_reused: 0,
            large_allocations: 0,
            let_go_handed: 0,
        }
    }

    /// The configured block size in bytes.
    pub fn block_size(&self) -> usize {
        self.block_size
    }

    /// A fragment of `len` bytes (1-byte aligned). See the type's docs for what it contains.
    ///
    /// A request larger than the block size gets a dedicated allocation.
    ///
    /// # Panics
    /// If `len` overflows `isize` (it could never be allocated).
    ///
    /// ```
    /// let mut cache = pagepipe::FragCache::new();
    /// let mut f = cache.alloc(5);
    /// f.copy_from_slice(b"hello");
    /// assert_eq!(&f[..], b"hello");
    /// ```
    #[inline]
    pub fn alloc(&mut self, len: usize) -> Frag {
        // `len - 1 < remaining` is `0 < len <= remaining` in one compare (len 0 wraps around).
        if len.wrapping_sub(1) < self.size - self.offset {
            // SAFETY: 0 < len <= size - offset, checked just above.
            return unsafe { self.carve(len) };
        }
        self.alloc_slow(len, 1)
    }

    /// A fragment of `len` bytes whose address is a multiple of `align`.
    ///
    /// # Panics
    /// If `align` is not a power of two, or `len` rounded up to `align` overflows `isize`.
    ///
    /// ```
    /// let mut cache = pagepipe::FragCache::new();
    /// let _pad = cache.alloc(3);
    /// let f = cache.alloc_aligned(64, 64);
    /// assert_eq!(f.as_ptr() as usize % 64, 0);
    /// ```
    #[inline]
    pub fn alloc_aligned(&mut self, len: usize, align: usize) -> Frag {
        assert!(
            align.is_power_of_two(),
            "FragCache::alloc_aligned: align {align} is not a power of two"
        );
        let pad = (self.base.as_ptr() as usize + self.offset).wrapping_neg() & (align - 1);
        let remaining = self.size - self.offset;
        if pad < remaining && len.wrapping_sub(1) < remaining - pad {
            self.offset += pad;
            // SAFETY: 0 < len <= size - offset after moving offset by pad < remaining.
            return unsafe { self.carve(len) };
        }
        self.alloc_slow(len, align)
    }

    /// A writable buffer with room for at least `min` and at most `max` bytes, to fill and then
    /// [`commit`](PreparedFrag::commit) (keeping a prefix as a [`Frag`]) or
    /// [`abort`](PreparedFrag::abort) (keeping nothing). The buffer is the rest of the current
    /// block when that holds `min` bytes (the cache moves to a new block otherwise); a `min`
    /// larger than a block gets a dedicated allocation of exactly `min` bytes.
    ///
    /// # Panics
    /// If `min > max`, or `min` overflows `isize`.
    ///
    /// ```
    /// let mut cache = pagepipe::FragCache::new();
    /// let mut b = cache.prepare(16, 4096);
    /// assert!(b.len() >= 16 && b.len() <= 4096);
    /// b[..3].copy_from_slice(b"abc");
    /// let f = b.commit(3);
    /// assert_eq!(&f[..], b"abc");
    /// cache.prepare(1, 10).abort(); // takes nothing
    /// ```
    pub fn prepare(&mut self, min: usize, max: usize) -> PreparedFrag<'_> {
        assert!(
            min <= max,
            "FragCache::prepare: min {min} is larger than max {max}"
        );
        let want = if max == 0 { 0 } else { min.max(1) };
        if want > self.size - self.offset {
            if min > self.block_size {
                return self.prepare_large(min);
            }
            self.refill();
            if min > self.size - self.offset {
                return self.prepare_large(min);
            }
        }
        let cap = (self.size - self.offset).min(max);
        // SAFETY: offset <= size, so the pointer stays inside (or one past) the block.
        let ptr = unsafe { NonNull::new_unchecked(self.base.as_ptr().add(self.offset)) };
        PreparedFrag {
            cache: self,
            ptr,
            cap,
            large: None,
        }
    }

    /// The room left in the block being carved, if it holds at least `min` bytes (and at least
    /// one): a [`PreparedFrag`] over all of it, to fill and then
    /// [`commit`](PreparedFrag::commit) or [`abort`](PreparedFrag::abort) exactly as one from
    /// [`prepare`](FragCache::prepare). Unlike `prepare` it never takes a new block, never makes
    /// a dedicated allocation and never consumes anything by itself: `None` when the current
    /// block has less than `min` bytes left (or there is no current block). The kernel's
    /// `page_frag_alloc_probe`.
    ///
    /// What it is for: appending to the block being carved while it has room, so consecutive
    /// pieces of a stream end up next to each other (the way TCP's sendmsg coalesces a write
    /// into the previous fragment of a socket buffer), and falling back to `prepare` only when
    /// the room runs out.
    ///
    /// ```
    /// use pagepipe::{Frag, FragCache};
    ///
    /// /// Copies `data` into fragments, appending to the current block while it has room.
    /// fn append(cache: &mut FragCache, out: &mut Vec<Frag>, mut data: &[u8]) {
    ///     while !data.is_empty() {
    ///         let mut fill = |mut room: pagepipe::PreparedFrag<'_>| {
    ///             let n = room.len().min(data.len());
    ///             room[..n].copy_from_slice(&data[..n]);
    ///             data = &data[n..];
    ///             room.commit(n)
    ///         };
    ///         // Append while the block has room for 64 bytes (no refill) ...
    ///         let appended = cache.probe(64).map(&mut fill);
    ///         // ... else prepare, which moves to a new block.
    ///         let frag = appended.unwrap_or_else(|| fill(cache.prepare(64, 4096)));
    ///         out.push(frag);
    ///     }
    /// }
    ///
    /// let mut cache = FragCache::with_block_size(4096);
    /// let mut frags = Vec::new();
    /// append(&mut cache, &mut frags, &[1; 3000]);
    /// append(&mut cache, &mut frags, &[2; 3000]);
    /// // The second write went on where the first ended, then spilled into a new block.
    /// assert_eq!(frags[1].as_ptr(), frags[0].as_ptr().wrapping_add(3000));
    /// assert_eq!(frags.iter().map(|f| f.len()).sum::<usize>(), 6000);
    /// assert_eq!(cache.stats().blocks_allocated, 2);
    /// // Nothing to probe once the block is used up: probe never refills.
    /// let left = cache.probe(1).map_or(0, |room| room.len());
    /// let _rest = cache.alloc(left);
    /// assert!(cache.probe(1).is_none());
    /// ```
    pub fn probe(&mut self, min: usize) -> Option<PreparedFrag<'_>> {
        let room = self.size - self.offset;
        if room == 0 || room < min {
            return None;
        }
        // SAFETY: offset < size, so the pointer stays inside the current block.
        let ptr = unsafe { NonNull::new_unchecked(self.base.as_ptr().add(self.offset)) };
        Some(PreparedFrag {
            cache: self,
            ptr,
            cap: room,
            large: None,
        })
    }

    /// The cache's counters. Costs one lock of the spare list.
    pub fn stats(&self) -> FragStats {
        let current = match self.cur {
            // SAFETY: the cache holds its bias on the current block, so the header is live.
            Some(c) if unsafe { c.as_ref() }.count.load(Ordering::Relaxed) > self.bias => {
                self.offset
            }
            _ => 0,
        };
        let released = self.shared.released.load(Ordering::Relaxed);
        let spare = self
            .shared
            .spare
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .blocks
            .len();
        FragStats {
            blocks_allocated: self.blocks_allocated,
            blocks_reused: self.blocks_reused,
            bytes_outstanding: self.let_go_handed.saturating_sub(released) + current as u64,
            large_allocations: self.large_allocations,
            spare_blocks: spare,
            bytes_mapped: self.shared.mapped.load(Ordering::Relaxed),
        }
    }

    /// Hands out `len` bytes at `offset` of the current block.
    ///
    /// # Safety
    /// `0 < len <= self.size - self.offset` (so there is a current block).
    #[inline]
    unsafe fn carve(&mut self, len: usize) -> Frag {
        debug_assert!(len > 0 && len <= self.size - self.offset && self.cur.is_some());
        // SAFETY: offset + len <= size, inside the current block (caller's contract).
        let ptr = unsafe { NonNull::new_unchecked(self.base.as_ptr().add(self.offset)) };
        self.offset += len;
        self.bias -= 1;
        Frag {
            block: self.cur,
            ptr,
            len,
        }
    }

    #[cold]
    fn alloc_slow(&mut self, len: usize, align: usize) -> Frag {
        if len == 0 {
            return Frag::empty_aligned(align);
        }
        // A fresh block starts page aligned: only larger alignments need padding room.
        let room = if align <= PAGE_SIZE {
            len
        } else {
            len.saturating_add(align - 1)
        };
        if room > self.block_size {
            return self.alloc_large(len, align);
        }
        self.refill();
        let pad = (self.base.as_ptr() as usize).wrapping_neg() & (align - 1);
        if pad + len > self.size {
            return self.alloc_large(len, align); // the one-page fallback block was too small
        }
        self.offset = pad;
        // SAFETY: 0 < len and offset + len <= size, checked above.
        unsafe { self.carve(len) }
    }

    /// Lets go of the current block, then takes one to carve: the same block when all its
    /// fragments are gone, else a spare block, else a new one from the OS.
    #[cold]
    fn refill(&mut self) {
        if let Some(block) = self.let_go() {
            // SAFETY: `let_go` returned it, so its count is zero and it is ours alone.
            let c = unsafe { block.as_ref() };
            if c.mem.len() == self.block_size {
                self.blocks_reused += 1;
                return self.take(block);
            }
            // A one-page fallback block: try for a full-size one again.
            // SAFETY: ours alone (above); forgotten right here.
            unsafe { free_block(block) };
        }
        let spare = {
            let mut spare = self.shared.spare.lock().unwrap_or_else(|e| e.into_inner());
            spare.epoch += 1;
            spare.blocks.pop()
        };
        if let Some(block) = spare {
            self.blocks_reused += 1;
            return self.take(block.0);
        }
        let mem = match map_block(self.block_size) {
            Ok(m) => m,
            Err(_) => map_block(FALLBACK_BLOCK_SIZE).unwrap_or_else(|_| {
                std::alloc::handle_alloc_error(
                    Layout::from_size_align(FALLBACK_BLOCK_SIZE, PAGE_SIZE).unwrap(),
                )
            }),
        };
        self.shared.mapped.fetch_add(mem.len(), Ordering::Relaxed);
        self.blocks_allocated += 1;
        let block = new_block(Memory::Mapped(mem), false, 0, &self.shared);
        self.take(block);
    }

    /// Makes `block` (count zero, ours alone) the current block, putting the whole bias in.
    fn take(&mut self, block: NonNull<Block>) {
        // SAFETY: ours alone (caller's contract), so the header is live.
        let c = unsafe { block.as_ref() };
        // Relaxed: no one else holds a reference to the block; fragments made from it reach
        // other threads only through channels that order this store before their drops.
        c.count.store(BIAS, Ordering::Relaxed);
        #[cfg(loom)]
        c.probe.with_mut(|p| {
            // SAFETY: loom checks this write against the fragment owners' writes.
            unsafe { *p = 0 }
        });
        self.cur = Some(block);
        // SAFETY: a block's memory pointer is never null (a mapping or a live allocation).
        self.base = unsafe { NonNull::new_unchecked(c.mem.ptr()) };
        self.size = c.mem.len();
        self.offset = 0;
        self.bias = BIAS;
    }

    /// Gives up the cache's bias on the current block. Returns the block when that left its
    /// count at zero (every fragment is gone and the block is the caller's alone); otherwise its
    /// last fragment will [`release`] it.
    fn let_go(&mut self) -> Option<NonNull<Block>> {
        let block = self.cur.take()?;
        let handed = self.offset;
        // SAFETY: the cache still holds its bias, so the header is live.
        let c = unsafe { block.as_ref() };
        // Relaxed: published by the Release half of the subtraction below.
        c.handed.store(handed, Ordering::Relaxed);
        let bias = self.bias;
        self.base = NonNull::dangling();
        self.size = 0;
        self.offset = 0;
        self.bias = 0;
        // AcqRel. Release: pairs with the Acquire fence in `release`, publishing `handed` and
        // the cache's writes to the last fragment's thread. Acquire: pairs with the Release
        // subtractions of `Frag::drop` / `FrozenFrag::drop`, so every dropped fragment's
        // accesses happen before the cache hands its bytes out again.
        if c.count.fetch_sub(bias, Ordering::AcqRel) == bias {
            return Some(block);
        }
        self.let_go_handed += handed as u64;
        None
    }

    /// A dedicated, zeroed allocation for one large fragment.
    fn alloc_large(&mut self, len: usize, align: usize) -> Frag {
        let block = self.new_large(len, align);
        // SAFETY: `new_large` made the header and nothing else refers to it yet.
        let c = unsafe { block.as_ref() };
        c.count.store(1, Ordering::Relaxed);
        c.handed.store(len, Ordering::Relaxed);
        self.let_go_handed += len as u64;
        // SAFETY: a live allocation's pointer is never null.
        let ptr = unsafe { NonNull::new_unchecked(c.mem.ptr()) };
        Frag {
            block: Some(block),
            ptr,
            len,
        }
    }

    /// Allocates the header and zeroed memory of a large allocation; count zero, not counted.
    fn new_large(&mut self, len: usize, align: usize) -> NonNull<Block> {
        let layout = Layout::from_size_align(len, align).unwrap_or_else(|_| {
            panic!("FragCache: a fragment of {len} bytes aligned to {align} overflows isize")
        });
        debug_assert!(len > 0);
        // SAFETY: `layout` has a non-zero size (callers never ask for an empty large fragment).
        let ptr = NonNull::new(unsafe { std::alloc::alloc_zeroed(layout) })
            .unwrap_or_else(|| std::alloc::handle_alloc_error(layout));
        self.large_allocations += 1;
        self.shared.mapped.fetch_add(len, Ordering::Relaxed);
        new_block(Memory::Heap { ptr, layout }, true, 0, &self.shared)
    }

    fn prepare_large(&mut self, min: usize) -> PreparedFrag<'_> {
        let block = self.new_large(min, 1);
        // SAFETY: just made; nothing else refers to it.
        let ptr = unsafe { NonNull::new_unchecked(block.as_ref().mem.ptr()) };
        PreparedFrag {
            cache: self,
            ptr,
            cap: min,
            large: Some(block),
        }
    }
}

/// Maps one block of `len` bytes.
fn map_block(len: usize) -> std::io::Result<Mapping> {
    #[cfg(test)]
    if len > FALLBACK_BLOCK_SIZE && FAIL_BIG_BLOCKS.with(|f| f.get()) {
        return Err(std::io::Error::from(std::io::ErrorKind::OutOfMemory));
    }
    Mapping::anonymous(len)
}

impl Drop for FragCache {
    fn drop(&mut self) {
        // Close the spare list first, so a block released from now on is freed, not parked.
        let parked = {
            let mut spare = self.shared.spare.lock().unwrap_or_else(|e| e.into_inner());
            spare.closed = true;
            std::mem::take(&mut spare.blocks)
        };
        for block in parked {
            // SAFETY: taken off the spare list, which owned it alone.
            unsafe { free_block(block.0) };
        }
        if let Some(block) = self.let_go() {
            // SAFETY: `let_go` returned it: count zero, ours alone.
            unsafe { free_block(block) };
        }
    }
}

/// A writable buffer from [`FragCache::prepare`] or [`FragCache::probe`]; derefs to the whole
/// room offered.
/// Dropping it without [`commit`](PreparedFrag::commit) is an [`abort`](PreparedFrag::abort).
pub struct PreparedFrag<'a> {
    cache: &'a mut FragCache,
    /// Invariant: `ptr..ptr + cap` is the current block's `offset..` (or the whole of `large`),
    /// held by no fragment.
    ptr: NonNull<u8>,
    cap: usize,
    /// A dedicated allocation made for this buffer, not yet committed (count zero, ours).
    large: Option<NonNull<Block>>,
}

impl fmt::Debug for PreparedFrag<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PreparedFrag")
            .field("cap", &self.cap)
            .field("large", &self.large.is_some())
            .finish()
    }
}

impl PreparedFrag<'_> {
    /// Keeps the first `n` bytes as a fragment; the rest stays with the cache.
    ///
    /// # Panics
    /// If `n` is larger than the room offered (`self.len()`).
    pub fn commit(mut self, n: usize) -> Frag {
        assert!(
            n <= self.cap,
            "PreparedFrag::commit: {n} bytes committed but only {} prepared",
            self.cap
        );
        if n == 0 {
            return Frag::empty_aligned(1);
        }
        if let Some(block) = self.large.take() {
            // SAFETY: this buffer's own dedicated allocation, referenced by nothing else.
            let c = unsafe { block.as_ref() };
            c.count.store(1, Ordering::Relaxed);
            c.handed.store(n, Ordering::Relaxed);
            self.cache.let_go_handed += n as u64;
            return Frag {
                block: Some(block),
                ptr: self.ptr,
                len: n,
            };
        }
        // SAFETY: 0 < n <= cap <= size - offset (type invariant), and ptr is base + offset.
        unsafe { self.cache.carve(n) }
    }

    /// Gives the room back untouched by any fragment (same as dropping it).
    pub fn abort(self) {}
}

impl Drop for PreparedFrag<'_> {
    fn drop(&mut self) {
        if let Some(block) = self.large.take() {
            // SAFETY: this buffer's own uncommitted allocation: count zero, ours alone.
            unsafe { free_block(block) };
        }
    }
}

impl Deref for PreparedFrag<'_> {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        // SAFETY: `ptr..ptr + cap` is initialized memory held by no fragment (type invariant)
        // and the buffer borrows the cache mutably, so no one else reaches it.
        unsafe { std::slice::from_raw_parts(self.ptr.as_ptr(), self.cap) }
    }
}

impl DerefMut for PreparedFrag<'_> {
    fn deref_mut(&mut self) -> &mut [u8] {
        // SAFETY: as in `deref`, and `&mut self` makes this the only access.
        unsafe { std::slice::from_raw_parts_mut(self.ptr.as_ptr(), self.cap) }
    }
}

/// A writable fragment from a [`FragCache`]: derefs to its bytes, owns them alone, may be sent
/// to and dropped on any thread. [`freeze`](Frag::freeze) it to share it read-only.
///
/// ```
/// let mut cache = pagepipe::FragCache::new();
/// let mut f = cache.alloc(4);
/// f.copy_from_slice(&[1, 2, 3, 4]);
/// let shared = f.freeze();
/// let copy = shared.clone();
/// std::thread::spawn(move || assert_eq!(&copy[..], &[1, 2, 3, 4])).join().unwrap();
/// assert_eq!(shared.len(), 4);
/// ```
pub struct Frag {
    /// The block holding the bytes; `None` for an empty fragment, which holds no memory.
    /// Invariant: when `Some`, `len > 0` and one reference of the block's count is this
    /// fragment's.
    block: Option<NonNull<Block>>,
    /// Invariant: `ptr..ptr + len` lies in the block and belongs to this fragment alone.
    ptr: NonNull<u8>,
    len: usize,
}

// SAFETY: a Frag owns its bytes alone (type invariant) and gives up its share of the block with
// an atomic subtraction, which is sound on any thread.
unsafe impl Send for Frag {}
// SAFETY: `&Frag` only reads its own bytes.
unsafe impl Sync for Frag {}

impl Frag {
    /// An empty fragment; holds no memory.
    pub fn empty() -> Frag {
        Frag::empty_aligned(1)
    }

    fn empty_aligned(align: usize) -> Frag {
        // A zero-length slice needs only a non-null, aligned address.
        let ptr = NonNull::new(std::ptr::null_mut::<u8>().wrapping_add(align))
            .expect("align is non-zero");
        Frag {
            block: None,
            ptr,
            len: 0,
        }
    }

    /// Turns the fragment into a read-only handle that is cheap to clone (one atomic add) and
    /// may be shared between threads.
    pub fn freeze(self) -> FrozenFrag {
        let this = std::mem::ManuallyDrop::new(self);
        FrozenFrag {
            block: this.block,
            ptr: this.ptr,
            len: this.len,
        }
    }

    /// Shortens the fragment to its first `len` bytes; does nothing when it is not longer. The
    /// bytes cut off stay allocated (and unused) until the fragment is dropped, as in a
    /// network driver's receive buffer whose packet is shorter than the buffer.
    ///
    /// ```
    /// let mut cache = pagepipe::FragCache::new();
    /// let mut f = cache.alloc(2048); // a receive buffer
    /// f[..3].copy_from_slice(b"pkt");
    /// f.truncate(3); // the packet was 3 bytes
    /// assert_eq!(&f[..], b"pkt");
    /// ```
    pub fn truncate(&mut self, len: usize) {
        self.len = self.len.min(len);
    }

    /// Splits the fragment in two at `at`: returns the first `at` bytes as a fragment of its
    /// own and keeps the rest, without copying (like `BytesMut::split_to`). Costs one atomic
    /// add on the block's count (the new fragment's reference). Frames read into one large
    /// fragment are split off this way.
    ///
    /// # Panics
    /// If `at > self.len()`.
    ///
    /// ```
    /// let mut cache = pagepipe::FragCache::new();
    /// let mut f = cache.alloc(8);
    /// f.copy_from_slice(b"headbody");
    /// let head = f.split_to(4);
    /// assert_eq!((&head[..], &f[..]), (&b"head"[..], &b"body"[..]));
    /// std::thread::spawn(move || drop(head)); // each half is an independent fragment
    /// ```
    pub fn split_to(&mut self, at: usize) -> Frag {
        assert!(
            at <= self.len,
            "Frag::split_to: at {at} is past the end of a {}-byte fragment",
            self.len
        );
        if at == 0 {
            return Frag::empty();
        }
        let ptr = self.ptr;
        if at == self.len {
            return std::mem::take(self);
        }
        let block = self.block.expect("a non-empty fragment has a block");
        // SAFETY: our own reference keeps the header live.
        let c = unsafe { block.as_ref() };
        // Relaxed: we already hold a reference, so the block cannot be released meanwhile (as
        // in `Arc::clone`).
        if c.count.fetch_add(1, Ordering::Relaxed) > MAX_COUNT {
            std::process::abort(); // over usize::MAX / 4 handles: the count would overflow
        }
        // SAFETY: at < len, so the pointer stays inside this fragment's bytes.
        self.ptr = unsafe { NonNull::new_unchecked(ptr.as_ptr().add(at)) };
        self.len -= at;
        Frag {
            block: Some(block),
            ptr,
            len: at,
        }
    }

    #[cfg(all(loom, test))]
    pub(crate) fn loom_write_probe(&self, value: usize) {
        if let Some(c) = self.block {
            // SAFETY: a live fragment keeps its block's header live.
            let c = unsafe { c.as_ref() };
            // SAFETY: loom checks this write against the cache's recycling write.
            c.probe.with_mut(|p| unsafe { *p = value });
        }
    }
}

impl Default for Frag {
    fn default() -> Self {
        Frag::empty()
    }
}

/// Drops one handle's reference to `block`; releases the block when that was the last one.
///
/// # Safety
/// The caller held one reference of `block`'s count and gives it up for good.
#[inline]
unsafe fn put(block: NonNull<Block>) {
    // SAFETY: the caller's share keeps the header live until this subtraction.
    let c = unsafe { block.as_ref() };
    // Release: pairs with the Acquire fence in `release` and the AcqRel subtraction in
    // `FragCache::let_go`, so this handle's accesses happen before the bytes are reused.
    if c.count.fetch_sub(1, Ordering::Release) == 1 {
        // SAFETY: our subtraction brought the count to zero, and the cache had let go (while it
        // carves, its bias keeps the count above zero).
        unsafe { release(block) };
    }
}

impl Drop for Frag {
    #[inline]
    fn drop(&mut self) {
        if let Some(block) = self.block {
            // SAFETY: this fragment holds one reference of the count (type invariant).
            unsafe { put(block) };
        }
    }
}

impl Deref for Frag {
    type Target = [u8];
    #[inline]
    fn deref(&self) -> &[u8] {
        // SAFETY: `ptr..ptr + len` is initialized (zero-filled or written) memory that belongs
        // to this fragment alone (type invariant).
        unsafe { std::slice::from_raw_parts(self.ptr.as_ptr(), self.len) }
    }
}

impl DerefMut for Frag {
    #[inline]
    fn deref_mut(&mut self) -> &mut [u8] {
        // SAFETY: as in `deref`; `&mut self` makes this the only access.
        unsafe { std::slice::from_raw_parts_mut(self.ptr.as_ptr(), self.len) }
    }
}

impl AsRef<[u8]> for Frag {
    fn as_ref(&self) -> &[u8] {
        self
    }
}

impl AsMut<[u8]> for Frag {
    fn as_mut(&mut self) -> &mut [u8] {
        self
    }
}

impl fmt::Debug for Frag {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Frag")
            .field("ptr", &self.ptr)
            .field("len", &self.len)
            .finish()
    }
}

/// A read-only, cheaply cloneable, thread-shareable fragment (see [`Frag::freeze`]). The bytes
/// stay allocated until the last clone is dropped.
pub struct FrozenFrag {
    /// Invariant: as for [`Frag`] (one reference of the count per handle), but the bytes are
    /// only read.
    block: Option<NonNull<Block>>,
    ptr: NonNull<u8>,
    len: usize,
}

// SAFETY: handles only read the bytes, and share the count through atomic operations.
unsafe impl Send for FrozenFrag {}
// SAFETY: as for Send.
unsafe impl Sync for FrozenFrag {}

impl Clone for FrozenFrag {
    fn clone(&self) -> FrozenFrag {
        if let Some(block) = self.block {
            // SAFETY: our own share keeps the header live.
            let c = unsafe { block.as_ref() };
            // Relaxed: we already hold a share, so the block cannot be released meanwhile (as
            // in `Arc::clone`).
            if c.count.fetch_add(1, Ordering::Relaxed) > MAX_COUNT {
                std::process::abort(); // over usize::MAX / 4 clones: the count would overflow
            }
        }
        FrozenFrag {
            block: self.block,
            ptr: self.ptr,
            len: self.len,
        }
    }
}

impl Drop for FrozenFrag {
    fn drop(&mut self) {
        if let Some(block) = self.block {
            // SAFETY: this handle holds one reference of the count (type invariant).
            unsafe { put(block) };
        }
    }
}

impl Deref for FrozenFrag {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        // SAFETY: initialized bytes no one writes while a frozen handle lives (type invariant).
        unsafe { std::slice::from_raw_parts(self.ptr.as_ptr(), self.len) }
    }
}

impl AsRef<[u8]> for FrozenFrag {
    fn as_ref(&self) -> &[u8] {
        self
    }
}

impl fmt::Debug for FrozenFrag {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("FrozenFrag")
            .field("ptr", &self.ptr)
            .field("len", &self.len)
            .finish()
    }
}

/// Without copying: the `Bytes` owns the fragment and drops it with its last clone.
///
/// ```
/// let mut cache = pagepipe::FragCache::new();
/// let mut f = cache.alloc(3);
/// f.copy_from_slice(b"abc");
/// let at = f.as_ptr();
/// let b = bytes::Bytes::from(f);
/// assert_eq!(b.as_ptr(), at);
/// assert_eq!(&b[..], b"abc");
/// ```
#[cfg(feature = "bytes")]
impl From<Frag> for bytes::Bytes {
    fn from(frag: Frag) -> bytes::Bytes {
        bytes::Bytes::from_owner(frag)
    }
}

/// Without copying, as for [`Frag`].
#[cfg(feature = "bytes")]
impl From<FrozenFrag> for bytes::Bytes {
    fn from(frag: FrozenFrag) -> bytes::Bytes {
        bytes::Bytes::from_owner(frag)
    }
}

#[cfg(test)]
thread_local! {
    /// Makes `map_block` fail for full-size blocks on this thread (fallback test).
    static FAIL_BIG_BLOCKS: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    #[test]
    fn falls_back_to_one_page_blocks_and_back() {
        FAIL_BIG_BLOCKS.with(|f| f.set(true));
        let mut cache = FragCache::new();
        let a = cache.alloc(1000);
        assert_eq!(cache.size, FALLBACK_BLOCK_SIZE);
        // Does not fit the fallback block: served by a dedicated allocation.
        let b = cache.alloc(8000);
        assert_eq!(cache.stats().large_allocations, 1);
        FAIL_BIG_BLOCKS.with(|f| f.set(false));
        drop(a); // a one-page block is freed, not parked as a spare
        assert_eq!(cache.stats().spare_blocks, 0);
        let c = cache.alloc(4096); // fills the second one-page block
        let d = cache.alloc(1); // refill: a full-size block again
        assert_eq!(cache.size, DEFAULT_BLOCK_SIZE);
        drop((b, c, d));
        assert_eq!(cache.stats().spare_blocks, 0);
        assert_eq!(cache.stats().bytes_outstanding, 0);
    }

    #[test]
    fn used_up_block_is_reused_in_place() {
        let mut cache = FragCache::with_block_size(4096);
        for _ in 0..10 {
            drop(cache.alloc(4096));
        }
        let s = cache.stats();
        assert_eq!((s.blocks_allocated, s.blocks_reused), (1, 9));
    }

    #[test]
    fn released_block_goes_to_spare_list_and_back() {
        let mut cache = FragCache::with_block_size(4096);
        let a = cache.alloc(4096);
        let b = cache.alloc(4096); // lets go of a's block while `a` lives
        drop(a); // last fragment: parks the block
        assert_eq!(cache.stats().spare_blocks, 1);
        let _c = cache.alloc(1); // lets go of b's block, takes the spare
        let s = cache.stats();
        assert_eq!(
            (s.blocks_allocated, s.blocks_reused, s.spare_blocks),
            (2, 1, 0)
        );
        drop(b);
        assert_eq!(cache.stats().spare_blocks, 1);
        assert_eq!(cache.shared.trim(true), 4096);
        assert_eq!(cache.stats().bytes_outstanding, 1);
    }

    #[test]
    #[should_panic(expected = "not a power of two")]
    fn bad_alignment_panics() {
        FragCache::new().alloc_aligned(8, 3);
    }

    #[test]
    #[should_panic(expected = "overflows isize")]
    fn overflowing_len_panics() {
        FragCache::new().alloc(usize::MAX - 10);
    }

    /// The block count of a fragment's block.
    fn count_of(f: &FrozenFrag) -> usize {
        // SAFETY: a live handle keeps its block's header live.
        unsafe { f.block.unwrap().as_ref() }
            .count
            .load(Ordering::Relaxed)
    }

    #[test]
    fn clones_count_references_not_bytes() {
        let mut cache = FragCache::new();
        // A dedicated allocation of 64 MiB: with a count in bytes, a 32-bit target aborted
        // after about 16 clones of it.
        let big = cache.alloc(64 << 20).freeze();
        assert_eq!(count_of(&big), 1);
        let clones: Vec<FrozenFrag> = (0..1000).map(|_| big.clone()).collect();
        assert_eq!(count_of(&big), 1001);
        drop(clones);
        assert_eq!(count_of(&big), 1);
        // On a block: the bias plus one per handle.
        let small = cache.alloc(3000).freeze();
        let base = count_of(&small);
        let c = small.clone();
        assert_eq!(count_of(&small), base + 1);
        drop(c);
        drop((big, small));
        assert_eq!(cache.stats().bytes_outstanding, 0);
    }

    #[test]
    fn probe_offers_the_rest_of_the_block_and_never_refills() {
        let mut cache = FragCache::with_block_size(4096);
        assert!(cache.probe(0).is_none(), "no block yet: nothing to probe");
        let a = cache.alloc(1000);
        let room = cache.probe(100).unwrap();
        assert_eq!(room.len(), 3096);
        assert_eq!(room.as_ptr() as usize, a.as_ptr() as usize + 1000);
        room.abort();
        assert!(cache.probe(3097).is_none());
        let mut room = cache.probe(3096).unwrap();
        room[..2].copy_from_slice(b"ok");
        let b = room.commit(2);
        assert_eq!(&b[..], b"ok");
        let _rest = cache.alloc(3094);
        assert!(cache.probe(1).is_none());
        let s = cache.stats();
        assert_eq!(
            (s.blocks_allocated, s.blocks_reused, s.large_allocations),
            (1, 0, 0)
        );
    }

    #[test]
    fn prepared_commit_abort_and_large() {
        let mut cache = FragCache::with_block_size(4096);
        let mut b = cache.prepare(10, 100);
        assert_eq!(b.len(), 100);
        b[..2].copy_from_slice(b"hi");
        let f = b.commit(2);
        assert_eq!(&f[..], b"hi");
        cache.prepare(50, 50).abort();
        let g = cache.alloc(10);
        assert_eq!(
            g.as_ptr() as usize,
            f.as_ptr() as usize + 2,
            "abort consumed nothing"
        );
        // Larger than a block: a dedicated allocation, freed on abort or on the last drop.
        let mut big = cache.prepare(10_000, 20_000);
        assert_eq!(big.len(), 10_000);
        big[9_999] = 1;
        let big = big.commit(10_000);
        cache.prepare(5000, 5000).abort();
        let s = cache.stats();
        assert_eq!(s.large_allocations, 2);
        assert_eq!(s.bytes_mapped, 4096 + 10_000);
        assert_eq!(s.bytes_outstanding, 2 + 10 + 10_000);
        drop((f, g, big));
        assert_eq!(cache.stats().bytes_outstanding, 0);
        assert_eq!(cache.stats().bytes_mapped, 4096);
    }
}

#[cfg(all(test, loom))]
mod loom_tests {
    use super::*;

    /// A fragment dropped on another thread races the cache's reuse of its block, in place or
    /// through the spare list; loom checks the reuse is ordered after the drop (the probe) and
    /// that no block is lost or freed twice.
    #[test]
    fn cross_thread_drop_races_block_reuse() {
        loom::model(|| {
            let mut cache = FragCache::with_block_size(4096);
            let a = cache.alloc(3000);
            let t = loom::thread::spawn(move || {
                a.loom_write_probe(1);
                drop(a);
            });
            // Does not fit: lets go of the block, reuses it in place if `a` is already gone.
            let b = cache.alloc(2000);
            b.loom_write_probe(2);
            // Lets go of b's block; may take a's block from the spare list.
            let c = cache.alloc(4096);
            c.loom_write_probe(3);
            // A shrink races the release: it may free a's block, parked or not yet parked.
            cache.shared.trim(true);
            t.join().unwrap();
            drop((b, c));
            assert_eq!(cache.stats().bytes_outstanding, 0);
        });
    }

    /// The two halves of a split fragment are dropped on two threads while the cache lets go of
    /// the block and reuses it: the split's reference keeps the block until both are gone.
    #[test]
    fn split_halves_dropped_on_two_threads() {
        loom::model(|| {
            let mut cache = FragCache::with_block_size(4096);
            let mut a = cache.alloc(3000);
            let b = a.split_to(1000);
            let t = loom::thread::spawn(move || {
                b.loom_write_probe(1);
                drop(b);
            });
            // (Only one half writes the probe: it stands for the whole block's bytes, and the
            // halves' bytes are disjoint, which the probe cannot express.)
            drop(a);
            // Does not fit: lets go of the block, reuses it in place if `b` is already gone.
            let c = cache.alloc(2000);
            c.loom_write_probe(3);
            t.join().unwrap();
            drop(c);
            assert_eq!(cache.stats().bytes_outstanding, 0);
        });
    }

    /// The cache is dropped while a fragment lives on another thread: the last one out frees.
    #[test]
    fn cache_dropped_before_fragment() {
        loom::model(|| {
            let mut cache = FragCache::with_block_size(4096);
            let a = cache.alloc(100);
            let t = loom::thread::spawn(move || drop(a));
            drop(cache);
            t.join().unwrap();
        });
    }
}

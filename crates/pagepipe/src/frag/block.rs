//! The memory block: where a block's bytes live ([`Memory`]), its header with the reference
//! count ([`Block`]), and what a block does when its count reaches zero ([`release`], [`put`]).
//! Also the state a cache shares with its blocks ([`CacheShared`]: the spare list and the
//! statistics), which a released block needs to park itself or to be freed.

use crate::sync::{Arc, AtomicU64, AtomicUsize, Mutex, Ordering};
use crate::sys::mm::Mapping;
use std::alloc::Layout;
use std::ptr::NonNull;

/// A count above this means clones overflowed it: abort, as `Arc` does. Clones count one
/// reference each, so this takes over `usize::MAX / 4` clones (about 2^30 on 32-bit targets)
/// whatever the fragment's length.
pub(super) const MAX_COUNT: usize = usize::MAX / 2;

/// Bytes of spare blocks an idle cache keeps when the background trimmer visits it: two
/// default-size blocks; none at all for blocks over 32 KiB.
#[cfg_attr(loom, allow(dead_code))] // the registry and its trimmer do not exist under loom
pub(super) const IDLE_KEEP_BYTES: usize = 64 * 1024;

/// Where a block's bytes live.
pub(super) enum Memory {
    /// A block: anonymous pages, zero when first mapped.
    Mapped(Mapping),
    /// A dedicated allocation for one large request, zeroed, from the global allocator.
    ///
    /// Invariant: `ptr` came from `alloc_zeroed(layout)` and is freed only in `Drop`.
    Heap { ptr: NonNull<u8>, layout: Layout },
}

impl Memory {
    pub(super) fn ptr(&self) -> *mut u8 {
        match self {
            Memory::Mapped(m) => m.as_ptr(),
            Memory::Heap { ptr, .. } => ptr.as_ptr(),
        }
    }

    pub(super) fn len(&self) -> usize {
        match self {
            Memory::Mapped(m) => m.len(),
            Memory::Heap { layout, .. } => layout.size(),
        }
    }

    /// What [`CacheShared::mapped`] counts for it: a mapping's whole OS pages (a one-page block
    /// takes a whole page where pages are larger than 4 KiB), an allocation's size as asked of
    /// the global allocator.
    pub(super) fn footprint(&self) -> usize {
        match self {
            Memory::Mapped(m) => m.footprint(),
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
pub(super) struct Block {
    /// In references: what is left of the cache's bias (while the cache carves this block) plus
    /// one for every live [`Frag`] and [`FrozenFrag`] handle on it.
    ///
    /// Invariant: the thread whose subtraction brings it to zero owns the block alone: the cache
    /// (which then reuses it in place or frees it) or the last fragment (which calls
    /// [`release`]). A block on the spare list has count zero.
    ///
    /// [`Frag`]: crate::Frag
    /// [`FrozenFrag`]: crate::FrozenFrag
    pub(super) count: AtomicUsize,
    /// Bytes the cache carved out of this block (alignment padding included) before it let go
    /// of it; written by the cache before its Release subtraction in [`FragCache::let_go`], read
    /// by [`release`] after its Acquire load of the count. For a large allocation, the committed length.
    ///
    /// [`FragCache::let_go`]: super::cache::FragCache::let_go
    pub(super) handed: AtomicUsize,
    /// Invariant: `mem.ptr()..mem.ptr() + mem.len()` is valid for as long as the header lives.
    pub(super) mem: Memory,
    /// Whether `mem` is a dedicated large allocation (never recycled).
    large: bool,
    /// The cache's shared half: spare list and statistics.
    owner: Arc<CacheShared>,
    /// Under loom, a stand-in for the block's bytes: fragment owners and the recycling cache
    /// write it, so loom reports any reuse that is not ordered after the drops.
    #[cfg(loom)]
    pub(super) probe: loom::cell::UnsafeCell<usize>,
}

/// A block pointer that may travel between threads (inside the spare list).
pub(super) struct BlockPtr(pub(super) NonNull<Block>);

// SAFETY: a block on the spare list has count zero and is owned by the list alone (see
// `Block::count`); the Mutex around the list hands it to one thread at a time.
unsafe impl Send for BlockPtr {}

/// Allocates a block header for `mem`, with `count` set to `count`.
pub(super) fn new_block(
    mem: Memory,
    large: bool,
    count: usize,
    owner: &Arc<CacheShared>,
) -> NonNull<Block> {
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
pub(super) unsafe fn free_block(block: NonNull<Block>) -> usize {
    // SAFETY: the header came from `Box::leak` in `new_block`; the caller owns it alone.
    let header = unsafe { Box::from_raw(block.as_ptr()) };
    let len = header.mem.footprint();
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
pub(super) unsafe fn release(block: NonNull<Block>) {
    // SAFETY: the block is ours alone now (caller's contract) and its header is live.
    let c = unsafe { block.as_ref() };
    // Acquire: pairs with the Release subtractions in `Frag::drop`, `FrozenFrag::drop` and
    // `FragCache::let_go`, so every access through those handles (and the cache's store of
    // `handed`) happens before this thread recycles or frees the bytes. A load, not
    // `fence(Acquire)`: it reads the zero our own subtraction wrote (no one else writes the
    // count now), and a read-modify-write continues every earlier release sequence, so the load
    // synchronizes with all of those subtractions just as the fence would; unlike a fence,
    // ThreadSanitizer sees it (std's `Arc::drop` uses this load under TSan for that reason).
    // One load, on this cold path.
    let zero = c.count.load(Ordering::Acquire);
    debug_assert_eq!(zero, 0, "a released block's count is zero");
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
pub(super) struct CacheShared {
    pub(super) spare: Mutex<Spare>,
    /// Sum of `handed` over the let-go blocks whose last fragment is gone (statistics only).
    pub(super) released: AtomicU64,
    /// Bytes of block memory (blocks and large allocations) currently allocated for this cache,
    /// each counted by [`Memory::footprint`].
    pub(super) mapped: AtomicUsize,
}

/// Blocks whose fragments are all gone, kept mapped for the cache's next refills.
pub(super) struct Spare {
    /// Invariant: every entry has count zero and is referenced by nothing else.
    pub(super) blocks: Vec<BlockPtr>,
    /// Set when the cache is dropped: blocks released afterwards are freed, not parked.
    pub(super) closed: bool,
    /// Most entries kept (`MAX_SPARE_BYTES / block_size`: the list's bytes are bounded, whatever
    /// the block size); a block released beyond it is freed.
    pub(super) max: usize,
    /// The cache's block size: only blocks of this size are parked (a one-page fallback block
    /// is freed, so the cache tries for full-size blocks again).
    pub(super) block_size: usize,
    /// Bumped by every refill that looks at the list; lets the idle trimmer see activity.
    pub(super) epoch: u64,
    /// `epoch` at the idle trimmer's previous visit.
    #[cfg_attr(loom, allow(dead_code))] // read only by the trimmer, absent under loom
    pub(super) seen_epoch: u64,
}

#[cfg_attr(loom, allow(dead_code))] // the registry and its trimmer do not exist under loom
impl CacheShared {
    /// Takes the blocks to give back: all of them when `force`, else those beyond
    /// [`IDLE_KEEP_BYTES`] when no refill happened since the previous call.
    fn take_trimmable(&self, force: bool) -> Vec<BlockPtr> {
        let mut spare = self.spare.lock().unwrap_or_else(|e| e.into_inner());
        let idle = spare.epoch == spare.seen_epoch;
        spare.seen_epoch = spare.epoch;
        let keep = if force {
            0
        } else if idle {
            IDLE_KEEP_BYTES / spare.block_size
        } else {
            return Vec::new();
        };
        let n = spare.blocks.len().saturating_sub(keep);
        let at = spare.blocks.len() - n;
        spare.blocks.split_off(at)
    }

    /// Gives spare blocks back to the OS (see [`CacheShared::take_trimmable`]); returns the bytes.
    pub(super) fn trim(&self, force: bool) -> usize {
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
impl crate::reclaim::Trim for CacheShared {
    fn trim(&self, force: bool) -> usize {
        CacheShared::trim(self, force)
    }

    /// The spare-list lock: `release`, the trimmer, `shrink()`, a refill, `stats()` and the
    /// cache's drop all take it, so a child that inherited it held would hang in any of them.
    fn hold_for_fork(self: Arc<Self>) -> Option<Box<dyn std::any::Any>> {
        let guard = self.spare.lock().unwrap_or_else(|e| e.into_inner());
        // SAFETY: the guard borrows the mutex inside `self`'s allocation, which `ForkHold` keeps
        // alive in `_owner` and drops only after the guard (fields drop in declaration order);
        // moving the `Arc` does not move the allocation. The guard never leaves the `ForkHold`.
        let guard = unsafe {
            std::mem::transmute::<
                std::sync::MutexGuard<'_, Spare>,
                std::sync::MutexGuard<'static, Spare>,
            >(guard)
        };
        Some(Box::new(ForkHold {
            _guard: guard,
            _owner: self,
        }))
    }
}

/// A cache's spare-list lock held across `fork(2)` by the forking thread (see `crate::fork`).
#[cfg(not(loom))]
struct ForkHold {
    /// Declared first, so it is dropped (unlocked) before `_owner`, which owns the mutex.
    _guard: std::sync::MutexGuard<'static, Spare>,
    _owner: Arc<CacheShared>,
}

/// Drops one handle's reference to `block`; releases the block when that was the last one.
///
/// # Safety
/// The caller held one reference of `block`'s count and gives it up for good.
#[inline]
pub(super) unsafe fn put(block: NonNull<Block>) {
    // SAFETY: the caller's share keeps the header live until this subtraction.
    let c = unsafe { block.as_ref() };
    // Release: pairs with the Acquire load in `release` and the AcqRel subtraction in
    // `FragCache::let_go`, so this handle's accesses happen before the bytes are reused.
    if c.count.fetch_sub(1, Ordering::Release) == 1 {
        // SAFETY: our subtraction brought the count to zero, and the cache had let go (while it
        // carves, its bias keeps the count above zero).
        unsafe { release(block) };
    }
}

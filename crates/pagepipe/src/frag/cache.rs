//! [`FragCache`]: carves blocks into fragments; its configuration ([`DEFAULT_BLOCK_SIZE`],
//! [`MAX_BLOCK_SIZE`]) and its counters ([`FragStats`]).

use super::block::{free_block, new_block, Block, CacheShared, Memory, Spare};
use super::unique::Frag;
use crate::sync::{Arc, AtomicU64, AtomicUsize, Mutex, Ordering};
use crate::sys::mm::{Mapping, PAGE_SIZE};
use std::alloc::Layout;
use std::fmt;
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

/// Bytes of spare blocks a cache keeps at most, whatever its block size: 2 MiB (512 blocks of
/// 4 KiB, 64 of 32 KiB, one of 2 MiB; blocks over 2 MiB are never parked, each is freed when its
/// last fragment goes).
pub(super) const MAX_SPARE_BYTES: usize = 2 << 20;

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
/// **Spare memory.** A block whose fragments are all gone is parked for the next refill, up to
/// 2 MiB of parked blocks per cache whatever the block size (blocks over 2 MiB are freed, never
/// parked); the idle trimmer gives an idle cache's parked blocks back down to 64 KiB within two
/// of its 100 ms visits, and [`crate::shrink`] gives them all back.
///
/// **Fork.** A forked child may use the caches it inherited (and drop their fragments): the
/// fork handlers hold every cache's spare-list lock across `fork(2)`.
///
/// **Sizes.** Requests larger than a block get a dedicated allocation (counted in
/// [`FragStats::large_allocations`]). A zero-length request returns an empty fragment that holds
/// no memory. Like `Box`, the cache aborts the process (`handle_alloc_error`) when the OS has
/// no memory left even for a one-page block. A bad argument is never an abort: an alignment
/// that is not a power of two or exceeds [`MAX_BLOCK_SIZE`], a length that overflows `isize`,
/// and a dedicated allocation the global allocator refuses (a request larger than the memory
/// the OS will give, say `alloc(1 << 50)`) panic with a message.
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
    pub(super) base: NonNull<u8>,
    /// Next free byte of the current block. Invariant: `offset <= size`; no live fragment
    /// holds a byte at or past `offset`.
    pub(super) offset: usize,
    /// Length of the current block (0 when none).
    pub(super) size: usize,
    /// What is left of the bias the cache put into the current block's count:
    /// `BIAS - fragments handed out of it since it was (re)taken`.
    bias: usize,
    /// Configured block size: a power of two from 4 KiB to [`MAX_BLOCK_SIZE`].
    pub(super) block_size: usize,
    pub(super) shared: Arc<CacheShared>,
    blocks_allocated: u64,
    blocks_reused: u64,
    pub(super) large_allocations: u64,
    /// Sum of bytes handed out of blocks the cache let go of, and of large allocations.
    pub(super) let_go_handed: u64,
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
    /// all; a dedicated allocation counts its whole size (a large [`PreparedFrag`] committed
    /// short holds all of it) until its last fragment is gone. Clones of a frozen fragment do
    /// not count again.
    ///
    /// [`PreparedFrag`]: crate::PreparedFrag
    pub bytes_outstanding: u64,
    /// Fragments served by a dedicated allocation (requests larger than a block). A large
    /// [`PreparedFrag`](crate::PreparedFrag) counts when it is committed non-empty; an aborted
    /// one is not counted.
    pub large_allocations: u64,
    /// Spare blocks parked for reuse: what [`crate::shrink`] would give back.
    pub spare_blocks: usize,
    /// Bytes currently allocated for this cache: its blocks (in use, being carved or spare) in
    /// whole OS pages (a one-page block takes 16 KiB where pages are 16 KiB), and its dedicated
    /// allocations (live fragments and uncommitted large builders) at the size asked of the
    /// global allocator.
    pub bytes_mapped: usize,
}

impl FragCache {
    /// A cache with 32 KiB blocks ([`DEFAULT_BLOCK_SIZE`]). Takes no memory until the first
    /// allocation; registers the cache so [`crate::shrink`] can reach its spare blocks.
    ///
    /// # Examples
    ///
    /// ```
    /// let mut cache = pagepipe::FragCache::new();
    /// assert_eq!(cache.block_size(), pagepipe::DEFAULT_BLOCK_SIZE);
    /// let f = cache.alloc(100);
    /// assert_eq!(f.len(), 100);
    /// assert_eq!(cache.stats().bytes_outstanding, 100);
    /// ```
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
                max: MAX_SPARE_BYTES / bytes,
                block_size: bytes,
                epoch: 0,
                seen_epoch: 0,
            }),
            released: AtomicU64::new(0),
            mapped: AtomicUsize::new(0),
        });
        #[cfg(not(loom))]
        {
            let weak: std::sync::Weak<dyn crate::reclaim::Trim> = Arc::downgrade(&shared) as _;
            crate::fork::install();
            crate::reclaim::register(weak);
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
    ///
    /// # Examples
    /// See [`FragCache::new`].
    pub fn block_size(&self) -> usize {
        self.block_size
    }

    /// A fragment of `len` bytes (1-byte aligned). See the type's docs for what it contains.
    ///
    /// A request larger than the block size gets a dedicated allocation.
    ///
    /// # Panics
    /// If `len` overflows `isize` (it could never be allocated), or a dedicated allocation (a
    /// request larger than a block) is refused by the global allocator.
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
    /// If `align` is not a power of two or exceeds [`MAX_BLOCK_SIZE`], if `len` rounded up to
    /// `align` overflows `isize`, or if a dedicated allocation (a request that does not fit a
    /// block) is refused by the global allocator.
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
        assert!(
            align <= MAX_BLOCK_SIZE,
            "FragCache::alloc_aligned: align {align} exceeds the largest supported, {MAX_BLOCK_SIZE}"
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

    /// The cache's counters. Costs one lock of the spare list.
    ///
    /// # Examples
    /// See [`FragCache::new`].
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
    pub(super) unsafe fn carve(&mut self, len: usize) -> Frag {
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
    pub(super) fn refill(&mut self) {
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
        self.shared
            .mapped
            .fetch_add(mem.footprint(), Ordering::Relaxed);
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
    ///
    /// [`release`]: super::block::release
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
        // AcqRel. Release: pairs with the Acquire load in `release`, publishing `handed` and
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
        self.large_allocations += 1;
        // SAFETY: a live allocation's pointer is never null.
        let ptr = unsafe { NonNull::new_unchecked(c.mem.ptr()) };
        Frag {
            block: Some(block),
            ptr,
            len,
        }
    }

    /// Allocates the header and zeroed memory of a large allocation; count zero, not counted in
    /// `large_allocations` (the caller counts it when it becomes a fragment).
    pub(super) fn new_large(&mut self, len: usize, align: usize) -> NonNull<Block> {
        let layout = Layout::from_size_align(len, align).unwrap_or_else(|_| {
            panic!("FragCache: a fragment of {len} bytes aligned to {align} overflows isize")
        });
        debug_assert!(len > 0);
        // SAFETY: `layout` has a non-zero size (callers never ask for an empty large fragment).
        let ptr = NonNull::new(unsafe { std::alloc::alloc_zeroed(layout) });
        // A refusal is a panic, not `handle_alloc_error`'s abort: it is one request's size that
        // the allocator cannot serve (a bad argument, from the caller's side), nothing has been
        // changed yet, and smaller requests still work.
        let ptr = ptr.unwrap_or_else(|| {
            panic!(
                "FragCache: no memory for a dedicated fragment of {len} bytes aligned to {align}"
            )
        });
        self.shared.mapped.fetch_add(len, Ordering::Relaxed);
        new_block(Memory::Heap { ptr, layout }, true, 0, &self.shared)
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

#[cfg(test)]
thread_local! {
    /// Makes `map_block` fail for full-size blocks on this thread (fallback test).
    static FAIL_BIG_BLOCKS: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    use super::super::frozen::FrozenFrag;

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

    /// Parks `n` whole-block fragments' blocks: allocates them all, moves on, drops them.
    fn park(cache: &mut FragCache, n: usize) {
        let block = cache.block_size();
        let frags: Vec<_> = (0..n).map(|_| cache.alloc(block)).collect();
        let next = cache.alloc(block); // lets go of the last of them
        drop(frags);
        drop(next); // still the block being carved: not parked
    }

    #[test]
    fn spare_list_is_bounded_in_bytes_whatever_the_block_size() {
        for block in [4096, 32 << 10, 1 << 20, 2 << 20, 64 << 20] {
            let mut cache = FragCache::with_block_size(block);
            park(&mut cache, 8); // mapped lazily and never touched: no memory is used
            let s = cache.stats();
            // Before: 64 MiB blocks parked 4 (256 MiB), 1 MiB blocks 4 (4 MiB). (`<=`: the
            // background trimmer may visit meanwhile.)
            let most = (MAX_SPARE_BYTES / block).min(8);
            assert!(s.spare_blocks <= most, "{block}: {s:?}");
            assert!(s.bytes_mapped <= (most + 1) * block, "{block}: {s:?}");
        }
    }

    #[test]
    fn idle_trim_keeps_at_most_idle_keep_bytes() {
        use super::super::block::IDLE_KEEP_BYTES;
        for block in [4096, 32 << 10, 1 << 20] {
            let mut cache = FragCache::with_block_size(block);
            park(&mut cache, 8);
            cache.shared.trim(false); // the trimmer's first visit: the cache was busy
            cache.shared.trim(false); // no refill since: idle
            let s = cache.stats();
            // Before: two blocks whatever their size (2 MiB of 1 MiB blocks).
            assert_eq!(
                s.spare_blocks,
                (IDLE_KEEP_BYTES / block).min(8),
                "{block}: {s:?}"
            );
        }
    }

    #[test]
    fn truncate_to_zero_gives_the_block_back() {
        let mut cache = FragCache::with_block_size(4096);
        let mut a = cache.alloc(4096);
        let _b = cache.alloc(1); // lets go of a's block
        a.truncate(0);
        assert!(
            a.is_empty() && a.block.is_none(),
            "an empty fragment holds a block"
        );
        // Before: the empty fragment kept the block until it was dropped.
        let s = cache.stats();
        assert_eq!((s.spare_blocks, s.bytes_outstanding), (1, 1), "{s:?}");
        let mut c = cache.alloc(10);
        c.truncate(3);
        assert_eq!(c.len(), 3);
    }

    #[test]
    fn bytes_mapped_counts_whole_pages() {
        let mut cache = FragCache::with_block_size(4096);
        let _a = cache.alloc(1);
        let page = crate::sys::mm::page_size();
        assert_eq!(cache.stats().bytes_mapped, 4096usize.next_multiple_of(page));
    }

    #[test]
    #[should_panic(expected = "not a power of two")]
    fn bad_alignment_panics() {
        FragCache::new().alloc_aligned(8, 3);
    }

    #[test]
    #[should_panic(expected = "align 1099511627776 exceeds")]
    fn huge_alignment_panics() {
        // Aborted the process ("memory allocation of 1 bytes failed") before.
        FragCache::new().alloc_aligned(1, 1 << 40);
    }

    #[test]
    #[should_panic(expected = "no memory for a dedicated fragment of 4611686018427387904 bytes")]
    fn refused_large_allocation_panics() {
        FragCache::new().alloc(1 << 62);
    }

    #[test]
    #[should_panic(expected = "no memory for a dedicated fragment")]
    fn refused_large_builder_panics() {
        let mut cache = FragCache::new();
        let _ = cache.prepare(1 << 62, 1 << 62);
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
}

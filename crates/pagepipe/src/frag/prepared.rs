//! [`PreparedFrag`]: bytes reserved in a [`FragCache`] to fill, then keep a prefix of
//! ([`commit`](PreparedFrag::commit)) or give back ([`abort`](PreparedFrag::abort)); and the
//! cache's methods that hand one out, [`FragCache::prepare`] and [`FragCache::probe`].

use super::block::{free_block, Block};
use super::cache::FragCache;
use super::unique::Frag;
use crate::sync::Ordering;
use std::fmt;
use std::ops::{Deref, DerefMut};
use std::ptr::NonNull;

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
    /// Keeps the first `n` bytes as a fragment; the rest stays with the cache. From a dedicated
    /// allocation (a `min` larger than a block), the fragment holds the whole allocation until
    /// it is dropped, and [`FragStats::bytes_outstanding`] counts all of it.
    ///
    /// [`FragStats::bytes_outstanding`]: crate::FragStats::bytes_outstanding
    ///
    /// # Panics
    /// If `n` is larger than the room offered (`self.len()`).
    ///
    /// # Examples
    ///
    /// ```
    /// let mut cache = pagepipe::FragCache::new();
    /// let mut room = cache.prepare(64, 1500);
    /// room[..3].copy_from_slice(b"abc");
    /// let frag = room.commit(3);            // or room.abort(): nothing consumed
    /// assert_eq!(&frag[..], b"abc");
    /// ```
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
            // The whole allocation stays held by the fragment, however short the commit.
            let held = c.mem.len();
            c.handed.store(held, Ordering::Relaxed);
            self.cache.let_go_handed += held as u64;
            self.cache.large_allocations += 1;
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
    ///
    /// # Examples
    /// See [`PreparedFrag::commit`].
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

// `prepare` and `probe` live beside the type they return, so that cache.rs need not import
// this file.
impl FragCache {
    /// A writable buffer with room for at least `min` and at most `max` bytes, to fill and then
    /// [`commit`](PreparedFrag::commit) (keeping a prefix as a [`Frag`]) or
    /// [`abort`](PreparedFrag::abort) (keeping nothing). The buffer is the rest of the current
    /// block when that holds `min` bytes (the cache moves to a new block otherwise); a `min`
    /// larger than a block gets a dedicated allocation of exactly `min` bytes.
    ///
    /// # Panics
    /// If `min > max`, `min` overflows `isize`, or the dedicated allocation for a `min` larger
    /// than a block is refused by the global allocator.
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

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

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
        assert_eq!(s.large_allocations, 1, "the aborted builder is not counted");
        assert_eq!(s.bytes_mapped, 4096 + 10_000);
        assert_eq!(s.bytes_outstanding, 2 + 10 + 10_000);
        drop((f, g, big));
        assert_eq!(cache.stats().bytes_outstanding, 0);
        assert_eq!(cache.stats().bytes_mapped, 4096);
    }

    #[test]
    fn large_builder_committed_short_counts_its_whole_allocation() {
        let mut cache = FragCache::with_block_size(4096);
        let short = cache.prepare(10_000, 10_000).commit(100);
        let s = cache.stats();
        // Before: 100 outstanding while 10,000 bytes stayed held.
        assert_eq!(
            (s.bytes_outstanding, s.bytes_mapped, s.large_allocations),
            (10_000, 10_000, 1)
        );
        cache.prepare(10_000, 10_000).commit(0); // nothing kept: not counted
        cache.prepare(10_000, 10_000).abort();
        assert_eq!(cache.stats().large_allocations, 1);
        drop(short);
        let s = cache.stats();
        assert_eq!((s.bytes_outstanding, s.bytes_mapped), (0, 0));
    }
}

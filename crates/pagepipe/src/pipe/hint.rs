//! Prefetch hints for the data path: the lines an operation will touch first are fetched before
//! it takes its side, and a thread that read a request fetches what its reply will touch. Hints
//! only: a stale or corrupt view fetches the wrong lines and changes nothing else.

use crate::pipe::shared::{Ring, Shared};
use crate::region::{Side, Slot};
use crate::ring;
use crate::sync::Ordering;

impl Ring<'_> {
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
impl Shared {
    /// Starts fetching the lines the next operation of side `side` will touch first (see
    /// [`Ring::prefetch`]), before it takes its lock: the write side's last and first free slots
    /// at head, or the read side's slot at tail. A hint from unlocked loads: a stale or corrupt
    /// view only fetches the wrong lines. Nothing under loom: its loads would be more
    /// interleavings to explore for a hint that has no effect on what the model checks.
    #[cfg(loom)]
    pub(crate) fn prefetch(&self, _side: Side) {}

    /// See the loom version above.
    #[cfg(not(loom))]
    pub(crate) fn prefetch(&self, side: Side) {
        let Ok(size) = self.region.ring_size() else {
            return;
        };
        let ring = Ring::new(&self.region, size);
        let h = self.header();
        if side == Side::Write {
            // The head the last writer saved, from the write side's own line, not the head
            // word: a waiting reader polls that one, and loading it would wait for the line.
            let head = h.write_side.state[0].load(Ordering::Relaxed);
            ring.prefetch(head);
            ring.prefetch(head.wrapping_sub(1));
        } else {
            ring.prefetch(ring::index(h.tail.word.load(Ordering::Relaxed)));
        }
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    /// The reply hint keeps raw addresses past the pipe's life: prefetching them once the
    /// region is unmapped must be harmless (`PREFETCHW` never faults).
    #[test]
    fn reply_hint_outlives_its_pipe() {
        use std::io::Write;
        let (mut w, r) = crate::builder::pipe().unwrap();
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

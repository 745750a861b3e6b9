//! The pool's mechanics, on a pipe's shared region: claiming a free position for data, counting
//! spare pages, faulting pages in ahead of a write (prefill), and trimming spare pages back to
//! the OS (after a write, when idle, or on [`crate::shrink`]).

use crate::lock;
use crate::pipe::shared::{Shared, WriteGuard};
use crate::region::{Slot, DROPPED};
use crate::ring::{self, check_indices};
use crate::sync::Ordering;
use std::io;

impl Shared {
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
}
/// Splits `count` positions starting at `first` in a ring of `ring` into contiguous runs.
fn wrapped_runs(first: usize, count: usize, ring: usize) -> impl Iterator<Item = (usize, usize)> {
    let a = count.min(ring - first);
    [(first, a), (0, count - a)]
        .into_iter()
        .filter(|&(_, n)| n > 0)
}
#[cfg(not(loom))]
impl crate::reclaim::Trim for Shared {
    fn trim(&self, force: bool) -> usize {
        Shared::trim(self, force)
    }

    fn before_fork(&self) {
        self.key_before_fork();
    }

    fn hold_for_fork(self: std::sync::Arc<Self>) -> Option<Box<dyn std::any::Any>> {
        Some(Shared::hold_for_fork(self))
    }

    fn note_for_watch(&self) {
        self.note_ends_for_watch();
    }

    fn in_forked_child(&self) {
        self.forget_key();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn wrapped_runs_split_at_the_end() {
        assert_eq!(
            wrapped_runs(14, 4, 16).collect::<Vec<_>>(),
            vec![(14, 2), (0, 2)]
        );
        assert_eq!(wrapped_runs(0, 4, 16).collect::<Vec<_>>(), vec![(0, 4)]);
    }
}

//! `F_SETPIPE_SZ`: resizing a pipe in place, holding both sides (the region reserved positions
//! for the largest ring the pipe may have, and as many again to stage a resize, when it was
//! made, so nothing is remapped).
//!
//! A slot's data lives at its position (index modulo the ring size), so a new size moves the
//! queued slots. The move survives the resizer's death at any instant, with no byte ever held
//! only in one process's memory: the queued slots are first copied to *staging* positions past
//! both rings and a journal in the header is marked staged; only then is the ring rewritten
//! from the staged copies, the new size set, and the journal cleared. A taker of either side
//! that finds the journal staged (its resizer died; a live one holds both sides throughout)
//! finishes the rewrite before it does anything else (`Shared::take` in `pipe/shared.rs`).

use crate::error::{ebusy, invalid};
use crate::lock;
use crate::pipe::shared::{ReadGuard, Shared, WriteGuard};
use crate::region::{ring_size_for, DROPPED, END_MASK, RELEASED, STAGED};
use crate::ring::{self, check_indices};
use crate::sync::Ordering;
use std::io;
use std::time::Instant;

impl Shared {
    /// `F_SETPIPE_SZ`: see [`crate::Writer::set_capacity`]. Moves the queued slots to their
    /// positions in the new ring through the staging area (see the module docs).
    pub(crate) fn set_capacity(
        &self,
        bytes: usize,
        deadline: Option<Instant>,
    ) -> io::Result<usize> {
        if self.config().notes != 0 {
            return Err(ebusy()); // Linux: a notification pipe is not resized
        }
        let ss = self.config().slot_size;
        let new_ring = ring_size_for(bytes, ss)?;
        if new_ring > self.region.reach() {
            // Linux: EPERM above /proc/sys/fs/pipe-max-size.
            return Err(io::Error::new(
                io::ErrorKind::PermissionDenied,
                format!(
                    "pipe capacity {bytes} is above this pipe's maximum of {} bytes \
                     (Builder::max_capacity)",
                    self.region.reach() * ss
                ),
            ));
        }
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
            // The staging positions lie past both rings, in the far part.
            self.region.ensure_far()?;
            self.stage(&ws, tail, old_ring, new_ring)?;
            self.apply_resize(&ws, &rs)?;
        }
        drop(rs);
        drop(ws);
        // Sleepers recheck against the new size.
        self.header().writable.wake_all();
        self.header().readable.wake_all();
        Ok(self.capacity())
    }

    /// A resize's first half: copies the queued slots `tail..head` (data and bookkeeping) to
    /// the staging positions past both rings, then writes the journal and marks it
    /// [`STAGED`]. Until then the ring is untouched, so a resizer killed here loses nothing
    /// (the staging positions are outside every ring: nobody reads them). Both sides are held.
    fn stage(&self, ws: &WriteGuard<'_>, tail: u64, old: usize, new: usize) -> io::Result<()> {
        let ring = ws.ring();
        let ss = ring.slot_size();
        let count = (ws.head - tail) as usize; // <= min(old, new): checked by the caller
        let staging = old.max(new);
        if staging + count > self.region.max_ring {
            // Not for rings within the reach (positions are twice the reach): only a peer's
            // ring size could get here.
            return Err(invalid(format!(
                "a ring of {old} slots with {count} queued cannot be staged in {} positions",
                self.region.max_ring
            )));
        }
        for k in 0..count {
            let (pos, slot) = ring.slot(tail + k as u64);
            let st = slot.state.load(Ordering::Relaxed);
            let start = slot.start.load(Ordering::Relaxed);
            let end = checked_end(st, start, ss)?;
            let dst = staging + k;
            // SAFETY: end <= slot_size (checked), pos < old <= max_ring and dst < max_ring
            // (checked above), so both ranges lie in their positions' pages, which differ
            // (dst >= max(old, new) > pos); both sides are held, so no holder touches them.
            unsafe { std::ptr::copy_nonoverlapping(ring.page(pos), self.region.page(dst), end) };
            let d = self.region.slot(dst);
            d.start.store(start, Ordering::Relaxed);
            d.state.store(st & !(RELEASED | DROPPED), Ordering::Relaxed);
        }
        let j = &self.header().resize;
        j.tail.store(tail, Ordering::Relaxed);
        j.count.store(count as u32, Ordering::Relaxed);
        j.old_ring.store(old as u32, Ordering::Relaxed);
        j.new_ring.store(new as u32, Ordering::Relaxed);
        j.staging.store(staging as u32, Ordering::Relaxed);
        // Release: the staged copies and the journal above are complete for whoever sees
        // STAGED (the Acquire load in `Shared::resize_pending`).
        j.state.store(STAGED, Ordering::Release);
        Ok(())
    }

    /// A resize's second half, also how the next taker finishes one whose resizer died
    /// ([`Shared::settle_resize`]): rewrites the ring from the staged copies at their
    /// positions in the new ring, sets the new size, clears the journal and drops the staging
    /// pages. Idempotent until the journal is cleared: the staged copies are read, never
    /// written. Everything in the journal is checked against the ring first. Both sides held.
    pub(crate) fn apply_resize(&self, ws: &WriteGuard<'_>, rs: &ReadGuard<'_>) -> io::Result<()> {
        // The staged copies lie past both rings, in the far part (a taker finishing a dead
        // resizer's work may not have mapped it yet).
        self.region.ensure_far()?;
        let h = self.header();
        let j = &h.resize;
        // Acquire: as in `Shared::resize_pending`.
        if j.state.load(Ordering::Acquire) != STAGED {
            return Err(invalid("a resize journal in an unknown state"));
        }
        let tail = j.tail.load(Ordering::Relaxed);
        let count = j.count.load(Ordering::Relaxed) as usize;
        let old = j.old_ring.load(Ordering::Relaxed) as usize;
        let new = j.new_ring.load(Ordering::Relaxed) as usize;
        let staging = j.staging.load(Ordering::Relaxed) as usize;
        let max = self.region.max_ring;
        let ring_ok = |n: usize| n.is_power_of_two() && n <= max;
        if !ring_ok(old)
            || !ring_ok(new)
            || staging != old.max(new)
            || tail != rs.tail
            || ws.head.checked_sub(rs.tail) != Some(count as u64)
            || count > old.min(new)
            || staging + count > max
        {
            return Err(invalid(format!(
                "a resize journal that does not match the ring: tail {tail}, {count} slots, \
                 {old} -> {new} slots, staged at {staging}; the ring holds {}..{}",
                rs.tail, ws.head
            )));
        }
        let ss = self.config().slot_size;
        // Check every staged slot before destroying anything.
        let staged = (0..count)
            .map(|k| {
                let d = self.region.slot(staging + k);
                let st = d.state.load(Ordering::Relaxed);
                let start = d.start.load(Ordering::Relaxed);
                Ok((st, start, checked_end(st, start, ss)?))
            })
            .collect::<io::Result<Vec<_>>>()?;
        self.region.drop_pages(0, staging);
        for pos in 0..staging {
            self.region
                .slot(pos)
                .state
                .store(RELEASED | DROPPED, Ordering::Relaxed);
        }
        for (k, (st, start, end)) in staged.into_iter().enumerate() {
            let pos = (tail + k as u64) as usize & (new - 1);
            // SAFETY: end <= slot_size (checked), pos < new <= max_ring and staging + k <
            // max_ring (checked), distinct positions (pos < staging); both sides are held.
            unsafe {
                std::ptr::copy_nonoverlapping(
                    self.region.page(staging + k),
                    self.region.page(pos),
                    end,
                )
            };
            let slot = self.region.slot(pos);
            slot.start.store(start, Ordering::Relaxed);
            slot.state.store(st, Ordering::Relaxed);
        }
        h.dropped.store((new - count) as u64, Ordering::Relaxed);
        // Release (both): pair with the Acquire loads in Region::ring_size / max_usage. In an
        // order that keeps max_usage <= ring_size at every moment, so a taker who finds the
        // resizer dead between the two still validates the region.
        if new < old {
            h.max_usage.store(new as u32, Ordering::Release);
            h.ring_size.store(new as u32, Ordering::Release);
        } else {
            h.ring_size.store(new as u32, Ordering::Release);
            h.max_usage.store(new as u32, Ordering::Release);
        }
        // Release: the rewritten ring is complete before the journal stops pointing at the
        // staged copies.
        j.state.store(0, Ordering::Release);
        self.region.drop_pages(staging, count);
        for pos in staging..staging + count {
            self.region
                .slot(pos)
                .state
                .store(RELEASED | DROPPED, Ordering::Relaxed);
        }
        Ok(())
    }

    /// Finishes a resize whose resizer died after staging (see [`Shared::apply_resize`]),
    /// taking both sides in resize order.
    pub(crate) fn settle_resize(&self, wait: lock::Wait) -> io::Result<()> {
        let (mut ws, mut rs) = self.lock_both_raw(wait)?;
        // Holding both sides, each side's view of the other is exact.
        (ws.cached_tail, rs.cached_head) = (rs.tail, ws.head);
        if self.resize_pending() {
            self.apply_resize(&ws, &rs)?;
        }
        drop(rs);
        drop(ws);
        self.header().writable.wake_all();
        self.header().readable.wake_all();
        Ok(())
    }
}

/// A slot's end offset from its `state` word, checked against its `start` and the slot size.
fn checked_end(st: u64, start: u64, slot_size: usize) -> io::Result<usize> {
    let end = (st & END_MASK) as usize;
    if end > slot_size || start > end as u64 {
        return Err(invalid(format!("bad slot: start {start}, end {end}")));
    }
    Ok(end)
}

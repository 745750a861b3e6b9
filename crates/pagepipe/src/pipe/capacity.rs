//! `F_SETPIPE_SZ`: resizing a pipe in place, holding both sides (the region reserved the largest
//! ring when it was made, so nothing is remapped).

use crate::error::{ebusy, invalid};
use crate::lock;
use crate::pipe::shared::{Ring, Shared, WriteGuard};
use crate::region::{ring_size_for, DROPPED, END_MASK, RELEASED};
use crate::ring::{self, check_indices};
use crate::sync::Ordering;
use std::io;
use std::time::Instant;

impl Shared {
    /// `F_SETPIPE_SZ`: see [`crate::Writer::set_capacity`]. Moves the queued slots to their positions in
    /// the new ring, in place (the region reserved the largest ring when it was made).
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
            self.move_slots(&ws, tail, new_ring)?;
            let h = self.header();
            h.dropped
                .store((new_ring - queued) as u64, Ordering::Relaxed);
            // Release (both): pair with the Acquire loads in Region::ring_size / max_usage.
            h.max_usage.store(new_ring as u32, Ordering::Release);
            h.ring_size.store(new_ring as u32, Ordering::Release);
        }
        drop(rs);
        drop(ws);
        // Sleepers recheck against the new size.
        self.header().writable.wake_all();
        self.header().readable.wake_all();
        Ok(self.capacity())
    }

    /// Rewrites slots `tail..head` at their positions in a ring of `new_ring` slots; every other
    /// position of the new ring (and of the old one beyond it) becomes free with its page
    /// dropped. Both sides are held.
    fn move_slots(&self, ws: &WriteGuard<'_>, tail: u64, new_ring: usize) -> io::Result<()> {
        let old = ws.ring();
        let ss = old.slot_size();
        let queued: Vec<(u64, u64, Vec<u8>)> = (tail..ws.head)
            .map(|i| {
                let (pos, slot) = old.slot(i);
                let st = slot.state.load(Ordering::Relaxed);
                let start = slot.start.load(Ordering::Relaxed);
                let end = (st & END_MASK) as usize;
                if end > ss || start > end as u64 {
                    return Err(invalid(format!("bad slot {i}: start {start}, end {end}")));
                }
                let mut page = vec![0u8; end];
                // SAFETY: end <= slot_size, so the range is inside position pos's page; both
                // sides are held, so no one else touches it; `page` is a distinct allocation.
                unsafe { std::ptr::copy_nonoverlapping(old.page(pos), page.as_mut_ptr(), end) };
                Ok((st, start, page))
            })
            .collect::<io::Result<_>>()?;
        let span = old.size.max(new_ring);
        self.region.drop_pages(0, span);
        for pos in 0..span {
            self.region
                .slot(pos)
                .state
                .store(RELEASED | DROPPED, Ordering::Relaxed);
        }
        let new = Ring::new(&self.region, new_ring);
        for (i, (st, start, page)) in (tail..).zip(queued) {
            let (pos, slot) = new.slot(i);
            // SAFETY: page.len() <= slot_size (checked above) and position pos < new_ring <=
            // max_ring; both sides are held.
            unsafe { std::ptr::copy_nonoverlapping(page.as_ptr(), new.page(pos), page.len()) };
            slot.start.store(start, Ordering::Relaxed);
            slot.state
                .store(st & !(RELEASED | DROPPED), Ordering::Relaxed);
        }
        Ok(())
    }
}

//! Handle slots: what a `pp_writer *` or `pp_reader *` points to.
//!
//! A C program may call a function on a handle it (or another thread) already closed; that must
//! be `EINVAL`, never a use of freed memory, and a close must not free an end another thread is
//! writing through. So:
//! - a slot's memory is never freed: a closed slot goes back to its [`Pool`] and a later open
//!   reuses it, as the kernel reuses a closed descriptor's number (a stale pointer then names
//!   the new end, as a stale descriptor would name the new file);
//! - a call counts itself in the slot's `state` while it uses the value; close marks the slot
//!   closed, and whoever brings the count to zero on a closed slot drops the value (the close
//!   itself when no call is in flight, else the last call to return).
//!
//! `state`'s invariant: bit 0 `CLOSED`, bit 1 `DROPPED` (the value is gone; set only on a
//! closed slot with no call in flight, by exactly one thread), the rest the calls in flight in
//! units of `ONE`. The value is `Some` exactly while `DROPPED` is clear, and it is touched only
//! by calls that counted themselves on an open slot, by [`Pool::open`] (on a dropped slot it
//! owns) and by the one thread that sets `DROPPED`.
//!
//! After `fork(2)` a child inherits the counts of calls other threads had in flight; those never
//! return there, so a close in the child leaves that one end to the child's exit (the kernel
//! then closes its descriptors, and the other side sees the end closed).

use crate::errno::einval;
use std::cell::UnsafeCell;
use std::io;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;

const CLOSED: usize = 1;
const DROPPED: usize = 2;
const ONE: usize = 4;

/// One handle: a value and the count of calls using it (see the module docs).
pub(crate) struct Slot<T: 'static> {
    state: AtomicUsize,
    value: UnsafeCell<Option<T>>,
    pool: &'static Pool<T>,
}

// SAFETY: the value is shared (`&T`) among the calls counted in `state`, and moved in or out
// only by the one thread the protocol gives it to (see the module docs): the same as sending
// and sharing a `T`.
unsafe impl<T: Send + Sync + 'static> Sync for Slot<T> {}

/// The closed slots of one handle type, for reuse.
pub(crate) struct Pool<T: 'static> {
    free: Mutex<Vec<&'static Slot<T>>>,
}

impl<T: Send + Sync + 'static> Pool<T> {
    pub(crate) const fn new() -> Pool<T> {
        Pool {
            free: Mutex::new(Vec::new()),
        }
    }

    /// A slot holding `value`, open: a reused one if any, else a new one (never freed).
    pub(crate) fn open(&'static self, value: T) -> &'static Slot<T> {
        let reused = self.free.lock().unwrap_or_else(|e| e.into_inner()).pop();
        let slot = reused.unwrap_or_else(|| {
            Box::leak(Box::new(Slot {
                state: AtomicUsize::new(CLOSED | DROPPED),
                value: UnsafeCell::new(None),
                pool: self,
            }))
        });
        // SAFETY: the slot is dropped (DROPPED set, value None) and came off the free list (or
        // was just made), so this thread alone may move a value in; calls that count themselves
        // meanwhile see CLOSED and never touch the value.
        unsafe { *slot.value.get() = Some(value) };
        // A stale call (a pointer kept past its close) may be counted for an instant: wait for
        // it to leave, then open. Release: the value stored above is visible to every call
        // that sees the slot open (their Acquire increment).
        while slot
            .state
            .compare_exchange_weak(CLOSED | DROPPED, 0, Ordering::Release, Ordering::Relaxed)
            .is_err()
        {
            std::hint::spin_loop();
        }
        slot
    }
}

impl<T: Send + Sync + 'static> Slot<T> {
    /// Runs `f` on the value; `EINVAL` if the slot is closed. The value stays alive until `f`
    /// returns even if another thread closes the slot meanwhile.
    pub(crate) fn with<R>(&'static self, f: impl FnOnce(&T) -> io::Result<R>) -> io::Result<R> {
        // Acquire: pairs with `open`'s Release, so the value is visible.
        let prev = self.state.fetch_add(ONE, Ordering::Acquire);
        let _leave = Leave(self);
        if prev & CLOSED != 0 {
            return Err(einval("the pagepipe handle is closed"));
        }
        // SAFETY: the slot was open when we counted ourselves, so DROPPED is clear, the value
        // is Some, and no thread drops it before our count is removed (by `Leave`, after `f`).
        let value = unsafe { (*self.value.get()).as_ref() };
        f(value.ok_or_else(|| einval("the pagepipe handle is closed"))?)
    }

    /// Closes the slot; the value is dropped now, or by the last call still using it.
    /// `EINVAL` if it was closed already.
    pub(crate) fn close(&'static self) -> io::Result<()> {
        // AcqRel: Acquire so that if we drop the value we see the calls that used it; Release
        // so our earlier uses happen before whoever drops it.
        let prev = self.state.fetch_or(CLOSED, Ordering::AcqRel);
        if prev & CLOSED != 0 {
            return Err(einval("the pagepipe handle is already closed"));
        }
        self.try_drop();
        Ok(())
    }

    /// Drops the value if the slot is closed, not dropped, and no call is in flight; one thread
    /// wins the state change and drops it.
    fn try_drop(&'static self) {
        // Acquire: the calls that used the value (their Release decrement) happen before the
        // drop.
        if self
            .state
            .compare_exchange(
                CLOSED,
                CLOSED | DROPPED,
                Ordering::Acquire,
                Ordering::Relaxed,
            )
            .is_ok()
        {
            // SAFETY: we set DROPPED on a closed slot with no call in flight: no one else reads
            // or moves the value until `open` reuses the slot, after we put it on the free list.
            let value = unsafe { (*self.value.get()).take() };
            drop(value);
            let mut free = self.pool.free.lock().unwrap_or_else(|e| e.into_inner());
            free.push(self);
        }
    }
}

/// Removes a call's count when it returns (or unwinds), dropping the value if it was the last
/// call on a closed slot.
struct Leave<T: Send + Sync + 'static>(&'static Slot<T>);

impl<T: Send + Sync + 'static> Drop for Leave<T> {
    fn drop(&mut self) {
        // Release: this call's use of the value happens before the drop (try_drop's Acquire).
        let prev = self.0.state.fetch_sub(ONE, Ordering::Release);
        if prev == CLOSED | ONE {
            self.0.try_drop();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::AtomicBool;
    use std::sync::Arc;

    struct Flag(Arc<AtomicBool>);
    impl Drop for Flag {
        fn drop(&mut self) {
            self.0.store(true, Ordering::SeqCst); // SeqCst: test bookkeeping only
        }
    }

    #[test]
    fn a_closed_slot_is_einval_and_reused() {
        static POOL: Pool<Flag> = Pool::new();
        let dropped = Arc::new(AtomicBool::new(false));
        let slot = POOL.open(Flag(dropped.clone()));
        assert!(slot.with(|_| Ok(())).is_ok());
        slot.close().unwrap();
        assert!(dropped.load(Ordering::SeqCst));
        assert_eq!(
            slot.with(|_| Ok(())).unwrap_err().kind(),
            io::ErrorKind::InvalidInput
        );
        assert_eq!(
            slot.close().unwrap_err().kind(),
            io::ErrorKind::InvalidInput
        );
        let again = POOL.open(Flag(Arc::new(AtomicBool::new(false))));
        assert!(std::ptr::eq(slot, again));
        again.close().unwrap();
    }

    #[test]
    fn a_close_during_a_call_drops_after_it() {
        static POOL: Pool<Flag> = Pool::new();
        let dropped = Arc::new(AtomicBool::new(false));
        let slot = POOL.open(Flag(dropped.clone()));
        slot.with(|_| {
            slot.close().unwrap();
            assert!(!dropped.load(Ordering::SeqCst), "dropped under a call");
            Ok(())
        })
        .unwrap();
        assert!(dropped.load(Ordering::SeqCst));
    }
}

//! Handle tables: what a `pp_writer *` or `pp_reader *` names.
//!
//! A handle is not an address. It is a number, `generation << 32 | index << 8 | kind` (on a
//! 64-bit target), cast to the opaque pointer type: the kind byte says which table (write ends
//! or read ends), the index which slot of it, the generation which opening of that slot. A C
//! program may call a function on a handle it (or another thread) already closed, or cast one
//! kind to the other; that must be an error (`EINVAL`, `EBADF`), never a use of freed memory
//! or a call on some other end, and it must leave no trace a `fork(2)` could strand. So:
//!
//! - a slot's memory is never freed: a closed slot goes back to its table's free stack and a
//!   later open reuses it under the next generation; a stale handle names the old generation
//!   and stays an error (unlike a stale descriptor number, which names the new file; the
//!   generation is 32 bits, so only a handle kept across 4 billion reopenings of its slot could
//!   name a later end);
//! - a call counts itself in the slot's `state` with one compare-and-swap that also checks
//!   that the slot is open under the handle's generation: a stale or wrong call changes nothing
//!   anywhere, so a fork at any instant leaves the child no count of it;
//! - close marks the slot closed, and whoever brings the count to zero on a closed slot drops
//!   the value (the close itself when no call is in flight, else the last call to return);
//! - nothing in the table is a lock: the free stack and the segments are atomics, so a child
//!   can never inherit one held.
//!
//! `state`'s layout: bits 0..2 the phase (`FREE`, `OPEN`, `CLOSED`, `BUSY`), bits 2..32 the
//! calls in flight (in units of `ONE`), bits 32..64 the generation. The value is `Some`
//! exactly while the phase is `OPEN` or `CLOSED` (and while the one thread that owns a `FREE`
//! or `BUSY` slot fills or empties it); calls touch it only after counting themselves on an
//! `OPEN` slot of their generation.
//!
//! After `fork(2)` the child inherits the counts of calls other threads had in flight; those
//! never return there. The child handler ([`Pool::after_fork_child`]) sets them to zero, so a
//! close in the child drops the end at once; an end closed in the parent while a call was in
//! flight is dropped by the child's next open. A slot another thread was opening or dropping
//! at the instant of the fork is lost to the child (a few bytes), never waited for.

use crate::errno::einval;
use std::cell::UnsafeCell;
use std::io;
use std::ptr;
use std::sync::atomic::{AtomicBool, AtomicPtr, AtomicU32, AtomicU64, Ordering};

/// Which table a handle belongs to: its low byte.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
#[repr(u8)]
pub(crate) enum Kind {
    /// `pp_writer *`.
    Writer = b'W',
    /// `pp_reader *`.
    Reader = b'R',
}

impl Kind {
    fn of(tag: u8) -> Option<Kind> {
        [Kind::Writer, Kind::Reader]
            .into_iter()
            .find(|k| *k as u8 == tag)
    }
}

/// Bits of a handle that carry the generation (the rest of the state's 32 are compared too
/// where the handle has room: everywhere on 64-bit targets).
#[cfg(target_pointer_width = "64")]
const GEN_BITS: u32 = 32;
#[cfg(not(target_pointer_width = "64"))]
const GEN_BITS: u32 = 8;
const GEN_MASK: u32 = if GEN_BITS == 32 {
    u32::MAX
} else {
    (1 << GEN_BITS) - 1
};
/// Bits of a handle that carry the index: 24 on 64-bit targets (16 Mi handles of each kind).
const INDEX_BITS: u32 = usize::BITS - 8 - GEN_BITS;
/// The most slots a table holds.
const MAX_SLOTS: u32 = 1 << INDEX_BITS;
/// Segment `k` holds `FIRST << k` slots: 64, 128, ..., enough segments for `MAX_SLOTS`.
const FIRST: u32 = 64;
const SEGMENTS: usize = (INDEX_BITS - FIRST.trailing_zeros() + 1) as usize;
const _: () = assert!(FIRST as u64 * ((1u64 << SEGMENTS) - 1) >= MAX_SLOTS as u64);

const FREE: u64 = 0;
const OPEN: u64 = 1;
const CLOSED: u64 = 2;
const BUSY: u64 = 3;
const PHASE: u64 = 3;
const ONE: u64 = 4;
const COUNT: u64 = 0xFFFF_FFFC;

fn phase(s: u64) -> u64 {
    s & PHASE
}
fn count(s: u64) -> u64 {
    (s & COUNT) / ONE
}
fn generation(s: u64) -> u32 {
    (s >> 32) as u32
}
fn word(generation: u32, phase: u64, count: u64) -> u64 {
    debug_assert!(phase <= PHASE && count <= COUNT / ONE);
    ((generation as u64) << 32) | (count * ONE) | phase
}

/// The segment and the position in it of slot `index`.
fn locate(index: u32) -> (usize, usize) {
    let j = index / FIRST + 1;
    let k = (u32::BITS - 1 - j.leading_zeros()) as usize;
    let start = FIRST * ((1 << k) - 1);
    (k, (index - start) as usize)
}

fn segment_len(k: usize) -> usize {
    (FIRST as usize) << k
}

/// One handle's slot: its state word, its link in the free stack and the value.
struct Slot<T> {
    state: AtomicU64,
    /// The next free slot's index + 1 (0: none), while this one is on the free stack.
    next: AtomicU32,
    value: UnsafeCell<Option<T>>,
}

impl<T> Slot<T> {
    fn new() -> Slot<T> {
        Slot {
            state: AtomicU64::new(word(0, FREE, 0)),
            next: AtomicU32::new(0),
            value: UnsafeCell::new(None),
        }
    }
}

/// The table of one handle kind (see the module docs).
pub(crate) struct Pool<T: 'static> {
    kind: Kind,
    /// Segment `k` (`segment_len(k)` slots), null until a slot in it is first needed; never
    /// freed once published.
    segments: [AtomicPtr<Slot<T>>; SEGMENTS],
    /// Indexes handed out so far (every slot below was made or is being made).
    len: AtomicU32,
    /// The free stack: `tag << 32 | (top index + 1)`, 0 in the low half when empty; the tag
    /// changes with every push and pop so a stale compare-and-swap fails (no ABA).
    free: AtomicU64,
    /// Set in a forked child that holds closed slots left for it to drop.
    reap: AtomicBool,
}

impl<T: Send + Sync + 'static> Pool<T> {
    pub(crate) const fn new(kind: Kind) -> Pool<T> {
        Pool {
            kind,
            segments: [const { AtomicPtr::new(ptr::null_mut()) }; SEGMENTS],
            len: AtomicU32::new(0),
            free: AtomicU64::new(0),
            reap: AtomicBool::new(false),
        }
    }

    /// A new open handle holding `value`: a slot from the free stack (under its next
    /// generation) or a new one. `EMFILE` when the table is full.
    pub(crate) fn open(&'static self, value: T) -> io::Result<usize> {
        if self.reap.swap(false, Ordering::Acquire) {
            self.reap_closed();
        }
        let index = match self.pop() {
            Some(index) => index,
            None => self.grow()?,
        };
        let slot = self.slot(index).expect("a popped or made slot exists");
        let s = slot.state.load(Ordering::Relaxed);
        debug_assert_eq!(phase(s), FREE);
        let mut gen = generation(s).wrapping_add(1);
        if gen & GEN_MASK == 0 {
            gen = gen.wrapping_add(1);
        }
        // SAFETY: the slot is FREE and came off the free stack (or was just made), so this
        // thread alone owns its value: calls only read it after counting themselves on an OPEN
        // slot, and it is not OPEN until the store below.
        unsafe { *slot.value.get() = Some(value) };
        // Release: pairs with the Acquire compare-and-swap in `with` and `close`: the value
        // stored above is visible to every call that sees the slot open.
        slot.state.store(word(gen, OPEN, 0), Ordering::Release);
        Ok(self.encode(index, gen))
    }

    /// Runs `f` on the value of handle `h`: `EINVAL` for a null, closed or made-up handle,
    /// `EBADF` for one of the other kind. The value stays alive until `f` returns even if
    /// another thread closes the handle meanwhile.
    pub(crate) fn with<R>(
        &'static self,
        h: usize,
        f: impl FnOnce(&T) -> io::Result<R>,
    ) -> io::Result<R> {
        let (index, gen, slot) = self.find(h)?;
        let mut s = slot.state.load(Ordering::Relaxed);
        loop {
            if phase(s) != OPEN || generation(s) & GEN_MASK != gen {
                return Err(closed());
            }
            if count(s) == COUNT / ONE {
                return Err(io::Error::from_raw_os_error(libc::EAGAIN));
            }
            // Acquire: pairs with `open`'s Release store, so the value is visible.
            match slot
                .state
                .compare_exchange_weak(s, s + ONE, Ordering::Acquire, Ordering::Relaxed)
            {
                Ok(_) => break,
                Err(now) => s = now,
            }
        }
        let _leave = Leave {
            pool: self,
            index,
            gen,
            slot,
        };
        // SAFETY: we counted ourselves on an OPEN slot of this generation: the value is Some
        // and nobody takes it before our count leaves (in `Leave`, after `f`).
        let value = unsafe { (*slot.value.get()).as_ref() };
        f(value.ok_or_else(closed)?)
    }

    /// Closes handle `h`; the value is dropped now, or by the last call still using it.
    /// `EINVAL` for a null, already closed or made-up handle, `EBADF` for one of the other kind.
    pub(crate) fn close(&'static self, h: usize) -> io::Result<()> {
        let (index, gen, slot) = self.find(h)?;
        let mut s = slot.state.load(Ordering::Relaxed);
        loop {
            if phase(s) != OPEN || generation(s) & GEN_MASK != gen {
                return Err(einval("the pagepipe handle is already closed"));
            }
            // AcqRel: Acquire so that if we drop the value we see the calls that used it;
            // Release so our earlier uses happen before whoever drops it.
            match slot.state.compare_exchange_weak(
                s,
                s & !PHASE | CLOSED,
                Ordering::AcqRel,
                Ordering::Relaxed,
            ) {
                Ok(_) => break,
                Err(now) => s = now,
            }
        }
        if count(s) == 0 {
            self.try_drop(index, slot, generation(s));
        }
        Ok(())
    }

    /// In a forked child (the only thread there): the calls counted in flight belonged to
    /// threads the child does not have, so their counts go. An open slot is then closed and
    /// dropped as usual; a closed one is dropped by the child's next `open`. Only atomic loads
    /// and stores: safe in a `pthread_atfork` child handler.
    pub(crate) fn after_fork_child(&self) {
        for k in 0..SEGMENTS {
            let seg = self.segments[k].load(Ordering::Acquire);
            if seg.is_null() {
                continue;
            }
            for i in 0..segment_len(k) {
                // SAFETY: a published segment holds `segment_len(k)` slots and is never freed.
                let slot = unsafe { &*seg.add(i) };
                let s = slot.state.load(Ordering::Relaxed);
                let p = phase(s);
                if (p == OPEN || p == CLOSED) && count(s) != 0 {
                    slot.state
                        .store(word(generation(s), p, 0), Ordering::Relaxed);
                }
                // Every closed slot, counted or not: a fork between a close's (or a last
                // call's) state change and its drop leaves one at count 0 that nothing else
                // would ever drop.
                if p == CLOSED {
                    self.reap.store(true, Ordering::Release);
                }
            }
        }
    }

    /// Drops every closed slot no call uses (left so by a fork; see `after_fork_child`).
    fn reap_closed(&'static self) {
        let len = self.len.load(Ordering::Relaxed).min(MAX_SLOTS);
        for index in 0..len {
            if let Some(slot) = self.slot(index) {
                let s = slot.state.load(Ordering::Relaxed);
                if phase(s) == CLOSED && count(s) == 0 {
                    self.try_drop(index, slot, generation(s));
                }
            }
        }
    }

    /// Drops the value if slot `index` is closed under `gen` with no call in flight; one
    /// thread wins the state change and drops it, then frees the slot.
    fn try_drop(&'static self, index: u32, slot: &'static Slot<T>, gen: u32) {
        // Acquire: the calls that used the value (their Release decrement) happen before the
        // drop.
        if slot
            .state
            .compare_exchange(
                word(gen, CLOSED, 0),
                word(gen, BUSY, 0),
                Ordering::Acquire,
                Ordering::Relaxed,
            )
            .is_ok()
        {
            // SAFETY: we moved a closed slot with no call in flight to BUSY: no call counts
            // itself on it (they need OPEN) and no one else drops it (they need CLOSED), so this
            // thread alone owns the value until it pushes the slot on the free stack.
            let value = unsafe { (*slot.value.get()).take() };
            drop(value);
            slot.state.store(word(gen, FREE, 0), Ordering::Relaxed);
            self.push(index);
        }
    }

    /// The handle for slot `index` under generation `gen`.
    fn encode(&self, index: u32, gen: u32) -> usize {
        debug_assert!(index < MAX_SLOTS);
        ((gen & GEN_MASK) as usize) << (usize::BITS - GEN_BITS)
            | (index as usize) << 8
            | self.kind as usize
    }

    /// Handle `h`'s index, generation (masked) and slot: `EINVAL` for null or a number that
    /// names no slot, `EBADF` for a handle of the other kind.
    fn find(&self, h: usize) -> io::Result<(u32, u32, &'static Slot<T>)> {
        if h == 0 {
            return Err(einval("null pagepipe handle"));
        }
        match Kind::of(h as u8) {
            Some(k) if k == self.kind => {}
            // The other kind's handle (a cast): as write(2) on a descriptor open for reading.
            Some(_) => return Err(io::Error::from_raw_os_error(libc::EBADF)),
            None => return Err(einval("not a pagepipe handle")),
        }
        let index = ((h >> 8) & (MAX_SLOTS as usize - 1)) as u32;
        let gen = (h >> (usize::BITS - GEN_BITS)) as u32 & GEN_MASK;
        let slot = self.slot(index).ok_or_else(closed)?;
        Ok((index, gen, slot))
    }

    /// Slot `index`, if its segment exists.
    fn slot(&self, index: u32) -> Option<&'static Slot<T>> {
        if index >= MAX_SLOTS {
            return None;
        }
        let (k, i) = locate(index);
        // Acquire: pairs with `grow`'s publishing compare-and-swap: the slots are initialized.
        let seg = self.segments[k].load(Ordering::Acquire);
        if seg.is_null() {
            return None;
        }
        // SAFETY: a published segment holds `segment_len(k)` slots (`i` is below it, by
        // `locate`) and is never freed.
        Some(unsafe { &*seg.add(i) })
    }

    /// A new slot's index, making its segment if needed. `EMFILE` when the table is full.
    fn grow(&self) -> io::Result<u32> {
        let mut len = self.len.load(Ordering::Relaxed);
        loop {
            if len >= MAX_SLOTS {
                return Err(io::Error::from_raw_os_error(libc::EMFILE));
            }
            match self
                .len
                .compare_exchange_weak(len, len + 1, Ordering::Relaxed, Ordering::Relaxed)
            {
                Ok(_) => break,
                Err(now) => len = now,
            }
        }
        let (k, _) = locate(len);
        if self.segments[k].load(Ordering::Acquire).is_null() {
            let made: Box<[Slot<T>]> = (0..segment_len(k)).map(|_| Slot::new()).collect();
            let made = Box::into_raw(made).cast::<Slot<T>>();
            // AcqRel: Release publishes the initialized slots (pairs with `slot`'s Acquire);
            // Acquire on failure sees the winner's.
            if self.segments[k]
                .compare_exchange(ptr::null_mut(), made, Ordering::AcqRel, Ordering::Acquire)
                .is_err()
            {
                // SAFETY: `made` is the Box made above (same length), never published.
                drop(unsafe { Box::from_raw(ptr::slice_from_raw_parts_mut(made, segment_len(k))) });
            }
        }
        Ok(len)
    }

    /// Takes the top of the free stack.
    fn pop(&self) -> Option<u32> {
        // Acquire: pairs with `push`'s Release: the slot's `next` and emptied value are seen.
        let mut head = self.free.load(Ordering::Acquire);
        loop {
            let top = head as u32;
            if top == 0 {
                return None;
            }
            let next = self.slot(top - 1)?.next.load(Ordering::Relaxed);
            let tag = (head >> 32).wrapping_add(1);
            match self.free.compare_exchange_weak(
                head,
                tag << 32 | next as u64,
                Ordering::Acquire,
                Ordering::Acquire,
            ) {
                Ok(_) => return Some(top - 1),
                Err(now) => head = now,
            }
        }
    }

    /// Puts slot `index` (FREE) on the free stack.
    fn push(&self, index: u32) {
        let slot = self.slot(index).expect("a dropped slot exists");
        let mut head = self.free.load(Ordering::Relaxed);
        loop {
            slot.next.store(head as u32, Ordering::Relaxed);
            let tag = (head >> 32).wrapping_add(1);
            // Release: the slot's `next`, its emptied value and FREE state happen before the
            // pop that takes it (pairs with `pop`'s Acquire).
            match self.free.compare_exchange_weak(
                head,
                tag << 32 | (index as u64 + 1),
                Ordering::Release,
                Ordering::Relaxed,
            ) {
                Ok(_) => return,
                Err(now) => head = now,
            }
        }
    }
}

/// `EINVAL` for a handle that is closed (or was never opened).
fn closed() -> io::Error {
    einval("the pagepipe handle is closed")
}

/// Removes a call's count when it returns (or unwinds), dropping the value if it was the last
/// call on a closed slot.
struct Leave<T: Send + Sync + 'static> {
    pool: &'static Pool<T>,
    index: u32,
    /// The slot's generation when the call counted itself (masked as handles carry it).
    gen: u32,
    slot: &'static Slot<T>,
}

impl<T: Send + Sync + 'static> Drop for Leave<T> {
    fn drop(&mut self) {
        let mut s = self.slot.state.load(Ordering::Relaxed);
        loop {
            if count(s) == 0 || generation(s) & GEN_MASK != self.gen {
                // A fork from a signal handler that interrupted this call: the child's fork
                // handler already took the counts of the calls in flight, ours with them (and
                // the slot may since hold another handle's value and counts).
                return;
            }
            // Release: this call's use of the value happens before the drop (try_drop's
            // Acquire).
            match self.slot.state.compare_exchange_weak(
                s,
                s - ONE,
                Ordering::Release,
                Ordering::Relaxed,
            ) {
                Ok(_) => break,
                Err(now) => s = now,
            }
        }
        if phase(s) == CLOSED && count(s) == 1 {
            self.pool.try_drop(self.index, self.slot, generation(s));
        }
    }
}

/// Registers `child` to run in every child `fork(2)` makes, once per process.
pub(crate) fn install_fork_handler(child: unsafe extern "C" fn()) {
    // A `Once`: a second thread that opens a handle meanwhile waits until the handler is
    // registered, so no fork after any handle exists can miss it.
    static INSTALLED: std::sync::Once = std::sync::Once::new();
    INSTALLED.call_once(|| {
        // SAFETY: pthread_atfork(3) only records the function; `child` runs in the child's
        // only thread and does atomic loads and stores. A failure (ENOMEM) leaves a child the
        // counts it inherits: its closes of those ends then wait for its exit.
        unsafe { libc::pthread_atfork(None, None, Some(child)) };
    });
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::AtomicBool;
    use std::sync::{Arc, Barrier};

    struct Flag(Arc<AtomicBool>);
    impl Drop for Flag {
        fn drop(&mut self) {
            self.0.store(true, Ordering::SeqCst); // SeqCst: test bookkeeping only
        }
    }

    fn flag() -> (Flag, Arc<AtomicBool>) {
        let dropped = Arc::new(AtomicBool::new(false));
        (Flag(dropped.clone()), dropped)
    }

    fn kind_of(e: io::Error) -> Option<i32> {
        crate::errno::errno_of(&e).into()
    }

    #[test]
    fn a_closed_handle_is_einval_even_after_its_slot_is_reused() {
        static POOL: Pool<Flag> = Pool::new(Kind::Writer);
        let (value, dropped) = flag();
        let h = POOL.open(value).unwrap();
        assert!(POOL.with(h, |_| Ok(())).is_ok());
        POOL.close(h).unwrap();
        assert!(dropped.load(Ordering::SeqCst));
        assert_eq!(
            kind_of(POOL.with(h, |_| Ok(())).unwrap_err()),
            Some(libc::EINVAL)
        );
        assert_eq!(kind_of(POOL.close(h).unwrap_err()), Some(libc::EINVAL));
        let again = POOL.open(flag().0).unwrap();
        assert_ne!(again, h, "a new generation");
        assert_eq!(
            again & 0xFFFF_FF00 & !(usize::MAX << 32),
            h & 0xFFFF_FF00 & !(usize::MAX << 32),
            "the same slot"
        );
        assert_eq!(
            kind_of(POOL.with(h, |_| Ok(())).unwrap_err()),
            Some(libc::EINVAL)
        );
        assert_eq!(kind_of(POOL.close(h).unwrap_err()), Some(libc::EINVAL));
        assert!(POOL.with(again, |_| Ok(())).is_ok());
        POOL.close(again).unwrap();
    }

    #[test]
    fn a_call_whose_count_a_fork_handler_took_leaves_the_slot_whole() {
        // A fork from a signal handler that interrupted a call: in the child, the handler
        // (here called by hand) takes the call's count; the call's return must not take it
        // again (a decrement below zero would borrow from the phase and generation bits).
        static POOL: Pool<Flag> = Pool::new(Kind::Writer);
        let (value, dropped) = flag();
        let h = POOL.open(value).unwrap();
        POOL.with(h, |_| {
            POOL.after_fork_child();
            Ok(())
        })
        .unwrap();
        assert!(POOL.with(h, |_| Ok(())).is_ok(), "still open, count whole");
        POOL.close(h).unwrap();
        assert!(dropped.load(Ordering::SeqCst));
        assert_eq!(kind_of(POOL.close(h).unwrap_err()), Some(libc::EINVAL));
    }

    #[test]
    fn a_close_during_a_call_drops_after_it() {
        static POOL: Pool<Flag> = Pool::new(Kind::Writer);
        let (value, dropped) = flag();
        let h = POOL.open(value).unwrap();
        POOL.with(h, |_| {
            POOL.close(h).unwrap();
            assert!(!dropped.load(Ordering::SeqCst), "dropped under a call");
            assert!(POOL.with(h, |_| Ok(())).is_err(), "closed for new calls");
            Ok(())
        })
        .unwrap();
        assert!(dropped.load(Ordering::SeqCst));
    }

    #[test]
    fn the_other_kind_is_ebadf_and_made_up_numbers_einval() {
        static WRITERS: Pool<u32> = Pool::new(Kind::Writer);
        static READERS: Pool<u32> = Pool::new(Kind::Reader);
        let w = WRITERS.open(1).unwrap();
        let r = READERS.open(2).unwrap();
        assert_eq!(
            kind_of(WRITERS.with(r, |_| Ok(())).unwrap_err()),
            Some(libc::EBADF)
        );
        assert_eq!(kind_of(READERS.close(w).unwrap_err()), Some(libc::EBADF));
        for made_up in [0, 1, 0x1000, usize::MAX, w + (1 << 8), w ^ (1 << 40)] {
            let e = WRITERS.with(made_up, |_| Ok(())).unwrap_err();
            assert_eq!(kind_of(e), Some(libc::EINVAL), "{made_up:#x}");
        }
        assert_eq!(WRITERS.with(w, |v| Ok(*v)).unwrap(), 1);
        assert_eq!(READERS.with(r, |v| Ok(*v)).unwrap(), 2);
        WRITERS.close(w).unwrap();
        READERS.close(r).unwrap();
    }

    #[test]
    fn closed_slots_are_reused_and_many_handles_span_segments() {
        static POOL: Pool<usize> = Pool::new(Kind::Reader);
        let handles: Vec<usize> = (0..1000).map(|i| POOL.open(i).unwrap()).collect();
        for (i, &h) in handles.iter().enumerate() {
            assert_eq!(POOL.with(h, |v| Ok(*v)).unwrap(), i);
        }
        for &h in &handles {
            POOL.close(h).unwrap();
        }
        let again: Vec<usize> = (0..1000).map(|i| POOL.open(i).unwrap()).collect();
        assert_eq!(POOL.len.load(Ordering::Relaxed), 1000, "every slot reused");
        for (&h, &old) in again.iter().zip(&handles) {
            assert!(POOL.with(old, |_| Ok(())).is_err());
            POOL.close(h).unwrap();
        }
    }

    #[test]
    fn locate_covers_every_index_once() {
        let mut expected = (0, 0);
        for index in 0..FIRST * 15 {
            assert_eq!(locate(index), expected, "{index}");
            expected.1 += 1;
            if expected.1 == segment_len(expected.0) {
                expected = (expected.0 + 1, 0);
            }
        }
        let (k, i) = locate(MAX_SLOTS - 1);
        assert_eq!((k, i), (SEGMENTS - 1, i));
        assert!(i < segment_len(k));
    }

    /// A forked child closes an end whose call was in flight in another thread of its
    /// parent: the end is dropped at once in the child, not left to its exit.
    #[test]
    fn a_forked_child_forgets_the_calls_in_flight() {
        static POOL: Pool<Flag> = Pool::new(Kind::Writer);
        extern "C" fn child() {
            POOL.after_fork_child();
        }
        let (value, dropped) = flag();
        let h = POOL.open(value).unwrap();
        let inside = Arc::new(Barrier::new(2));
        let leave = Arc::new(Barrier::new(2));
        let caller = {
            let (inside, leave) = (inside.clone(), leave.clone());
            std::thread::spawn(move || {
                POOL.with(h, |_| {
                    inside.wait();
                    leave.wait();
                    Ok(())
                })
            })
        };
        inside.wait();
        // SAFETY: fork(2); the child makes only the calls below (atomics, no allocation but
        // the drop of a flag) and leaves with _exit.
        let pid = unsafe { libc::fork() };
        assert!(pid >= 0);
        if pid == 0 {
            child();
            let ok = POOL.close(h).is_ok() && dropped.load(Ordering::SeqCst);
            // SAFETY: _exit(2) ends the child without running the parent's destructors.
            unsafe { libc::_exit(if ok { 0 } else { 1 }) };
        }
        let mut status = 0;
        // SAFETY: waitpid(2) on our own child, with a valid status pointer.
        assert_eq!(unsafe { libc::waitpid(pid, &mut status, 0) }, pid);
        assert!(
            libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0,
            "{status:#x}"
        );
        assert!(
            !dropped.load(Ordering::SeqCst),
            "the parent's call is still in flight"
        );
        leave.wait();
        caller.join().unwrap().unwrap();
        POOL.close(h).unwrap();
        assert!(dropped.load(Ordering::SeqCst));
    }
}

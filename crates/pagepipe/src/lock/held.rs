//! Which side locks each thread of this process holds, or is taking: what tells a word that
//! names one of our threads because it holds the lock from one a peer wrote (nobody holds it).
//!
//! Each thread claims a slot in a static table and writes only its own slot: the locks it holds
//! or is taking (an entry written before the CAS that may take it, published by the CAS's
//! Release, and cleared before the release or when the taking fails). A
//! taker that finds another of our threads named in a word reads that thread's slot
//! (`involved`, slow path only). A thread that found no free slot makes every such
//! question answer "involved" (cannot tell: wait, never take over).

#[cfg(not(loom))]
mod imp {
    use std::sync::atomic::{AtomicU32, AtomicU64, AtomicUsize, Ordering};

    /// Locks one thread can hold at once (both sides and the readiness lock at most).
    const HELD: usize = 8;
    /// Threads with a slot at once.
    const THREADS: usize = 1024;

    /// Aligned to a pair of cache lines: threads write their own slots on every lock and
    /// unlock, and must not share a line.
    #[repr(align(128))]
    struct Slot {
        /// The owning thread's id; 0: free.
        tid: AtomicU32,
        /// Locks held or being taken that found no free entry.
        overflow: AtomicU32,
        /// Locks held, or being taken (written before the CAS that may take them).
        held: [AtomicU64; HELD],
    }

    impl Slot {
        const fn new() -> Slot {
            Slot {
                tid: AtomicU32::new(0),
                overflow: AtomicU32::new(0),
                held: [const { AtomicU64::new(0) }; HELD],
            }
        }

        fn clear(&self) {
            self.overflow.store(0, Ordering::Relaxed);
            for h in &self.held {
                h.store(0, Ordering::Relaxed);
            }
        }
    }

    static SLOTS: [Slot; THREADS] = [const { Slot::new() }; THREADS];
    /// Live threads that found no free slot.
    static UNSLOTTED: AtomicUsize = AtomicUsize::new(0);

    /// A thread's claim on its slot; frees it when the thread exits.
    struct Claim(Option<&'static Slot>);

    impl Drop for Claim {
        fn drop(&mut self) {
            MINE.with(|m| m.set(None));
            match self.0 {
                Some(slot) => {
                    slot.clear();
                    // Release: the cleared slot is complete before another thread claims it.
                    slot.tid.store(0, Ordering::Release);
                }
                None => {
                    UNSLOTTED.fetch_sub(1, Ordering::Relaxed);
                }
            }
        }
    }

    /// What a thread found when it asked for a slot.
    #[derive(Clone, Copy)]
    enum Mine {
        Slot(&'static Slot),
        None,
    }

    thread_local! {
        /// This thread's slot, once asked (a plain cell: read on every lock and unlock).
        static MINE: std::cell::Cell<Option<Mine>> = const { std::cell::Cell::new(None) };
        /// Frees the slot when the thread exits (touched only when the slot is claimed).
        static CLAIM: std::cell::RefCell<Option<Claim>> = const { std::cell::RefCell::new(None) };
    }

    #[cold]
    fn claim() -> Mine {
        let tid = crate::sys::thread::gettid();
        let mut found = Mine::None;
        // A slot already carrying our id was left by an earlier thread with this id that could
        // not free it (it took a lock while its thread-locals were being torn down): stale.
        for slot in &SLOTS {
            if slot.tid.load(Ordering::Relaxed) == tid {
                slot.clear();
                found = Mine::Slot(slot);
                break;
            }
        }
        for slot in SLOTS.iter().filter(|_| matches!(found, Mine::None)) {
            // Acquire: pairs with the Release free in `Claim::drop`.
            if slot.tid.load(Ordering::Relaxed) == 0
                && slot
                    .tid
                    .compare_exchange(0, tid, Ordering::Acquire, Ordering::Relaxed)
                    .is_ok()
            {
                slot.clear();
                found = Mine::Slot(slot);
                break;
            }
        }
        let claim = match found {
            Mine::Slot(s) => Claim(Some(s)),
            Mine::None => {
                UNSLOTTED.fetch_add(1, Ordering::Relaxed);
                Claim(None)
            }
        };
        // A thread being torn down cannot register a destructor: then keep nothing (the slot
        // leaks, which only costs a slot).
        let _ = CLAIM.try_with(|c| *c.borrow_mut() = Some(claim));
        MINE.with(|m| m.set(Some(found)));
        found
    }

    /// Runs `f` on this thread's slot (`None`: it has none).
    #[inline]
    fn with_mine<R>(f: impl FnOnce(Option<&'static Slot>) -> R) -> R {
        let mine = MINE.with(|m| m.get()).unwrap_or_else(claim);
        f(match mine {
            Mine::Slot(s) => Some(s),
            Mine::None => None,
        })
    }

    /// Before the CAS that may take lock `id`: from here until [`remove`], this thread holds
    /// or takes it (published by the CAS's Release).
    #[inline]
    pub(crate) fn intend(id: u64) {
        with_mine(|s| {
            let Some(s) = s else { return };
            match s.held.iter().find(|h| h.load(Ordering::Relaxed) == 0) {
                Some(h) => h.store(id, Ordering::Relaxed),
                None => {
                    s.overflow.fetch_add(1, Ordering::Relaxed);
                }
            }
        });
    }

    /// Lock `id` is about to be released, or was not taken.
    #[inline]
    pub(crate) fn remove(id: u64) {
        with_mine(|s| {
            let Some(s) = s else { return };
            match s.held.iter().find(|h| h.load(Ordering::Relaxed) == id) {
                // Release: a taker that reads this 0 (`involved`) also sees the release swap
                // made before it (see `SideLock::take_over`).
                Some(h) => h.store(0, Ordering::Release),
                None => {
                    let _ = s
                        .overflow
                        .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |o| o.checked_sub(1));
                }
            }
        });
    }

    /// During an attempt to take lock `id`: whether this thread held it already, besides
    /// the attempt's own entry (true when it cannot tell).
    pub(crate) fn held_before(id: u64) -> bool {
        with_mine(|s| match s {
            Some(s) => {
                s.held
                    .iter()
                    .filter(|h| h.load(Ordering::Relaxed) == id)
                    .count()
                    >= 2
                    || s.overflow.load(Ordering::Relaxed) > 0
            }
            None => true,
        })
    }

    /// Whether thread `tid` of this process holds or is taking lock `id` (true when it cannot
    /// tell). The caller loaded a word naming `tid` and fenced (Acquire) since.
    pub(crate) fn involved(tid: u32, id: u64) -> bool {
        // Every slot with that id (a stale one may precede the live one), and the threads with
        // no slot at all.
        SLOTS
            .iter()
            .filter(|slot| slot.tid.load(Ordering::Relaxed) == tid)
            .any(|slot| {
                slot.held.iter().any(|h| h.load(Ordering::Relaxed) == id)
                    || slot.overflow.load(Ordering::Relaxed) > 0
            })
            || UNSLOTTED.load(Ordering::Relaxed) > 0
    }

    /// In a forked child, on its only thread: the other threads' slots name threads of the
    /// parent; every slot is freed and this thread claims anew.
    pub(crate) fn note_fork() {
        for slot in &SLOTS {
            slot.clear();
            slot.tid.store(0, Ordering::Relaxed);
        }
        UNSLOTTED.store(0, Ordering::Relaxed);
        MINE.with(|m| m.set(None));
        CLAIM.with(|c| {
            if let Some(c) = c.borrow_mut().take() {
                std::mem::forget(c); // its slot is freed above; its drop would count wrong
            }
        });
    }
}

#[cfg(not(loom))]
pub(super) use imp::*;

/// Under loom, no peer writes identities: a word naming the caller is always its own hold, and
/// a word naming another thread is a live holder.
#[cfg(loom)]
mod imp {
    pub(crate) fn intend(_id: u64) {}
    pub(crate) fn remove(_id: u64) {}
    pub(crate) fn held_before(_id: u64) -> bool {
        true
    }
    pub(crate) fn involved(_tid: u32, _id: u64) -> bool {
        true
    }
}

#[cfg(loom)]
pub(super) use imp::*;

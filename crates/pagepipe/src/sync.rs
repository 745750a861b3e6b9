//! Atomics shim: std normally, loom under `cfg(loom)`; plus the futex word both sides sleep on.

#[cfg(loom)]
pub(crate) use loom::sync::atomic::{
    fence, AtomicBool, AtomicPtr, AtomicU32, AtomicU64, AtomicUsize,
};
#[cfg(loom)]
pub(crate) use loom::sync::{Arc, Mutex};
#[cfg(not(loom))]
pub(crate) use std::sync::atomic::{
    fence, AtomicBool, AtomicPtr, AtomicU32, AtomicU64, AtomicUsize,
};
#[cfg(not(loom))]
pub(crate) use std::sync::{Arc, Mutex};

pub(crate) use std::sync::atomic::Ordering;

/// Gives up the CPU in a spin loop (loom: lets the model schedule another thread).
pub(crate) fn yield_now() {
    #[cfg(loom)]
    loom::thread::yield_now();
    #[cfg(not(loom))]
    std::thread::yield_now();
}

/// Atomics for words that no concurrency protocol depends on (configuration written before
/// use or with both sides held, advisory counters, process-local caches): std's even under
/// loom, so models explore the protocol words (indices, slot states, futexes, locks, closes)
/// and not these.
pub(crate) use std::sync::atomic::{
    AtomicBool as ColdBool, AtomicU32 as ColdU32, AtomicU64 as ColdU64,
};
use std::time::Duration;

/// A sequence word that sleepers wait on and wakers bump: the futex of one side of a pipe, and
/// the count of its sleepers.
///
/// It lives in a pipe's shared region, so waits and wakes use shared futexes (keyed by the
/// memory file, not the address): a waker in one process wakes a sleeper in another.
///
/// Protocol: a sleeper reads the word, registers itself (in the ring index word, see
/// `wait::sleep_until`), rechecks its condition and only then calls [`Futex::sleep`] with the
/// value it read; a waker changes the condition, then calls [`Futex::wake_one`] or
/// [`Futex::wake_all`], which bump the word before waking. A wake that races the sleeper's
/// recheck changes the word, so the kernel's compare in FUTEX_WAIT fails and the sleeper goes
/// round again: no lost wakeup.
///
/// `sleepers` counts the threads between their increment before FUTEX_WAIT and their decrement
/// after it. A sleeper that a wake of one picked (the kernel dequeued it under its hash-bucket
/// lock, after every sleeper still queued had counted itself: the count of those is in the
/// value its decrement reads) learns from it whether others may still be asleep (see
/// `wait::sleep_until`). A hint only: a hostile peer may write any value, which costs wake-ups
/// or leaves a sleeper to its tick, never memory safety.
#[cfg_attr(not(loom), repr(C))]
pub(crate) struct Futex {
    word: AtomicU32,
    sleepers: AtomicU32,
    /// The last sleeper's CPU as [`cpu_tag`] writes it. A hint.
    sleeper_cpu: ColdU32,
    #[cfg(loom)]
    lock: loom::sync::Mutex<()>,
    #[cfg(loom)]
    cv: loom::sync::Condvar,
}

/// How [`Futex::sleep`] ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Slept {
    /// A wake picked this sleeper; `others` other sleepers were counted as it woke.
    Woken { others: u32 },
    /// The timeout expired.
    TimedOut,
    /// The word had moved (no sleep), a signal, or an error.
    Other,
}

impl Futex {
    #[cfg(loom)]
    pub(crate) fn new() -> Futex {
        Futex {
            word: AtomicU32::new(0),
            sleepers: AtomicU32::new(0),
            sleeper_cpu: ColdU32::new(0),
            lock: loom::sync::Mutex::new(()),
            cv: loom::sync::Condvar::new(),
        }
    }

    /// The current sequence value, to pass to [`Futex::sleep`].
    pub(crate) fn seq(&self) -> u32 {
        // Acquire: pairs with the Release bump in `wake_one`/`wake_all`, so a sleeper that reads
        // the new value also sees the condition change that preceded the bump.
        self.word.load(Ordering::Acquire)
    }

    /// Sleeps, counted, until the word moves away from `seq` (or spuriously, or after
    /// `timeout`).
    pub(crate) fn sleep(&self, seq: u32, timeout: Option<Duration>) -> Slept {
        // Relaxed (both): the kernel's hash-bucket lock orders a queued sleeper's increment
        // before the wake that dequeues another, and that before the woken one's decrement; an
        // RMW reads the latest value in the word's order.
        self.sleepers.fetch_add(1, Ordering::Relaxed);
        #[cfg(not(loom))]
        self.sleeper_cpu.store(cpu_tag(), Ordering::Relaxed);
        #[cfg(not(loom))]
        let woken = match crate::sys::futex::wait_shared_end(self.word.as_ptr(), seq, timeout) {
            crate::sys::futex::WaitEnd::Woken => true,
            crate::sys::futex::WaitEnd::TimedOut => false,
            crate::sys::futex::WaitEnd::Other => {
                self.sleepers.fetch_sub(1, Ordering::Relaxed);
                return Slept::Other;
            }
        };
        #[cfg(loom)]
        let woken = {
            let _ = timeout;
            let guard = self.lock.lock().unwrap();
            // Acquire: pairs with the Release bump in `wake_one`/`wake_all` (as in `seq`).
            if self.word.load(Ordering::Acquire) != seq {
                drop(guard);
                self.sleepers.fetch_sub(1, Ordering::Relaxed);
                return Slept::Other;
            }
            drop(self.cv.wait(guard).unwrap());
            true
        };
        let before = self.sleepers.fetch_sub(1, Ordering::Relaxed);
        if woken {
            Slept::Woken {
                others: before.saturating_sub(1),
            }
        } else {
            Slept::TimedOut
        }
    }

    /// Whether the last sleeper went to sleep on this thread's CPU (`None`: not known). A hint
    /// (a peer may write any value there): it decides when to wake or whether to spin, never
    /// whether a sleeper is woken.
    pub(crate) fn sleeper_here(&self) -> Option<bool> {
        // Relaxed: a hint (see above).
        let cpu = self.sleeper_cpu.load(Ordering::Relaxed);
        let here = cpu_tag();
        (cpu != 0 && here != 0).then_some(cpu == here)
    }

    /// Bumps the sequence and wakes one sleeper (the kernel picks it), if any.
    pub(crate) fn wake_one(&self) {
        // Release: pairs with the Acquire load in `seq`.
        self.word.fetch_add(1, Ordering::Release);
        #[cfg(not(loom))]
        crate::sys::futex::wake_one_shared(self.word.as_ptr());
        #[cfg(loom)]
        {
            let _guard = self.lock.lock().unwrap();
            self.cv.notify_one();
        }
    }

    /// Bumps the sequence and wakes every sleeper.
    pub(crate) fn wake_all(&self) {
        // Release: pairs with the Acquire load in `seq`.
        self.word.fetch_add(1, Ordering::Release);
        #[cfg(not(loom))]
        crate::sys::futex::wake_shared(self.word.as_ptr());
        #[cfg(loom)]
        {
            let _guard = self.lock.lock().unwrap();
            self.cv.notify_all();
        }
    }
}

/// This thread's CPU as [`Futex`] records its sleepers': the CPU number plus one, 0 if unknown.
fn cpu_tag() -> u32 {
    crate::sys::thread::current_cpu().map_or(0, |c| c.wrapping_add(1))
}

/// Pads and aligns `T` to its own pair of cache lines so the writer's and the reader's hot words
/// never share one (adjacent-line prefetch makes 128 the unit on x86).
#[repr(C, align(128))]
#[derive(Default)]
pub(crate) struct Padded<T>(pub(crate) T);

impl<T> std::ops::Deref for Padded<T> {
    type Target = T;
    fn deref(&self) -> &T {
        &self.0
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    #[test]
    fn the_sleepers_cpu_is_compared_with_ours() {
        // SAFETY: a Futex is atomics only, and all-zero atomics are valid (as in the zeroed
        // region it lives in).
        let f: Futex = unsafe { std::mem::zeroed() };
        assert_eq!(f.sleeper_here(), None, "nobody slept yet");
        f.sleeper_cpu.store(u32::MAX, Ordering::Relaxed); // a peer's nonsense
        assert_eq!(f.sleeper_here(), Some(false));
        // This thread may move between the two reads of its CPU: try until it stays put.
        let here = (0..1000).any(|_| {
            let Some(cpu) = crate::sys::thread::current_cpu() else {
                return true; // cannot be told here: nothing to check
            };
            f.sleeper_cpu.store(cpu + 1, Ordering::Relaxed);
            f.sleeper_here() == Some(true)
        });
        assert!(here);
    }
}

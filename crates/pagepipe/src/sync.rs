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

/// A sequence word that sleepers wait on and wakers bump: the futex of one side of a pipe.
///
/// It lives in a pipe's shared region, so waits and wakes use shared futexes (keyed by the
/// memory file, not the address): a waker in one process wakes a sleeper in another.
///
/// Protocol: a sleeper reads the word, registers itself (in the ring index word, see
/// `End::wait_readable` in `pipe/end.rs`), rechecks its condition and only then calls [`Futex::wait`] with
/// the value it read; a waker changes the condition, then calls [`Futex::wake_all`], which bumps the
/// word before waking. A wake that races the sleeper's recheck changes the word, so the
/// kernel's compare in FUTEX_WAIT fails and the sleeper goes round again: no lost wakeup.
#[cfg_attr(not(loom), repr(transparent))]
pub(crate) struct Futex {
    word: AtomicU32,
    #[cfg(loom)]
    lock: loom::sync::Mutex<()>,
    #[cfg(loom)]
    cv: loom::sync::Condvar,
}

impl Futex {
    #[cfg(loom)]
    pub(crate) fn new() -> Futex {
        Futex {
            word: AtomicU32::new(0),
            #[cfg(loom)]
            lock: loom::sync::Mutex::new(()),
            #[cfg(loom)]
            cv: loom::sync::Condvar::new(),
        }
    }

    /// The current sequence value, to pass to [`Futex::wait`].
    pub(crate) fn seq(&self) -> u32 {
        // Acquire: pairs with the Release bump in `wake_all`, so a sleeper that reads the new
        // value also sees the condition change that preceded the bump.
        self.word.load(Ordering::Acquire)
    }

    /// Sleeps until the word moves away from `seq` (or spuriously, or after `timeout`).
    /// Returns false on timeout.
    pub(crate) fn wait(&self, seq: u32, timeout: Option<Duration>) -> bool {
        #[cfg(not(loom))]
        {
            crate::sys::futex::wait_shared(self.word.as_ptr(), seq, timeout)
        }
        #[cfg(loom)]
        {
            let _ = timeout;
            let guard = self.lock.lock().unwrap();
            // Acquire: pairs with the Release bump in `wake_all` (as in `seq`).
            if self.word.load(Ordering::Acquire) != seq {
                return true;
            }
            drop(self.cv.wait(guard).unwrap());
            true
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

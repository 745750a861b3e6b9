//! Wake-ups after a delay, for the async adapters' waits that no side can announce.
//!
//! An adapter that finds its side held by another holder (a chunk, a resize, a concurrent call)
//! is woken directly when a holder of this process releases it, but nothing wakes it when the
//! holder is in another process (its release wakes that pipe's futex sleepers only), or when
//! the holder is a thread of ours that leaked its chunk and exited (only a caller that asks
//! finds it dead and takes the side over). Such a task asks again after a delay that grows
//! while the side stays held (see the adapters), instead of yielding to the scheduler in a loop
//! at 100% of a core.
//!
//! tokio's own timers need a runtime built with its time driver, which an adapter cannot
//! require; so one thread per process sleeps until the earliest due wake-up. It starts with the
//! first delay asked for and sleeps on a condition variable with no timeout while nothing is
//! due: no CPU while idle. A forked child has no such thread: the fork handlers take the lock
//! across the fork (see `fork.rs`), and the child forgets the parent's entries and thread and
//! starts its own when it first needs one. Where no thread can be started, the wake-up is
//! immediate (the adapters' earlier behaviour: a busy wait, never a hang), and the start is
//! tried again a second later.

use std::sync::{Condvar, Mutex, MutexGuard};
use std::task::Waker;
use std::time::{Duration, Instant};

/// The due wake-ups and whether this process's thread runs.
pub(crate) struct Timer {
    /// `(due, waker)`, unordered: an adapter registers one at a time per task, so the list
    /// stays as short as the number of tasks waiting for a held side.
    due: Vec<(Instant, Waker)>,
    /// The thread runs in this process (false in a forked child until it starts its own).
    running: bool,
    /// When starting the thread last failed: until a second has passed, wake at once rather
    /// than try again on every wait.
    failed: Option<Instant>,
}

static TIMER: Mutex<Timer> = Mutex::new(Timer {
    due: Vec::new(),
    running: false,
    failed: None,
});
/// Signalled when an earlier wake-up than the thread sleeps for is added.
static ADDED: Condvar = Condvar::new();

fn lock() -> MutexGuard<'static, Timer> {
    TIMER.lock().unwrap_or_else(|e| e.into_inner())
}

/// Wakes `waker` after `delay` (at once if no thread can be started). A task that asks again
/// before its wake-up keeps the earlier one.
pub(crate) fn wake_after(delay: Duration, waker: &Waker) {
    let due = Instant::now() + delay;
    let mut t = lock();
    if !t.running
        && t.failed
            .is_none_or(|at| at.elapsed() >= Duration::from_secs(1))
    {
        // With asynchronous signals blocked: the application's handlers run on its own threads.
        t.running = crate::sys::thread::spawn_helper(
            std::thread::Builder::new().name("pagepipe-timer".into()),
            run,
        )
        .is_ok();
        t.failed = (!t.running).then(Instant::now);
    }
    if !t.running {
        drop(t);
        waker.wake_by_ref();
        return;
    }
    let earliest = t.due.iter().map(|e| e.0).min();
    match t.due.iter_mut().find(|e| e.1.will_wake(waker)) {
        Some(e) => e.0 = e.0.min(due),
        None => t.due.push((due, waker.clone())),
    }
    if earliest.is_none_or(|e| due < e) {
        ADDED.notify_one();
    }
}

/// Marks the thread gone if it ever unwinds (a waker's code it runs panicked where it could
/// not be caught), so the next wait starts another instead of queueing for nobody.
struct Gone;

impl Drop for Gone {
    fn drop(&mut self) {
        if std::thread::panicking() {
            lock().running = false;
        }
    }
}

/// The thread: wakes what is due, then sleeps until the next wake-up is.
fn run() {
    let _gone = Gone;
    let mut t = lock();
    loop {
        let now = Instant::now();
        // Moved out, not cloned: no waker code (clone, drop) runs under the lock.
        let mut woken = Vec::new();
        let mut i = 0;
        while i < t.due.len() {
            if t.due[i].0 <= now {
                woken.push(t.due.swap_remove(i).1);
            } else {
                i += 1;
            }
        }
        if !woken.is_empty() {
            drop(t);
            // Outside the lock: a waker may run code. A waker that panics must not end the
            // thread, or every later wake-up would be lost.
            for w in woken {
                let _ = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| w.wake()));
            }
            t = lock();
            continue;
        }
        t = match t.due.iter().map(|e| e.0).min() {
            None => ADDED.wait(t).unwrap_or_else(|e| e.into_inner()),
            Some(next) => {
                ADDED
                    .wait_timeout(t, next.saturating_duration_since(now))
                    .unwrap_or_else(|e| e.into_inner())
                    .0
            }
        };
    }
}

/// Taken by the fork handlers before a fork, so the child never inherits it held by a thread
/// that does not exist there.
pub(crate) fn before_fork() -> MutexGuard<'static, Timer> {
    lock()
}

/// In the child, with the lock the prepare handler took: the parent's thread did not survive
/// the fork, and its entries are the parent's tasks. They are leaked, not dropped: a waker's
/// drop may run arbitrary code, which a fork handler must not.
pub(crate) fn after_fork_child(mut t: MutexGuard<'static, Timer>) {
    std::mem::forget(std::mem::take(&mut t.due));
    t.running = false;
    t.failed = None;
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering::Relaxed};
    use std::sync::Arc;

    struct Count(AtomicUsize);
    impl std::task::Wake for Count {
        fn wake(self: Arc<Self>) {
            self.0.fetch_add(1, Relaxed);
        }
    }

    #[test]
    fn a_wake_up_comes_after_its_delay_and_a_second_ask_keeps_the_earlier_one() {
        let count = Arc::new(Count(AtomicUsize::new(0)));
        let waker = Waker::from(count.clone());
        let t0 = Instant::now();
        wake_after(Duration::from_millis(30), &waker);
        wake_after(Duration::from_secs(60), &waker); // keeps the 30 ms one
        while count.0.load(Relaxed) == 0 {
            assert!(t0.elapsed() < Duration::from_secs(10), "never woken");
            std::thread::sleep(Duration::from_millis(1));
        }
        assert!(t0.elapsed() >= Duration::from_millis(30));
        std::thread::sleep(Duration::from_millis(50));
        assert_eq!(count.0.load(Relaxed), 1, "one wake-up per registration");
    }
}

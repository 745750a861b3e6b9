//! Waiting for the other side, and waking it (seed 002's conditional wake-ups).
//!
//! - [`sleep_until`]: a blocked side spins while spinning pays (see [`crate::spin`]), then registers in the other side's index word
//!   (see [`crate::ring`]), rechecks and sleeps on its futex, a tick at a time, so a dead peer
//!   (who cannot wake anyone) is noticed at the next tick.
//! - [`wake_one_if_waiting`]: the advancing side wakes a sleeper only when the index RMW that
//!   published (or consumed) returned the sleeper flag: an uncontended operation makes no
//!   syscall. It wakes one, as Linux's pipe wakes one exclusive waiter; the one woken hands
//!   the flag on and [`pass_on`] the wake-up (with N readers on one pipe, waking all of them
//!   for each write was N - 1 wasted trips through the scheduler).
//! - [`Wakers`]: the same protocol for async tasks of this process.

use crate::error::timed_out;
use crate::ring::WAITING;
use crate::sync::{AtomicU64, Futex, Ordering, Slept};
use std::io;
use std::time::{Duration, Instant};

/// Async tasks of this process waiting for one transition of one pipe (data arriving, room
/// appearing): the in-process half of the adapters' wake-up. A side that makes the transition
/// in this process wakes them directly, with no system call and no trip through the reactor;
/// one in another process cannot, and charges the signal pipe the task's descriptor watches
/// (see `End::sync`), so the adapters wait for both.
///
/// Protocol (a store-load pair on each side): a waiter registers its waker, sets `waiting`
/// (SeqCst) and issues a SeqCst fence, then rechecks the ring; an advancer publishes with its
/// SeqCst index RMW, then loads `waiting` (SeqCst). In the single total order either the
/// recheck sees the advance or the load sees the flag. Waking takes every registered waker and
/// clears the flag under the list's lock, so a registration is consumed by exactly one wake.
///
/// Fork: a child inherits the lists with the parent's wakers in them (and possibly a list lock
/// a parent thread held). It must never run them (they would touch the parent's runtime, whose
/// locks may be held by threads that do not exist here), so each list records the
/// [`children`] generation it was registered in: a child's wake finds another generation and
/// returns, without the lock; its first registration, and its drop of the list, forget the
/// parent's wakers (leaked, not dropped; the drop takes no lock). What remains: a child forked
/// while a parent thread was inside `register` or a wake on a list deadlocks on that list's
/// lock at its first registration there (a window of a few instructions; the lists are per
/// pipe and per process, not in the fork handlers).
#[derive(Default)]
pub(crate) struct Wakers {
    /// Some waker is registered (a hint read on every advance: only waiters write it).
    waiting: crate::sync::AtomicBool,
    /// The [`children`] generation of the last registration (written under the list's lock).
    born: std::sync::atomic::AtomicU64,
    list: crate::sync::Mutex<Vec<std::task::Waker>>,
}

/// Forks this process came out of as the child (see [`Wakers`]); bumped by the fork handler.
static CHILDREN: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

/// This process's generation: how many forks it came out of as the child.
fn children() -> u64 {
    CHILDREN.load(std::sync::atomic::Ordering::Relaxed)
}

/// In a forked child (see `fork.rs`): every [`Wakers`] list now holds the parent's wakers.
#[cfg(not(loom))]
pub(crate) fn note_fork_child() {
    CHILDREN.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
}

impl Wakers {
    /// Registers `waker` (once, however often the same task registers) and raises the flag.
    /// The caller rechecks the ring afterwards.
    #[cfg_attr(not(any(feature = "tokio", loom)), allow(dead_code))] // the adapters' only
    pub(crate) fn register(&self, waker: &std::task::Waker) {
        let mut list = self.list.lock().unwrap_or_else(|e| e.into_inner());
        let now = children();
        if self.born.load(std::sync::atomic::Ordering::Relaxed) != now {
            // The parent's wakers: never run them, never drop them here (a drop may run code).
            std::mem::forget(std::mem::take(&mut *list));
            self.born.store(now, std::sync::atomic::Ordering::Relaxed);
        }
        if !list.iter().any(|w| w.will_wake(waker)) {
            list.push(waker.clone());
        }
        // SeqCst: the store half of the waiter's store-load pair (see the type's docs).
        self.waiting.store(true, Ordering::SeqCst);
        // SeqCst fence: the caller's recheck loads the indices with Acquire only; after this
        // fence it sees any SeqCst advance that precedes the fence in the total order, and an
        // advance that follows it follows our store too, so its load of `waiting` sees it
        // (loom found the lost wake-up without it).
        crate::sync::fence(Ordering::SeqCst);
    }

    /// Wakes every registered task, if any. Called after the advance it announces: inlined,
    /// so that a pipe nobody waits on pays one load and a branch per transition.
    #[inline(always)]
    pub(crate) fn wake(&self) {
        // loom treats SeqCst accesses as AcqRel (its documented limitation), so it cannot see
        // the order between the advance's SeqCst RMW and this SeqCst load that the memory
        // model guarantees (and that x86's locked RMW, a full barrier, gives for free); this
        // fence stands in for it in the model only.
        #[cfg(loom)]
        crate::sync::fence(Ordering::SeqCst);
        // SeqCst: the load half of the advancer's store-load pair (see the type's docs).
        if self.waiting.load(Ordering::SeqCst) {
            self.wake_all();
        }
    }

    #[cold]
    #[inline(never)]
    fn wake_all(&self) {
        // Relaxed: `register` writes `born` before its SeqCst store of the flag, which the
        // caller's SeqCst load of it read.
        if self.born.load(std::sync::atomic::Ordering::Relaxed) != children() {
            // Set in the parent: its wakers are not ours to run (see the type's docs). The
            // flag stays: clearing it here, outside the lock, could clear a registration this
            // process makes meanwhile; until the first one, a transition costs two loads more.
            return;
        }
        let list = {
            let mut list = self.list.lock().unwrap_or_else(|e| e.into_inner());
            self.waiting.store(false, Ordering::Relaxed); // under the lock
            std::mem::take(&mut *list)
        };
        for w in list {
            w.wake();
        }
    }
}

impl Drop for Wakers {
    /// In a forked child, the parent's wakers are forgotten, not dropped (see the type's docs:
    /// a waker's drop may run the parent's runtime code).
    fn drop(&mut self) {
        if self.born.load(std::sync::atomic::Ordering::Relaxed) != children() {
            // Not `lock()`: a parent thread may have held it at the fork, and `&mut self` needs
            // no lock (a list half-changed by that thread is forgotten as it is).
            #[cfg(not(loom))]
            let list = self.list.get_mut().unwrap_or_else(|e| e.into_inner());
            #[cfg(loom)]
            let mut guard = self.list.lock().unwrap_or_else(|e| e.into_inner());
            #[cfg(loom)]
            let list = &mut *guard;
            std::mem::forget(std::mem::take(list));
        }
    }
}

/// One pipe's async waiters in this process: its [`Wakers`] lists, made the first time a task
/// registers (most pipes never have one, and an idle pipe's memory is counted: issue 23).
///
/// Protocol, on top of [`Wakers`]': the lists are published with a SeqCst CAS before the first
/// registration in them, and an advancer loads the pointer (SeqCst) after its advance, where it
/// would load `waiting`. In the single total order, an advancer that finds no lists loaded
/// before they were published, so before any registration and its recheck, which then sees the
/// advance; one that finds them goes on as [`Wakers::wake`]. Never freed before the pipe. (The
/// advances that are SeqCst: the index RMWs and the side locks' unlock. A close (`End::drop`)
/// and a death the watcher reports (`End::hung_up`) advance with Release only, as before the
/// lists were lazy: their tasks are also woken through the reactor once the pipe has left the
/// process, and a confined pipe's close is its own process's.)
pub(crate) struct Lazy<T: Default> {
    lists: crate::sync::AtomicPtr<T>,
    /// Owns a `Box<T>`: Send and Sync only as that is.
    _owns: std::marker::PhantomData<Box<T>>,
}

impl<T: Default> Default for Lazy<T> {
    fn default() -> Lazy<T> {
        Lazy {
            lists: crate::sync::AtomicPtr::new(std::ptr::null_mut()),
            _owns: std::marker::PhantomData,
        }
    }
}

impl<T: Default> Lazy<T> {
    /// The lists, if a task ever registered: for advancers, after their advance.
    #[inline]
    pub(crate) fn get(&self) -> Option<&T> {
        // As in `Wakers::wake`: loom sees SeqCst accesses as AcqRel only.
        #[cfg(loom)]
        crate::sync::fence(Ordering::SeqCst);
        // SeqCst: the advancer's load, after its advance (see the type's docs).
        let p = self.lists.load(Ordering::SeqCst);
        // SAFETY: a non-null pointer is a Box published by `get_or_make`, freed only by Drop
        // (`&mut self`), so alive for as long as `&self`.
        unsafe { p.as_ref() }
    }

    /// The lists, made if no task registered before: for a waiter, before it registers.
    #[cfg_attr(not(any(feature = "tokio", loom)), allow(dead_code))] // the adapters' only
    pub(crate) fn get_or_make(&self) -> &T {
        if let Some(lists) = self.get() {
            return lists;
        }
        let new = Box::into_raw(Box::<T>::default());
        // SeqCst: the publication, before any registration (see the type's docs).
        match self.lists.compare_exchange(
            std::ptr::null_mut(),
            new,
            Ordering::SeqCst,
            Ordering::SeqCst,
        ) {
            // SAFETY: `new` is published now and freed only by Drop (`&mut self`).
            Ok(_) => unsafe { &*new },
            Err(won) => {
                // SAFETY: `new` was never published: ours to free. `won` is another thread's
                // published Box, alive as above.
                unsafe {
                    drop(Box::from_raw(new));
                    &*won
                }
            }
        }
    }
}

impl<T: Default> Drop for Lazy<T> {
    fn drop(&mut self) {
        #[cfg(not(loom))]
        let p = *self.lists.get_mut();
        #[cfg(loom)]
        let p = self.lists.load(Ordering::Relaxed);
        if !p.is_null() {
            // SAFETY: published by `get_or_make` from a Box, and nothing borrows it past `&mut
            // self`.
            drop(unsafe { Box::from_raw(p) });
        }
    }
}
/// The earlier of two optional deadlines (`None`: no bound).
pub(crate) fn earliest(a: Option<Instant>, b: Option<Instant>) -> Option<Instant> {
    match (a, b) {
        (Some(a), Some(b)) => Some(a.min(b)),
        (a, b) => a.or(b),
    }
}

/// Blocks until `ready(force)`: spins briefly, then registers as a sleeper in the other side's
/// index `word` (head for readers, tail for writers), rechecks and sleeps on `futex`, a tick at a
/// time; after a tick that nobody ended, rechecks with `force` (peers may have died). With
/// `ask_first`, also rechecks with `force` before the first sleep.
///
/// An advance wakes one sleeper, as Linux's pipe wakes one exclusive waiter ([`wake_one_if_waiting`]),
/// and clears the flag that every sleeper registered in. So the one it picked, finding others
/// still asleep (the futex's count), puts the flag back before it looks: the next advance
/// wakes the next one, and the reader or writer that leaves queued data or room behind passes
/// the wake-up on ([`pass_on`]).
pub(crate) fn sleep_until(
    word: &AtomicU64,
    futex: &Futex,
    ready: impl Fn(bool) -> bool,
    deadline: Option<Instant>,
    ask_first: bool,
    tick: impl Fn() -> Duration,
) -> io::Result<()> {
    if deadline.is_some_and(|d| Instant::now() >= d) {
        return Err(timed_out()); // also bounds a caller that keeps finding nothing to do
    }
    // After spinning, ask the kernel once before sleeping (`ask_first`: unless the peer's death
    // wakes us anyway): a peer killed meanwhile bumped no counter, and a sleeper should not
    // wait a tick to see it gone.
    if crate::spin::spin_until(|| ready(false)) || ready(ask_first) {
        return Ok(());
    }
    loop {
        let seq = futex.seq();
        // Acquire: pairs with the Release fetch_add that advances `word`; the RMW puts our
        // registration in its modification order, before or after that advance, so either the
        // recheck below sees the advance or the advancer sees our flag and wakes us.
        word.fetch_or(WAITING, Ordering::Acquire);
        if ready(false) {
            return Ok(());
        }
        // The kernel tells the death watcher when the peer dies, and it wakes us (and a peer of
        // a confined pipe wakes us by its drop): then the tick is only a safety net. Without
        // it (the watcher could not run or register this end), we ask the kernel every tick.
        let mut tick = tick();
        if let Some(d) = deadline {
            let now = Instant::now();
            if now >= d {
                return Err(timed_out());
            }
            tick = tick.min(d - now);
        }
        match futex.sleep(seq, Some(tick)) {
            Slept::Woken { others } => {
                if others > 0 {
                    // The wake that picked us cleared the flag the others registered in: put
                    // it back for them (Relaxed: a hint the next advance's RMW reads; a stale
                    // one costs a wake-up that finds nobody).
                    word.fetch_or(WAITING, Ordering::Relaxed);
                }
                // Look before registering again: a registration left behind would cost the
                // next advance a wake-up that finds nobody.
                if ready(false) {
                    return Ok(());
                }
            }
            Slept::TimedOut if ready(true) => return Ok(()),
            Slept::TimedOut | Slept::Other => {}
        }
    }
}

/// After an RMW on an index `word` returned `old`: wakes one sleeper registered in it, as an
/// advance does (a published slot, a freed one). The others stay asleep with the flag put back
/// by the one woken (see [`sleep_until`]).
pub(crate) fn wake_one_if_waiting(word: &AtomicU64, futex: &Futex, old: u64) {
    if old & WAITING != 0 {
        // Relaxed: clearing the flag may erase a registration made after `old`; that sleeper
        // read the futex sequence before the bump (Release), so its FUTEX_WAIT fails and it
        // registers again. One that was already asleep stays asleep: the sleeper this wakes
        // counted it and puts the flag back.
        word.fetch_and(!WAITING, Ordering::Relaxed);
        futex.wake_one();
        // Woken on our CPU, the sleeper runs once we sleep: our next spin would only delay it.
        if futex.sleeper_here() == Some(true) {
            crate::spin::woke_here();
        }
    }
}

/// After an RMW on an index `word` returned `old`: wakes every sleeper registered in it, as a
/// close or a change of capacity does (every sleeper must look).
pub(crate) fn wake_all_if_waiting(word: &AtomicU64, futex: &Futex, old: u64) {
    if old & WAITING != 0 {
        // Relaxed: as in `wake_one_if_waiting`; every sleeper already asleep is woken.
        word.fetch_and(!WAITING, Ordering::Relaxed);
        futex.wake_all();
    }
}

/// When a side is let go (its guard dropped, after the unlock): if a sleeper of that side is
/// registered in the other side's index `word` and `left(index)` says something is left for it
/// (queued data after a read, room after a write), wakes one, as Linux's pipe_read wakes the
/// next reader when it leaves data behind. This is where a wake-up one sleeper took, but left
/// unused (it read part, or wrote part), reaches the next. Costs a load when nobody sleeps.
pub(crate) fn pass_on(word: &AtomicU64, futex: &Futex, left: impl FnOnce(u64) -> bool) {
    // Relaxed: a hint. A sleeper that put the flag back did so before it looked again; one
    // registering now rechecks after its own RMW and sees what is left.
    let w = word.load(Ordering::Relaxed);
    if w & WAITING != 0 && left(crate::ring::index(w)) {
        wake_one_if_waiting(word, futex, w);
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;
    use std::sync::Arc;

    /// A waker that ends the process with status 3 if it runs anywhere but in `parent`.
    struct OnlyIn {
        parent: libc::pid_t,
    }

    impl std::task::Wake for OnlyIn {
        fn wake(self: Arc<Self>) {
            // SAFETY: getpid and _exit have no preconditions.
            if unsafe { libc::getpid() } != self.parent {
                // SAFETY: leaves the child at once, running nothing of the parent's.
                unsafe { libc::_exit(3) };
            }
        }
    }

    /// Dropped anywhere but in `parent` (a waker's last reference gone), it ends the process
    /// with status 4.
    impl Drop for OnlyIn {
        fn drop(&mut self) {
            // SAFETY: getpid and _exit have no preconditions.
            if unsafe { libc::getpid() } != self.parent {
                // SAFETY: as above.
                unsafe { libc::_exit(4) };
            }
        }
    }

    /// A child inherits the lists with its parent's wakers in them: a transition in the child
    /// (a guard's release, a write) must not run them, nor may the child's drop of the lists
    /// (a pipe dropped in the child) drop them.
    #[test]
    fn a_forked_child_never_runs_its_parents_wakers() {
        let _forks = crate::fork::tests_that_fork();
        let wakers = Wakers::default();
        // SAFETY: getpid has no preconditions.
        let parent = unsafe { libc::getpid() };
        wakers.register(&std::task::Waker::from(Arc::new(OnlyIn { parent })));
        // SAFETY: the child only bumps an atomic, loads a flag and leaves with _exit.
        let pid = unsafe { libc::fork() };
        assert!(pid >= 0);
        if pid == 0 {
            note_fork_child(); // pagepipe's fork handler does it too, if this test binary installed it
            wakers.wake();
            drop(wakers);
            // SAFETY: leaves the child at once.
            unsafe { libc::_exit(0) };
        }
        let mut status = 0;
        // SAFETY: our own child, a valid status pointer.
        assert_eq!(unsafe { libc::waitpid(pid, &mut status, 0) }, pid);
        assert!(libc::WIFEXITED(status), "{status:#x}");
        assert_eq!(
            libc::WEXITSTATUS(status),
            0,
            "the child ran its parent's waker"
        );
        // The parent's registration stands.
        assert!(wakers.waiting.load(Ordering::SeqCst));
    }
}

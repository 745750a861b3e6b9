//! Fork handling, in one place: the `pthread_atfork(3)` handlers, which call the parts that care.
//!
//! - before: every pipe's ends join the death watcher's list (a confined pipe's were not in
//!   it; found through the registry's live owners, used with the registry unlocked), the
//!   pipes note the fork and make their async adapters' descriptors exact (a pipe may have
//!   ends in two processes afterwards, see `pipe::end::before_fork`); every pipe
//!   makes its provisional key real (`Shared::key_before_fork`: the child will see the lock
//!   words the parent's threads write, and must find their key locked); then the spare
//!   memory registry's lock is taken, so the child never inherits it held by a thread that does
//!   not exist there; then, in registration order, every registered fragment cache's spare-list
//!   lock (held by a `shrink()` caller, the idle trimmer or a thread dropping the last fragment
//!   of a block, a child would wait for it forever: [`crate::reclaim::Trim::hold_for_fork`]);
//!   then the process keys' list, the region cache, the death watcher (`watch.rs`), the
//!   async adapters' timer (`timer.rs`, feature `tokio`) and the regions' cells (`cells.rs`,
//!   a leaf lock: last).
//! - after, in the parent: every lock taken before is unlocked.
//! - after, in the child: the side locks forget the thread identity the parent had
//!   ([`crate::lock::note_fork`]), every pipe gives its memory file descriptor a description
//!   of the child's own in place of the parent's (`Shared::forget_key`: the parent's key lock
//!   lives on that description and must die with the parent), the death watcher and the
//!   adapters' timer forget the parent's thread (the child starts its own; the watcher also
//!   closes the parent's epoll instance), the async wakers' lists stop counting the parent's
//!   tasks ([`crate::wait::note_fork_child`]), and every lock is unlocked.
//!
//! Taking the caches' locks, rather than resetting them in the child, is what glibc does for
//! malloc's arenas: a lock held at the fork means a spare list may be half-changed (a `Vec`
//! between a push and its length update), and only waiting for the holder to finish leaves the
//! child a consistent list.

#[cfg(not(loom))]
use crate::reclaim::{registry, Registry};

/// Installs the fork handlers once (every pipe and cache calls this before it registers).
#[cfg(not(loom))]
pub(crate) fn install() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        crate::sys::thread::at_fork(before_fork, after_fork_parent, after_fork_child)
    });
}

#[cfg(not(loom))]
thread_local! {
    /// The fork gate ([`crate::fork_gate`]), held exclusively across a fork by the forking
    /// thread.
    static FORK_EXCL: std::cell::RefCell<Option<crate::fork_gate::Exclusive>> =
        const { std::cell::RefCell::new(None) };
    /// The registry guard held across a fork by the forking thread.
    static FORK_GUARD: std::cell::RefCell<Option<std::sync::MutexGuard<'static, Registry>>> =
        const { std::cell::RefCell::new(None) };
    /// The registered owners' locks held across a fork by the forking thread.
    static FORK_HOLDS: std::cell::RefCell<Vec<Box<dyn std::any::Any>>> =
        const { std::cell::RefCell::new(Vec::new()) };
    /// The process keys' list, held across a fork by the forking thread.
    static FORK_KEYS: std::cell::RefCell<Option<std::sync::MutexGuard<'static, crate::pipe::keys::OwnKeys>>> =
        const { std::cell::RefCell::new(None) };
    /// The region cache's lock, held across a fork by the forking thread.
    static FORK_CACHE: std::cell::RefCell<Option<std::sync::MutexGuard<'static, crate::pipe::cache::Cache>>> =
        const { std::cell::RefCell::new(None) };
    /// The death watcher's lock, held across a fork by the forking thread.
    static FORK_WATCH: std::cell::RefCell<Option<std::sync::MutexGuard<'static, crate::watch::Watcher>>> =
        const { std::cell::RefCell::new(None) };
    /// The cells' lock, held across a fork by the forking thread.
    static FORK_CELLS: std::cell::RefCell<Option<std::sync::MutexGuard<'static, crate::cells::Areas>>> =
        const { std::cell::RefCell::new(None) };
    /// The async adapters' timer lock, held across a fork by the forking thread.
    #[cfg(feature = "tokio")]
    static FORK_TIMER: std::cell::RefCell<Option<std::sync::MutexGuard<'static, crate::timer::Timer>>> =
        const { std::cell::RefCell::new(None) };
}

#[cfg(not(loom))]
extern "C" fn before_fork() {
    let excl = crate::fork_gate::exclusive();
    FORK_EXCL.with(|x| *x.borrow_mut() = Some(excl));
    crate::pipe::end::before_fork();
    let guard = registry();
    let holds = guard.hold_owners_for_fork();
    FORK_HOLDS.with(|h| *h.borrow_mut() = holds);
    FORK_GUARD.with(|g| *g.borrow_mut() = Some(guard));
    let keys = crate::pipe::keys::own_keys();
    FORK_KEYS.with(|k| *k.borrow_mut() = Some(keys));
    let cache = crate::pipe::cache::lock();
    FORK_CACHE.with(|c| *c.borrow_mut() = Some(cache));
    let watch = crate::watch::before_fork();
    FORK_WATCH.with(|w| *w.borrow_mut() = Some(watch));
    #[cfg(feature = "tokio")]
    FORK_TIMER.with(|t| *t.borrow_mut() = Some(crate::timer::before_fork()));
    FORK_CELLS.with(|c| *c.borrow_mut() = Some(crate::cells::lock()));
    crate::fork_gate::end_of_prepare();
}

/// Releases what `before_fork` took: the owners' locks, then the registry.
#[cfg(not(loom))]
fn release_fork_locks() {
    FORK_HOLDS.with(|h| drop(std::mem::take(&mut *h.borrow_mut())));
    FORK_GUARD.with(|g| drop(g.borrow_mut().take()));
    FORK_EXCL.with(|x| drop(x.borrow_mut().take()));
}

#[cfg(not(loom))]
extern "C" fn after_fork_parent() {
    FORK_CELLS.with(|c| drop(c.borrow_mut().take()));
    #[cfg(feature = "tokio")]
    FORK_TIMER.with(|t| drop(t.borrow_mut().take()));
    FORK_WATCH.with(|w| drop(w.borrow_mut().take()));
    FORK_CACHE.with(|c| drop(c.borrow_mut().take()));
    FORK_KEYS.with(|k| drop(k.borrow_mut().take()));
    release_fork_locks();
}

#[cfg(not(loom))]
extern "C" fn after_fork_child() {
    // The cells' list is as the parent had it: every cell and area is mapped here too.
    FORK_CELLS.with(|c| drop(c.borrow_mut().take()));
    crate::lock::note_fork();
    crate::wait::note_fork_child();
    #[cfg(feature = "tokio")]
    if let Some(timer) = FORK_TIMER.with(|t| t.borrow_mut().take()) {
        crate::timer::after_fork_child(timer);
    }
    FORK_GUARD.with(|g| {
        if let Some(reg) = g.borrow_mut().as_mut() {
            reg.in_forked_child();
        }
    });
    crate::region::after_forgets();
    if let Some(watch) = FORK_WATCH.with(|w| w.borrow_mut().take()) {
        crate::watch::after_fork_child(watch);
    }
    if let Some(cache) = FORK_CACHE.with(|c| c.borrow_mut().take()) {
        crate::pipe::cache::in_forked_child(cache);
    }
    if let Some(mut keys) = FORK_KEYS.with(|k| k.borrow_mut().take()) {
        keys.clear(); // the parent's keys; the child takes its own
    }
    release_fork_locks();
}

/// Serializes the unit tests that fork with those that count on no fork (a pipe stays
/// confined to its process only while the process does not fork): one binary runs them all
/// on parallel threads.
#[cfg(all(test, not(loom)))]
pub(crate) fn tests_that_fork() -> std::sync::MutexGuard<'static, ()> {
    static FORKING_TESTS: std::sync::Mutex<()> = std::sync::Mutex::new(());
    FORKING_TESTS.lock().unwrap_or_else(|e| e.into_inner())
}

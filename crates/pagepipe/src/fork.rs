//! Fork handling, in one place: the `pthread_atfork(3)` handlers, which call the parts that care.
//!
//! - before: the pipes note the fork and make their async adapters' descriptors exact (a pipe
//!   may have ends in two processes afterwards, see `pipe::end::before_fork`); then the spare
//!   memory registry's lock is taken, so the child never inherits it held by a thread that does
//!   not exist there;
//! - after, in the parent: the registry is unlocked;
//! - after, in the child: the side locks forget the thread identity the parent had
//!   ([`crate::lock::note_fork`]), and the registry is unlocked.

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
    /// The registry guard held across a fork by the forking thread.
    static FORK_GUARD: std::cell::RefCell<Option<std::sync::MutexGuard<'static, Registry>>> =
        const { std::cell::RefCell::new(None) };
}

#[cfg(not(loom))]
extern "C" fn before_fork() {
    crate::pipe::end::before_fork();
    let guard = registry();
    FORK_GUARD.with(|g| *g.borrow_mut() = Some(guard));
}

#[cfg(not(loom))]
extern "C" fn after_fork_parent() {
    FORK_GUARD.with(|g| drop(g.borrow_mut().take()));
}

#[cfg(not(loom))]
extern "C" fn after_fork_child() {
    crate::lock::note_fork();
    FORK_GUARD.with(|g| drop(g.borrow_mut().take()));
}

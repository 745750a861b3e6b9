//! Fork handling: the `pthread_atfork(3)` handlers, and the fork generation by which a writer
//! knows it was inherited.
//!
//! A forked child has the parent's memory but only the forking thread, and shares every open
//! file description with the parent. Two things must then not happen in the child:
//! - its flusher working on the parent's writers: waiting on their ranges through the shared
//!   description consumes the kernel's per-description error record, and the parent's
//!   `finish()` returned `Ok` with none of its bytes on disk (issue 27). The child forgets the
//!   parent's writers and the counters they contributed ([`Flusher::forget_after_fork`]);
//! - an inherited writer syncing through the parent's description: it takes a description of
//!   its own first (`Writer::adopt`), when it sees that the generation moved on.
//!
//! Before the fork the forking thread takes the flusher's locks a child could need (the list of
//! writers, the record of started threads), so that no lock is inherited held by a thread that
//! does not exist in the child; the parent and the child release them after it.
//!
//! [`Flusher::forget_after_fork`]: crate::flusher::Flusher::forget_after_fork

use crate::flusher::{ForkHold, FLUSHER};
use pagepipe_sys as sys;
use std::cell::RefCell;
use std::sync::atomic::{AtomicU64, Ordering};

/// Bumped in every forked child (by the child handler): a writer made in an older generation
/// was inherited from an ancestor process.
static GENERATION: AtomicU64 = AtomicU64::new(0);

/// The current fork generation.
pub(crate) fn generation() -> u64 {
    // Relaxed: written only by the child handler while the child has one thread; every thread
    // of the child is started after it.
    GENERATION.load(Ordering::Relaxed)
}

/// Installs the fork handlers once (every writer calls this when it is made).
pub(crate) fn install() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| sys::thread::at_fork(before_fork, after_fork_parent, after_fork_child));
}

thread_local! {
    /// The flusher's locks, held by the forking thread across the fork.
    static HOLD: RefCell<Option<ForkHold>> = const { RefCell::new(None) };
}

extern "C" fn before_fork() {
    let hold = FLUSHER.hold_for_fork();
    HOLD.with(|h| *h.borrow_mut() = Some(hold));
}

extern "C" fn after_fork_parent() {
    HOLD.with(|h| drop(h.borrow_mut().take()));
}

extern "C" fn after_fork_child() {
    // Relaxed: see `generation`.
    GENERATION.fetch_add(1, Ordering::Relaxed);
    HOLD.with(|h| {
        if let Some(mut hold) = h.borrow_mut().take() {
            FLUSHER.forget_after_fork(&mut hold);
        }
    });
}

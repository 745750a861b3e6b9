//! The fork gate: what must not straddle a `fork(2)` holds it shared ([`hold`]), and the
//! forking thread holds it exclusively across the fork (the prepare handler in `fork.rs` takes
//! it first, both after-fork handlers release it).
//!
//! Held shared while a pipe is made (a pipe made between the fork handlers' first steps and the
//! fork itself would count as confined to the parent while the child holds it) and while a
//! descriptor number is briefly doubled (the key description's reopening: a spare descriptor
//! open at the fork would give the child a reference to the parent's key description; the far
//! part's mapping, `Region::ensure_far`, whose spare descriptor the child would inherit unknown
//! to it), and
//! while a pipe decides between a provisional and a real key (`Shared::take_key`) or makes its
//! provisional key real on the way out (`Shared::expose_key`): the prepare handler makes every
//! provisional key real, and must see every one recorded before the fork.
//!
//! A thread may hold it more than once (a nested [`hold`] passes): the standard `RwLock` may
//! not be read-locked twice by one thread (a writer waiting between the two would deadlock
//! them).

/// The gate.
static FORKING: std::sync::RwLock<()> = std::sync::RwLock::new(());

thread_local! {
    /// This thread holds the gate exclusively: it is forking, inside the prepare handler.
    static FORKING_HERE: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
    /// Shared holds of the gate this thread has now (only the first one locks it).
    static DEPTH: std::cell::Cell<u32> = const { std::cell::Cell::new(0) };
}

/// A shared hold of the gate; nothing for the forking thread itself (`counted` false) or for
/// a hold nested in another of this thread's (`guard` `None`).
pub(crate) struct Hold {
    #[allow(dead_code)]
    guard: Option<std::sync::RwLockReadGuard<'static, ()>>,
    counted: bool,
}

impl Drop for Hold {
    fn drop(&mut self) {
        if self.counted {
            DEPTH.with(|d| d.set(d.get() - 1));
        }
        // `guard`, if any, is dropped after this: the thread's last hold unlocks the gate.
    }
}

/// Keeps this process from forking until dropped. The forking thread itself passes: what its
/// prepare handler does (making a pipe's descriptor exact, which may take the process's key on
/// the pipe) finishes before the fork, so it cannot straddle it; waiting for the gate it holds
/// would deadlock the fork.
pub(crate) fn hold() -> Hold {
    if FORKING_HERE.with(std::cell::Cell::get) {
        return Hold {
            guard: None,
            counted: false,
        };
    }
    let depth = DEPTH.with(|d| d.replace(d.get() + 1));
    let guard = (depth == 0).then(|| FORKING.read().unwrap_or_else(|e| e.into_inner()));
    Hold {
        guard,
        counted: true,
    }
}

/// The exclusive hold of the forking thread, across the fork; see [`exclusive`].
pub(crate) struct Exclusive(#[allow(dead_code)] std::sync::RwLockWriteGuard<'static, ()>);

/// The forking thread's own prepare steps are done: from here its [`hold`]s wait for the gate
/// as anyone's (a user's prepare handler that runs after ours and makes a pipe must not pass:
/// that pipe would count as confined to the parent). Such a handler, or an after-fork handler
/// run before ours releases the gate, that makes a pipe or takes a pipe's first key waits for
/// the gate its own thread holds: it hangs the fork. Make pipes before or after `fork(2)`, not
/// in `pthread_atfork` handlers.
pub(crate) fn end_of_prepare() {
    FORKING_HERE.with(|f| f.set(false));
}

/// Keeps every [`hold`] of other threads out until dropped: for the forking thread, across the
/// fork; the thread's own holds pass until [`end_of_prepare`].
pub(crate) fn exclusive() -> Exclusive {
    let guard = FORKING.write().unwrap_or_else(|e| e.into_inner());
    FORKING_HERE.with(|f| f.set(true));
    Exclusive(guard)
}

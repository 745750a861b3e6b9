//! The fork gate: what must not straddle a `fork(2)` holds it shared ([`hold`]), and the
//! forking thread holds it exclusively across the fork (the prepare handler in `fork.rs` takes
//! it first, both after-fork handlers release it).
//!
//! Held shared while a pipe is made (a pipe made between the fork handlers' first steps and the
//! fork itself would count as confined to the parent while the child holds it) and while a
//! descriptor number is briefly doubled (the key description's reopening: a spare descriptor
//! open at the fork would give the child a reference to the parent's key description; the far
//! part's mapping, whose spare descriptor the child would inherit unknown to it).

/// The gate.
static FORKING: std::sync::RwLock<()> = std::sync::RwLock::new(());

thread_local! {
    /// This thread holds the gate exclusively: it is forking, inside the prepare handler.
    static FORKING_HERE: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
    /// Shared holds this thread has now: a nested [`hold`] passes (a second read of a
    /// `RwLock` whose writer waits would deadlock).
    static HOLDS_HERE: std::cell::Cell<u32> = const { std::cell::Cell::new(0) };
}

/// A shared hold of the gate, or nothing for the forking thread itself.
pub(crate) struct Hold(Option<std::sync::RwLockReadGuard<'static, ()>>);

impl Drop for Hold {
    fn drop(&mut self) {
        HOLDS_HERE.with(|n| n.set(n.get() - 1));
        drop(self.0.take());
    }
}

/// Keeps this process from forking until dropped. The forking thread itself passes: what its
/// prepare handler does (making a pipe's descriptor exact, which may take the process's key on
/// the pipe) finishes before the fork, so it cannot straddle it; waiting for the gate it holds
/// would deadlock the fork. A thread that holds the gate already passes too.
pub(crate) fn hold() -> Hold {
    let nested = HOLDS_HERE.with(|n| {
        n.set(n.get() + 1);
        n.get() > 1
    });
    if nested || FORKING_HERE.with(std::cell::Cell::get) {
        return Hold(None);
    }
    Hold(Some(FORKING.read().unwrap_or_else(|e| e.into_inner())))
}

/// The exclusive hold of the forking thread, across the fork; see [`exclusive`].
pub(crate) struct Exclusive(#[allow(dead_code)] std::sync::RwLockWriteGuard<'static, ()>);

/// The forking thread's own prepare steps are done: from here its [`hold`]s wait for the gate
/// as anyone's (a user's prepare handler that runs after ours and makes a pipe must not pass:
/// that pipe would count as confined to the parent).
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

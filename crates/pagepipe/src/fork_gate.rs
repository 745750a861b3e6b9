//! The fork gate: what must not straddle a `fork(2)` holds it shared ([`hold`]), and the
//! forking thread holds it exclusively across the fork (the prepare handler in `fork.rs` takes
//! it first, both after-fork handlers release it).
//!
//! Held shared while a pipe is made (a pipe made between the fork handlers' first steps and the
//! fork itself would count as confined to the parent while the child holds it) and while a
//! descriptor number is briefly doubled (the key description's reopening: a spare descriptor
//! open at the fork would give the child a reference to the parent's key description).

/// The gate.
static FORKING: std::sync::RwLock<()> = std::sync::RwLock::new(());

/// Keeps this process from forking until dropped.
pub(crate) fn hold() -> std::sync::RwLockReadGuard<'static, ()> {
    FORKING.read().unwrap_or_else(|e| e.into_inner())
}

/// Keeps every [`hold`] out until dropped: for the forking thread, across the fork.
pub(crate) fn exclusive() -> std::sync::RwLockWriteGuard<'static, ()> {
    FORKING.write().unwrap_or_else(|e| e.into_inner())
}

//! Spare memory, process-wide: every pipe and every [`crate::FragCache`] registers what it can give
//! back to the OS in one registry. An idle trimmer thread trims idle owners every
//! [`IDLE_TICK`]; [`shrink`] empties all of it now (and [`crate::PressureMonitor`] calls it under
//! memory pressure).

#[cfg(not(loom))]
use crate::sync::{Arc, Mutex};
#[cfg(not(loom))]
use std::sync::Weak;

/// Gives every pipe's spare pages and every [`crate::FragCache`]'s spare blocks back to the OS
/// now, and returns how many bytes that released. Memory in use is never touched: pages holding
/// pipe data, blocks with a live fragment, the block a cache is carving. A pipe in the middle of
/// a write is skipped.
///
/// ```
/// let mut cache = pagepipe::FragCache::with_block_size(4096);
/// let a = cache.alloc(4096);
/// let b = cache.alloc(4096); // moves to a second block while `a` lives
/// drop(a); // a's block becomes a spare block
/// assert!(pagepipe::shrink() >= 4096);
/// assert_eq!(cache.stats().spare_blocks, 0);
/// drop(b);
/// ```
pub fn shrink() -> usize {
    #[cfg(not(loom))]
    {
        trim_all(true)
    }
    #[cfg(loom)]
    {
        0
    }
}

/// Something holding spare memory that it can give back to the OS.
#[cfg(not(loom))]
pub(crate) trait Trim: Send + Sync {
    /// Trims spare pages of an idle owner to its idle budget; `force` trims even when busy and
    /// down to zero spare pages. Returns the bytes given back.
    fn trim(&self, force: bool) -> usize;

    /// Takes every lock of this owner that another thread may hold while it is not on a pipe's
    /// shared memory, for the fork handlers ([`crate::fork`]): a child forked while such a lock
    /// is held would wait for it forever, as the thread holding it does not exist there. The
    /// returned value holds them (and keeps the owner alive); dropping it releases them, in the
    /// parent and in the child. `None`: the owner has no such lock.
    fn hold_for_fork(self: Arc<Self>) -> Option<Box<dyn std::any::Any>> {
        None
    }

    /// Runs in the prepare fork handler (the forking thread, the fork gate held exclusively,
    /// the fork counted, the registry unlocked): readies what a fork must find ready (see
    /// `Shared::key_before_fork`: the process's provisional key on a pipe made real).
    fn before_fork(&self) {}

    /// In the prepare fork handler, the registry unlocked: puts the owner's ends in the death
    /// watcher's list (a confined pipe's are not there; see `crate::watch::note`).
    fn note_for_watch(&self) {}

    /// Runs in a forked child, in the fork handler (one thread, the registry locked): drops
    /// what the child must not share with its parent (see `Shared::forget_key`).
    fn in_forked_child(&self) {}
}

/// Every live pipe and fragment cache of the process, so the idle trimmer and [`crate::shrink`]
/// can reach them.
#[cfg(not(loom))]
pub(crate) struct Registry {
    owners: Vec<Weak<dyn Trim>>,
    /// `owners.len()` at which a registration first drops the dead entries: twice the live
    /// count at the last compaction, so registering costs O(1) amortized however many pipes
    /// live.
    compact_at: usize,
    /// The trimmer waits for a registration (no pipe was left when it last looked).
    sleeping: bool,
    /// This process's trimmer thread runs. A forked child has none (fork copies only the
    /// calling thread) until it registers a pipe of its own ([`Registry::in_forked_child`]).
    trimmer: bool,
}

#[cfg(not(loom))]
static REGISTRY: Mutex<Registry> = Mutex::new(Registry {
    owners: Vec::new(),
    compact_at: 0,
    sleeping: false,
    trimmer: false,
});

/// Wakes the trimmer when a pipe is registered; it sleeps on it while no pipe exists.
#[cfg(not(loom))]
static REGISTERED: std::sync::Condvar = std::sync::Condvar::new();

/// How often the idle trimmer looks at the registered pipes.
#[cfg(not(loom))]
pub(crate) const IDLE_TICK: std::time::Duration = std::time::Duration::from_millis(100);

/// The registry, locked (also by the fork handlers, around `fork(2)`).
#[cfg(not(loom))]
pub(crate) fn registry() -> std::sync::MutexGuard<'static, Registry> {
    REGISTRY.lock().unwrap_or_else(|e| e.into_inner())
}

#[cfg(not(loom))]
impl Registry {
    /// What [`Trim::hold_for_fork`] returns for every live owner, taken in registration order
    /// with the registry locked (`self`). Any fixed order is deadlock-free: no other code holds
    /// two owners' locks at once, and no owner's lock is held while taking the registry's.
    pub(crate) fn hold_owners_for_fork(&self) -> Vec<Box<dyn std::any::Any>> {
        self.owners
            .iter()
            .filter_map(Weak::upgrade)
            .filter_map(Trim::hold_for_fork)
            .collect()
    }

    /// Every live owner, for a caller to act on once it has unlocked the registry (a handle
    /// dropped under the lock could be a confined pipe's last, whose region goes to the cache,
    /// which registers its trimmer: a deadlock).
    pub(crate) fn live_owners(&self) -> Vec<Arc<dyn Trim>> {
        self.owners.iter().filter_map(Weak::upgrade).collect()
    }

    /// In a forked child, with the registry locked (`self`): the parent's trimmer thread is
    /// not here; then [`Trim::in_forked_child`] of every live owner.
    pub(crate) fn in_forked_child(&mut self) {
        self.trimmer = false;
        self.sleeping = false;
        self.owners_in_forked_child();
    }

    /// [`Trim::in_forked_child`] of every live owner, with the registry locked (`self`).
    fn owners_in_forked_child(&self) {
        for owner in self.owners.iter().filter_map(Weak::upgrade) {
            owner.in_forked_child();
        }
    }
}

/// Registers `owner` for idle trimming and starts this process's trimmer thread on first use.
/// Callers install the fork handlers first ([`crate::fork::install`]): a fork must not copy the
/// registry's lock held.
#[cfg(not(loom))]
pub(crate) fn register(owner: Weak<dyn Trim>) {
    let mut reg = registry();
    if reg.owners.len() >= reg.compact_at {
        reg.owners.retain(|w| w.strong_count() > 0);
        reg.compact_at = (2 * reg.owners.len()).max(64);
    }
    // The trimmer sleeps only while no pipe is registered: wake it only then.
    let idle = reg.sleeping;
    reg.owners.push(owner);
    if !reg.trimmer {
        // A failed spawn only means idle pipes keep their spare pages until the next read or
        // shrink(); it is not worth failing pipe creation for.
        let spawned = crate::sys::thread::spawn_helper(
            std::thread::Builder::new().name("pagepipe-trim".into()),
            trimmer,
        );
        reg.trimmer = spawned.is_ok();
    }
    drop(reg);
    if idle {
        REGISTERED.notify_all();
    }
}

/// The trimmer thread: every tick, trims idle pipes; sleeps while no pipe exists.
#[cfg(not(loom))]
fn trimmer() {
    loop {
        let reg = registry();
        let reg = REGISTERED
            .wait_while(reg, |r| {
                r.owners.retain(|w| w.strong_count() > 0);
                r.sleeping = r.owners.is_empty();
                r.sleeping
            })
            .unwrap_or_else(|e| e.into_inner());
        drop(reg);
        std::thread::sleep(IDLE_TICK);
        trim_all(false);
    }
}

/// Trims every registered pipe; returns the bytes given back.
#[cfg(not(loom))]
pub(crate) fn trim_all(force: bool) -> usize {
    let live: Vec<Arc<dyn Trim>> = {
        let mut reg = registry();
        reg.owners.retain(|w| w.strong_count() > 0);
        reg.owners.iter().filter_map(Weak::upgrade).collect()
    };
    live.iter().map(|p| p.trim(force)).sum()
}

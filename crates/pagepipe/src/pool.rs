//! The per-pipe page pool and its policies (seed 000).
//!
//! Every slot position of a pipe owns one page-sized buffer in the pipe's arena. A position that
//! holds no data is *free*; its page is either *resident* (a spare page in the pool: the next write
//! there costs no page fault) or given back to the OS with `MADV_DONTNEED` (the next write there
//! faults in a zeroed page: the userspace price of the kernel's `alloc_page()`). A policy decides
//! which freed pages stay resident, whether a writer faults pages in before taking the write side,
//! and when spare pages are trimmed.

#[cfg(not(loom))]
use crate::sync::{Arc, Mutex};
#[cfg(not(loom))]
use std::sync::Weak;

/// How a pipe recycles the pages its data passes through.
///
/// The variants reproduce the kernel designs measured in seed 000, plus pagepipe's default.
/// See the README's pool table for what each costs on this machine.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PoolPolicy {
    /// The 2026 kernel's unified per-pipe pool: before taking the write side a writer faults in
    /// up to `min(pages needed, burst)` pages; after the write the pool is trimmed back to `keep`
    /// spare pages. Reads keep freed pages only while fewer than `keep` are spare.
    Unified {
        /// Spare pages kept between writes (the kernel keeps 2).
        keep: usize,
        /// Most pages faulted in ahead of one write (the kernel's burst is 8).
        burst: usize,
    },
    /// The pre-2026 kernel: two cached pages (`tmp_page[2]`); every other page is faulted in while
    /// holding the write side and given back as soon as it is read.
    TmpPage,
    /// No pool: every page goes back to the OS when read and is faulted in again when written.
    None,
    /// pagepipe's default: freed pages stay resident while the pipe is busy, so steady streaming
    /// takes no page faults; a pipe idle for about 100 ms (or [`crate::shrink`]) trims
    /// them back to `keep` spare pages.
    Adaptive {
        /// Spare pages an idle pipe keeps.
        keep: usize,
    },
}

impl Default for PoolPolicy {
    /// `Adaptive { keep: 2 }`, chosen by measurement (README, "Pool policies").
    fn default() -> Self {
        PoolPolicy::Adaptive { keep: 2 }
    }
}

impl PoolPolicy {
    /// Whether a page freed by a read stays resident, given the spare pages already resident
    /// (computed only by the policies that need it: it reads shared counters).
    pub(crate) fn keep_on_release(self, spare: impl FnOnce() -> usize) -> bool {
        match self {
            PoolPolicy::Unified { keep, .. } => spare() < keep,
            PoolPolicy::TmpPage => spare() < 2,
            PoolPolicy::None => false,
            PoolPolicy::Adaptive { .. } => true,
        }
    }

    /// How many pages a writer of `len` bytes faults in before taking the write side.
    pub(crate) fn prefill(self, len: usize, slot_size: usize) -> usize {
        match self {
            PoolPolicy::Unified { burst, .. } => len.div_ceil(slot_size).min(burst),
            _ => 0,
        }
    }

    /// Spare pages to keep after every write, if this policy trims after writes.
    pub(crate) fn trim_after_write(self) -> Option<usize> {
        match self {
            PoolPolicy::Unified { keep, .. } => Some(keep),
            _ => None,
        }
    }

    /// Spare pages an idle pipe keeps.
    #[cfg(not(loom))]
    pub(crate) fn idle_keep(self) -> usize {
        match self {
            PoolPolicy::Unified { keep, .. } | PoolPolicy::Adaptive { keep } => keep,
            PoolPolicy::TmpPage => 2,
            PoolPolicy::None => 0,
        }
    }
}

/// Something holding spare memory that it can give back to the OS.
#[cfg(not(loom))]
pub(crate) trait Trim: Send + Sync {
    /// Trims spare pages of an idle owner to its idle budget; `force` trims even when busy and
    /// down to zero spare pages. Returns the bytes given back.
    fn trim(&self, force: bool) -> usize;
}

/// Every live pipe in the process, so an idle trimmer and [`crate::shrink`] can reach them.
#[cfg(not(loom))]
struct Registry {
    owners: Vec<Weak<dyn Trim>>,
    /// The process whose trimmer thread runs (0: none yet). A forked child has no trimmer
    /// thread (fork copies only the calling thread) until it registers a pipe of its own.
    trimmer_pid: u32,
}

#[cfg(not(loom))]
static REGISTRY: Mutex<Registry> = Mutex::new(Registry {
    owners: Vec::new(),
    trimmer_pid: 0,
});

/// Wakes the trimmer when a pipe is registered; it sleeps on it while no pipe exists.
#[cfg(not(loom))]
static REGISTERED: std::sync::Condvar = std::sync::Condvar::new();

/// How often the idle trimmer looks at the registered pipes.
#[cfg(not(loom))]
pub(crate) const IDLE_TICK: std::time::Duration = std::time::Duration::from_millis(100);

#[cfg(not(loom))]
fn registry() -> std::sync::MutexGuard<'static, Registry> {
    REGISTRY.lock().unwrap_or_else(|e| e.into_inner())
}

/// Registers `owner` for idle trimming and starts this process's trimmer thread on first use.
#[cfg(not(loom))]
pub(crate) fn register(owner: Weak<dyn Trim>) {
    init_fork_handling();
    let mut reg = registry();
    reg.owners.retain(|w| w.strong_count() > 0);
    reg.owners.push(owner);
    let pid = std::process::id();
    if reg.trimmer_pid != pid {
        // A failed spawn only means idle pipes keep their spare pages until the next read or
        // shrink(); it is not worth failing pipe creation for.
        let spawned = std::thread::Builder::new()
            .name("pagepipe-trim".into())
            .spawn(trimmer);
        if spawned.is_ok() {
            reg.trimmer_pid = pid;
        }
    }
    drop(reg);
    REGISTERED.notify_all();
}

/// The trimmer thread: every tick, trims idle pipes; sleeps while no pipe exists.
#[cfg(not(loom))]
fn trimmer() {
    loop {
        let reg = registry();
        let reg = REGISTERED
            .wait_while(reg, |r| {
                r.owners.retain(|w| w.strong_count() > 0);
                r.owners.is_empty()
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

/// Installs the fork handlers once: the registry lock is taken around `fork(2)`, so a child
/// never inherits it held by a thread that does not exist there, and the child's thread forgets
/// the lock identity it had in the parent.
#[cfg(not(loom))]
pub(crate) fn init_fork_handling() {
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
    crate::pipe::before_fork();
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn policies_decide_as_documented() {
        let unified = PoolPolicy::Unified { keep: 2, burst: 8 };
        assert!(unified.keep_on_release(|| 1));
        assert!(!unified.keep_on_release(|| 2));
        assert_eq!(unified.prefill(64 * 1024, 4096), 8);
        assert_eq!(unified.prefill(5000, 4096), 2);
        assert_eq!(unified.trim_after_write(), Some(2));
        assert!(PoolPolicy::TmpPage.keep_on_release(|| 1));
        assert!(!PoolPolicy::TmpPage.keep_on_release(|| 2));
        assert!(!PoolPolicy::None.keep_on_release(|| 0));
        assert!(PoolPolicy::default().keep_on_release(|| unreachable!("adaptive keeps every page")));
        assert_eq!(PoolPolicy::None.prefill(1 << 20, 4096), 0);
    }
}

//! The death watcher: how a process learns, within microseconds and with no polling, that the
//! other side of one of its pipes has no holder left.
//!
//! The kernel already knows: every holder of an end keeps a descriptor of that end's signal pipe
//! (see `pipe/end.rs`), and when the last one closes (an exit, a `SIGKILL`, a drop) the signal
//! pipe's other end polls `POLLHUP` (no writer left) or `POLLERR` (no reader left). One thread
//! per process sleeps in `epoll_wait(2)` on the hang-up descriptor of each of the process's
//! ends, registered with no event (only `EPOLLHUP`/`EPOLLERR` are reported), so it wakes only
//! when a side dies, and costs no CPU while none does. When it wakes it verifies the death with
//! `poll(2)` (a reused key must not kill a live pipe), sets the end's sticky "peer gone" flag,
//! which every call checks with one load (no system call on the fast path), and wakes the end's
//! sleepers, in every process, through the pipe's futex, and its async tasks here.
//!
//! Only an end whose other side may be in another process needs watching: while a pipe is
//! confined to the process that made it (no fork since, no end sent or received), its ends
//! come and go by drops here, which wake the other side themselves. So an end is *armed*
//! (registered with the instance) when its pipe stops being confined ([`arm`]: an end is sent,
//! received or passed, or the process forks), and the thread starts with the first armed end
//! and lives as long as the process. A forked child has no thread (fork copies only the
//! caller) and an inherited epoll instance that is the parent's: the fork handler forgets it,
//! and the child starts its own at its next call on any end ([`ensure_running`]), arming every
//! end it inherited. Where no thread can run (thread or epoll creation failed), sleepers keep
//! the old fallback: they ask the kernel every [`crate::lock::TICK`].

use crate::sys;
use std::collections::BTreeMap;
use std::os::fd::{BorrowedFd, FromRawFd, IntoRawFd, OwnedFd, RawFd};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, Weak};
use std::time::Duration;

/// An end the watcher watches (implemented by `pipe::end::End`; a trait so that this module
/// sits below the ends it serves).
pub(crate) trait Watched: Send + Sync {
    /// The descriptor on which the kernel reports that the other side has no holder left
    /// (`POLLHUP` or `POLLERR`), if the end has one (a confined pipe has none).
    fn hangup_fd(&self) -> Option<BorrowedFd<'_>>;

    /// Run before this process forks (the child will hold the end too): the end gets a
    /// descriptor the kernel counts holders with, if it had none.
    fn before_fork(&self);

    /// The watcher saw the hang-up: verify it with the kernel and, if real, mark the end's
    /// peer gone and wake its waiters. Returns whether it was real.
    fn hung_up(&self) -> bool;

    /// Whether the watcher's epoll instance watches the end (it may fail to register one).
    fn set_watched(&self, watched: bool);

    /// What [`Watched::set_watched`] last set.
    fn watched(&self) -> bool;

    /// Whether the end's pipe is still confined to this process (no end of it can be in
    /// another): then it needs no watching.
    fn confined(&self) -> bool;
}

/// The process's watcher: its epoll instance and every end it watches.
pub(crate) struct Watcher {
    /// The epoll instance's descriptor number (owned by the watcher thread, which never exits),
    /// with the fork generation ([`CHILD`]) of the process it belongs to.
    epoll: Option<(RawFd, u64)>,
    /// Every live end of this process whose pipe is not confined to it (see [`note`]), by key
    /// (its address), watched or not yet.
    ends: BTreeMap<usize, Weak<dyn Watched>>,
    /// Creating the thread or the instance failed in this generation: do not retry on every
    /// call (sleepers fall back to the tick).
    failed: Option<u64>,
}

static WATCHER: Mutex<Watcher> = Mutex::new(Watcher {
    epoll: None,
    ends: BTreeMap::new(),
    failed: None,
});

/// Forks this process has been the child of: a watcher belongs to one generation.
static CHILD: AtomicU64 = AtomicU64::new(0);
/// `CHILD + 1` of the generation whose watcher runs, 0 while none does.
static RUNNING: AtomicU64 = AtomicU64::new(0);
/// `CHILD + 1` of the generation that needs a watcher (some end was armed, or ends were
/// inherited across a fork), 0 while none does.
static NEEDED: AtomicU64 = AtomicU64::new(0);

/// Tick of a sleeper while the watcher runs: a safety net only (the watcher wakes sleepers when
/// a side dies), long enough that a blocked end costs no measurable CPU.
const WATCHED_TICK: Duration = Duration::from_secs(1);

fn lock() -> MutexGuard<'static, Watcher> {
    WATCHER.lock().unwrap_or_else(|e| e.into_inner())
}

fn key(end: &Arc<dyn Watched>) -> usize {
    Arc::as_ptr(end).cast::<()>() as usize
}

/// Whether this process's watcher runs (one load each of two process-local words).
#[inline]
fn running() -> bool {
    RUNNING.load(Ordering::Relaxed) == CHILD.load(Ordering::Relaxed).wrapping_add(1)
}

/// How long a sleeper may sleep before it asks the kernel itself whether its peer is gone:
/// long if the watcher runs and watches its end (`watched`) or its pipe is `confined` to this
/// process (its peers' drops wake it), else [`crate::lock::TICK`].
pub(crate) fn tick(watched: bool, confined: bool) -> Duration {
    if covers(watched, confined) {
        WATCHED_TICK
    } else {
        crate::lock::TICK
    }
}

/// Whether a peer's death wakes an end's sleepers without their asking (a confined pipe's peer
/// wakes them by its drop; a watched end's, by the watcher): then a sleeper need not ask the
/// kernel before it sleeps, only once a tick passes.
pub(crate) fn covers(watched: bool, confined: bool) -> bool {
    confined || (watched && running())
}

/// Notes a new end of this process, and arms it, unless its pipe is confined (see the module
/// docs): a confined pipe's ends join the list only when it leaves the process ([`note`],
/// from `pipe::end::expose` and before a fork), which keeps an idle pipe's memory down (a
/// list entry each: about 130 bytes per pipe, measured over 2,000 pipes).
pub(crate) fn watch(end: &Arc<dyn Watched>) {
    if end.confined() {
        return;
    }
    let mut w = lock();
    w.ends.insert(key(end), Arc::downgrade(end));
    NEEDED.store(
        CHILD.load(Ordering::Relaxed).wrapping_add(1),
        Ordering::Relaxed,
    );
    let (ep, inherited) = w.start();
    if let Some(ep) = ep {
        if !end.watched() {
            // SAFETY: the watcher thread owns the instance and never closes it.
            let ep = unsafe { BorrowedFd::borrow_raw(ep) };
            end.set_watched(register(ep, &**end, key(end)));
        }
    }
    drop(w);
    drop(inherited); // after unlocking: dropping the last handle of an end unwatches it
}

/// Registers `end` with the instance `ep`: whether it is watched now. A failure (no memory,
/// the user's watch limit, no descriptor) leaves it to the sleepers' tick.
fn register(ep: BorrowedFd<'_>, end: &dyn Watched, key: usize) -> bool {
    end.hangup_fd()
        .is_some_and(|fd| sys::poll::epoll_add(ep, fd, 0, key as u64).is_ok())
}

/// Puts `end` in the list (its pipe is leaving this process, or the process is about to fork);
/// [`arm`] then registers it, [`prepare_fork`] gives it its signal descriptor.
pub(crate) fn note(end: &Arc<dyn Watched>) {
    lock().ends.insert(key(end), Arc::downgrade(end));
}

/// Before this process forks: every end gets its descriptor of its pipe's signal pipe (see
/// [`Watched::before_fork`]), so that the kernel counts the child's holds. The caller put the
/// confined pipes' ends in the list first ([`note`]).
pub(crate) fn prepare_fork() {
    let ends: Vec<Arc<dyn Watched>> = lock().ends.values().filter_map(Weak::upgrade).collect();
    for end in &ends {
        end.before_fork();
    }
    drop(ends); // unlocked: a last handle's drop takes the lock
}

/// Arms every end of this process whose pipe is no longer confined (an end left or came, or
/// the process is about to fork), starting the watcher if it does not run.
pub(crate) fn arm() {
    NEEDED.store(
        CHILD.load(Ordering::Relaxed).wrapping_add(1),
        Ordering::Relaxed,
    );
    start_now();
}

/// Stops watching `end` (before its descriptor closes).
pub(crate) fn unwatch(end: &dyn Watched) {
    let key = (end as *const dyn Watched).cast::<()>() as usize;
    let mut w = lock();
    w.ends.remove(&key);
    if !end.watched() {
        return;
    }
    if let Some((ep, generation)) = w.epoll {
        if generation == CHILD.load(Ordering::Relaxed) {
            // SAFETY: as in `watch`.
            let ep = unsafe { BorrowedFd::borrow_raw(ep) };
            // ENOENT when it already fired (the watcher removes what it saw die).
            if let Some(fd) = end.hangup_fd() {
                let _ = sys::poll::epoll_del(ep, fd);
            }
        }
    }
}

/// Makes sure this process's watcher runs if it needs one: a forked child starts its own at its
/// first call on an inherited end. Inlined: two loads on the fast path.
#[inline]
pub(crate) fn ensure_running() {
    if !running() && NEEDED.load(Ordering::Relaxed) == CHILD.load(Ordering::Relaxed).wrapping_add(1)
    {
        start_now();
    }
}

#[cold]
#[inline(never)]
fn start_now() {
    let mut w = lock();
    let (_, inherited) = w.start();
    drop(w);
    drop(inherited); // after unlocking, as in `watch`
}

impl Watcher {
    /// This generation's epoll instance, starting the thread if it does not run yet, with every
    /// end of the process that is not confined and not yet watched registered; `None` where it
    /// cannot run. Also returns the
    /// handles it took on the ends it registered, for the caller to drop once it has unlocked
    /// (a handle dropped here could be an end's last, whose drop takes this lock).
    fn start(&mut self) -> (Option<RawFd>, Vec<Arc<dyn Watched>>) {
        let generation = CHILD.load(Ordering::Relaxed);
        let ep = match self.epoll {
            Some((ep, g)) if g == generation => ep,
            _ if self.failed == Some(generation) => return (None, Vec::new()),
            _ => {
                let Some(ep) = spawn() else {
                    self.failed = Some(generation);
                    return (None, Vec::new());
                };
                self.epoll = Some((ep, generation));
                RUNNING.store(generation.wrapping_add(1), Ordering::Relaxed);
                ep
            }
        };
        // SAFETY: the watcher thread owns the instance and never closes it.
        let epb = unsafe { BorrowedFd::borrow_raw(ep) };
        let mut held = Vec::new();
        for (&key, end) in &self.ends {
            if let Some(end) = end.upgrade() {
                if !end.watched() && !end.confined() {
                    end.set_watched(register(epb, &*end, key));
                }
                held.push(end);
            }
        }
        (Some(ep), held)
    }
}

/// Creates an epoll instance and the thread that waits on it; the instance's number.
fn spawn() -> Option<RawFd> {
    let ep = sys::poll::epoll_create().ok()?;
    let raw = ep.into_raw_fd();
    // With asynchronous signals blocked: the application's handlers run on its own threads.
    let started = sys::thread::spawn_helper(
        std::thread::Builder::new()
            .name("pagepipe-watch".into())
            .stack_size(64 * 1024),
        move || {
            // SAFETY: `raw` is the instance created above, owned by this thread from here on.
            run(unsafe { OwnedFd::from_raw_fd(raw) })
        },
    );
    match started {
        Ok(_) => Some(raw),
        Err(_) => {
            // SAFETY: the thread did not start, so nothing else owns `raw`.
            drop(unsafe { OwnedFd::from_raw_fd(raw) });
            None
        }
    }
}

/// The watcher thread: waits for hang-ups and hands each to its end.
fn run(ep: OwnedFd) {
    use std::os::fd::AsFd;
    let mut events = [libc::epoll_event { events: 0, u64: 0 }; 64];
    loop {
        let n = match sys::poll::epoll_wait(ep.as_fd(), &mut events, None) {
            Ok(n) => n,
            Err(_) => {
                // Cannot happen with a valid instance and buffer; do not spin if it does.
                std::thread::sleep(crate::lock::TICK);
                continue;
            }
        };
        for ev in &events[..n] {
            let key = ev.u64 as usize;
            // Not under the lock: the end may be dropped here (its last handle) and unwatch.
            let end = lock().ends.get(&key).and_then(Weak::upgrade);
            if let Some(end) = end {
                if end.hung_up() {
                    // Level-triggered: once is enough (the flag is sticky).
                    if let Some(fd) = end.hangup_fd() {
                        let _ = sys::poll::epoll_del(ep.as_fd(), fd);
                    }
                }
            }
        }
    }
}

/// The fork handlers' part (see `fork.rs`): the registry's lock is held across the fork, so
/// the child never inherits it held by the watcher thread, which does not exist there.
pub(crate) fn before_fork() -> MutexGuard<'static, Watcher> {
    lock()
}

/// In the child, with the lock the prepare handler took: forgets the parent's epoll instance
/// (closing this process's copy of its descriptor, which would otherwise keep watching the
/// parent's ends) and the parent's thread.
pub(crate) fn after_fork_child(mut w: MutexGuard<'static, Watcher>) {
    let child = CHILD.fetch_add(1, Ordering::Relaxed).wrapping_add(1);
    // Every end the child inherited may have its other side in the parent now.
    if !w.ends.is_empty() {
        NEEDED.store(child.wrapping_add(1), Ordering::Relaxed);
    }
    for end in w.ends.values().filter_map(Weak::upgrade) {
        end.set_watched(false); // the parent's instance watched it, not ours
    }
    if let Some((ep, _)) = w.epoll.take() {
        // SAFETY: this process's copy of the parent's instance descriptor, used by nobody
        // here (the parent's thread did not survive the fork).
        drop(unsafe { OwnedFd::from_raw_fd(ep) });
    }
    w.failed = None;
    drop(w);
}

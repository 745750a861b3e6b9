//! One process's hold on one end of a pipe ([`End`]): the kernel object that counts holders
//! across processes (the signal pipe), liveness of the other end, readiness for `poll(2)` and
//! async adapters, and blocking until the other side moves.
//!
//! Which processes hold an end is counted by the kernel, through one small kernel pipe per
//! pagepipe, its *signal pipe*. Every process holding a writer keeps its write end open, every
//! process holding a reader its read end; descriptors follow `fork`, `SCM_RIGHTS` and exec like
//! the ends they stand for, and the kernel closes them when a process exits or is killed. So
//! the read end polls `POLLHUP` exactly when no process holds a writer, and the write end
//! `POLLERR` when none holds a reader. A pipe gets its signal pipe only when it may leave the
//! process that made it (a send, a fork) or someone polls it (`Shared::ensure_signal`): until
//! then the other side's only holder is this process's own end, whose drop is seen directly.
//!
//! The same descriptors are what the ends hand out for polling. The signal pipe is in packet
//! mode (every one-byte write takes a slot of its own) and has two slots: a reader's
//! descriptor polls `POLLIN` while a packet is queued, a writer's `POLLOUT` while a slot is
//! free. While some process polls, one packet stands for "the ring holds data" and two for "the
//! ring is full" (see [`End::sync`]). A writer can only add packets and a reader only remove
//! them; either can change the slot count (`F_SETPIPE_SZ`), which is how a resize by either
//! side, with the other side gone or not, leaves both descriptors exact.

#[cfg(not(loom))]
use crate::lock;
use crate::pipe::hint::prefetch_next_write;
#[cfg(not(loom))]
use crate::pipe::shared::LocalEnd;
use crate::pipe::shared::{timeout_ns, Shared};
use crate::region::{Side, FULL, READABLE, SIGNAL_SLOTS};
use crate::ring;
use crate::sync::{Arc, ColdBool, ColdU32, Ordering};
use crate::wait::{sleep_until, Wakers};
use std::io;
use std::time::{Duration, Instant};

/// How long a call waits for the readiness lock in all (asleep on its futex), at most: a call
/// with a deadline waits no later than that (see [`CallDeadline`]). Honest holders keep it
/// for a system call or two, so only a holder descheduled this long, stopped, or a peer keeping
/// it on purpose makes a call wait this much (it used to spin up to a second). Past it, a
/// thread of this process finishes the sync (see [`End::defer_sync`]). Not shorter: a sync
/// left to that thread may come after the call returned, and an edge-triggered poller that
/// read until `WouldBlock` meanwhile can then wait for an edge that a writer's sync skipped
/// (it saw the packet the reader's pending sync was to remove); a holder descheduled for this
/// long is rare, one descheduled for a millisecond is not (measured: the epoll tests lost an
/// edge under load with 1 ms).
#[cfg(not(loom))]
const READINESS_PATIENCE: Duration = Duration::from_millis(100);

#[cfg(not(loom))]
thread_local! {
    /// The deadline of the read or write this thread is in, if it has one (see
    /// [`CallDeadline`]).
    static CALL_DEADLINE: std::cell::Cell<Option<Instant>> = const { std::cell::Cell::new(None) };
}

/// This thread's call deadline while it lives (see [`CALL_DEADLINE`]): a sync inside the call
/// waits for the readiness lock no later than it (`write_deadline(10 ms)` returns within its
/// 10 ms); the previous one comes back at its drop. A call without a deadline (the common
/// case) touches nothing: `None` is what the word holds outside calls with one.
#[cfg(not(loom))]
pub(crate) struct CallDeadline(Option<Option<Instant>>);

#[cfg(not(loom))]
impl CallDeadline {
    /// Makes `deadline`, if any, this thread's call deadline.
    #[inline]
    pub(crate) fn set(deadline: Option<Instant>) -> CallDeadline {
        CallDeadline(deadline.map(|d| CALL_DEADLINE.with(|c| c.replace(Some(d)))))
    }
}

#[cfg(not(loom))]
impl Drop for CallDeadline {
    #[inline]
    fn drop(&mut self) {
        if let Some(before) = self.0 {
            CALL_DEADLINE.with(|d| d.set(before));
        }
    }
}

/// The most rounds one call syncs while its side's `sig_pending` bit keeps coming back with the
/// ring moved (see [`End::sync_delegating`]): a peer that keeps moving it and raising the bit
/// cannot keep a call here.
#[cfg(not(loom))]
const MAX_SYNC_ROUNDS: u32 = 64;

/// The most slots a sync gives the signal pipe: a writer that grows a full ring adds some, a
/// reader that empties it goes back to [`SIGNAL_SLOTS`].
#[cfg(not(loom))]
const MAX_SIGNAL_SLOTS: u32 = 64;

/// Ends of this process that an async adapter ever wrapped (see [`End::adapt`]).
#[cfg(not(loom))]
static ADAPTED: std::sync::Mutex<Vec<std::sync::Weak<End>>> = std::sync::Mutex::new(Vec::new());

/// Makes the descriptors of the adapted ends that `which` selects exact (see [`End::adapt`]).
#[cfg(not(loom))]
fn exact_adapted(which: impl Fn(&End) -> bool) {
    let ends: Vec<Arc<End>> = {
        let mut list = ADAPTED.lock().unwrap_or_else(|e| e.into_inner());
        list.retain(|w| w.strong_count() > 0);
        list.iter().filter_map(std::sync::Weak::upgrade).collect()
    };
    for end in ends.iter().filter(|e| which(e)) {
        let _ = end.poll_fd();
    }
}

/// Run before `fork(2)` (pthread_atfork's prepare handler, in the forking thread): after the
/// fork a pipe may have ends in two processes, and an adapter's task parked in this one may
/// wait for the other, which can only reach it through its descriptor.
#[cfg(not(loom))]
pub(crate) fn before_fork() {
    // Every pipe, with the registry unlocked (see `Registry::live_owners`).
    let owners = crate::reclaim::registry().live_owners();
    // Every pipe's ends in the watcher's list, confined ones too: after the fork none is.
    for owner in &owners {
        owner.note_for_watch();
    }
    crate::watch::prepare_fork();
    crate::pipe::shared::note_fork();
    crate::watch::arm();
    exact_adapted(|_| true);
    // After the fork is counted (no provisional key is chosen from here on) and before the
    // keys' list is locked for the fork: every provisional key becomes real (see
    // `Shared::take_key`).
    for owner in &owners {
        owner.before_fork();
    }
    drop(owners); // a last handle dropped here: no longer confined, so not cached
}

/// An end of `shared` is going to another process: the pipe gets its signal pipe if it had
/// none (the kernel must count holders from now on), this process's key on it becomes real
/// if it was provisional (the other process will read lock words naming it, see
/// `Shared::take_key`) and the pipe is marked exposed, the death watcher arms its ends, and
/// this process's async adapters on it switch to exact descriptors (see [`End::adapt`]).
/// Every way an end leaves calls this before the end's descriptors are made.
///
/// # Errors
/// The OS's error if the signal pipe cannot be made or the key made real (a full descriptor
/// table, no `/proc`): the end must not go (the pipe stays confined).
#[cfg(not(loom))]
pub(crate) fn expose(shared: &Arc<Shared>) -> io::Result<()> {
    shared.ensure_signal()?;
    shared.expose_key()?;
    // No longer confined: its ends join the watcher's list, which `arm` registers.
    shared.note_ends_for_watch();
    crate::watch::arm();
    exact_adapted(|end| Arc::ptr_eq(&end.shared, shared));
    Ok(())
}

/// `End::sync_deferred`'s value while a thread of this process (this fork generation) has the
/// end's deferred sync.
#[cfg(not(loom))]
fn deferred_mark() -> u64 {
    crate::lock::fork_generation() + 1
}

/// The thread [`End::defer_sync`] starts: waits, holding the pipe's mapping but not the end
/// (an end dropped meanwhile must close), until the readiness lock is free or its holder dead,
/// then has the end sync; again while calls keep leaving it transitions, a bounded number of
/// times (a peer that keeps the lock and the bit busy: the next call starts another thread).
#[cfg(not(loom))]
fn deferred_sync(shared: &Shared, end: Option<std::sync::Weak<dyn LocalEnd>>) {
    let sig_lock = &shared.header().sig_lock;
    for _ in 0..MAX_SYNC_ROUNDS {
        if sig_lock.lock(shared, lock::Wait::Until(None)).is_err() {
            break; // this process's key is unusable: the end's next call reports it
        }
        sig_lock.unlock(shared);
        let Some(end) = end.as_ref().and_then(std::sync::Weak::upgrade) else {
            return; // dropped: nothing to sync
        };
        if end.sync_deferred() {
            return;
        }
    }
    if let Some(end) = end.as_ref().and_then(std::sync::Weak::upgrade) {
        end.give_up_deferred();
    }
}

#[cfg(not(loom))]
impl LocalEnd for End {
    fn sync(&self) {
        End::sync(self);
    }

    fn sync_deferred(&self) -> bool {
        if !self.sync_until(Some(Instant::now() + READINESS_PATIENCE)) {
            return false; // held again: the thread waits for it again
        }
        // SeqCst (both): a call that raised the bit and then found the flag still set left its
        // transition to us; the flag's order puts its swap before our store, so the load below
        // sees its bit.
        self.sync_deferred.store(0, Ordering::SeqCst);
        let bit = 1u32 << self.side.index();
        let mine = deferred_mark();
        self.shared.header().sig_pending.load(Ordering::SeqCst) & bit == 0
            || self.sync_deferred.swap(mine, Ordering::SeqCst) == mine
    }

    fn give_up_deferred(&self) {
        self.sync_deferred.store(0, Ordering::SeqCst);
    }

    fn give_signal(&self, fd: std::os::fd::OwnedFd) {
        let _ = self.signal.set(fd); // an end that has one keeps it (received ends)
    }

    fn note_for_watch(self: Arc<Self>) {
        crate::watch::note(&(self as Arc<dyn crate::watch::Watched>));
    }
}

#[cfg(not(loom))]
impl crate::watch::Watched for End {
    fn hangup_fd(&self) -> Option<std::os::fd::BorrowedFd<'_>> {
        self.signal()
    }

    fn before_fork(&self) {
        // The child will hold this end too: the kernel must count holders from now on. A
        // failure (a full descriptor table) leaves this pipe's deaths unseen across the fork.
        let _ = self.shared.ensure_signal();
    }

    fn set_watched(&self, watched: bool) {
        self.watched.store(watched, Ordering::Relaxed);
    }

    fn watched(&self) -> bool {
        self.watched.load(Ordering::Relaxed)
    }

    fn confined(&self) -> bool {
        self.shared.confined()
    }

    fn hung_up(&self) -> bool {
        if !self.ask_kernel() {
            return false; // a stale event (a reused key) or a spurious one
        }
        // Release: pairs with the Acquire load in `peer_gone`; `ask_kernel`'s Acquire fence
        // made the dead side's last publications visible to us, and so to whoever sees this.
        self.peer_gone.store(true, Ordering::Release);
        let h = self.shared.header();
        if self.side == Side::Read {
            h.readable.wake_all();
        } else {
            h.writable.wake_all();
        }
        self.wake_own_waiters();
        // The dead processes may have held a lock: its sleepers check now, not in a tick, and
        // so do takers that come soon.
        lock::note_death();
        h.write_side.lock.nudge();
        h.read_side.lock.nudge();
        h.sig_lock.nudge();
        true
    }
}
/// One process's hold on one end of a pipe: the handles (`Writer`, `Reader` and their clones)
/// of that end in this process share it, and its drop is the process closing that end.
pub(crate) struct End {
    pub(crate) shared: Arc<Shared>,
    /// Which side this end holds.
    pub(crate) side: Side,
    /// This process's descriptor of the signal pipe: its write end for a writer, its read end
    /// for a reader (see the module docs). Unset while the pipe is confined to this process
    /// and nobody polls it: the pipe gets its signal pipe only when it needs one
    /// (`Shared::ensure_signal`), and until then the other side's holders are this process's
    /// own end, whose drop is seen directly.
    #[cfg(not(loom))]
    signal: std::sync::OnceLock<std::os::fd::OwnedFd>,
    /// `closes[other side]` when this end last asked the kernel about the other side, its low
    /// 32 bits (a change of a multiple of 2^32 goes unseen until the next forced ask, as a
    /// peer that never bumps the count does; it keeps the end in 24 bytes).
    peer_seen: ColdU32,
    /// Sticky: the other end has no holder left (no new holder can appear: ends are only ever
    /// copied from live ones).
    peer_gone: ColdBool,
    /// The death watcher watches this end's hang-up descriptor (see `watch.rs`): sleepers may
    /// sleep long ticks.
    watched: ColdBool,
    /// This process has made the descriptor it hands out exact (see [`End::enable_polling`]).
    #[cfg(not(loom))]
    polling: std::sync::atomic::AtomicBool,
    /// A thread of this process waits to sync this end's descriptor (see
    /// [`End::defer_sync`]): the fork generation it was started in, plus one; 0 for none (a
    /// forked child, which has no such thread, sees another generation).
    #[cfg(not(loom))]
    sync_deferred: std::sync::atomic::AtomicU64,
}

impl End {
    #[cfg(not(loom))]
    pub(crate) fn new(
        shared: Arc<Shared>,
        side: Side,
        signal: Option<std::os::fd::OwnedFd>,
    ) -> End {
        let once = std::sync::OnceLock::new();
        if let Some(fd) = signal {
            let _ = once.set(fd);
        }
        End {
            shared,
            side,
            signal: once,
            peer_seen: ColdU32::new(u32::MAX),
            peer_gone: ColdBool::new(false),
            watched: ColdBool::new(false),
            polling: std::sync::atomic::AtomicBool::new(false),
            sync_deferred: std::sync::atomic::AtomicU64::new(0),
        }
    }

    #[cfg(loom)]
    pub(crate) fn new(shared: Arc<Shared>, side: Side) -> End {
        shared.open[side.index()].fetch_add(1, Ordering::Relaxed);
        End {
            shared,
            side,
            peer_seen: ColdU32::new(u32::MAX),
            peer_gone: ColdBool::new(false),
            watched: ColdBool::new(false),
        }
    }

    /// Shares a new end among its handles, and notes it as this process's end of its side
    /// (see `Shared::local`).
    pub(crate) fn arc(end: End) -> Arc<End> {
        let end = Arc::new(end);
        #[cfg(not(loom))]
        {
            let local: std::sync::Weak<dyn LocalEnd> = Arc::downgrade(&end) as _;
            let slot = &end.shared.local[end.side.index()];
            *slot.lock().unwrap_or_else(|e| e.into_inner()) = Some(local);
            crate::watch::watch(&(end.clone() as Arc<dyn crate::watch::Watched>));
        }
        end
    }

    /// Sets this end's non-blocking mode, for every holder of it (a flag in the region, not the
    /// descriptors' shared `O_NONBLOCK`).
    pub(crate) fn set_nonblocking(&self, nonblocking: bool) {
        self.shared.header().nonblocking[self.side.index()]
            .store(u32::from(nonblocking), Ordering::Relaxed);
    }

    /// Whether calls on this end are non-blocking.
    pub(crate) fn is_nonblocking(&self) -> bool {
        self.shared.nonblocking(self.side)
    }

    /// Sets this end's timeout for blocking calls (`None`: wait forever), for every holder.
    pub(crate) fn set_timeout(&self, timeout: Option<Duration>) -> io::Result<()> {
        let ns = timeout_ns(timeout)?;
        self.shared.header().timeout_ns[self.side.index()].store(ns, Ordering::Relaxed);
        Ok(())
    }

    /// The timeout set by [`End::set_timeout`].
    pub(crate) fn timeout(&self) -> Option<Duration> {
        match self.shared.header().timeout_ns[self.side.index()].load(Ordering::Relaxed) {
            0 => None,
            ns => Some(Duration::from_nanos(ns)),
        }
    }

    pub(crate) fn side(&self) -> Side {
        self.side
    }

    /// This end's descriptor of the signal pipe, if the pipe has one yet.
    #[cfg(not(loom))]
    pub(crate) fn signal(&self) -> Option<std::os::fd::BorrowedFd<'_>> {
        use std::os::fd::AsFd;
        self.signal.get().map(AsFd::as_fd)
    }

    /// This end's descriptor of the signal pipe, made first if the pipe has none.
    ///
    /// # Errors
    /// The OS's error if the signal pipe cannot be made (a full descriptor table).
    #[cfg(not(loom))]
    pub(crate) fn signal_now(&self) -> io::Result<std::os::fd::BorrowedFd<'_>> {
        if self.signal.get().is_none() {
            self.shared.ensure_signal()?;
        }
        self.signal().ok_or_else(|| {
            io::Error::other("the pipe's signal pipe was made after this end was dropped")
        })
    }

    /// Which readiness this end stands for, and which wakers its waiting tasks use:
    /// [`READABLE`] for a reader, [`FULL`] for a writer.
    pub(crate) fn own(&self) -> usize {
        if self.side == Side::Read {
            READABLE
        } else {
            FULL
        }
    }

    /// Async tasks of this process waiting for this end to become ready (the lists made if
    /// none were: for a task about to register).
    #[cfg_attr(not(any(feature = "tokio", loom)), allow(dead_code))] // the adapters' only
    pub(crate) fn waiters(&self) -> &Wakers {
        &self.shared.waiters.get_or_make().ready[self.own()]
    }

    /// Async tasks of this process waiting for this end's side, held by another holder of this
    /// process, to be released (see `AsyncWaiters::released`), made as [`End::waiters`].
    #[cfg(any(feature = "tokio", loom))]
    pub(crate) fn release_waiters(&self) -> &Wakers {
        &self.shared.waiters.get_or_make().released[self.side.index()]
    }

    /// Wakes the tasks of this process waiting for this end to become ready, if any.
    #[inline]
    fn wake_own_waiters(&self) {
        if let Some(w) = self.shared.waiters.get() {
            w.ready[self.own()].wake();
        }
    }

    /// Wakes the tasks of this process waiting on the other end: this side's transitions (data
    /// for a writer, room for a reader, a close) are their wake-ups.
    #[inline]
    fn wake_peer_waiters(&self) {
        if let Some(w) = self.shared.waiters.get() {
            w.ready[if self.side == Side::Write {
                READABLE
            } else {
                FULL
            }]
            .wake();
        }
    }

    /// The descriptor this end hands out for polling (the signal pipe's read end for a
    /// reader, its write end for a writer), made (if the pipe had no signal pipe yet) and made
    /// exact first. If the signal pipe cannot be made (a full descriptor table), the memory
    /// file's descriptor, which always polls ready: a poller then finds `WouldBlock` where
    /// there is nothing to do, never a wait with no end, and the next call tries again. An
    /// end that lost its memory file too (a child forked at its descriptor limit, whose calls
    /// all fail with `BrokenPipe`) hands out a descriptor that always polls ready
    /// (`region::ready_fd`). Panics only if even that cannot be made (no descriptor and no
    /// memory left): `AsFd` has no way to fail.
    #[cfg(not(loom))]
    pub(crate) fn poll_fd(&self) -> std::os::fd::BorrowedFd<'_> {
        // Acquire: pairs with the Release store in `enable_polling`.
        if !self.polling.load(std::sync::atomic::Ordering::Acquire) {
            self.enable_polling(); // again at the next call if it could not finish
        }
        match self.signal() {
            Some(fd) => fd,
            None => match self.shared.region.memfd() {
                Ok(fd) => fd,
                Err(e) => crate::region::ready_fd().unwrap_or_else(|| {
                    panic!("a pipe end with no descriptor left, and none to be made: {e}")
                }),
            },
        }
    }

    /// Wraps this end in an async adapter. While its pipe is [confined](Shared::confined) to
    /// this process, transitions wake the adapter's tasks directly and its descriptor is
    /// left as it is (no system call per transition); otherwise, or as soon as the pipe stops
    /// being confined, the descriptor is made exact ([`End::poll_fd`]) and every process's
    /// transitions reach the adapter through the reactor as well.
    ///
    /// A pipe stops being confined only through this process (a fork, a send), and each way
    /// first notes it (`FORKS`, `exposed`) and then makes every end in `ADAPTED` exact; an
    /// adapter registers in `ADAPTED` and then looks at the notes. Both under `ADAPTED`'s lock,
    /// so one of the two sees the other.
    #[cfg(not(loom))]
    #[cfg_attr(not(feature = "tokio"), allow(dead_code))] // used by the tokio adapters
    pub(crate) fn adapt(end: &Arc<End>) {
        {
            let mut list = ADAPTED.lock().unwrap_or_else(|e| e.into_inner());
            list.retain(|w| w.strong_count() > 0);
            list.push(Arc::downgrade(end));
        }
        if !end.shared.confined() {
            let _ = end.poll_fd();
        }
    }

    /// Starts keeping this end's descriptor exact, in every process: sets the region's `polled`
    /// flag for this side and brings the descriptor to the ring's state. This side can: while
    /// nobody polls, the signal pipe holds one packet in two slots, so only a reader may have
    /// to remove it (the ring is empty) and only a writer add one (the ring is full).
    #[cfg(not(loom))]
    fn enable_polling(&self) {
        if self.signal_now().is_err() {
            return; // see `poll_fd`
        }
        let h = self.shared.header();
        let which = self.own();
        // SeqCst: as below. Set first, whether or not the lock comes: from now on every
        // transition of either side keeps the descriptor exact.
        h.polled[which].store(1, Ordering::SeqCst);
        // SeqCst: with the SeqCst index RMWs and flag loads in `sync` (a store-load pair on
        // each side): either a publisher or consumer sees the flag and syncs after us, or our
        // reading of the indices in the sync below sees its update.
        h.polled[which].store(1, Ordering::SeqCst);
        if !self.sync_delegating() {
            // A live holder kept the lock past our patience: this end's descriptor is called
            // exact only after a sync of its own, retried at the next `poll_fd`.
            return;
        }
        // Release: pairs with the Acquire load in `poll_fd`.
        self.polling
            .store(true, std::sync::atomic::Ordering::Release);
    }

    /// After a state change by this side (a publication, a consumption, a resize): if some
    /// process polls, brings the signal pipe to the ring's state. A writer can only add packets
    /// (it holds the write end), a reader only remove them, and each state change of the ring
    /// is made by the side that can reflect it: data appears and the ring fills only by writes,
    /// it empties and frees room only by reads. A resize changes fullness by either side; the
    /// resizer then changes the signal pipe's slot count instead, which either end may do.
    /// Transitions are serialized by `sig_lock` and each rereads the indices under it, so the
    /// last sync after the last change leaves both descriptors exact. Usually one system call
    /// per transition.
    #[cfg(not(loom))]
    #[inline]
    pub(crate) fn sync(&self) {
        self.wake_peer_waiters();
        let h = self.shared.header();
        // SeqCst: see enable_polling.
        if h.polled[READABLE].load(Ordering::SeqCst) != 0
            || h.polled[FULL].load(Ordering::SeqCst) != 0
        {
            self.sync_polled();
        }
    }

    /// The rest of [`End::sync`], once some process polls.
    #[cfg(not(loom))]
    #[cold]
    #[inline(never)]
    fn sync_polled(&self) {
        self.sync_delegating();
    }

    /// Brings the signal pipe to the ring's state under `sig_lock`, waiting for the lock at
    /// most [`READINESS_PATIENCE`] in all (asleep on its futex; a dead holder is taken over as
    /// for any side lock): honest holders keep it for a system call or two. When a live holder
    /// keeps it longer (descheduled, stopped, or a peer keeping it on purpose), this side's
    /// `sig_pending` bit is raised and the sync is left to a thread of this process
    /// ([`End::defer_sync`]), which waits for the lock as long as its holder lives: only this
    /// side can reflect its own transitions (a writer can only add packets and a reader only
    /// remove them), so nothing else may be trusted with them. A holder syncs again while it
    /// finds its side's bit raised with the ring moved since its last sync (a bit raised with
    /// the ring unmoved asks for nothing new). True if this call synced.
    #[cfg(not(loom))]
    fn sync_delegating(&self) -> bool {
        let patience = Instant::now() + READINESS_PATIENCE;
        let deadline = CALL_DEADLINE
            .with(|d| d.get())
            .map_or(patience, |d| d.min(patience));
        if self.sync_until(Some(deadline)) {
            return true;
        }
        self.defer_sync();
        false
    }

    /// [`End::sync_delegating`]'s work, waiting for the lock until `deadline` (`None`: as long
    /// as its holder lives): false, with this side's bit raised, if it was not done.
    #[cfg(not(loom))]
    fn sync_until(&self, deadline: Option<Instant>) -> bool {
        let h = self.shared.header();
        let sh = &*self.shared;
        let bit = 1u32 << self.side.index();
        if h.sig_lock.lock(sh, lock::Wait::Until(deadline)).is_err() {
            // SeqCst: the store half of a store-load pair with the holder's load of
            // `sig_pending` after its release; then one more try, so that a holder that
            // released before it could see the bit cannot leave it to nobody.
            h.sig_pending.fetch_or(bit, Ordering::SeqCst);
            if h.sig_lock.lock(sh, lock::Wait::Never).is_err() {
                return false;
            }
        }
        let mut seen = None;
        for _ in 0..MAX_SYNC_ROUNDS {
            // SeqCst: cleared before we read the ring: a bit raised after this is for a change
            // our sync may miss, and is seen by the load below.
            h.sig_pending.fetch_and(!bit, Ordering::SeqCst);
            let now = (sh.indices(), sh.limit_now());
            if seen != Some(now) {
                self.sync_locked();
                seen = Some(now);
            }
            h.sig_lock.unlock(sh);
            // SeqCst: the load half of the pair above.
            if h.sig_pending.load(Ordering::SeqCst) & bit == 0 {
                return true;
            }
            // Relocked within the same patience, not a fresh one per round.
            if h.sig_lock.lock(sh, lock::Wait::Until(deadline)).is_err() {
                h.sig_pending.fetch_or(bit, Ordering::SeqCst);
                return false;
            }
        }
        h.sig_lock.unlock(sh);
        h.sig_pending.fetch_or(bit, Ordering::SeqCst);
        false
    }

    /// Leaves this end's sync to a thread of this process that waits for the readiness lock as
    /// long as its holder lives (taking it over if it dies), then syncs: at most one such
    /// thread per end at a time (one already there syncs again for every call that raised the
    /// bit meanwhile, see `sync_deferred`). It keeps the pipe's mapping and the end itself
    /// only while it syncs. If the thread cannot start, the bit stays raised for this side's
    /// next sync.
    #[cfg(not(loom))]
    #[cold]
    fn defer_sync(&self) {
        // SeqCst: after this call raised its bit (see `sync_deferred`): a thread that is
        // already there sees the bit after it clears the flag, and syncs again.
        let mine = deferred_mark();
        if self.sync_deferred.swap(mine, Ordering::SeqCst) == mine {
            return;
        }
        let me = self.shared.local[self.side.index()]
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone();
        let shared = self.shared.clone();
        let started = crate::sys::thread::spawn_helper(
            std::thread::Builder::new()
                .name("pagepipe-sync".into())
                .stack_size(64 * 1024),
            move || deferred_sync(&shared, me),
        );
        if started.is_err() {
            self.sync_deferred.store(0, Ordering::SeqCst);
        }
    }

    #[cfg(loom)]
    pub(crate) fn sync(&self) {
        self.wake_peer_waiters();
    }

    /// The body of [`End::sync`], with `sig_lock` held. The descriptors poll `POLLIN` while
    /// `packets >= 1` and `POLLOUT` while `packets < slots`. The usual state has two slots and
    /// one packet for "data", two for "full", none for "empty" (once the reader's descriptor is
    /// polled; else the one it started with). Each side moves toward it as far as it can: a
    /// writer adds packets, a reader takes them, either sets the slot count. Where a side
    /// cannot (a writer that made room by a resize cannot take a packet; a reader that made
    /// the ring full by a resize, or a writer with no reader left, cannot add one) it changes
    /// the slot count instead, and a later sync brings the usual state back.
    #[cfg(not(loom))]
    fn sync_locked(&self) {
        use crate::sys::mm::PAGE_SIZE;
        use crate::sys::pipe::{read_byte, set_pipe_size, write_byte};
        let sh = &*self.shared;
        let h = sh.header();
        let (head, tail) = sh.indices();
        let occupied = ring::occupancy(head, tail);
        let readable = occupied != 0;
        let full = occupied >= sh.limit_now();
        let watch_in = h.polled[READABLE].load(Ordering::Relaxed) != 0;
        let watch_out = h.polled[FULL].load(Ordering::Relaxed) != 0;
        let Some(fd) = self.signal() else {
            return; // polled only once the pipe has its signal pipe: not ours yet (dropping)
        };
        // What the signal pipe holds, asked of the kernel: nothing in the shared region says
        // it (a peer could write any count there and hide data from a poller).
        let (mut packets, mut slots) = Self::ask_signal_pipe(fd, watch_out);
        let target: u32 = if watch_out && full {
            2
        } else if watch_in && !readable {
            0
        } else {
            1
        };
        // A failed move (a refused resize, a peer's bytes in the way) leaves the pipe as the
        // kernel has it: the next sync asks again.
        let set_slots = |n: u32, slots: &mut u32| {
            if *slots != n && set_pipe_size(fd, n as usize * PAGE_SIZE).is_ok() {
                *slots = n;
            }
        };
        if self.side == Side::Write {
            if packets <= target {
                if watch_out {
                    set_slots(SIGNAL_SLOTS, &mut slots); // room for the packets first
                }
                while packets < target {
                    match write_byte(fd) {
                        Ok(()) => packets += 1,
                        // No reader left (`EPIPE`): nobody to tell of data, and fullness goes
                        // by the slot count below. Anything else: a peer's bytes are in the
                        // way.
                        Err(_) => break,
                    }
                }
                if packets < target && watch_out && full && packets.is_power_of_two() {
                    set_slots(packets, &mut slots); // full with no reader: fewer slots
                }
                if watch_out && full {
                    // A co-writer may have cleared O_DIRECT on the descriptors' shared
                    // description: our packets then merged into fewer slots than we count.
                    // The kernel's own answer decides; fewer slots until it says full.
                    let mut n = slots / 2;
                    while n >= 1
                        && crate::sys::poll::poll_now(fd, libc::POLLOUT) & libc::POLLOUT != 0
                    {
                        set_slots(n, &mut slots);
                        n /= 2;
                    }
                }
            } else if watch_out && full != (packets >= slots) {
                // More packets than the state calls for (a resize made room; or a peer's):
                // the slot count makes the writer's readiness right.
                let n = if full {
                    packets
                } else {
                    (packets + 1).next_power_of_two()
                };
                if n.is_power_of_two() && n <= MAX_SIGNAL_SLOTS {
                    set_slots(n, &mut slots);
                }
            }
        } else if packets >= target {
            while packets > target {
                match read_byte(fd) {
                    Ok(()) => packets -= 1,
                    Err(_) => break,
                }
            }
            if watch_out {
                set_slots(SIGNAL_SLOTS, &mut slots);
            }
        } else if watch_out && full && packets == 1 {
            set_slots(1, &mut slots); // made full by a resize: one slot instead of a packet
        }
    }

    /// The signal pipe's `(packets, slots)` as the kernel has them (bytes queued stand for
    /// packets: ours are one byte each), clamped to what a sync can work with. The slot count
    /// matters only to the writer's readiness: without `slots` it is not asked (one system
    /// call less per sync while only readers poll) and reads as [`MAX_SIGNAL_SLOTS`].
    #[cfg(not(loom))]
    fn ask_signal_pipe(fd: std::os::fd::BorrowedFd<'_>, slots: bool) -> (u32, u32) {
        use crate::sys::mm::PAGE_SIZE;
        let slots = if slots {
            crate::sys::pipe::pipe_size(fd)
                .map_or(SIGNAL_SLOTS, |b| {
                    u32::try_from(b / PAGE_SIZE).unwrap_or(MAX_SIGNAL_SLOTS)
                })
                .clamp(1, MAX_SIGNAL_SLOTS)
        } else {
            MAX_SIGNAL_SLOTS
        };
        let packets = crate::sys::pipe::fionread(fd).unwrap_or(0);
        (u32::try_from(packets).unwrap_or(slots).min(slots), slots)
    }

    /// Whether the other end has no holder left in any process. Without `force`, asks the
    /// kernel only when some process closed that end since we last asked (no syscall on the
    /// fast path); with it, always (sleepers, every tick: a killed process bumps nothing).
    pub(crate) fn peer_gone(&self, force: bool) -> bool {
        // Acquire: pairs with the Release store in `hung_up` (the watcher thread's).
        if self.peer_gone.load(Ordering::Acquire) {
            return true;
        }
        // A forked child that lost the region: no wait on it may last (its calls then fail
        // with `BrokenPipe` when they need the region's locks).
        #[cfg(not(loom))]
        if self.shared.region.lost() {
            return true;
        }
        #[cfg(not(loom))]
        crate::watch::ensure_running();
        let other = self.side.other().index();
        // Acquire: pairs with the Release bump in `End::drop`, made after that process
        // published its last slots (and closed its descriptor).
        let seen = self.shared.header().closes[other].load(Ordering::Acquire);
        let seen = seen as u32;
        if !force && seen == self.peer_seen.load(Ordering::Relaxed) {
            return false;
        }
        self.peer_seen.store(seen, Ordering::Relaxed);
        if self.ask_kernel() {
            self.peer_gone.store(true, Ordering::Relaxed);
            return true;
        }
        false
    }

    #[cfg(not(loom))]
    fn ask_kernel(&self) -> bool {
        let other = self.side.other();
        if self.shared.confined() {
            // The pipe never left this process, so this process's ends are the other side's
            // only holders: no system call (an empty `try_read` that spins must not make
            // one). A fork meanwhile may have given that side a holder elsewhere: then the
            // kernel decides. The fork is counted before it happens; a last handle dropped
            // after it is seen with that count through the handle's Release decrement and
            // `local_gone`'s Acquire fence when the forking thread dropped it, and through the
            // kernel's fork (which write-protects this process's memory) otherwise.
            let gone = self.shared.local_gone(other);
            if !gone || self.shared.confined() {
                return gone;
            }
        }
        let Some(fd) = self.signal() else {
            // Not confined, yet no signal pipe: a fork whose handler could not make one (a
            // full descriptor table, see `Watched::before_fork`). The kernel counts no holders
            // for us then; this process's ends are all that can be seen.
            return self.shared.local_gone(other);
        };
        // A reader asks the signal pipe's read end (POLLHUP: no writer holds the write end);
        // a writer its write end (POLLERR: no reader holds the read end).
        let gone = if self.side == Side::Read {
            libc::POLLHUP
        } else {
            libc::POLLERR
        };
        let gone = crate::sys::poll::poll_now(fd, 0) & gone != 0;
        if gone {
            // Acquire: the peers' last publications happened before their descriptors closed,
            // which the kernel's poll observed; our later loads of head/tail must see them.
            std::sync::atomic::fence(std::sync::atomic::Ordering::Acquire);
        }
        gone
    }

    #[cfg(loom)]
    fn ask_kernel(&self) -> bool {
        // Acquire: pairs with the AcqRel decrement in End::drop.
        self.shared.open[self.side.other().index()].load(Ordering::Acquire) == 0
    }

    /// How long a sleeper on this end sleeps before it asks the kernel itself about the other
    /// side (see `watch::tick`).
    fn tick(&self) -> Duration {
        #[cfg(not(loom))]
        return crate::watch::tick(self.watched.load(Ordering::Relaxed), self.shared.confined());
        #[cfg(loom)]
        return crate::lock::TICK;
    }

    /// Whether a sleeper must ask the kernel about the other side before it sleeps: unless the
    /// other side's death wakes it anyway (see `watch::covers`).
    fn ask_before_sleep(&self) -> bool {
        #[cfg(not(loom))]
        return !crate::watch::covers(self.watched.load(Ordering::Relaxed), self.shared.confined());
        #[cfg(loom)]
        return true;
    }

    /// Blocks until the ring may hold data or no writer is left; `TimedOut` at the deadline.
    pub(crate) fn wait_readable(&self, deadline: Option<Instant>) -> io::Result<()> {
        let sh = &*self.shared;
        let h = sh.header();
        sleep_until(
            &h.head.word,
            &h.readable,
            |force| {
                let (hd, t) = sh.indices();
                if hd != t {
                    sh.prefetch(Side::Read); // what the read will touch first travels meanwhile
                    prefetch_next_write(); // and what this thread's reply will touch
                    return true;
                }
                self.peer_gone(force)
            },
            deadline,
            self.ask_before_sleep(),
            || self.tick(),
        )
    }

    /// Blocks until the ring may have a free slot or no reader is left; `TimedOut` at the
    /// deadline.
    pub(crate) fn wait_writable(&self, deadline: Option<Instant>) -> io::Result<()> {
        let sh = &*self.shared;
        let h = sh.header();
        sleep_until(
            &h.tail.word,
            &h.writable,
            |force| {
                let (hd, t) = sh.indices();
                !ring::is_full(hd, t, sh.limit_now()) || self.peer_gone(force)
            },
            deadline,
            self.ask_before_sleep(),
            || self.tick(),
        )
    }
}

impl Drop for End {
    fn drop(&mut self) {
        // Close our descriptor of the end first: a peer that sees the bump below and asks the
        // kernel must not count us. The watcher stops watching it before it closes.
        #[cfg(not(loom))]
        {
            crate::watch::unwatch(self);
            drop(self.signal.take());
        }
        #[cfg(loom)]
        // AcqRel: Release pairs with the Acquire load in ask_kernel (our publications happen
        // before a peer sees the end closed); Acquire orders other ends' drops.
        self.shared.open[self.side.index()].fetch_sub(1, Ordering::AcqRel);
        let h = self.shared.header();
        // Release: pairs with the Acquire load in `peer_gone`.
        h.closes[self.side.index()].fetch_add(1, Ordering::Release);
        // The other side's sleepers registered in the index word they wait on (see
        // `sleep_until`): an RMW of it orders this close against each registration. Either a
        // registration comes later in the word's order, reads from this RMW (Release: the bump
        // above is visible to its recheck) and the sleeper sees the close, or it came before
        // and this RMW sees its flag and wakes it. No flag: nobody to wake, no system call.
        let (word, futex) = if self.side == Side::Write {
            (&h.head.word, &h.readable)
        } else {
            (&h.tail.word, &h.writable)
        };
        // Release: as above.
        let old = word.fetch_or(0, Ordering::Release);
        crate::wait::wake_all_if_waiting(word, futex, old);
        // Tasks of this process waiting on the other side see the close at once (those in
        // other processes by their descriptor's POLLHUP or POLLERR).
        self.wake_peer_waiters();
    }
}

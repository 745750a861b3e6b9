//! What one process knows of one pipe ([`Shared`]: its mapping of the region), the guards of
//! the two sides, and the index operations both sides build on: taking a side and loading its
//! saved state, publishing (head), consuming (tail), snapshots for sleepers.
//!
//! Also this process's key on the pipe (see [`crate::lock`]): provisional while the pipe is
//! confined to this process (no description opened, no byte locked), made real when the pipe
//! leaves (an end sent or passed: [`Shared::expose_key`]; a fork: [`Shared::key_before_fork`]),
//! real from the start on a pipe that came from another process (see [`Shared::take_key`]).

use crate::error::invalid;
use crate::lock::{self, Taken};
use crate::region::{self, Config, Region, Side, Slot, RELEASED};
use crate::ring::{self, check_indices, ONE};
use crate::sync::{AtomicU64, ColdU64, Ordering};
use crate::wait::{wake_one_if_waiting, Lazy, Wakers};
use std::io;
use std::time::{Duration, Instant};

/// This process's end of one side of a pipe, as [`Shared`] keeps it: what a resize asks of it.
/// (The end itself, `pipe::end::End`, holds its `Shared`; this trait keeps the two files from
/// importing each other.)
pub(crate) trait LocalEnd: Send + Sync {
    /// Brings this end's descriptors to the ring's state (see `End::sync`).
    fn sync(&self);

    /// On the thread a sync that could not get the readiness lock started, once the lock came
    /// free: the sync; true when nothing is left for the thread (see `End::defer_sync`).
    fn sync_deferred(&self) -> bool;

    /// The thread of `End::defer_sync` gives up (a peer keeps the lock and the bit busy).
    fn give_up_deferred(&self);

    /// Hands this end its descriptor of the pipe's new signal pipe (see
    /// [`Shared::ensure_signal`]).
    fn give_signal(&self, fd: std::os::fd::OwnedFd);

    /// Puts this end in the death watcher's list (`crate::watch::note`): its pipe is leaving
    /// this process, or the process is about to fork.
    fn note_for_watch(self: std::sync::Arc<Self>);
}

/// Everything one process knows of one pipe: its mapping of the region.
pub(crate) struct Shared {
    /// Taken out only by `drop`, which may give it to the cache (see `pipe::cache`).
    #[cfg(not(loom))]
    pub(crate) region: std::mem::ManuallyDrop<Region>,
    #[cfg(loom)]
    pub(crate) region: Region,
    /// `index(head)` seen by the idle trimmer's last tick.
    #[cfg(not(loom))]
    pub(crate) idle_mark: std::sync::atomic::AtomicU64,
    /// This process's end of each side of this mapping, if it has one: `set_capacity` changes
    /// state that either side may have to reflect in its descriptor.
    #[cfg(not(loom))]
    pub(crate) local: [std::sync::Mutex<Option<std::sync::Weak<dyn LocalEnd>>>; 2],
    /// Whether the pipe has its signal pipe in this process (see [`Shared::ensure_signal`]);
    /// the lock serializes making it with itself.
    #[cfg(not(loom))]
    signal_made: std::sync::Mutex<bool>,
    /// Tasks of this process waiting in an async adapter, made at the first registration
    /// (see [`AsyncWaiters`]).
    pub(crate) waiters: Lazy<AsyncWaiters>,
    /// [`FORKS`] when this process made or mapped the region (see [`Shared::confined`]).
    #[cfg(not(loom))]
    #[cfg_attr(not(feature = "tokio"), allow(dead_code))] // used by the tokio adapters
    born_forks: u64,
    /// An end of this pipe left this process (sent over a socket, passed to a command) or
    /// came from another (see [`Shared::confined`]).
    #[cfg(not(loom))]
    pub(crate) exposed: std::sync::atomic::AtomicBool,
    /// Ends open in this (only) process: loom's stand-in for the signal pipe.
    #[cfg(loom)]
    pub(crate) open: [crate::sync::AtomicUsize; 2],
    /// This process's key on the pipe (see [`crate::lock`]) with the fork generation it was
    /// taken in, `(generation + 1) << 32 | key`, and `PROVISIONAL` (`pipe/keys.rs`) while its byte is not
    /// locked (see [`Shared::take_key`]); 0 until taken. Changed only under `keying` (and by
    /// the prepare fork handler, which holds the fork gate exclusively), from 0 to a key, or
    /// from provisional to real with the same key: every thread that read a key of this
    /// generation uses the same value.
    #[cfg(not(loom))]
    pub(super) key: std::sync::atomic::AtomicU64,
    /// Serializes deciding the key (provisional or real) with making it real and marking the
    /// pipe exposed (see [`Shared::expose_key`]). Taken after the fork gate, never before.
    #[cfg(not(loom))]
    pub(super) keying: std::sync::Mutex<()>,
    /// The memory file's inode, 0 until first asked for (see [`Shared::ino`]).
    #[cfg(not(loom))]
    pub(super) ino: std::sync::atomic::AtomicU64,
}

/// One pipe's async waiters in this process (see `Shared::waiters`).
#[derive(Default)]
pub(crate) struct AsyncWaiters {
    /// Tasks waiting for an end to become ready, indexed like `polled`: `[FULL]` for room,
    /// `[READABLE]` for data.
    pub(crate) ready: [Wakers; 2],
    /// Tasks waiting for a side that another holder of this process has (a chunk, a resize, a
    /// concurrent call), indexed by [`Side::index`]: the guards' release wakes them (see the
    /// adapters in `tokio.rs`). Only where adapters exist.
    #[cfg(any(feature = "tokio", loom))]
    pub(crate) released: [Wakers; 2],
}

/// Dead resizers one call settles before it calls a journal that keeps reappearing corrupt.
const MAX_SETTLES: u32 = 3;

#[cfg(not(loom))]
impl Drop for Shared {
    fn drop(&mut self) {
        self.drop_key();
        // SAFETY: `region` is taken once, here, and `self` is not used after.
        let region = unsafe { std::mem::ManuallyDrop::take(&mut self.region) };
        if self.confined() {
            // No other process can hold this region: it waits for the next pipe.
            crate::pipe::cache::give(region);
        }
        // Otherwise dropped: the mapping, and the descriptor (with this process's key lock).
    }
}

/// A view of the ring with a validated size, for as long as a side is held.
#[derive(Clone, Copy)]
pub(crate) struct Ring<'a> {
    region: &'a Region,
    /// Slot count, a power of two of at most `region.max_ring`.
    pub(crate) size: usize,
}

impl<'a> Ring<'a> {
    /// A view of `region`'s ring of `size` slots (validated by the caller).
    pub(crate) fn new(region: &'a Region, size: usize) -> Ring<'a> {
        Ring { region, size }
    }

    /// Slot index `index`'s position and bookkeeping.
    pub(crate) fn slot(&self, index: u64) -> (usize, &'a Slot) {
        let pos = ring::slot(index, self.size);
        (pos, self.region.slot(pos))
    }

    /// The first byte of position `pos`'s page.
    pub(crate) fn page(&self, pos: usize) -> *mut u8 {
        self.region.page(pos)
    }

    /// The first byte of the pages of positions `pos..pos + count`, which lie one after the
    /// other (see `Region::run`).
    pub(crate) fn run(&self, pos: usize, count: usize) -> *mut u8 {
        self.region.run(pos, count)
    }

    pub(crate) fn slot_size(&self) -> usize {
        self.region.config.slot_size
    }
}

/// The write side, held: released on drop.
pub(crate) struct WriteGuard<'a> {
    pub(crate) sh: &'a Shared,
    /// `index(head)`: only write-side holders move head.
    pub(crate) head: u64,
    /// A possibly stale `index(tail)`; never ahead of the real tail.
    pub(crate) cached_tail: u64,
    /// Ring size and max_usage, validated when the side was taken (they change only with both
    /// sides held).
    pub(crate) ring_size: usize,
    pub(crate) limit: u64,
    /// Not `Send`: the side lock's word names the thread that took it, and a guard moved to
    /// another thread would outlive that identity (the taking thread may exit, and the side
    /// would then be taken over from its live holder).
    pub(crate) _thread: std::marker::PhantomData<*const ()>,
}

/// The read side, held: released on drop.
pub(crate) struct ReadGuard<'a> {
    pub(crate) sh: &'a Shared,
    /// `index(tail)`: only read-side holders move tail.
    pub(crate) tail: u64,
    /// A possibly stale `index(head)`; never ahead of the real head.
    pub(crate) cached_head: u64,
    pub(crate) ring_size: usize,
    pub(crate) limit: u64,
    /// Not `Send`: see [`WriteGuard`].
    pub(crate) _thread: std::marker::PhantomData<*const ()>,
}

impl Drop for WriteGuard<'_> {
    fn drop(&mut self) {
        let h = self.sh.header();
        store_side_state(&h.write_side.state, self.head, self.cached_tail);
        h.write_side.lock.unlock(self.sh);
        // Room left for another writer asleep: hand it the wake-up (see `wait::sleep_until`).
        crate::wait::pass_on(&h.tail.word, &h.writable, |tail| {
            !ring::is_full(self.head, tail, self.limit)
        });
        // After the unlock's SeqCst swap: the advance of `Wakers`' protocol.
        #[cfg(any(feature = "tokio", loom))]
        if let Some(w) = self.sh.waiters.get() {
            w.released[Side::Write.index()].wake();
        }
    }
}

impl Drop for ReadGuard<'_> {
    fn drop(&mut self) {
        let h = self.sh.header();
        store_side_state(&h.read_side.state, self.tail, self.cached_head);
        h.read_side.lock.unlock(self.sh);
        // Data left for another reader asleep: hand it the wake-up (see `wait::sleep_until`).
        crate::wait::pass_on(&h.head.word, &h.readable, |head| head != self.tail);
        // After the unlock's SeqCst swap: the advance of `Wakers`' protocol.
        #[cfg(any(feature = "tokio", loom))]
        if let Some(w) = self.sh.waiters.get() {
            w.released[Side::Read.index()].wake();
        }
    }
}

/// Saves a side's `(own index, cached other index)` for the next holder; the lock's Release
/// unlock orders it.
fn store_side_state(state: &[ColdU64; 2], own: u64, other: u64) {
    state[0].store(own, Ordering::Relaxed);
    state[1].store(other, Ordering::Relaxed);
}

/// The side state a holder left, or after a dead holder, the index words themselves: `own`
/// (head for writers, tail for readers: only this side moves it) and `other` (Acquire: pairs
/// with the other side's Release index RMW). With `check_own`, checks the saved copy against
/// the `own` word (see below); without, the caller checks it later.
///
/// On an error the side is released: a corrupt region must not keep it held (its holder would
/// get `Deadlock` on every later call, and everyone else would wait for a live holder).
fn load_side_state(
    holders: &dyn lock::Holders,
    side: &region::SideLine,
    taken: Taken,
    own: &AtomicU64,
    other: &AtomicU64,
    check_own: bool,
) -> io::Result<(u64, u64)> {
    let state = &side.state;
    let (mine, theirs) = match taken {
        // Relaxed: written by the previous holder before its Release unlock, which our lock's
        // Acquire pairs with.
        Taken::Clean => (
            state[0].load(Ordering::Relaxed),
            state[1].load(Ordering::Relaxed),
        ),
        // The dead holder may have moved its index without saving its copy. Relaxed for our own
        // index (nobody else moves it); Acquire for the other side's.
        Taken::FromDead => (
            ring::index(own.load(Ordering::Relaxed)),
            ring::index(other.load(Ordering::Acquire)),
        ),
    };
    // Between holders the copy equals the index word (only holders move it, and they save the
    // copy before releasing): a mismatch is a corrupt region, which would otherwise make a
    // sleeper see data (or room) that the side cannot find. Not in loom models: it validates
    // memory, not the protocol.
    #[cfg(loom)]
    let _ = (check_own, holders);
    #[cfg(not(loom))]
    if check_own && taken == Taken::Clean {
        if let Err(e) = check_saved_index(mine, own.load(Ordering::Relaxed)) {
            side.lock.unlock(holders);
            return Err(e);
        }
    }
    Ok((mine, theirs))
}

/// A side's saved index against its index `word` (see [`load_side_state`]).
pub(crate) fn check_saved_index(saved: u64, word: u64) -> io::Result<()> {
    if ring::index(word) != saved {
        return Err(invalid(format!(
            "a side's saved index {saved} differs from its index word {}",
            ring::index(word)
        )));
    }
    Ok(())
}

impl WriteGuard<'_> {
    pub(crate) fn ring(&self) -> Ring<'_> {
        Ring {
            region: &self.sh.region,
            size: self.ring_size,
        }
    }

    /// Checks the head word against the saved head, for holders that took the side with
    /// [`Shared::lock_write_unchecked`] and are about to wait for room or report it missing.
    pub(crate) fn check_head(&self) -> io::Result<()> {
        check_saved_index(
            self.head,
            self.sh.header().head.word.load(Ordering::Relaxed),
        )
    }
}

impl ReadGuard<'_> {
    pub(crate) fn ring(&self) -> Ring<'_> {
        Ring {
            region: &self.sh.region,
            size: self.ring_size,
        }
    }
}

impl Shared {
    pub(crate) fn new(region: Region) -> Shared {
        Shared {
            #[cfg(not(loom))]
            idle_mark: std::sync::atomic::AtomicU64::new(0),
            #[cfg(not(loom))]
            local: Default::default(),
            #[cfg(not(loom))]
            signal_made: std::sync::Mutex::new(false),
            waiters: Lazy::default(),
            #[cfg(not(loom))]
            born_forks: FORKS.load(std::sync::atomic::Ordering::Relaxed),
            #[cfg(not(loom))]
            exposed: std::sync::atomic::AtomicBool::new(false),
            #[cfg(loom)]
            open: [
                crate::sync::AtomicUsize::new(0),
                crate::sync::AtomicUsize::new(0),
            ],
            #[cfg(not(loom))]
            key: std::sync::atomic::AtomicU64::new(0),
            #[cfg(not(loom))]
            keying: std::sync::Mutex::new(()),
            #[cfg(not(loom))]
            ino: std::sync::atomic::AtomicU64::new(0),
            #[cfg(not(loom))]
            region: std::mem::ManuallyDrop::new(region),
            #[cfg(loom)]
            region,
        }
    }

    /// Puts this process's ends of this pipe in the death watcher's list (see
    /// `crate::watch::note`): a confined pipe's ends are not in it.
    #[cfg(not(loom))]
    pub(crate) fn note_ends_for_watch(&self) {
        for slot in &self.local {
            let end = slot.lock().unwrap_or_else(|e| e.into_inner()).clone();
            if let Some(end) = end.and_then(|w| w.upgrade()) {
                end.note_for_watch();
            }
        }
    }

    /// Whether every end of this pipe is in this process: it was made here, and neither did
    /// this process fork since, nor did an end come from or go to another process. While it is,
    /// the async adapters need no descriptor: every transition is made by this process, which
    /// wakes them through [`Shared::waiters`].
    #[cfg(not(loom))]
    pub(crate) fn confined(&self) -> bool {
        !self.exposed.load(std::sync::atomic::Ordering::Relaxed)
            && FORKS.load(std::sync::atomic::Ordering::Relaxed) == self.born_forks
    }

    /// Whether no other process can write the region (see [`Shared::confined`]): what lets the
    /// chunk API hand out slices over it (see `ReadChunk::slices`). Under loom, always.
    #[inline]
    pub(crate) fn private(&self) -> bool {
        #[cfg(not(loom))]
        return self.confined();
        #[cfg(loom)]
        return true;
    }

    /// Notes that an end of this pipe came from another process (see [`Shared::confined`]),
    /// before anyone takes a key on it; or, from [`Shared::expose_key`], that one is going to
    /// another (`pipe::end::expose` also switches the adapters).
    #[cfg(not(loom))]
    pub(crate) fn mark_exposed(&self) {
        self.exposed
            .store(true, std::sync::atomic::Ordering::Relaxed);
    }

    /// Whether this process holds an end of `side` (a live handle of it, as far as `local`
    /// knows: an end this process dropped, or never had, is not held).
    #[cfg(all(not(loom), feature = "tokio"))]
    pub(crate) fn holds(&self, side: Side) -> bool {
        let slot = &self.local[side.index()];
        slot.lock()
            .unwrap_or_else(|e| e.into_inner())
            .as_ref()
            .is_some_and(|w| w.strong_count() > 0)
    }

    /// Makes the pipe's signal pipe, if it has none in this process yet, and hands its two ends
    /// to this process's ends of the pipe (an end dropped meanwhile has its half closed at
    /// once: the kernel then reports that side gone, as it is). A pipe made here needs one
    /// only once it may leave the process (a send, a fork) or someone polls it: until then the
    /// other side's holder can only be this process's end, whose drop is seen directly
    /// ([`Shared::local_gone`]), and creation costs no kernel pipe. An end that came from
    /// another process brought its descriptor ([`Shared::note_signal`]).
    ///
    /// # Errors
    /// The OS's error if the kernel pipe cannot be made (a full descriptor table).
    #[cfg(not(loom))]
    pub(crate) fn ensure_signal(&self) -> io::Result<()> {
        use std::os::fd::AsFd;
        let mut made = self.signal_made.lock().unwrap_or_else(|e| e.into_inner());
        if *made {
            return Ok(());
        }
        let (read, write) = crate::sys::pipe::packet_pipe()?;
        // Nobody polls yet (polling makes the signal pipe first): one packet, both
        // descriptors ready, as the header says (see Region::init and End::enable_polling).
        crate::sys::pipe::write_byte(write.as_fd())?;
        for (side, fd) in [(Side::Write, write), (Side::Read, read)] {
            let end = self.local[side.index()]
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .as_ref()
                .and_then(std::sync::Weak::upgrade);
            if let Some(end) = end {
                end.give_signal(fd);
            }
        }
        *made = true;
        Ok(())
    }

    /// The pipe's own locks a forked child could need, held by the forking thread across
    /// `fork(2)` (see `crate::fork`; called after every `before_fork`, with the registry
    /// locked): `signal_made`, then `local` (the order `ensure_signal` takes them in). A child
    /// that inherited one held by a parent thread (a resize syncing the ends, an adapter asking
    /// which ends this process holds, a liveness question) would wait for it forever in its
    /// first such call, deadline or not. Both are leaves, held for a few instructions or a
    /// `pipe2(2)`: the fork waits that long at most.
    #[cfg(not(loom))]
    pub(crate) fn hold_for_fork(self: std::sync::Arc<Self>) -> Box<dyn std::any::Any> {
        type Guard<T> = std::sync::MutexGuard<'static, T>;
        /// Declared guards first, so they are dropped (unlocked) before `_owner`, which owns
        /// the mutexes.
        struct ForkHold {
            _made: Guard<bool>,
            _local: [Guard<Option<std::sync::Weak<dyn LocalEnd>>>; 2],
            _owner: std::sync::Arc<Shared>,
        }
        let made = self.signal_made.lock().unwrap_or_else(|e| e.into_inner());
        let [w, r] = &self.local;
        let local = [w, r].map(|m| m.lock().unwrap_or_else(|e| e.into_inner()));
        // SAFETY: the guards borrow mutexes inside `self`'s allocation, which `ForkHold` keeps
        // alive in `_owner` and drops only after them (fields drop in declaration order);
        // moving the `Arc` does not move the allocation. The guards never leave the `ForkHold`.
        let (made, local) = unsafe {
            (
                std::mem::transmute::<std::sync::MutexGuard<'_, bool>, Guard<bool>>(made),
                std::mem::transmute::<
                    [std::sync::MutexGuard<'_, Option<std::sync::Weak<dyn LocalEnd>>>; 2],
                    [Guard<Option<std::sync::Weak<dyn LocalEnd>>>; 2],
                >(local),
            )
        };
        Box::new(ForkHold {
            _made: made,
            _local: local,
            _owner: self,
        })
    }

    /// An end of this mapping came with its descriptor of the signal pipe (received).
    #[cfg(not(loom))]
    pub(crate) fn note_signal(&self) {
        *self.signal_made.lock().unwrap_or_else(|e| e.into_inner()) = true;
    }

    /// Whether this process's end of `side` is gone (or never was): the whole answer for a
    /// pipe that never left the process ([`Shared::confined`]). The end's last handle dropped before this process's view
    /// of it goes: an Acquire fence after seeing it gone orders the end's last publications
    /// (before its drop) before our later loads.
    #[cfg(not(loom))]
    pub(crate) fn local_gone(&self, side: Side) -> bool {
        let gone = self.local[side.index()]
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .as_ref()
            .is_none_or(|w| w.strong_count() == 0);
        if gone {
            // Acquire: pairs with the Release decrement of the end's last handle (`Arc`'s
            // drop), which its earlier publications precede.
            std::sync::atomic::fence(std::sync::atomic::Ordering::Acquire);
        }
        gone
    }

    /// After a change either side may have to reflect (a resize): syncs the descriptors of
    /// every end this process holds. A side held only by other processes catches up at its
    /// next operation.
    pub(crate) fn sync_local(&self) {
        #[cfg(not(loom))]
        for slot in &self.local {
            let end = slot
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .as_ref()
                .and_then(std::sync::Weak::upgrade);
            if let Some(end) = end {
                end.sync();
            }
        }
    }

    pub(crate) fn header(&self) -> &region::Header {
        self.region.header()
    }

    pub(crate) fn config(&self) -> Config {
        self.region.config
    }

    /// Takes side `side`'s lock. A resize whose resizer died before it finished (its journal
    /// still staged, see `pipe/capacity.rs`) is settled first: the lock is abandoned as a dead
    /// holder would leave it (so whoever takes it next still recovers the side's state), both
    /// sides are taken in resize order (write, then read) and the resize is finished.
    fn take(&self, side: Side, wait: lock::Wait) -> io::Result<Taken> {
        let lock = &self.side_line(side).lock;
        let mut settled = 0;
        loop {
            let taken = lock.lock(self, wait)?;
            if !self.resize_pending() {
                return Ok(taken);
            }
            lock.abandon(self);
            // Each settling finishes one dead resizer's work; a journal staged again and again
            // is a peer rewriting it, not resizers dying: bounded, then reported.
            if settled == MAX_SETTLES {
                return Err(invalid(
                    "the resize journal is staged again after every settling (a peer writes it)",
                ));
            }
            self.settle_resize(wait)?;
            settled += 1;
        }
    }

    /// The shared line of side `side`.
    fn side_line(&self, side: Side) -> &region::SideLine {
        let h = self.header();
        match side {
            Side::Write => &h.write_side,
            Side::Read => &h.read_side,
        }
    }

    /// Whether a resize's journal is staged (one load of a cold word). Only a resizer that died
    /// leaves it so for anyone who holds a side: a live one holds both until it clears it.
    #[inline]
    pub(crate) fn resize_pending(&self) -> bool {
        // Acquire: pairs with the Release store of STAGED in `set_capacity`, so the staged
        // slots are visible to whoever settles.
        self.header().resize.state.load(Ordering::Acquire) != 0
    }

    /// Takes both sides in resize order, as [`Shared::lock_write`] and
    /// [`Shared::lock_read`] do but without settling (this is the settling) and without
    /// skipping released slots (a resizer releases none, and the ring may be half rewritten).
    pub(crate) fn lock_both_raw(
        &self,
        wait: lock::Wait,
    ) -> io::Result<(WriteGuard<'_>, ReadGuard<'_>)> {
        let h = self.header();
        let ws = self.write_guard(h.write_side.lock.lock(self, wait)?, true)?;
        let rs = self.read_guard(h.read_side.lock.lock(self, wait)?, false)?;
        Ok((ws, rs))
    }

    /// Takes the write side and reads its state from the region.
    pub(crate) fn lock_write(&self, wait: lock::Wait) -> io::Result<WriteGuard<'_>> {
        self.write_guard(self.take(Side::Write, wait)?, true)
    }

    /// [`Shared::lock_write`] without loading the head word to check the saved head against
    /// it, for `write`: a waiting reader polls that word, so loading it misses in the cache
    /// and waits for the line, on a round trip's critical path. The writer checks it where it
    /// touches the word anyway: the publication's RMW returns it ([`publish`]),
    /// and a writer that finds the ring full checks before it waits or reports `WouldBlock`
    /// ([`WriteGuard::check_head`]), so a corrupt word never has it wait for room it cannot
    /// find. A write that only merges checks nothing: it touches the slot before the saved
    /// head, which is memory-safe whatever the word says.
    pub(crate) fn lock_write_unchecked(&self, wait: lock::Wait) -> io::Result<WriteGuard<'_>> {
        self.write_guard(self.take(Side::Write, wait)?, false)
    }

    /// [`Shared::lock_write_unchecked`] if the write side is free now, without waiting
    /// (`None`: it is held, or its saved state is corrupt), for fast paths that fall back to
    /// the general one, which waits or reports.
    #[inline]
    pub(crate) fn try_lock_write_unchecked(&self) -> Option<WriteGuard<'_>> {
        let lock = &self.header().write_side.lock;
        if !lock.try_lock(self) {
            return None;
        }
        if self.resize_pending() {
            lock.abandon(self); // the general path settles it
            return None;
        }
        self.write_guard(Taken::Clean, false).ok()
    }

    /// The guard of the write side just taken (`taken`): its state read from the region.
    #[inline]
    fn write_guard(&self, taken: Taken, check_head: bool) -> io::Result<WriteGuard<'_>> {
        let h = self.header();
        // A dead holder's unpublished slots are beyond head: nothing else to recover.
        let (head, cached_tail) = load_side_state(
            self,
            &h.write_side,
            taken,
            &h.head.word,
            &h.tail.word,
            check_head,
        )?;
        let mut g = WriteGuard {
            sh: self,
            head,
            cached_tail,
            ring_size: 1,
            limit: 1,
            _thread: std::marker::PhantomData,
        };
        g.ring_size = self.region.ring_size()?;
        g.limit = self.region.max_usage(g.ring_size)? as u64;
        check_indices(g.head, g.cached_tail, g.ring_size)?;
        Ok(g)
    }

    /// Takes the read side and reads its state from the region; after a reader that died
    /// holding it, skips the slots it had released but not yet handed back.
    pub(crate) fn lock_read(&self, wait: lock::Wait) -> io::Result<ReadGuard<'_>> {
        self.read_guard(self.take(Side::Read, wait)?, true)
    }

    /// [`Shared::lock_read`] if the read side is free now, without waiting (`None`: it is
    /// held, or its saved state is corrupt), for fast paths that fall back to the general
    /// one, which waits or reports.
    #[inline]
    pub(crate) fn try_lock_read(&self) -> Option<ReadGuard<'_>> {
        let lock = &self.header().read_side.lock;
        if !lock.try_lock(self) {
            return None;
        }
        if self.resize_pending() {
            lock.abandon(self); // the general path settles it
            return None;
        }
        self.read_guard(Taken::Clean, true).ok()
    }

    /// The guard of the read side just taken (`taken`): its state read from the region, and
    /// after a dead holder, the slots it released skipped (if `recover`).
    #[inline]
    fn read_guard(&self, taken: Taken, recover: bool) -> io::Result<ReadGuard<'_>> {
        let h = self.header();
        let (tail, cached_head) =
            load_side_state(self, &h.read_side, taken, &h.tail.word, &h.head.word, true)?;
        let mut g = ReadGuard {
            sh: self,
            tail,
            cached_head,
            ring_size: 1,
            limit: 1,
            _thread: std::marker::PhantomData,
        };
        g.ring_size = self.region.ring_size()?;
        g.limit = self.region.max_usage(g.ring_size)? as u64;
        check_indices(g.cached_head, g.tail, g.ring_size)?;
        if taken == Taken::FromDead && recover {
            self.skip_released(&mut g);
        }
        Ok(g)
    }

    /// After a reader that died holding the read side: skips the slots it had released but
    /// not yet handed back.
    #[cold]
    fn skip_released(&self, g: &mut ReadGuard<'_>) {
        let ring = g.ring();
        let mut skipped = 0;
        while g.tail + skipped != g.cached_head {
            let st = ring.slot(g.tail + skipped).1.state.load(Ordering::Relaxed);
            if st & RELEASED == 0 {
                break;
            }
            // A notification record the dead reader released after a poster flagged it (see
            // `notify`): its LOSS record is still owed.
            if st & region::LOSS != 0 {
                self.header().note_loss.store(1, Ordering::Relaxed);
            }
            skipped += 1;
        }
        self.advance_tail(skipped);
        g.tail += skipped;
    }

    // ----- waking -----

    /// Called after a slot was published with a `head` RMW that returned `old`.
    pub(crate) fn wake_readers_if_waiting(&self, old: u64) {
        let h = self.header();
        wake_one_if_waiting(&h.head.word, &h.readable, old);
    }

    /// Called after a slot was consumed with a `tail` RMW that returned `old`.
    pub(crate) fn wake_writers_if_waiting(&self, old: u64) {
        let h = self.header();
        wake_one_if_waiting(&h.tail.word, &h.writable, old);
    }

    /// Hands `n` released slots back to the writer side and wakes a sleeping writer.
    pub(crate) fn advance_tail(&self, n: u64) {
        let old = self.advance_tail_quiet(n);
        self.wake_writers_if_waiting(old);
    }

    /// Hands `n` released slots back to the writer side; returns the tail word before (0 for
    /// no slot), whose sleeper flag the caller hands to [`Shared::wake_writers_if_waiting`]
    /// once, when its call is done: a read that frees many slots wakes a sleeping writer once,
    /// as Linux's `pipe_read` does, not once per batch (a wake-up on a busy machine costs the
    /// woken side a trip through the scheduler, and every one it need not make is a win).
    pub(crate) fn advance_tail_quiet(&self, n: u64) -> u64 {
        if n == 0 {
            return 0;
        }
        // Release: pairs with the writer's Acquire load of tail, so our reads of these pages (and
        // their release) happen before the writer reuses the positions. SeqCst (free on x86,
        // where every RMW is a full barrier): the store half of the store-load pair with
        // End::enable_polling.
        self.header().tail.word.fetch_add(n * ONE, Ordering::SeqCst)
    }

    /// The head index now, checked against the caller's `tail` in a ring of `ring` slots.
    /// Acquire: pairs with the writer's Release head RMW, publishing the slots and pages below
    /// it.
    pub(crate) fn load_head(&self, tail: u64, ring: usize) -> io::Result<u64> {
        let head = ring::index(self.header().head.word.load(Ordering::Acquire));
        check_indices(head, tail, ring)?;
        Ok(head)
    }

    /// The tail index now, checked against the caller's `head` in a ring of `ring` slots.
    /// Acquire: pairs with the reader's Release tail RMW, so its reads of the freed pages (and
    /// its release of their slots) happen before a writer reuses them.
    pub(crate) fn load_tail(&self, head: u64, ring: usize) -> io::Result<u64> {
        let tail = ring::index(self.header().tail.word.load(Ordering::Acquire));
        check_indices(head, tail, ring)?;
        Ok(tail)
    }

    // ----- waiting (no side held) -----

    /// A `(head, tail)` index snapshot: tail is read first, so the head read after it is never
    /// behind it (head only grows, and tail never passes it) unless a peer corrupted them.
    pub(crate) fn indices(&self) -> (u64, u64) {
        let h = self.header();
        // Acquire (both): pair with the Release RMWs that advance tail and head.
        let t = ring::index(h.tail.word.load(Ordering::Acquire));
        let hd = ring::index(h.head.word.load(Ordering::Acquire));
        (hd, t)
    }

    /// Slots data may use now, for sleepers (a bad value reads as "full": they recheck every
    /// tick and the next operation reports it).
    pub(crate) fn limit_now(&self) -> u64 {
        self.region
            .ring_size()
            .and_then(|r| self.region.max_usage(r))
            .map_or(0, |l| l as u64)
    }

    /// The deadline of a blocking call on `side` that starts now, if a timeout is set.
    pub(crate) fn deadline(&self, side: Side) -> Option<Instant> {
        match self.header().timeout_ns[side.index()].load(Ordering::Relaxed) {
            0 => None,
            ns => Instant::now().checked_add(Duration::from_nanos(ns)),
        }
    }

    pub(crate) fn nonblocking(&self, side: Side) -> bool {
        self.header().nonblocking[side.index()].load(Ordering::Relaxed) != 0
    }

    /// How a call on `side` may wait for its side lock (`nonblocking`: the call's own mode).
    pub(crate) fn lock_wait(&self, nonblocking: bool, deadline: Option<Instant>) -> lock::Wait {
        if nonblocking {
            lock::Wait::Never
        } else {
            lock::Wait::Until(deadline)
        }
    }

    /// Bytes queued (`FIONREAD`), without taking a lock: a snapshot.
    pub(crate) fn queued_bytes(&self) -> usize {
        let h = self.header();
        // Consumed bytes first, so that the published count read after it covers them, except
        // for bytes published a moment ago: a writer counts them just after its publication
        // RMW, so a reader may consume them first (the difference saturates: such a snapshot
        // reads too little, never a wrapped huge value). Acquire (both): keeps the second load
        // after the first; the counters are written Relaxed by their side's holder next to
        // that side's index RMW.
        let out = h.tail.bytes.load(Ordering::Acquire);
        let inn = h.head.bytes.load(Ordering::Acquire);
        inn.saturating_sub(out) as usize
    }

    // ----- capacity -----

    pub(crate) fn capacity(&self) -> usize {
        self.limit_now() as usize * self.config().slot_size
    }
}

/// Forks this process made, or that made it (counted before each fork, so parent and child
/// both see the increment).
#[cfg(not(loom))]
static FORKS: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

/// Counts a fork (before it happens; see `pipe::end::before_fork`).
#[cfg(not(loom))]
pub(crate) fn note_fork() {
    FORKS.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
}

/// Slots staged before one publication (and, on the reader side, released before one tail
/// update): one index RMW, one cache-line handoff to the other side, per this many pages at
/// least (a run copied at once, up to 64 KiB, is published as one batch).
pub(crate) const PUBLISH_BATCH: u64 = 4;

/// Most bytes one copy moves between a caller's buffer and the ring: a write's whole pages go
/// into consecutive free slots, whose pages lie one after the other, with one copy rather than
/// one per slot, and a read copies such a run of full slots out at once. Where the two sides'
/// cores share no cache (this machine's far vCPU placement, docs/benchmarks.md), copying one
/// 4 KiB page at a time moved 4.7-5.0 GB/s and 64 KiB runs 6.2-6.7, rtrb's speed on the same
/// placement; on near cores the two were even. A run is published as one batch.
pub(crate) const COPY_RUN: usize = 64 << 10;

/// Publishes the `n` slots staged from index `from`, holding `bytes` in all, and wakes a
/// sleeping reader. `InvalidData` when the head word was not at `from`: a peer corrupted the
/// region (the check `Shared::lock_write_unchecked` leaves to us).
pub(crate) fn publish(sh: &Shared, from: u64, n: u64, bytes: usize) -> io::Result<()> {
    let old = publish_quiet(sh, from, n, bytes)?;
    sh.wake_readers_if_waiting(old);
    Ok(())
}

/// [`publish`] without the wake-up: returns the head word before (0 for no slot), whose
/// sleeper flag the caller hands to [`Shared::wake_readers_if_waiting`] once its call has
/// published everything it will (a write wakes a sleeping reader once, when it is done or the
/// ring is full, as Linux's `pipe_write` does). On `InvalidData` it has woken the sleepers
/// itself.
pub(crate) fn publish_quiet(sh: &Shared, from: u64, n: u64, bytes: usize) -> io::Result<u64> {
    if n == 0 {
        return Ok(0);
    }
    // Release: pairs with the reader's Acquire load of head, publishing the pages and slots.
    // SeqCst (free on x86): the store half of the store-load pair with End::enable_polling.
    // A run's publication is timed now and then: the line comes back from the reader's core,
    // and how long that takes tells where that core is (see `copy::Placement`). A round trip's
    // single slot is not (the clock would sit on its critical path).
    let old = crate::pipe::copy::timed(n >= PUBLISH_BATCH, || {
        sh.header().head.word.fetch_add(n * ONE, Ordering::SeqCst)
    });
    // After the RMW, which brought the line here: a waiting reader polls it, and loading the
    // counter before the RMW would wait for the line on a round trip's critical path.
    add_bytes(sh, bytes);
    if let Err(e) = check_saved_index(from, old) {
        sh.wake_readers_if_waiting(old); // whatever the head word says, nobody sleeps on it
        return Err(e);
    }
    Ok(old)
}

/// Counts `n` more bytes published (for `Reader::len`); only write-side holders write it.
pub(crate) fn add_bytes(sh: &Shared, n: usize) {
    let b = &sh.header().head.bytes;
    b.store(
        b.load(Ordering::Relaxed).wrapping_add(n as u64),
        Ordering::Relaxed,
    );
}

/// A timeout as the region stores it (nanoseconds, 0 for none).
pub(crate) fn timeout_ns(t: Option<Duration>) -> io::Result<u64> {
    match t {
        None => Ok(0),
        Some(d) if d.is_zero() => Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            "cannot set a 0 duration timeout",
        )),
        Some(d) => Ok(u64::try_from(d.as_nanos()).unwrap_or(u64::MAX)),
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use std::sync::atomic::{AtomicBool, Ordering::Relaxed};

    /// Threads keep taking the pipe's own locks (as resizes syncing the ends, adapters and
    /// liveness questions do, each for a moment) while another thread forks: the fork holds
    /// them across `fork(2)` (`Shared::hold_for_fork`), so every child finds them free. Without
    /// that, a child now and then inherits one held by a thread it does not have, and its first
    /// call that takes it hangs.
    #[test]
    fn a_child_forked_while_threads_take_a_pipes_own_locks_finds_them_free() {
        let _forks = crate::fork::tests_that_fork();
        let (w, r) = crate::pipe().unwrap();
        let sh = w.end.shared.clone();
        let stop = std::sync::Arc::new(AtomicBool::new(false));
        let takers: Vec<_> = (0..3)
            .map(|i| {
                let (sh, stop) = (sh.clone(), stop.clone());
                std::thread::spawn(move || {
                    while !stop.load(Relaxed) {
                        if i < 2 {
                            let g = sh.local[i].lock().unwrap();
                            std::hint::black_box(&g);
                            std::thread::yield_now();
                        } else {
                            let g = sh.signal_made.lock().unwrap();
                            std::hint::black_box(&g);
                            std::thread::yield_now();
                        }
                    }
                })
            })
            .collect();
        let mut inherited = 0;
        for _ in 0..200 {
            // SAFETY: the child only tries three locks and leaves with _exit.
            let pid = unsafe { libc::fork() };
            assert!(pid >= 0);
            if pid == 0 {
                let free = sh.local.iter().all(|m| m.try_lock().is_ok())
                    && sh.signal_made.try_lock().is_ok();
                // SAFETY: leaves the child at once.
                unsafe { libc::_exit(i32::from(!free)) };
            }
            let mut status = 0;
            // SAFETY: our own child, a valid status pointer.
            assert_eq!(unsafe { libc::waitpid(pid, &mut status, 0) }, pid);
            assert!(libc::WIFEXITED(status), "{status:#x}");
            inherited += libc::WEXITSTATUS(status);
        }
        stop.store(true, Relaxed);
        for t in takers {
            t.join().unwrap();
        }
        assert_eq!(
            inherited, 0,
            "children of 200 forks inherited a pipe lock held"
        );
        drop((w, r));
    }
}

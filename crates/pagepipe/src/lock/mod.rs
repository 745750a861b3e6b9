//! Side locks that live in shared memory and survive a holder that dies.
//!
//! A lock is one 64-bit word in a pipe's region: 0 when free, else the holder's identity. The
//! low 32 bits hold the holding thread's id (bits 0..=30) and [`WAITERS`] (bit 31); the high 32
//! bits the holding process's *key* on this pipe. Taking the lock is one compare-and-swap of the
//! whole word, so the identity is never half written.
//!
//! Whether a holder lives is never read from the word alone, nor from "a thread with that id
//! exists" (a peer can name any live thread, init's or ours):
//! - Another process's key is a byte of the pipe's own memory file that the process keeps an
//!   open-file-description lock on (`F_OFD_SETLK`, through a description of its own) while it
//!   holds the pipe (see `Shared::key`). The kernel drops the lock when the process exits or is
//!   killed, and no other process can take it while it lives; `F_OFD_GETLK` tells whether
//!   anyone holds it. So a key names a live process *that holds
//!   this pipe*, or a dead holder: a stranger cannot be named. (While a pipe never left its
//!   process, that process's key is provisional, its byte unlocked: nobody else reads its lock
//!   words. It is locked before an end leaves or the process forks: `Shared::take_key`.)
//! - This process's key with another thread's id: every thread publishes which locks it holds or
//!   is taking ([`held`]); a thread that says neither does not hold it.
//! - The caller's own identity: a thread knows what it holds; if not this lock, a peer wrote it.
//!
//! A contended taker spins briefly, then sets [`WAITERS`] and sleeps on the word's low half (a
//! shared futex) for at most [`TICK`]. When a tick passes with the same holder, or it is woken
//! with the word unchanged (the death watcher nudges sleepers when a process dies: `nudge`),
//! it asks the OS whether that thread still exists; if not, it takes the lock over and tells its
//! caller, who recovers the side's state (see `Shared::read_guard` in `pipe/shared.rs`).
//! Nothing is trusted in the word: a value naming no live thread is a dead holder; a value
//! naming the caller, who does not hold it, is taken over too; only a caller that holds it
//! (a chunk alive) gets [`io::ErrorKind::Deadlock`].
//!
//! Why not robust pthread mutexes: their layout is libc's, the kernel walks list pointers that
//! a hostile peer could write, and loom cannot model them (DESIGN.md, "Cross-process").

#[cfg(not(loom))]
use crate::error::{held_too_long, unknown_holder};
use crate::sync::{AtomicU64, Ordering};
use std::io;
use std::time::{Duration, Instant};

/// Set in a held lock's word when some taker sleeps on it: the holder wakes on release.
pub(crate) const WAITERS: u64 = 1 << 31;
/// The thread id bits of a lock word.
const TID_MASK: u64 = WAITERS - 1;
/// When this process last learned that a peer process died (ms on [`clock_ms`]'s clock).
#[cfg(not(loom))]
static LAST_DEATH_MS: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

/// Milliseconds on the monotonic clock (never 0). No lazily initialized state: safe in a
/// child forked while another thread was here.
#[cfg(not(loom))]
fn clock_ms() -> u64 {
    crate::sys::thread::monotonic_ms() + 1
}

/// The death watcher saw a peer process die (see `watch.rs`): for a while, contended takers
/// check the holder before their first sleep instead of after a tick.
#[cfg(not(loom))]
pub(crate) fn note_death() {
    LAST_DEATH_MS.store(clock_ms(), std::sync::atomic::Ordering::Relaxed);
}

/// Whether a peer died in the last second (see [`note_death`]).
#[cfg(not(loom))]
fn death_recent() -> bool {
    let last = LAST_DEATH_MS.load(std::sync::atomic::Ordering::Relaxed);
    last != 0 && clock_ms().saturating_sub(last) < 1000
}

#[cfg(loom)]
fn death_recent() -> bool {
    false
}

/// A holder identity nobody has: thread id `TID_MASK` (above every `pid_max`), key 0 (no
/// process's: keys start at 1).
const DEAD_HOLDER: u64 = TID_MASK;
/// How long a taker sleeps before it checks that the holder is alive.
pub(crate) const TICK: Duration = Duration::from_millis(50);

const _: () = assert!(
    cfg!(target_endian = "little"),
    "the futex is the lock word's low half, which is its first four bytes only on little-endian"
);

/// How a taker may wait for a held lock.
#[derive(Clone, Copy, Debug)]
pub(crate) enum Wait {
    /// Not at all: `WouldBlock` (non-blocking ends never wait for a lock held by a chunk).
    Never,
    /// Until the lock is free or its holder is found dead, at most until the deadline if any.
    Until(Option<Instant>),
    /// Until the lock is free or its holder is found dead, never sleeping: spins and yields,
    /// asking the OS about the holder now and then, until the deadline (then
    /// `TimedOut`: a word a peer wrote, naming a live thread that holds nothing, must not keep
    /// a poster spinning). For notification posters, which must not sleep and hold the lock
    /// only to copy one record (as the kernel's poster spins on its queue's spinlock).
    Spin(Instant),
}

impl Wait {
    /// [`Wait::Spin`] for at most [`SPIN_PATIENCE`] from now.
    pub(crate) fn spin() -> Wait {
        Wait::Spin(Instant::now() + SPIN_PATIENCE)
    }
}

/// How a lock was taken.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Taken {
    /// From a live holder that released it (or it was free): the side's state is consistent.
    Clean,
    /// From a holder that died holding it: the caller must recover the side's state.
    FromDead,
}

/// What a taker found in the lock word (see `SideLock::look`).
enum Look {
    /// Taken, or an error to return.
    Done(io::Result<Taken>),
    /// The word changed under the CAS: load it again.
    Again,
    /// Another thread holds it.
    Held,
}

/// What a lock needs to know of the pipe it lives in: this process's key on it, the lock's
/// name in this process, and whether another process still holds the pipe. Implemented by
/// `Shared` (a trait, so this module sits below it).
pub(crate) trait Holders {
    /// This process's key on the pipe (see the module docs).
    fn key(&self) -> io::Result<u32>;
    /// `lock`'s name in this process, the same from every mapping of the pipe.
    fn id(&self, lock: &SideLock) -> u64;
    /// Whether the process whose key is `key` (not this one) still holds the pipe.
    fn process_alive(&self, key: u32) -> io::Result<bool>;
    /// Whether `key` is this process's through another mapping of the same pipe (an end
    /// received from ourselves): its holders are threads of ours, asked as ours are.
    fn ours(&self, key: u32) -> bool;
}

/// The calling thread's identity on a pipe: its thread id and the process's key.
#[inline]
fn identity<H: Holders + ?Sized>(h: &H) -> io::Result<u64> {
    Ok(u64::from(h.key()?) << 32 | u64::from(tid()?))
}

/// A side lock word (see the module docs).
#[repr(C)]
pub(crate) struct SideLock {
    word: AtomicU64,
    #[cfg(loom)]
    sleep: loom::sync::Mutex<()>,
    #[cfg(loom)]
    cv: loom::sync::Condvar,
}

impl SideLock {
    #[cfg(loom)]
    pub(crate) fn new() -> SideLock {
        SideLock {
            word: AtomicU64::new(0),
            sleep: loom::sync::Mutex::new(()),
            cv: loom::sync::Condvar::new(),
        }
    }

    /// Takes the lock.
    ///
    /// # Errors
    /// `WouldBlock` ([`Wait::Never`]) or `TimedOut` (deadline passed) while a live thread holds
    /// it; `Deadlock` if the word names the calling thread (it already holds this lock, for
    /// example through a chunk, or a peer wrote our identity into the region).
    #[inline]
    pub(crate) fn lock<H: Holders>(&self, h: &H, wait: Wait) -> io::Result<Taken> {
        let me = identity(h)?;
        let id = h.id(self);
        held::intend(id);
        // AcqRel: Acquire pairs with the Release swap in `unlock`, so the previous holder's
        // writes to the side's state are visible to us; Release publishes our intent (above)
        // to a taker of this process that finds our identity here and asks whether we hold it.
        let taken = match self
            .word
            .compare_exchange(0, me, Ordering::AcqRel, Ordering::Relaxed)
        {
            Ok(_) => Ok(Taken::Clean),
            Err(_) => self.lock_slow(me, id, h as &dyn Holders, wait),
        };
        if taken.is_err() {
            held::remove(id);
        }
        taken
    }

    /// Takes the lock only if it is free, with one compare-and-swap: no spinning, no waiting,
    /// no look at a holder. For fast paths that fall back to [`SideLock::lock`] when it fails.
    #[inline]
    pub(crate) fn try_lock<H: Holders + ?Sized>(&self, h: &H) -> bool {
        let Ok(me) = identity(h) else {
            return false; // `lock` reports why
        };
        let id = h.id(self);
        held::intend(id);
        // AcqRel: as in `lock`.
        let taken = self
            .word
            .compare_exchange(0, me, Ordering::AcqRel, Ordering::Relaxed)
            .is_ok();
        if !taken {
            held::remove(id);
        }
        taken
    }

    #[cold]
    fn lock_slow(&self, me: u64, id: u64, h: &dyn Holders, wait: Wait) -> io::Result<Taken> {
        let deadline = match wait {
            Wait::Never => None,
            Wait::Until(d) => d,
            Wait::Spin(until) => return self.lock_spin(me, id, h, until),
        };
        let mut spins = 0u32;
        let mut waited = 0u64; // WAITERS once we have slept: others may sleep too
        let mut suspect = None; // a holder seen through a whole tick
        let mut races = 0u32; // CASes lost in a row: the word keeps changing under us
        loop {
            let cur = self.word.load(Ordering::Relaxed);
            match self.look(cur, me, id, waited, h) {
                Look::Done(r) => return r,
                Look::Again => {
                    races += 1;
                    if races % RACES == 0 {
                        self.lost_races(&wait, deadline)?;
                    }
                    continue;
                }
                Look::Held => {}
            }
            if spins < SPINS {
                spins += 1;
                std::hint::spin_loop();
                continue;
            }
            let never = matches!(wait, Wait::Never);
            // Check the holder before the first sleep too when a process just died (its
            // holds are likely what we wait for); otherwise only after a tick or a nudge, so
            // a contended lock with live holders costs no check.
            let check = never || suspect == Some(cur | WAITERS) || (waited == 0 && death_recent());
            if check && !holder_alive(cur, me, id, h)? {
                if self.take_over(cur, me, id, h) {
                    return Ok(Taken::FromDead);
                }
                races += 1;
                if races % RACES == 0 {
                    self.lost_races(&wait, deadline)?;
                }
                continue;
            }
            if never {
                return Err(io::Error::new(
                    io::ErrorKind::WouldBlock,
                    "the pipe's side is held (by a chunk or a resize)",
                ));
            }
            if cur & WAITERS == 0
                && self
                    .word
                    .compare_exchange(cur, cur | WAITERS, Ordering::Relaxed, Ordering::Relaxed)
                    .is_err()
            {
                continue;
            }
            waited = WAITERS;
            let mut tick = TICK;
            if let Some(d) = deadline {
                let now = Instant::now();
                if now >= d {
                    return Err(io::Error::new(
                        io::ErrorKind::TimedOut,
                        "timed out waiting for the pipe's side lock",
                    ));
                }
                tick = tick.min(d - now);
            }
            // Woken with the word unchanged (a nudge: the death watcher saw a side die, see
            // `nudge`), or a whole tick with it unchanged: check the holder before sleeping
            // again. A release changes the word, so a contended lock costs no check.
            let _woken = self.sleep(cur | WAITERS, tick);
            suspect = Some(cur | WAITERS);
        }
    }

    /// After [`RACES`] lost CASes in a row (only a peer rewriting the word on purpose keeps
    /// winning): a non-blocking taker gives up, a blocking one checks its deadline and lets the
    /// CPU go for a moment.
    #[cold]
    fn lost_races(&self, wait: &Wait, deadline: Option<Instant>) -> io::Result<()> {
        if matches!(wait, Wait::Never) {
            return Err(io::Error::new(
                io::ErrorKind::WouldBlock,
                "the pipe's side lock keeps changing under us",
            ));
        }
        if deadline.is_some_and(|d| Instant::now() >= d) {
            return Err(io::Error::new(
                io::ErrorKind::TimedOut,
                "timed out: the pipe's side lock keeps changing under us",
            ));
        }
        crate::sync::yield_now();
        Ok(())
    }

    /// [`Wait::Spin`]'s loop: CAS when the word looks free, else spin (yielding the CPU every
    /// [`SPIN_YIELD`] turns), and every [`SPIN_CHECK`] turns take the lock over if the holder
    /// the word names is dead.
    #[cold]
    fn lock_spin(&self, me: u64, id: u64, h: &dyn Holders, until: Instant) -> io::Result<Taken> {
        let mut turns = 0u32;
        #[cfg(loom)]
        let _ = until;
        loop {
            let cur = self.word.load(Ordering::Relaxed);
            match self.look(cur, me, id, cur & WAITERS, h) {
                Look::Done(r) => return r,
                Look::Again => continue,
                Look::Held => {}
            }
            turns = turns.wrapping_add(1);
            if turns % SPIN_CHECK == 0 && !holder_alive(cur, me, id, h)? {
                if self.take_over(cur, me, id, h) {
                    return Ok(Taken::FromDead);
                }
                continue;
            }
            if turns % SPIN_YIELD == 0 {
                #[cfg(not(loom))]
                if Instant::now() >= until {
                    return Err(held_too_long(cur & TID_MASK, SPIN_PATIENCE));
                }
                crate::sync::yield_now();
            } else {
                std::hint::spin_loop();
            }
        }
    }

    /// What every taker does with a word `cur` it loaded, before it would wait: takes a free
    /// lock (keeping the `keep` flag bits), or reports one that names the caller.
    fn look(&self, cur: u64, me: u64, id: u64, keep: u64, h: &dyn Holders) -> Look {
        if cur & TID_MASK == 0 {
            // AcqRel: as in `lock`.
            return match self.word.compare_exchange(
                cur,
                me | keep,
                Ordering::AcqRel,
                Ordering::Relaxed,
            ) {
                Ok(_) => Look::Done(Ok(Taken::Clean)),
                Err(_) => Look::Again,
            };
        }
        let (tid, key) = (cur & TID_MASK, cur >> 32);
        if tid == TID_MASK || key == 0 {
            // No thread or process has this identity (an abandoned lock, or a peer's value):
            // dead without asking anyone.
            return match self.take_over(cur, me, id, h) {
                true => Look::Done(Ok(Taken::FromDead)),
                false => Look::Again,
            };
        }
        let mine =
            cur & !WAITERS == me || (tid == me & TID_MASK && key != me >> 32 && h.ours(key as u32));
        if mine {
            if held::held_before(id) {
                return Look::Done(Err(io::Error::new(
                    io::ErrorKind::Deadlock,
                    "this thread already holds this side of the pipe (a chunk is alive)",
                )));
            }
            // The word names this thread, which does not hold the lock: a peer wrote our
            // identity there. Nobody holds it: take it over, and have the caller recover the
            // side's state.
            return match self.take_over(cur, me, id, h) {
                true => Look::Done(Ok(Taken::FromDead)),
                false => Look::Again,
            };
        }
        Look::Held
    }

    /// Takes the lock from the dead (or false) holder named by `cur`; false if the word
    /// changed.
    ///
    /// A thread of this process that released the lock and took it again between our check and
    /// this CAS writes the very same word (same thread, same key): if the word named another
    /// thread of this process (through this mapping's key or another mapping's of the same
    /// pipe, see [`Holders::ours`]), ask again after the CAS, and give the lock back if that
    /// thread now says it holds (or takes) it. Another process's key cannot come back: the
    /// process is gone, and a new one gets that key only after a pid wraps around. A word
    /// naming this very thread (a peer wrote our identity) needs no second question.
    fn take_over(&self, cur: u64, me: u64, id: u64, h: &dyn Holders) -> bool {
        // AcqRel: as in `lock`; and the holder's writes before it died are visible through the
        // shared memory anyway (it can release nothing any more). Acquire (the reload below):
        // pairs with a release that overwrote us, as in `lock`.
        if self
            .word
            .compare_exchange(
                cur,
                me | (cur & WAITERS),
                Ordering::AcqRel,
                Ordering::Relaxed,
            )
            .is_err()
        {
            return false;
        }
        let key = (cur >> 32) as u32;
        let another_of_ours =
            cur & TID_MASK != me & TID_MASK && (u64::from(key) == me >> 32 || h.ours(key));
        if !another_of_ours {
            return true;
        }
        let taken = me | (cur & WAITERS);
        if held::involved((cur & TID_MASK) as u32, id) {
            self.give_back(taken, cur, me);
            return false;
        }
        // Acquire fence: the slot reads of `involved` above (which may have read that thread's
        // Release `held::remove`, made after its release swap) come before the reload below.
        crate::sync::fence(Ordering::Acquire);
        // That thread neither holds nor takes the lock now. If it held it again between our
        // check and our CAS and released it since, its release (a swap to 0) overwrote our
        // identity: then we do not hold it either. A hold it starts from here on fails its CAS.
        self.word.load(Ordering::Acquire) & !WAITERS == me
    }

    /// Puts back the identity `cur` that [`SideLock::take_over`] replaced with ours (`taken`),
    /// its holder being alive after all. A taker may set [`WAITERS`] on the word meanwhile: the
    /// word must not keep naming us then, or our next look would read our own identity as one
    /// a peer wrote and take the lock over from its live holder (two holders: seen as a
    /// `two holders` failure of `contended_takers_that_ask_never_share_the_lock`, about 3 runs
    /// in 100). So while the word names us, with or without the flag, it gets `cur`'s identity
    /// back with the flag as it is now; once it names anyone else (the holder released it, and
    /// maybe someone took it), nothing of ours is left in it. Bounded by [`RACES`] tries: only a
    /// peer rewriting the word on purpose keeps the flag flipping, and such a peer can write
    /// any holder into it anyway.
    fn give_back(&self, taken: u64, cur: u64, me: u64) {
        let mut now = taken;
        for _ in 0..RACES {
            // Relaxed: we changed nothing; the holder keeps its lock as it took it.
            match self.word.compare_exchange(
                now,
                (cur & !WAITERS) | (now & WAITERS),
                Ordering::Relaxed,
                Ordering::Relaxed,
            ) {
                Ok(_) => return,
                Err(seen) if seen & !WAITERS == me => now = seen,
                Err(_) => return,
            }
        }
    }

    /// Whether a live thread holds the lock (a snapshot). A holder whose liveness cannot be
    /// told counts as live: nothing is taken from it.
    pub(crate) fn held_by_live(&self, h: &dyn Holders) -> bool {
        let cur = self.word.load(Ordering::Relaxed);
        if cur & TID_MASK == 0 {
            return false;
        }
        let Ok(me) = identity(h) else {
            return true;
        };
        holder_alive(cur, me, h.id(self), h).unwrap_or(true)
    }

    /// Releases the lock, waking one sleeping taker if any registered. One is enough: a taker
    /// that slept takes the lock with [`WAITERS`] set, so its own release wakes the next; a
    /// woken taker that died meanwhile delays the others by at most a [`TICK`] (their sleeps
    /// are bounded). Waking all would make every writer of a busy pipe contend at each release.
    #[inline]
    pub(crate) fn unlock<H: Holders + ?Sized>(&self, h: &H) {
        // Release: pairs with the Acquire CAS in `lock`, publishing our writes to the side state.
        // SeqCst: also the advance of the release wakers' store-load pair (`AsyncWaiters::released`,
        // see `Wakers`), which the guards load right after; on x86 the same `xchg` either way.
        let old = self.word.swap(0, Ordering::SeqCst);
        // Only now: until the swap, a taker that finds our identity here must still hear that
        // we hold the lock (or it would take it from us). A stale entry after the swap only
        // makes such a taker wait for a word that no longer names us.
        held::remove(h.id(self));
        if old & WAITERS != 0 {
            self.wake_one();
        }
    }

    /// Leaves the lock as a holder that died would: named by an identity no thread has, so the
    /// next taker takes it over and recovers the side's state ([`Taken::FromDead`]). For a
    /// taker that finds it must not use the side yet (a resize to settle first) after it may
    /// have taken it from a dead holder: an ordinary unlock would hide that recovery is owed.
    pub(crate) fn abandon<H: Holders + ?Sized>(&self, h: &H) {
        // Release: as in `unlock` (we changed nothing, but pair anyway); the hold is forgotten
        // after the swap, as in `unlock`.
        let old = self.word.swap(DEAD_HOLDER, Ordering::Release);
        held::remove(h.id(self));
        if old & WAITERS != 0 {
            self.wake_one();
        }
    }

    /// Wakes every taker sleeping on the lock, without changing it: each checks that the
    /// holder still lives before it sleeps again. For the death watcher, which learns that a
    /// process died (it may have held this lock) before any tick would.
    #[cfg(not(loom))]
    pub(crate) fn nudge(&self) {
        crate::sys::futex::wake_shared(self.word.as_ptr().cast());
    }

    /// Sleeps while the word is `seen`, at most `timeout`; false on timeout.
    #[cfg(not(loom))]
    fn sleep(&self, seen: u64, timeout: Duration) -> bool {
        crate::sys::futex::wait_shared(self.word.as_ptr().cast(), seen as u32, Some(timeout))
    }

    #[cfg(not(loom))]
    fn wake_one(&self) {
        crate::sys::futex::wake_one_shared(self.word.as_ptr().cast());
    }

    #[cfg(loom)]
    fn sleep(&self, seen: u64, _timeout: Duration) -> bool {
        let guard = self.sleep.lock().unwrap();
        if self.word.load(Ordering::Relaxed) != seen {
            return true;
        }
        drop(self.cv.wait(guard).unwrap());
        true
    }

    #[cfg(loom)]
    fn wake_one(&self) {
        let _guard = self.sleep.lock().unwrap();
        self.cv.notify_one();
    }
}

mod held;

/// Spins before a taker sleeps (or, non-blocking, checks the holder and gives up): a side is
/// held for a copy of at most a few pages.
#[cfg(not(loom))]
const SPINS: u32 = 100;
#[cfg(loom)]
const SPINS: u32 = 0;

/// Lost CASes in a row after which a taker stops to think (see `SideLock::lost_races`).
const RACES: u32 = 1 << 10;

/// [`Wait::Spin`] yields the CPU every this many turns (every turn under loom, which needs a
/// yield to make progress in a spin loop).
#[cfg(not(loom))]
const SPIN_YIELD: u32 = 64;
#[cfg(loom)]
const SPIN_YIELD: u32 = 1;
/// The longest a [`Wait::spin`] waits for a holder that lives (a poster copies one record: a
/// live holder keeps the lock for microseconds).
pub(crate) const SPIN_PATIENCE: Duration = Duration::from_millis(100);

/// [`Wait::Spin`] asks the OS whether the holder lives every this many turns (a `/proc` read:
/// rare enough to cost nothing while a live holder copies its record).
const SPIN_CHECK: u32 = 1 << 12;

/// Whether the holder a lock word `cur` names still holds the pipe (see the module docs):
/// another process's key that the kernel still sees locked, or a thread of this process that
/// says it holds or takes this lock (`id`). The caller's own identity is handled before
/// (`SideLock::look`).
///
/// # Errors
/// When the kernel cannot tell (`F_GETLK` failed): the caller must not take the lock over, a
/// live process may hold it (fail closed).
fn holder_alive(cur: u64, me: u64, id: u64, h: &dyn Holders) -> io::Result<bool> {
    let tid = (cur & TID_MASK) as u32;
    let key = (cur >> 32) as u32;
    if tid == 0 || key == 0 || u64::from(tid) == TID_MASK {
        return Ok(false);
    }
    if key == (me >> 32) as u32 || h.ours(key) {
        // Acquire: pairs with the Release half of the AcqRel CAS that wrote that thread's
        // identity, so its intent (published before) is visible to `involved`.
        crate::sync::fence(Ordering::Acquire);
        return Ok(held::involved(tid, id));
    }
    #[cfg(not(loom))]
    return h.process_alive(key).map_err(|e| unknown_holder(key, e));
    #[cfg(loom)]
    return h.process_alive(key);
}

#[cfg(not(loom))]
thread_local! {
    /// The thread's id, 0 until asked.
    static TID: std::cell::Cell<u32> = const { std::cell::Cell::new(0) };
}

/// The calling thread's id, asked of the OS once per thread.
#[cfg(not(loom))]
fn tid() -> io::Result<u32> {
    TID.with(|c| {
        if c.get() == 0 {
            c.set(crate::sys::thread::gettid());
        }
        Ok(c.get())
    })
}

/// Run in a forked child (pthread_atfork), on its only thread: the id that thread cached in
/// the parent names the parent's thread, and the other threads' published holds are the
/// parent's.
#[cfg(not(loom))]
pub(crate) fn note_fork() {
    TID.with(|c| c.set(0));
    held::note_fork();
    FORK_GENERATION.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
}

/// Forks this process has been the child of (see `Shared::key`: keys do not survive a fork).
#[cfg(not(loom))]
static FORK_GENERATION: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

/// The current fork generation (see [`note_fork`]).
#[cfg(not(loom))]
#[inline]
pub(crate) fn fork_generation() -> u64 {
    FORK_GENERATION.load(std::sync::atomic::Ordering::Relaxed)
}

#[cfg(loom)]
fn tid() -> io::Result<u32> {
    use std::sync::atomic::AtomicU64 as StdU64;
    static NEXT: StdU64 = StdU64::new(1);
    loom::thread_local! {
        static ME: std::cell::Cell<u32> = std::cell::Cell::new(0);
    }
    ME.with(|c| {
        if c.get() == 0 {
            let id = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed) % TID_MASK + 1;
            c.set(id as u32);
        }
        Ok(c.get())
    })
}

#[cfg(all(test, not(loom)))]
mod tests;

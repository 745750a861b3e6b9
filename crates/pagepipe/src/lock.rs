//! Side locks that live in shared memory and survive a holder that dies.
//!
//! A lock is one 64-bit word in a pipe's region: 0 when free, else the holder's identity. The
//! low 32 bits hold the holding thread's id (bits 0..=30) and [`WAITERS`] (bit 31); the high 32
//! bits the low half of that thread's start time (clock ticks since boot, `/proc/<tid>/stat`
//! field 22), so a thread id that the OS reused for a new thread is not mistaken for the dead
//! holder. Taking the lock is one compare-and-swap of the whole word, so the identity is never
//! half written.
//!
//! A contended taker spins briefly, then sets [`WAITERS`] and sleeps on the word's low half (a
//! shared futex) for at most [`TICK`]. When a tick passes with the same holder, it asks the OS
//! whether that thread still exists; if not, it takes the lock over and tells its caller, who
//! recovers the side's state (see `Shared::read_guard` in `pipe/shared.rs`). Nothing is trusted in the word:
//! a value naming no live thread is a dead holder; a value naming the caller itself is reported
//! as [`io::ErrorKind::Deadlock`] rather than waited on forever.
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
    /// asking the OS about the holder now and then, for at most [`SPIN_PATIENCE`] (then
    /// `TimedOut`: a word a peer wrote, naming a live thread that holds nothing, must not keep
    /// a poster spinning). For notification posters, which must not sleep and hold the lock
    /// only to copy one record (as the kernel's poster spins on its queue's spinlock).
    Spin,
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
    pub(crate) fn lock(&self, wait: Wait) -> io::Result<Taken> {
        let me = me()?;
        // Acquire: pairs with the Release swap in `unlock`, so the previous holder's writes to
        // the side's state are visible to us.
        let taken = match self
            .word
            .compare_exchange(0, me, Ordering::Acquire, Ordering::Relaxed)
        {
            Ok(_) => Taken::Clean,
            Err(_) => self.lock_slow(me, wait)?,
        };
        held::add(self.addr());
        Ok(taken)
    }

    /// The word's address: how this thread's list of held locks names it.
    fn addr(&self) -> usize {
        std::ptr::from_ref(&self.word) as usize
    }

    /// Takes the lock only if it is free, with one compare-and-swap: no spinning, no waiting,
    /// no look at a holder. For fast paths that fall back to [`SideLock::lock`] when it fails.
    #[inline]
    pub(crate) fn try_lock(&self) -> bool {
        let Ok(me) = me() else {
            return false; // `lock` reports why
        };
        // Acquire: as in `lock`.
        let taken = self
            .word
            .compare_exchange(0, me, Ordering::Acquire, Ordering::Relaxed)
            .is_ok();
        if taken {
            held::add(self.addr());
        }
        taken
    }

    #[cold]
    fn lock_slow(&self, me: u64, wait: Wait) -> io::Result<Taken> {
        let deadline = match wait {
            Wait::Never => None,
            Wait::Until(d) => d,
            Wait::Spin => return self.lock_spin(me),
        };
        let mut spins = 0u32;
        let mut waited = 0u64; // WAITERS once we have slept: others may sleep too
        let mut suspect = None; // a holder seen through a whole tick
        loop {
            let cur = self.word.load(Ordering::Relaxed);
            match self.look(cur, me, waited) {
                Look::Done(r) => return r,
                Look::Again => continue,
                Look::Held => {}
            }
            if spins < SPINS {
                spins += 1;
                std::hint::spin_loop();
                continue;
            }
            let never = matches!(wait, Wait::Never);
            if (never || suspect == Some(cur | WAITERS)) && !holder_alive(cur)? {
                if self.take_over(cur, me) {
                    return Ok(Taken::FromDead);
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
            if self.sleep(cur | WAITERS, tick) {
                suspect = None;
            } else {
                // A whole tick with the word unchanged: check the holder before the next one.
                suspect = Some(cur | WAITERS);
            }
        }
    }

    /// [`Wait::Spin`]'s loop: CAS when the word looks free, else spin (yielding the CPU every
    /// [`SPIN_YIELD`] turns), and every [`SPIN_CHECK`] turns take the lock over if the holder
    /// the word names is dead.
    #[cold]
    fn lock_spin(&self, me: u64) -> io::Result<Taken> {
        let mut turns = 0u32;
        #[cfg(not(loom))]
        let started = Instant::now();
        loop {
            let cur = self.word.load(Ordering::Relaxed);
            match self.look(cur, me, cur & WAITERS) {
                Look::Done(r) => return r,
                Look::Again => continue,
                Look::Held => {}
            }
            turns = turns.wrapping_add(1);
            if turns % SPIN_CHECK == 0 && !holder_alive(cur)? {
                if self.take_over(cur, me) {
                    return Ok(Taken::FromDead);
                }
                continue;
            }
            if turns % SPIN_YIELD == 0 {
                #[cfg(not(loom))]
                if started.elapsed() >= SPIN_PATIENCE {
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
    fn look(&self, cur: u64, me: u64, keep: u64) -> Look {
        if cur & TID_MASK == 0 {
            // Acquire: as in `lock`.
            return match self.word.compare_exchange(
                cur,
                me | keep,
                Ordering::Acquire,
                Ordering::Relaxed,
            ) {
                Ok(_) => Look::Done(Ok(Taken::Clean)),
                Err(_) => Look::Again,
            };
        }
        if cur & TID_MASK == me & TID_MASK {
            if cur & !WAITERS == me && held::has(self.addr()) {
                return Look::Done(Err(io::Error::new(
                    io::ErrorKind::Deadlock,
                    "this thread already holds this side of the pipe (a chunk is alive)",
                )));
            }
            // The word names this thread, which does not hold the lock: a peer wrote our
            // identity there, or a dead thread whose id we reuse held it. Either way nobody
            // holds it: take it over, and have the caller recover the side's state.
            return match self.take_over(cur, me) {
                true => Look::Done(Ok(Taken::FromDead)),
                false => Look::Again,
            };
        }
        Look::Held
    }

    /// Takes the lock from the dead holder named by `cur`; false if the word changed.
    fn take_over(&self, cur: u64, me: u64) -> bool {
        // Acquire: as in `lock`; and the holder's writes before it died are visible through
        // the shared memory anyway (it can release nothing any more).
        self.word
            .compare_exchange(
                cur,
                me | (cur & WAITERS),
                Ordering::Acquire,
                Ordering::Relaxed,
            )
            .is_ok()
    }

    /// Whether a live thread holds the lock (a snapshot). A holder whose liveness cannot be
    /// told counts as live: nothing is taken from it.
    pub(crate) fn held_by_live(&self) -> bool {
        let cur = self.word.load(Ordering::Relaxed);
        cur & TID_MASK != 0 && holder_alive(cur).unwrap_or(true)
    }

    /// Releases the lock, waking one sleeping taker if any registered. One is enough: a taker
    /// that slept takes the lock with [`WAITERS`] set, so its own release wakes the next; a
    /// woken taker that died meanwhile delays the others by at most a [`TICK`] (their sleeps
    /// are bounded). Waking all would make every writer of a busy pipe contend at each release.
    pub(crate) fn unlock(&self) {
        held::remove(self.addr());
        // Release: pairs with the Acquire CAS in `lock`, publishing our writes to the side state.
        let old = self.word.swap(0, Ordering::Release);
        if old & WAITERS != 0 {
            self.wake_one();
        }
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

/// The side locks the calling thread holds, by address: what tells a word that names this
/// thread because it holds the lock (a real [`io::ErrorKind::Deadlock`]) from one that names it
/// because a peer wrote our identity (nobody holds it: taken over). A few entries suffice (a
/// thread holds at most both sides and the readiness lock); past them, nothing is recorded and
/// a word naming us stays a `Deadlock` (the old, conservative answer).
#[cfg(not(loom))]
mod held {
    use std::cell::Cell;

    const SLOTS: usize = 8;

    thread_local! {
        static HELD: Cell<[usize; SLOTS]> = const { Cell::new([0; SLOTS]) };
        /// Acquisitions that found no free entry and are still held.
        static OVERFLOW: Cell<usize> = const { Cell::new(0) };
    }

    pub(super) fn add(addr: usize) {
        HELD.with(|h| {
            let mut v = h.get();
            match v.iter().position(|&a| a == 0) {
                Some(i) => {
                    v[i] = addr;
                    h.set(v);
                }
                None => OVERFLOW.with(|o| o.set(o.get() + 1)),
            }
        });
    }

    pub(super) fn remove(addr: usize) {
        HELD.with(|h| {
            let mut v = h.get();
            match v.iter().position(|&a| a == addr) {
                Some(i) => {
                    v[i] = 0;
                    h.set(v);
                }
                None => OVERFLOW.with(|o| o.set(o.get().saturating_sub(1))),
            }
        });
    }

    /// Whether this thread holds the lock at `addr` (true when it cannot tell).
    pub(super) fn has(addr: usize) -> bool {
        HELD.with(|h| h.get().contains(&addr)) || OVERFLOW.with(|o| o.get() > 0)
    }
}

/// Under loom, no peer writes identities: a word naming the caller is always its own hold.
#[cfg(loom)]
mod held {
    pub(super) fn add(_addr: usize) {}
    pub(super) fn remove(_addr: usize) {}
    pub(super) fn has(_addr: usize) -> bool {
        true
    }
}

/// Spins before a taker sleeps (or, non-blocking, checks the holder and gives up): a side is
/// held for a copy of at most a few pages.
#[cfg(not(loom))]
const SPINS: u32 = 100;
#[cfg(loom)]
const SPINS: u32 = 0;

/// [`Wait::Spin`] yields the CPU every this many turns (every turn under loom, which needs a
/// yield to make progress in a spin loop).
#[cfg(not(loom))]
const SPIN_YIELD: u32 = 64;
#[cfg(loom)]
const SPIN_YIELD: u32 = 1;
/// The longest [`Wait::Spin`] waits for a holder that lives (a poster copies one record: a
/// live holder keeps the lock for microseconds).
#[cfg(not(loom))]
pub(crate) const SPIN_PATIENCE: Duration = Duration::from_millis(100);

/// [`Wait::Spin`] asks the OS whether the holder lives every this many turns (a `/proc` read:
/// rare enough to cost nothing while a live holder copies its record).
const SPIN_CHECK: u32 = 1 << 12;

/// Whether the thread a lock word names still exists (and is the same thread: same start time).
///
/// # Errors
/// When that cannot be told (procfs missing or unreadable, no descriptor or memory left): the
/// caller must not take the lock over, a live thread may hold it (fail closed).
#[cfg(not(loom))]
fn holder_alive(word: u64) -> io::Result<bool> {
    let tid = (word & TID_MASK) as u32;
    match crate::sys::thread::thread_start_time(tid) {
        Ok(start) => Ok(start == Some((word >> 32) as u32)),
        Err(e) => Err(unknown_holder(tid, e)),
    }
}

/// Under loom no thread dies: every holder is alive.
#[cfg(loom)]
fn holder_alive(_word: u64) -> io::Result<bool> {
    Ok(true)
}

#[cfg(not(loom))]
thread_local! {
    /// The thread's lock identity, 0 until computed.
    static ME: std::cell::Cell<u64> = const { std::cell::Cell::new(0) };
}

/// The calling thread's lock identity: thread id and start time, computed once per thread.
///
/// # Errors
/// When the start time cannot be read (procfs missing or unreadable, no descriptor left): an
/// identity without it would read as a dead holder to every other taker.
#[cfg(not(loom))]
pub(crate) fn me() -> io::Result<u64> {
    ME.with(|c| {
        if c.get() == 0 {
            let tid = crate::sys::thread::gettid();
            let start = crate::sys::thread::thread_start_time(tid)
                .and_then(|s| s.ok_or_else(|| io::Error::from(io::ErrorKind::NotFound)))
                .map_err(|e| unknown_holder(tid, e))?;
            c.set((u64::from(start) << 32) | (u64::from(tid) & TID_MASK));
        }
        Ok(c.get())
    })
}

/// Run in a forked child (pthread_atfork), on its only thread: the identity that thread
/// cached in the parent names the parent's thread.
#[cfg(not(loom))]
pub(crate) fn note_fork() {
    ME.with(|c| c.set(0));
}

#[cfg(loom)]
pub(crate) fn me() -> io::Result<u64> {
    use std::sync::atomic::AtomicU64 as StdU64;
    static NEXT: StdU64 = StdU64::new(1);
    loom::thread_local! {
        static ME: std::cell::Cell<u64> = std::cell::Cell::new(0);
    }
    ME.with(|c| {
        if c.get() == 0 {
            let id = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed) % TID_MASK + 1;
            c.set(id);
        }
        Ok(c.get())
    })
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    #[test]
    fn identity_names_a_live_thread() {
        let me = me().unwrap();
        assert_ne!(me & TID_MASK, 0);
        assert!(holder_alive(me).unwrap());
        // A different start time is a different (dead) thread with a reused id.
        assert!(!holder_alive(me ^ (1 << 40)).unwrap());
        // A thread that has exited is dead. `join` returns once the thread cleared its id, which
        // the kernel does before it finishes exiting: for a moment the task is still there (CI
        // saw it once), so allow it a second to go.
        let other = std::thread::spawn(super::me).join().unwrap().unwrap();
        assert_ne!(other & TID_MASK, me & TID_MASK);
        let t = Instant::now();
        while holder_alive(other).unwrap() {
            assert!(
                t.elapsed() < Duration::from_secs(1),
                "an exited thread still alive"
            );
            std::thread::sleep(Duration::from_millis(1));
        }
    }

    #[test]
    fn lock_taken_over_from_a_dead_holder() {
        let lock = SideLock {
            word: AtomicU64::new(0),
        };
        let dead = std::thread::spawn(|| {
            let l = SideLock {
                word: AtomicU64::new(0),
            };
            l.lock(Wait::Never).unwrap();
            l.word.load(Ordering::Relaxed)
        })
        .join()
        .unwrap();
        lock.word.store(dead, Ordering::Relaxed);
        let t = Instant::now();
        assert_eq!(lock.lock(Wait::Until(None)).unwrap(), Taken::FromDead);
        assert!(t.elapsed() < 5 * TICK);
        assert_eq!(
            lock.lock(Wait::Until(None)).unwrap_err().kind(),
            io::ErrorKind::Deadlock
        );
        lock.unlock();
        // Non-blocking takers take over from a dead holder at once, and give up on a live one.
        lock.word.store(dead, Ordering::Relaxed);
        assert_eq!(lock.lock(Wait::Never).unwrap(), Taken::FromDead);
        let held = std::sync::Arc::new(lock);
        let h2 = held.clone();
        let err = std::thread::spawn(move || h2.lock(Wait::Never).unwrap_err().kind())
            .join()
            .unwrap();
        assert_eq!(err, io::ErrorKind::WouldBlock);
        held.unlock();
        assert_eq!(held.lock(Wait::Never).unwrap(), Taken::Clean);
        held.unlock();
    }
}

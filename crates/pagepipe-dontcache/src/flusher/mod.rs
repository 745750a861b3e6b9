//! The process-wide flusher, and what each fallback writer shares with it ([`Shared`]): the
//! writer records its dirty ranges there, the submitter thread starts their writeback, the reaper
//! thread drops what completed. The two refer to each other (a writer's [`Shared`] updates
//! [`FLUSHER`]'s counters and kicks its threads; [`FLUSHER`] keeps the writers' [`Shared`] and
//! works on them), so they live in one file.

mod gauges;

use crate::consts::{
    DEFAULT_WINDOW, FLUSHER_POLL, FLUSHER_TICK, MAX_FOLIO, MAX_OVERDRAFT, MAX_PASSES, SCAN_LIMIT,
};
use crate::dirty::{coalesce, Inflight, LiveFd, Pending, Range};
use crate::error::reported;
use gauges::{smooth, Bandwidth, Foreign};
use pagepipe_sys::{self as sys, fs::RangeSync};
use std::fs::File;
use std::io;
use std::os::fd::{AsRawFd, RawFd};
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError, TryLockError, Weak};
use std::time::Duration;

/// Locks a mutex, taking over the data of one whose holder panicked: every critical section in
/// this crate leaves its data consistent between statements, and Drop must never panic.
pub(crate) fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

/// A sticky error: the first writeback or sync failure of a writer.
struct StoredError {
    kind: io::ErrorKind,
    message: String,
}

/// What a fallback writer shares with the flusher threads.
pub(crate) struct Shared {
    /// The writer's file descriptor. The writer owns the `File` and closes it in its own thread
    /// (so a filesystem can be unmounted once the writer is gone); the flusher may use this
    /// number only while holding `inflight` and seeing `closed == false`, or holding `starting`
    /// and seeing false (see [`LiveFd`]).
    fd: RawFd,
    /// The writer's window in bytes (Relaxed: a tuning value; stale reads are harmless).
    pub(crate) window: AtomicU64,
    pending: Mutex<Pending>,
    /// Held by the submitting flusher thread while it starts this writer's writeback, and by sync
    /// and drop (taken before `inflight`, never after it); true once the writer has closed (or
    /// is closing) its file.
    pub(crate) starting: Mutex<bool>,
    /// Held by the reaping flusher thread while it drops this writer's completed ranges, briefly
    /// by the submitting thread to queue a started range, and by sync and drop.
    pub(crate) inflight: Mutex<Inflight>,
    /// Bytes written and not yet dropped from the cache (sum of `charged` of every range in
    /// `pending` and `inflight`, plus a write being recorded and ranges the submitter is
    /// starting). Every change is mirrored in
    /// [`Flusher::total_dirty`].
    dirty: AtomicU64,
    /// The overdraft this writer holds from [`MAX_OVERDRAFT`] (bytes it may hold beyond its
    /// window; 0 when it holds none). Written by the writer's thread only (Relaxed: the writer
    /// reads its own writes; the submitter reads it as a hint for which writers to defer).
    pub(crate) grant: AtomicU64,
    /// Bytes of this writer's ranges queued in `inflight` (started, not yet dropped); its part of
    /// [`Flusher::inflight_bytes`], and moved with it ([`Shared::count_started`],
    /// [`Shared::count_dropped`]). Relaxed: a heuristic (see [`Shared::hold_back`]).
    started: AtomicU64,
    /// Fast check for `error`.
    pub(crate) failed: AtomicBool,
    error: Mutex<Option<StoredError>>,
}

/// What [`Shared::start_pending`] did.
#[derive(Clone, Copy, Debug, Default)]
struct Started {
    /// It started writeback of something.
    any: bool,
    /// It held something back (see [`Shared::hold_back`]): look again soon.
    held: bool,
}

/// What the reaper found when it looked at a writer's ranges in flight.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Completion {
    /// The range was written back and dropped.
    Dropped,
    /// Its writeback is still running (or the writer is busy draining itself).
    Busy,
    /// Nothing in flight.
    Idle,
}

impl Shared {
    pub(crate) fn new(fd: RawFd) -> Shared {
        Shared {
            fd,
            window: AtomicU64::new(DEFAULT_WINDOW as u64),
            pending: Mutex::new(Pending::default()),
            starting: Mutex::new(false),
            inflight: Mutex::new(Inflight::default()),
            dirty: AtomicU64::new(0),
            grant: AtomicU64::new(0),
            started: AtomicU64::new(0),
            failed: AtomicBool::new(false),
            error: Mutex::new(None),
        }
    }

    /// The writer's fd for use while the caller holds the `inflight` guard it passes; `None`
    /// once the writer has closed (or is closing) its file.
    fn live_fd(&self, inflight: &Inflight) -> Option<LiveFd> {
        (!inflight.closed).then_some(LiveFd(self.fd))
    }

    /// Keeps the first error; later ones add nothing (the first is the cause). `call` names
    /// the call that reported it (see [`reported`]).
    pub(crate) fn set_error(&self, e: &io::Error, call: String) {
        let mut slot = lock(&self.error);
        if slot.is_none() {
            *slot = Some(StoredError {
                kind: e.kind(),
                message: reported(&call, e),
            });
        }
        drop(slot);
        // Release: pairs with the Acquire load in check_error, which then finds `error` set.
        self.failed.store(true, Ordering::Release);
    }

    pub(crate) fn check_error(&self) -> io::Result<()> {
        // Acquire: pairs with the Release store in set_error.
        if !self.failed.load(Ordering::Acquire) {
            return Ok(());
        }
        match &*lock(&self.error) {
            Some(e) => Err(io::Error::new(e.kind, e.message.clone())),
            None => Ok(()),
        }
    }

    /// Keeps the error `from` kept, if any: the new flusher state of a writer inherited across
    /// a fork (`Writer::adopt`) goes on reporting it. Never blocks on `from`'s lock, which a
    /// thread of the parent may have held at the fork (such a holder was only adding a later
    /// error, which changes nothing: the first was set before `failed`).
    pub(crate) fn inherit_error(&self, from: &Shared) {
        // Acquire: pairs with the Release store in set_error.
        if !from.failed.load(Ordering::Acquire) {
            return;
        }
        let copy = |e: &Option<StoredError>| {
            e.as_ref().map(|e| StoredError {
                kind: e.kind,
                message: e.message.clone(),
            })
        };
        let kept = match from.error.try_lock() {
            Ok(guard) => copy(&guard),
            Err(TryLockError::Poisoned(p)) => copy(&p.into_inner()),
            Err(TryLockError::WouldBlock) => None,
        };
        *lock(&self.error) = Some(kept.unwrap_or_else(|| {
            StoredError {
                kind: io::ErrorKind::Other,
                message: "a writeback error kept before the process forked (its message was \
                      being read by another thread at the fork)"
                    .to_string(),
            }
        }));
        // Release: pairs with the Acquire load in check_error.
        self.failed.store(true, Ordering::Release);
    }

    /// Records a write of `len > 0` bytes at `offset`; returns the dirty bytes now in flight and
    /// whether the flusher should be kicked (a batch has accumulated).
    ///
    /// The counter counts pages dirtied, not bytes written: a write is charged the pages it
    /// touches less those the latest run of adjoining writes holds while it is pending (a run
    /// of small writes into one page charges that page once). Counting bytes let one-byte
    /// writes a page apart dirty a page each while counting a byte, so the window bounded
    /// nothing. A page rewritten after its range left the pending list is charged again: an
    /// overcount, never an undercount.
    pub(crate) fn record(&self, offset: u64, len: u64) -> (u64, bool) {
        self.charge(Range::of_write(offset, len), true)
    }

    /// Records pages a write dirtied beyond its own (a large folio around it, see
    /// `crate::folios`): `range`, charged exactly `range.charged`. Returns as [`Shared::record`].
    pub(crate) fn record_folio(&self, range: Range) -> (u64, bool) {
        self.charge(range, false)
    }

    /// Queues `range` and adds its charge to the counters: the pages it covers less those the
    /// latest run of writes holds (`pages`: a write's range), or `range.charged` as given (a
    /// folio's range, which does not join the run).
    fn charge(&self, mut range: Range, pages: bool) -> (u64, bool) {
        let batch = kick_batch(self.window.load(Ordering::Relaxed));
        let mut p = lock(&self.pending);
        if pages {
            let held = p.last_write.as_ref().map_or(0, |last| last.overlap(&range));
            range.charged = range.len() - held;
            if !p
                .last_write
                .as_mut()
                .is_some_and(|last| last.try_merge(&range))
            {
                p.last_write = Some(range);
            }
        }
        let charged = range.charged;
        // Relaxed: counters; the wait for room (Writer::wait_for_room) orders its own loads, and
        // an increase never lets a waiter go. Incremented before the range is queued (under the
        // pending lock, which the flusher takes to collect ranges), so the flusher's matching
        // decrement (in drop_range) comes after it.
        let old = self.dirty.fetch_add(charged, Ordering::Relaxed);
        if old == 0 && charged > 0 {
            FLUSHER.active.fetch_add(1, Ordering::Relaxed);
        }
        FLUSHER.total_dirty.fetch_add(charged, Ordering::Relaxed);
        if !p
            .ranges
            .last_mut()
            .is_some_and(|last| last.try_merge(&range))
        {
            p.ranges.push(range);
        }
        p.unkicked += charged;
        let kick = p.unkicked >= batch;
        if kick {
            p.unkicked = 0;
        }
        (old + charged, kick)
    }

    /// Whether this writer must wait before writing more: over its window plus the overdraft it
    /// holds.
    pub(crate) fn over_limit(&self) -> bool {
        // SeqCst: the load half of the handshake with drop_range (see there). Relaxed for the
        // window and grant: this writer's own settings, written on its own thread.
        self.dirty.load(Ordering::SeqCst) > self.limit()
    }

    /// The hard bound on this writer's dirty bytes: its window plus the overdraft it holds.
    fn limit(&self) -> u64 {
        // Relaxed: see the fields.
        self.window.load(Ordering::Relaxed) + self.grant.load(Ordering::Relaxed)
    }

    /// Whether the submitter should leave this writer's new ranges unstarted for now: it yields
    /// to another process's writeback, the writer holds an overdraft or will take one with its
    /// next write (the budget has some left), and it is more than a quarter window short of its
    /// limit (its window plus the overdraft it holds). Starting writeback then would queue
    /// behind the other process's and allocate blocks (ext4's delayed allocation) while holding
    /// the inode's `i_data_sem`, which the writer's own `pwrite` needs: measured, `pwrite`s of
    /// 20-100 ms. Close to its limit a writer's writeback starts anyway, so that a writer waiting
    /// at its window (which takes no overdraft while it waits) or at its overdraft's end always
    /// gets room in the end.
    fn deferred(&self, yielding: bool) -> bool {
        if !yielding {
            return false;
        }
        // Relaxed: hints; a stale value defers a range for one more round or starts it early.
        let may_overdraw = self.grant.load(Ordering::Relaxed) > 0 || overdraft_left() >= MAX_FOLIO;
        let quarter = self.window.load(Ordering::Relaxed) / 4;
        may_overdraw && self.dirty.load(Ordering::Relaxed) + quarter < self.limit()
    }

    /// Takes the pending ranges, coalesced, cut at multiples of [`MAX_FOLIO`]: writeback is
    /// started, completed and dropped a piece at a time, so a waiting writer resumes after one
    /// piece rather than after everything it wrote since the flusher last looked.
    fn take_pending(&self) -> Vec<Range> {
        let mut p = lock(&self.pending);
        p.unkicked = 0;
        let ranges = std::mem::take(&mut p.ranges);
        p.last_write = None;
        drop(p);
        coalesce(ranges)
            .into_iter()
            .flat_map(|r| r.split(MAX_FOLIO))
            .collect()
    }

    /// The `inflight` guard if the flusher may work on this writer now: `None` while sync or drop
    /// drains it on the writer's thread, or once the writer has closed its file.
    fn try_inflight(&self) -> Option<(MutexGuard<'_, Inflight>, LiveFd)> {
        let guard = match self.inflight.try_lock() {
            Ok(guard) => guard,
            // Taken over like every lock here (see `lock`): a panic elsewhere must not stall
            // a writer waiting for room.
            Err(TryLockError::Poisoned(e)) => e.into_inner(),
            Err(TryLockError::WouldBlock) => return None,
        };
        let fd = self.live_fd(&guard)?;
        Some((guard, fd))
    }

    /// Starts writeback (`SYNC_FILE_RANGE_WRITE`) of everything this writer recorded since the
    /// flusher last looked, and queues each range for the reaper once started; returns whether
    /// there was anything. Runs on the submitting thread, which may block here for tens of
    /// milliseconds (the block layer's writeback throttling, `wbt`, holds back a submitter
    /// when the device's queue is deep): the reaper goes on dropping completed ranges meanwhile,
    /// so writers waiting for room are not held up by a submission.
    fn start_pending(&self) -> Started {
        let starting = match self.starting.try_lock() {
            Ok(guard) => guard,
            // Taken over like every lock here (see `lock`).
            Err(TryLockError::Poisoned(e)) => e.into_inner(),
            // sync or drop is draining this writer on its own thread.
            Err(TryLockError::WouldBlock) => return Started::default(),
        };
        if *starting {
            return Started::default();
        }
        let fd = LiveFd(self.fd);
        let mut fresh = self.take_pending();
        let held = self.hold_back(&mut fresh);
        for &r in &fresh {
            self.start(fd, r);
            self.count_started(r.len());
            lock(&self.inflight).ranges.push_back(r);
            FLUSHER.kick_reaper();
        }
        drop(starting);
        Started {
            any: !fresh.is_empty(),
            held,
        }
    }

    /// Counts `bytes` of this writer's ranges as queued in `inflight`, here and process-wide.
    fn count_started(&self, bytes: u64) {
        // Relaxed: heuristic counts (see Flusher::inflight_bytes, Shared::started).
        FLUSHER.inflight_bytes.fetch_add(bytes, Ordering::Relaxed);
        self.started.fetch_add(bytes, Ordering::Relaxed);
    }

    /// Undoes [`Shared::count_started`] for `bytes` dropped from `inflight`.
    fn count_dropped(&self, bytes: u64) {
        // Relaxed: as in count_started.
        FLUSHER.inflight_bytes.fetch_sub(bytes, Ordering::Relaxed);
        self.started.fetch_sub(bytes, Ordering::Relaxed);
    }

    /// Leaves in `fresh` what may be started now and puts the rest back in `pending`; returns
    /// whether it put anything back. A writer draining the backlog of an overdraft (it holds
    /// one, and the submitter no longer yields) has at most half a window in flight at once:
    /// measured, its whole backlog (50-100 MiB) started at once made the block allocation of
    /// the last ranges read bitmaps queued behind the first ones while holding `i_data_sem`,
    /// and the writer's `pwrite` waited 20 ms for it.
    fn hold_back(&self, fresh: &mut Vec<Range>) -> bool {
        // Relaxed: hints (see the fields).
        let backlog =
            self.grant.load(Ordering::Relaxed) > 0 && !FLUSHER.yielding.load(Ordering::Relaxed);
        if !backlog {
            return false;
        }
        let cap = self.window.load(Ordering::Relaxed) / 2;
        let mut room = cap.saturating_sub(self.started.load(Ordering::Relaxed));
        let keep = fresh
            .iter()
            .take_while(|r| {
                let fits = room > 0;
                room = room.saturating_sub(r.len());
                fits
            })
            .count();
        let rest = fresh.split_off(keep);
        if rest.is_empty() {
            return false;
        }
        lock(&self.pending).ranges.splice(0..0, rest);
        true
    }

    fn start(&self, fd: LiveFd, r: Range) {
        if let Err(e) = sys::fs::sync_file_range(&fd, r.start, r.len(), RangeSync::Start) {
            self.set_error(
                &e,
                format!(
                    "sync_file_range(SYNC_FILE_RANGE_WRITE) of bytes {}..{}",
                    r.start, r.end
                ),
            );
        }
    }

    /// Drops the ranges in flight whose writeback has completed, looking at the oldest
    /// [`SCAN_LIMIT`] of them, in any order: the block layer's elevator completes writes in disk
    /// order, not in the order they were started, and a writer waiting for room must get it
    /// back as soon as any of its writeback is done (measured: with random 64 KiB writes the
    /// oldest range sometimes completed last, after the whole window, and the writer waited
    /// up to 800 ms for it). Never waits for a writeback still running (where `cachestat(2)`
    /// can tell): one writer's slow range must not hold up the others' completions, and the
    /// writer may still be dirtying its pages. A range found dirty and not under writeback
    /// (rewritten after its writeback started) has its writeback started again. Without
    /// `cachestat` (Linux < 6.5) it waits for the oldest range, one per call.
    fn complete_some(&self) -> Completion {
        let Some((mut inflight, fd)) = self.try_inflight() else {
            return Completion::Busy;
        };
        if inflight.ranges.is_empty() {
            return Completion::Idle;
        }
        let mut dropped = false;
        let mut busy = false;
        let mut i = 0;
        let mut scanned = 0;
        while i < inflight.ranges.len() && scanned < SCAN_LIMIT {
            let r = inflight.ranges[i];
            scanned += 1;
            match sys::fs::cachestat(&fd, r.start, r.len()) {
                Ok(cs) if cs.nr_writeback > 0 => {
                    busy = true;
                    i += 1;
                    continue;
                }
                Ok(cs) if cs.nr_dirty > 0 => {
                    self.start(fd, r);
                    busy = true;
                    i += 1;
                    continue;
                }
                Ok(_) => {}
                // No cachestat (Linux < 6.5): the wait below blocks until the oldest range is
                // written back; one range per call, so that new data is started in between.
                Err(_) if i == 0 => scanned = SCAN_LIMIT,
                Err(_) => break,
            }
            inflight.ranges.remove(i);
            // Written back already, this returns at once, with the writeback's error if it failed.
            if let Err(e) = sys::fs::sync_file_range(&fd, r.start, r.len(), RangeSync::Wait) {
                self.set_error(&e, wait_call(r));
            }
            self.drop_range(fd, r);
            dropped = true;
        }
        if dropped {
            Completion::Dropped
        } else if busy || !inflight.ranges.is_empty() {
            Completion::Busy
        } else {
            Completion::Idle
        }
    }

    /// Drops a written-back range from the cache and from the dirty counts; wakes the writers
    /// that wait for room.
    fn drop_range(&self, fd: LiveFd, r: Range) {
        // Fails only for a bad fd or a non-regular file, both excluded when the writer was made;
        // a failure would leave pages cached, never lose data.
        let _ = sys::fs::fadvise_dontneed(&fd, r.start, r.len());
        // SeqCst: with the SeqCst increment of `waiters` in Writer::wait_for_room and the SeqCst
        // load of `dirty` in over_limit, and the SeqCst load of `waiters` below, this is a
        // store-load (Dekker) handshake: either the writer sees the new count or we see it
        // waiting.
        let old = self.dirty.fetch_sub(r.charged, Ordering::SeqCst);
        if r.charged > 0 && old == r.charged {
            // Relaxed: a heuristic count (see Writer::pace); paired with the increment in record.
            FLUSHER.active.fetch_sub(1, Ordering::Relaxed);
        }
        // Relaxed: heuristics (Writer::pace, saturated).
        FLUSHER.total_dirty.fetch_sub(r.charged, Ordering::Relaxed);
        // Relaxed: a statistic (see Bandwidth).
        FLUSHER.dropped.fetch_add(r.len(), Ordering::Relaxed);
        self.count_dropped(r.len());
        // Release: pairs with the Acquire load of `progress` in wait_for_room (and the futex).
        FLUSHER.progress.fetch_add(1, Ordering::Release);
        // SeqCst: the other half of the handshake described above.
        if FLUSHER.waiters.load(Ordering::SeqCst) > 0 {
            sys::futex::wake_all(&FLUSHER.progress);
        }
    }

    /// Writes out and drops everything this writer dirtied, on the caller's thread. With
    /// `fdatasync`, also waits for the file's data and size to be durable.
    pub(crate) fn drain(&self, file: &File, fdatasync: bool) -> io::Result<()> {
        // `starting` first: a submission in progress finishes and queues its ranges before this
        // drain looks at them.
        let _starting = lock(&self.starting);
        let mut inflight = lock(&self.inflight);
        let fd = LiveFd(file.as_raw_fd());
        let fresh = self.take_pending();
        self.count_started(fresh.iter().map(Range::len).sum());
        inflight.ranges.extend(fresh);
        let synced = if fdatasync { file.sync_data() } else { Ok(()) };
        while let Some(r) = inflight.ranges.pop_front() {
            if !fdatasync {
                if let Err(e) = sys::fs::sync_file_range(&fd, r.start, r.len(), RangeSync::Wait) {
                    self.set_error(&e, wait_call(r));
                }
            }
            self.drop_range(fd, r);
        }
        if let Err(e) = &synced {
            self.set_error(e, "fdatasync".to_string());
        }
        synced
    }
}

/// The call that waits for the writeback of `r`, as an error message names it.
fn wait_call(r: Range) -> String {
    format!(
        "the wait for the writeback of bytes {}..{} (sync_file_range)",
        r.start, r.end
    )
}

/// The flusher is kicked after this many bytes of writes: a sixteenth of the window rounded down
/// to a power of two, at least 64 KiB, at most 2 MiB.
fn kick_batch(window: u64) -> u64 {
    let b = (window / 16).clamp(64 << 10, 2 << 20);
    1 << (63 - b.leading_zeros())
}

/// One flusher for every fallback writer of the process, as the kernel has one per device, in
/// two threads: the submitter ([`Flusher::submit`]) and the reaper ([`Flusher::reap`]).
pub(crate) struct Flusher {
    /// Coalescing kick flag and futex word: 1 when work was announced since the flusher last
    /// looked. Writers set it; only a 0 -> 1 transition wakes the thread.
    kick: AtomicU32,
    /// The reaper's kick flag and futex word: 1 when a range was queued since it last looked.
    reap: AtomicU32,
    writers: Mutex<Vec<Weak<Shared>>>,
    /// Futex word: bumped each time a range is dropped. Writers waiting for room in their window
    /// sleep on it (one word for all: a wake-up may be another writer's, and is rechecked).
    pub(crate) progress: AtomicU32,
    /// How many writers are (about to be) asleep on `progress`.
    pub(crate) waiters: AtomicU32,
    /// The sum of every fallback writer's `Shared::dirty` (paced against [`SHARED_WINDOW`]; tells
    /// [`Bandwidth`] whether writeback was kept busy).
    ///
    /// [`SHARED_WINDOW`]: crate::SHARED_WINDOW
    pub(crate) total_dirty: AtomicU64,
    /// How many fallback writers have a non-zero `Shared::dirty`: the writers that share the
    /// measured bandwidth (see `Writer::pace`).
    pub(crate) active: AtomicU64,
    /// Bytes dropped after writeback, ever (the flusher's bandwidth is measured from it).
    dropped: AtomicU64,
    /// The measured writeback bandwidth in bytes per second (0 until measured; see
    /// [`Bandwidth`]). Writers pace themselves by it (see `Writer::pace`).
    pub(crate) bandwidth: AtomicU64,
    /// Bytes of the ranges queued for the reaper (started, not yet dropped): this process's part
    /// of the system's writeback (see [`Foreign`]).
    inflight_bytes: AtomicU64,
    /// True while another process's writeback floods the system (see [`Foreign`]): the submitter
    /// defers writers that hold an overdraft, and they write on into the page cache at a pace
    /// that makes the overdraft last ([`YIELD_SPAN`]).
    ///
    /// [`YIELD_SPAN`]: crate::consts::YIELD_SPAN
    pub(crate) yielding: AtomicBool,
    /// The overdraft granted to writers, in bytes (at most [`MAX_OVERDRAFT`]).
    overdraft: AtomicU64,
}

pub(crate) static FLUSHER: Flusher = Flusher {
    kick: AtomicU32::new(0),
    reap: AtomicU32::new(0),
    writers: Mutex::new(Vec::new()),
    progress: AtomicU32::new(0),
    waiters: AtomicU32::new(0),
    total_dirty: AtomicU64::new(0),
    active: AtomicU64::new(0),
    dropped: AtomicU64::new(0),
    bandwidth: AtomicU64::new(0),
    inflight_bytes: AtomicU64::new(0),
    yielding: AtomicBool::new(false),
    overdraft: AtomicU64::new(0),
};

/// Takes up to `want` bytes of overdraft from [`MAX_OVERDRAFT`]; returns how much (0 when less
/// than a piece, [`MAX_FOLIO`], is left).
pub(crate) fn take_overdraft(want: u64) -> u64 {
    let mut granted = 0;
    // Relaxed: a budget counter; the compare-exchange alone keeps the sum within the budget, and
    // nothing else is published through it.
    let _ = FLUSHER
        .overdraft
        .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |used| {
            granted = grant_from(used, want);
            (granted > 0).then_some(used + granted)
        });
    granted
}

/// How much of `want` a writer gets when `used` bytes of [`MAX_OVERDRAFT`] are granted already:
/// what is left, up to `want`, or nothing when that is less than a piece ([`MAX_FOLIO`]).
fn grant_from(used: u64, want: u64) -> u64 {
    let g = want.min((MAX_OVERDRAFT as u64).saturating_sub(used));
    if g < MAX_FOLIO {
        0
    } else {
        g
    }
}

/// The overdraft not granted yet, in bytes.
fn overdraft_left() -> u64 {
    // Relaxed: see take_overdraft.
    (MAX_OVERDRAFT as u64).saturating_sub(FLUSHER.overdraft.load(Ordering::Relaxed))
}

/// Returns overdraft taken with [`take_overdraft`].
pub(crate) fn give_back_overdraft(bytes: u64) {
    if bytes > 0 {
        // Relaxed: see take_overdraft.
        FLUSHER.overdraft.fetch_sub(bytes, Ordering::Relaxed);
    }
}

/// [`Foreign::update`] on the process's one [`Foreign`], from whichever flusher thread gets to it
/// first (the other reads [`Flusher::yielding`]); returns and publishes [`Flusher::yielding`],
/// false while no writer has data in flight.
fn check_foreign() -> bool {
    static FOREIGN: Mutex<Option<Foreign>> = Mutex::new(None);
    match FOREIGN.try_lock() {
        Ok(mut f) => {
            // Relaxed: heuristics; a stale value shifts a decision by one round.
            let was = FLUSHER.yielding.load(Ordering::Relaxed);
            let now = FLUSHER.total_dirty.load(Ordering::Relaxed) != 0 && {
                let ours = FLUSHER.inflight_bytes.load(Ordering::Relaxed);
                f.get_or_insert_with(Foreign::new).update(was, ours)
            };
            if now != was {
                FLUSHER.yielding.store(now, Ordering::Relaxed);
            }
            now
        }
        // Poisoned or busy: the flag as it is (Relaxed: a heuristic).
        Err(_) => FLUSHER.yielding.load(Ordering::Relaxed),
    }
}

/// Whether the writers keep the flusher busy: at least two pieces in flight.
fn saturated() -> bool {
    // Relaxed: a heuristic.
    FLUSHER.total_dirty.load(Ordering::Relaxed) >= 2 * MAX_FOLIO
}

/// Adds the reaper's latest look to `b` and publishes a new estimate in
/// [`Flusher::bandwidth`] when `b` has a sample.
fn sample_bandwidth(b: &mut Bandwidth) {
    // Relaxed: statistics.
    let dropped = FLUSHER.dropped.load(Ordering::Relaxed);
    // While yielding, our writeback waits behind another process's: that measures the other
    // process, not what this process gets once it stops, so the estimate is frozen.
    // Relaxed: a heuristic.
    let busy = saturated() && !FLUSHER.yielding.load(Ordering::Relaxed);
    if let Some(rate) = b.observe(std::time::Instant::now(), dropped, busy) {
        let old = FLUSHER.bandwidth.load(Ordering::Relaxed);
        FLUSHER
            .bandwidth
            .store(smooth(old, rate), Ordering::Relaxed);
    }
}

/// The pid in which the reaper and the submitter were started.
static STARTED_IN: Mutex<[Option<u32>; 2]> = Mutex::new([None, None]);

/// The flusher's locks a forked child could need, held by the forking thread across `fork(2)`
/// (see `crate::fork`): the record of started threads, then the list of writers (the order in
/// which [`Flusher::register`] takes them, one after the other).
pub(crate) struct ForkHold {
    _started: MutexGuard<'static, [Option<u32>; 2]>,
    writers: MutexGuard<'static, Vec<Weak<Shared>>>,
}

/// Starts the flusher's two threads, the reaper (`pagepipe-reap`) and the submitter
/// (`pagepipe-flush`), once per process. A forked child has no flusher threads (fork copies only
/// the calling thread), so the pid each was started in is remembered and a child starts its
/// own; a failed start is retried by the next writer. They start with every asynchronous signal
/// blocked: the application's handlers run on its own threads (pagepipe-cp's SIGINT handler,
/// run on a flusher thread, could unlink a temporary's name just before the main thread
/// created it, and the temporary was left behind).
fn start_flusher() -> io::Result<()> {
    let pid = std::process::id();
    let mut started = lock(&STARTED_IN);
    if started.iter().all(|&slot| slot == Some(pid)) {
        return Ok(()); // every writer's registration comes here: no system call then
    }
    let _blocked = sys::thread::block_async_signals()?;
    let threads: [(&str, fn() -> !); 2] = [
        ("pagepipe-reap", || FLUSHER.reap()),
        ("pagepipe-flush", || FLUSHER.submit()),
    ];
    for (slot, (name, body)) in started.iter_mut().zip(threads) {
        if *slot != Some(pid) {
            std::thread::Builder::new()
                .name(name.into())
                .spawn(move || {
                    // Best effort: an older kernel keeps the default slice.
                    let _ = lengthen_slice();
                    body()
                })
                .map_err(|e| {
                    io::Error::new(
                        e.kind(),
                        format!("cannot start the dontcache flusher thread {name}: {e}"),
                    )
                })?;
            *slot = Some(pid);
        }
    }
    Ok(())
}

/// The scheduler slice the flusher threads ask for (see [`lengthen_slice`]).
const FLUSHER_SLICE: Duration = Duration::from_millis(20);

/// Asks the scheduler for a long slice, [`FLUSHER_SLICE`], for the calling thread (a flusher
/// thread), keeping its policy (`SCHED_OTHER`) and nice value: `sched_setattr(2)` with
/// `sched_runtime`, which EEVDF (Linux 6.12+) takes as the thread's slice. A waking thread with
/// a shorter slice (the default: 1.4 ms on the development VM) may then preempt it at once
/// rather than wait for the end of its slice, so a paced writer whose pause ends, or that waits
/// for a CPU, gets one when it needs it; the flusher still gets its fair share of the CPU, in
/// longer pieces.
/// Measured on the development VM: without it, the writer's wake-ups after a pacing pause
/// waited up to 2.2 ms (82 waits over 0.2 ms in one 1 GiB run) while the flusher threads ran
/// 0.5-2 ms stretches (`perf sched timehist`).
///
/// # Errors
/// The OS's error (`EINVAL` on kernels before 6.12 or with `sched_runtime` unsupported).
fn lengthen_slice() -> io::Result<()> {
    // SAFETY: errno is a thread-local integer; getpriority(2) reads a scheduling attribute of
    // the calling thread and touches no memory. errno is cleared first because -1 is also a
    // valid nice value.
    let nice = unsafe {
        *libc::__errno_location() = 0;
        libc::getpriority(libc::PRIO_PROCESS, 0)
    };
    if nice == -1 && io::Error::last_os_error().raw_os_error() != Some(0) {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: sched_attr is plain data, for which all zeroes is a valid value.
    let mut attr: libc::sched_attr = unsafe { std::mem::zeroed() };
    attr.size = std::mem::size_of::<libc::sched_attr>() as u32;
    attr.sched_policy = libc::SCHED_OTHER as u32;
    attr.sched_nice = nice;
    attr.sched_runtime = FLUSHER_SLICE.as_nanos() as u64;
    // SAFETY: sched_setattr(2) on the calling thread (pid 0) reads `attr`, a fully initialised
    // sched_attr of the size it declares, during the call only.
    let rc = unsafe {
        libc::syscall(
            libc::SYS_sched_setattr,
            0,
            &attr as *const libc::sched_attr,
            0,
        )
    };
    if rc != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

impl Flusher {
    /// Takes the locks a forked child could need (see [`ForkHold`]).
    pub(crate) fn hold_for_fork(&'static self) -> ForkHold {
        let started = lock(&STARTED_IN);
        ForkHold {
            _started: started,
            writers: lock(&self.writers),
        }
    }

    /// In a forked child, on its only thread: forgets the parent's writers and what they
    /// contributed to the process-wide counts. The child's flusher must never wait on the
    /// parent's ranges: through the open file description the two processes share, that wait
    /// would consume the writeback error the parent's `finish()` has to report. An inherited
    /// writer used in the child takes new flusher state of its own (`Writer::adopt`).
    pub(crate) fn forget_after_fork(&self, hold: &mut ForkHold) {
        hold.writers.clear();
        // Relaxed: the child has one thread; the threads it starts later see these stores.
        self.total_dirty.store(0, Ordering::Relaxed);
        self.active.store(0, Ordering::Relaxed);
        self.inflight_bytes.store(0, Ordering::Relaxed);
        self.overdraft.store(0, Ordering::Relaxed);
        self.yielding.store(false, Ordering::Relaxed);
        self.waiters.store(0, Ordering::Relaxed);
        self.kick.store(0, Ordering::Relaxed);
        self.reap.store(0, Ordering::Relaxed);
    }

    pub(crate) fn register(&self, shared: &Arc<Shared>) -> io::Result<()> {
        start_flusher()?;
        lock(&self.writers).push(Arc::downgrade(shared));
        // The flusher sleeps without a timeout while it has no writer: let it start ticking.
        self.kick();
        Ok(())
    }

    /// Announces work; many kicks before the flusher looks cost one wake-up.
    pub(crate) fn kick(&self) {
        // Release: pairs with the Acquire swap in `run`, so the flusher sees what was recorded
        // before the kick.
        if self.kick.swap(1, Ordering::Release) == 0 {
            sys::futex::wake_all(&self.kick);
        }
    }

    /// Live writers, pruning dropped ones.
    fn snapshot(&self) -> Vec<Arc<Shared>> {
        let mut writers = lock(&self.writers);
        writers.retain(|w| w.strong_count() > 0);
        writers.iter().filter_map(Weak::upgrade).collect()
    }

    /// Wakes the reaper (coalescing, as [`Flusher::kick`]).
    fn kick_reaper(&self) {
        // Release: pairs with the Acquire swap in `reap`, so the reaper sees the queued range.
        if self.reap.swap(1, Ordering::Release) == 0 {
            sys::futex::wake_all(&self.reap);
        }
    }

    /// The submitting thread's loop (`pagepipe-flush`). Each round it starts writeback of every
    /// writer's new ranges, starting with the next writer each round, and queues them for the
    /// reaper. It sleeps until kicked, or [`FLUSHER_TICK`] to pick up tails no kick announced.
    fn submit(&self) -> ! {
        let mut turn = 0usize;
        loop {
            // Acquire: pairs with the Release swap in `kick`.
            let kicked = self.kick.swap(0, Ordering::Acquire) == 1;
            let yielding = check_foreign();
            let writers = self.snapshot();
            let n = writers.len().max(1);
            let mut busy = false;
            let mut held = yielding;
            for i in 0..writers.len() {
                let w = &writers[(i + turn) % n];
                if !w.deferred(yielding) {
                    let started = w.start_pending();
                    busy |= started.any;
                    held |= started.held;
                }
            }
            turn = turn.wrapping_add(1);
            let idle = writers.is_empty();
            drop(writers);
            if !busy && !kicked {
                // While yielding or holding back, look again soon: deferred ranges start when it
                // ends, held-back ones when ranges in flight complete.
                let tick = if held { FLUSHER_POLL } else { FLUSHER_TICK };
                // A kick between the swap above and this wait changed the word: no sleep.
                sys::futex::wait(&self.kick, 0, (!idle).then_some(tick));
            }
        }
    }

    /// The reaping thread's loop (`pagepipe-reap`). It drops completed ranges, round robin over
    /// the writers (so a writer's share does not depend on how often it kicks), starting each
    /// round with the next writer, and never blocks on a writeback still running where
    /// `cachestat(2)` can tell: while ranges are in flight it looks again every
    /// [`FLUSHER_POLL`], or at once when a range is queued. It runs beside the submitting thread,
    /// which may block for a long time in the block layer's throttling: completions, and the
    /// writers waiting for them, do not wait for a submission.
    fn reap(&self) -> ! {
        let mut turn = 0usize;
        let mut bandwidth = Bandwidth::new(std::time::Instant::now());
        loop {
            // Acquire: pairs with the Release swap in `kick_reaper`.
            let kicked = self.reap.swap(0, Ordering::Acquire) == 1;
            let writers = self.snapshot();
            let n = writers.len().max(1);
            let order = || (0..writers.len()).map(|i| &writers[(i + turn) % n]);
            let mut busy = false;
            let mut in_flight = false;
            for _ in 0..MAX_PASSES {
                let mut dropped = false;
                for w in order() {
                    match w.complete_some() {
                        Completion::Dropped => dropped = true,
                        Completion::Busy => in_flight = true,
                        Completion::Idle => {}
                    }
                }
                if !dropped {
                    break;
                }
                busy = true;
            }
            turn = turn.wrapping_add(1);
            // The reaper looks too: the submitter may be blocked in a submission for tens of
            // milliseconds just when another process's writeback starts.
            check_foreign();
            sample_bandwidth(&mut bandwidth);
            drop(writers);
            if !busy && !kicked {
                // A queued range between the swap above and this wait changed the word.
                sys::futex::wait(&self.reap, 0, in_flight.then_some(FLUSHER_POLL));
            }
        }
    }
}

#[cfg(test)]
mod tests;

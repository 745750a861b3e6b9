//! A file writer that writes at buffered speed and leaves no page cache behind.
//!
//! Backup tools, log shippers and bulk loaders write far more data than anyone will read back
//! soon. Written through the page cache as usual, that data evicts everyone else's cache; written
//! with `O_DIRECT`, it obeys alignment rules and loses the kernel's write batching. Linux 6.14's
//! `RWF_DONTCACHE` is the middle road: writes go through the page cache, writeback starts at
//! once, and the pages are dropped when it completes. [`Writer`] uses that flag where the file
//! supports it and otherwise does the same thing from userspace:
//!
//! - writes stay buffered (`pwrite(2)`), and each writer records the byte ranges it dirtied;
//! - one process-wide flusher, shared by every writer as the kernel's per-device flusher is, in
//!   two threads: the submitter (`pagepipe-flush`), kicked through a coalescing flag (many
//!   writes, one wake-up), starts writeback of the recorded ranges with
//!   `sync_file_range(SYNC_FILE_RANGE_WRITE)`, which can block for tens of milliseconds in the
//!   block layer's writeback throttling; the reaper (`pagepipe-reap`) meanwhile drops what
//!   completed;
//! - the reaper never waits for a writeback still running: it asks `cachestat(2)` which of a
//!   writer's oldest ranges in flight are written back (in any order: the elevator completes
//!   them in disk order), and only then reaps each one's error (`sync_file_range` wait) and
//!   drops exactly that range with `posix_fadvise(POSIX_FADV_DONTNEED)`, round robin over the
//!   writers, so one writer's slow range holds up nobody else;
//! - a per-writer dirty counter bounds the data in flight to a window ([`DEFAULT_WINDOW`], see
//!   [`Writer::with_window`]). Past a quarter of its window a writer is paced to its share of
//!   the measured writeback bandwidth (a short pause on every write, spun when it is shorter
//!   than a sleep's wake-up, as the kernel's `balance_dirty_pages` sleeps), holding at half
//!   its window, so it rarely hits the window; a writer over its window waits
//!   for the flusher and never flushes inline (the inline flush is what made the first
//!   `RWF_DONTCACHE` slow);
//! - the window is elastic when another process floods the disk: while the system's pages
//!   under writeback (`/proc/meminfo`) exceed this process's own by 64 MiB, the submitter
//!   yields (starts no new writeback, which would only queue behind the other process's and
//!   hold ext4's `i_data_sem` meanwhile) and each writer may go on writing into an overdraft of
//!   up to three windows from a process-wide budget, [`MAX_OVERDRAFT`] (96 MiB), paced so that
//!   it lasts 400 ms; once the other writeback is done its backlog drains half a window at a
//!   time. The hard bound on the fallback writers' dirty data is the sum of their windows plus
//!   [`MAX_OVERDRAFT`].
//!
//! ```
//! use std::io::Write;
//! use pagepipe_dontcache::{Mode, Writer};
//!
//! let path = std::env::temp_dir().join(format!("dontcache-doc-{}", std::process::id()));
//! let mut w = Writer::create(&path)?;
//! for _ in 0..16 {
//!     w.write_all(&[7u8; 64 * 1024])?;
//! }
//! let stats = w.finish()?; // fdatasync, then drop what is still cached
//! assert_eq!(stats.bytes_written, 1 << 20);
//! assert_ne!(stats.mode, Mode::Auto); // resolved by the first write
//! assert_eq!(std::fs::read(&path)?.len(), 1 << 20);
//! std::fs::remove_file(&path)?;
//! # Ok::<(), std::io::Error>(())
//! ```
//!
//! Errors are never lost silently: a write error is returned by that write; an error of the
//! flusher's writeback (`EIO`, `ENOSPC`) is kept and returned by the next write, [`Writer::sync`]
//! and [`Writer::finish`] (it stays: every later call fails too). Dropping a writer without
//! [`Writer::finish`] writes its data out and drops it from the cache on a best-effort basis,
//! ignoring errors, like dropping a [`File`].
#![deny(unsafe_op_in_unsafe_fn, missing_docs)]
#![warn(clippy::undocumented_unsafe_blocks)]

use pagepipe_sys::{self as sys, fs::RangeSync};
use std::collections::VecDeque;
use std::fs::File;
use std::io::{self, Seek, SeekFrom, Write};
use std::os::fd::{AsRawFd, RawFd};
use std::os::unix::fs::FileExt;
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError, TryLockError, Weak};
use std::time::Duration;

/// The default bound on a fallback writer's dirty data in flight: 32 MiB.
pub const DEFAULT_WINDOW: usize = 32 << 20;

/// The smallest window [`Writer::with_window`] accepts (smaller requests are raised to it).
pub const MIN_WINDOW: usize = 256 << 10;

const PAGE: u64 = sys::mm::PAGE_SIZE as u64;

/// The largest page-cache folio (a PMD: 2 MiB with 4 KiB pages on x86-64 and arm64). Folios are
/// naturally aligned, and `POSIX_FADV_DONTNEED` skips a folio that sticks out of its range, so
/// ranges are cut only at multiples of this size: a cut anywhere else could leave the folio
/// that straddles it cached for good.
const MAX_FOLIO: u64 = 2 << 20;

/// How long a flusher with registered writers sleeps before looking for data that no kick
/// announced (a writer's tail below the kick batch).
const FLUSHER_TICK: Duration = Duration::from_millis(50);

/// How often a flusher with writeback in flight looks for completed ranges.
const FLUSHER_POLL: Duration = Duration::from_millis(1);

/// Passes of completions per reaper round: each pass looks at up to [`SCAN_LIMIT`] ranges of
/// each writer, and another follows while the last one dropped something (without `cachestat`
/// each pass drops one range per writer, waiting for it).
const MAX_PASSES: usize = 16;

/// How many of a writer's oldest ranges in flight the flusher asks `cachestat(2)` about per pass
/// (completed ones are dropped wherever they are among them).
const SCAN_LIMIT: usize = 64;

/// What all fallback writers of the process together may hold in flight before [`Writer::pace`]
/// slows those holding more than half their fair share of it (a soft bound: the largest window,
/// if larger, counts instead; only each writer's own window is a hard bound).
pub const SHARED_WINDOW: usize = 4 * DEFAULT_WINDOW;

/// What all fallback writers of the process together may hold beyond their windows while they
/// yield to another process's writeback (see [`Writer::with_window`]): 96 MiB. A writer's own
/// overdraft is at most three of its windows, as far as this budget allows; so the fallback
/// writers of a process never hold more than the sum of their windows plus this much dirty data
/// (plus the write each is recording).
pub const MAX_OVERDRAFT: usize = 3 * DEFAULT_WINDOW;

/// A yielding writer's overdraft is at most this many of its windows.
const OVERDRAFT_WINDOWS: u64 = 3;

/// A writer that yields to another process's writeback is paced so that its overdraft lasts at
/// least this long: it writes `overdraft / YIELD_SPAN` bytes per second (240 MiB/s with the
/// default window) while its own writeback waits.
const YIELD_SPAN: Duration = Duration::from_millis(400);

/// Writeback of other processes (bytes under writeback in the whole system, `Writeback:` of
/// `/proc/meminfo`, over what this process's writers have in flight) above which the submitter
/// yields, and below which it stops (hysteresis).
const YIELD_ON: u64 = 64 << 20;
/// See [`YIELD_ON`]. Low, so that the writers' backlog starts when the other process's writeback
/// is nearly done: measured, starting it with 32 MiB of the competitor's `fsync` still queued
/// stalled the writer 20-25 ms in `pwrite` (block allocation reading bitmaps behind it).
const YIELD_OFF: u64 = 8 << 20;

/// How often the submitter reads `/proc/meminfo` while writers have data in flight.
const FOREIGN_CHECK: Duration = Duration::from_millis(1);

/// Pauses of [`Writer::pace`] shorter than this accumulate until they reach it.
const MIN_PAUSE: Duration = Duration::from_micros(50);

/// Pauses of [`Writer::pace`] up to this long are spun (the writer stays on its CPU, reading the
/// clock) rather than slept, while fewer writers are paced than there are CPUs. Measured on the
/// development VM (2 vCPUs) with 64 KiB random writes: pauses of 50-120 µs asked of
/// `nanosleep` returned after 100 µs to 3.7 ms (timer slack, then waiting for a CPU busy with
/// the flusher threads and the kernel's writeback workers), and those oversleeps were the
/// writer's tail latency; the pause itself is what the writer owes the disk either way.
const SPIN_PAUSE: Duration = Duration::from_micros(200);

/// How far a paced writer may run ahead of its pauses to make up for a pause that took longer
/// than asked (an oversleep, or a preemption while spinning): [`Writer::pace`] counts the time a
/// pause really took, and the writer's next pauses are shortened by the excess up to this much.
const MAX_CREDIT: Duration = Duration::from_micros(500);

/// The bandwidth [`Writer::pace`] assumes until the flusher has measured one (bytes per second):
/// a first writer fills half its window in milliseconds, before the first sample.
const INITIAL_BANDWIDTH: u64 = 256 << 20;

/// The longest single pause of [`Writer::pace`] (beyond it the window's hard limit takes over).
const MAX_PAUSE: Duration = Duration::from_millis(20);

/// How long a writer over its window sleeps before rechecking (a safety net; the flusher wakes it).
const WINDOW_RECHECK: Duration = Duration::from_millis(100);

/// How a [`Writer`] or [`Reader`] keeps its data out of the page cache.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum Mode {
    /// Use `RWF_DONTCACHE` if the file supports it, found out with the first non-empty write or
    /// read; fall back to [`Mode::Fallback`] where the kernel answers `EOPNOTSUPP` or `EINVAL`.
    /// [`Writer::mode`] reports `Auto` only until that first write.
    #[default]
    Auto,
    /// Insist on `RWF_DONTCACHE`: the first write or read fails with
    /// [`io::ErrorKind::Unsupported`] where the file (or kernel) does not support it.
    Kernel,
    /// Never use `RWF_DONTCACHE`: buffered writes drained by pagepipe's flusher threads, buffered
    /// reads followed by `POSIX_FADV_DONTNEED`.
    Fallback,
}

/// What a [`Writer`] did, from [`Writer::stats`] or [`Writer::finish`].
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Stats {
    /// Bytes accepted by writes (rewrites of the same bytes count again).
    pub bytes_written: u64,
    /// The mode in use: [`Mode::Kernel`] or [`Mode::Fallback`]; [`Mode::Auto`] if nothing was
    /// written yet.
    pub mode: Mode,
    /// The most dirty bytes this writer had in flight at once. Fallback: the peak of the writer's
    /// own counter (bytes written and not yet written back and dropped, an upper bound on its
    /// dirty pages). Kernel: the file's dirty pages sampled with `cachestat(2)` once per window of
    /// writes (0 where `cachestat` is missing).
    pub peak_dirty_bytes: u64,
    /// How many times a write found the writer over its window (plus any overdraft) and waited
    /// for the flusher (always 0 in kernel mode, where the kernel throttles).
    pub writeback_waits: u64,
    /// How many times pacing slept before a write returned, slowing a writer that outran
    /// writeback before its window filled (always 0 in kernel mode).
    pub pauses: u64,
    /// The largest overdraft the writer held: bytes it was allowed beyond its window while
    /// another process's writeback flooded the system (see [`MAX_OVERDRAFT`]); 0 if it never
    /// yielded (always 0 in kernel mode). [`Stats::peak_dirty_bytes`] is at most the window plus
    /// this, plus one write.
    pub peak_overdraft_bytes: u64,
}

/// True for the answers that mean "this kernel or file does not do `RWF_DONTCACHE`".
fn is_unsupported(e: &io::Error) -> bool {
    matches!(
        e.raw_os_error(),
        Some(libc::EOPNOTSUPP) | Some(libc::EINVAL)
    )
}

fn unsupported(e: io::Error) -> io::Error {
    io::Error::new(
        io::ErrorKind::Unsupported,
        format!("RWF_DONTCACHE is not supported on this file: {e}"),
    )
}

/// Locks a mutex, taking over the data of one whose holder panicked: every critical section in
/// this module leaves its data consistent between statements, and Drop must never panic.
fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

fn check_regular(file: &File) -> io::Result<()> {
    let kind = file.metadata()?.file_type();
    if !kind.is_file() {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("dontcache needs a regular file, not {kind:?}"),
        ));
    }
    Ok(())
}

// ---------------------------------------------------------------------------------------------
// Dirty ranges
// ---------------------------------------------------------------------------------------------

/// Pages a writer dirtied: `start..end`, page aligned, and how many bytes of writes they carry.
///
/// Invariant: `start % PAGE == 0`, `end % PAGE == 0`, `start < end`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Range {
    start: u64,
    end: u64,
    /// Bytes added to the writer's dirty counter for this range; subtracted when it is dropped.
    charged: u64,
}

impl Range {
    /// The pages touched by a write of `len > 0` bytes at `offset`.
    fn of_write(offset: u64, len: u64) -> Range {
        debug_assert!(len > 0);
        let start = offset & !(PAGE - 1);
        let end = (offset + len).div_ceil(PAGE) * PAGE;
        Range {
            start,
            end,
            charged: len,
        }
    }

    fn len(&self) -> u64 {
        self.end - self.start
    }

    /// Cuts the range at the multiples of `piece` (a power of two, at least a page), sharing
    /// `charged` in proportion (the last piece takes the rounding remainder). Cutting at aligned
    /// offsets matters: the page cache keeps large folios (up to 2 MiB on x86-64) naturally
    /// aligned, and `POSIX_FADV_DONTNEED` skips a folio that sticks out of its range, so cuts at
    /// unaligned offsets would leave the folios straddling them cached.
    fn split(self, piece: u64) -> impl Iterator<Item = Range> {
        debug_assert!(piece.is_power_of_two() && piece >= PAGE);
        let len = self.len();
        let mut start = self.start;
        let mut left = self.charged;
        std::iter::from_fn(move || {
            if start >= self.end {
                return None;
            }
            let end = ((start / piece + 1) * piece).min(self.end);
            let charged = if end == self.end {
                left
            } else {
                (self.charged as u128 * (end - start) as u128 / len as u128) as u64
            };
            left -= charged;
            let r = Range {
                start,
                end,
                charged,
            };
            start = end;
            Some(r)
        })
    }

    /// Absorbs `other` if the two touch or overlap; returns false (unchanged) otherwise.
    fn try_merge(&mut self, other: &Range) -> bool {
        if other.start > self.end || other.end < self.start {
            return false;
        }
        self.start = self.start.min(other.start);
        self.end = self.end.max(other.end);
        self.charged += other.charged;
        true
    }
}

/// Sorts ranges by offset and merges those that touch: fewer, larger writeback requests.
fn coalesce(mut ranges: Vec<Range>) -> Vec<Range> {
    ranges.sort_unstable_by_key(|r| r.start);
    let mut out: Vec<Range> = Vec::with_capacity(ranges.len());
    for r in ranges {
        if !out.last_mut().is_some_and(|last| last.try_merge(&r)) {
            out.push(r);
        }
    }
    out
}

/// Ranges written but not yet handed to the flusher.
#[derive(Default)]
struct Pending {
    ranges: Vec<Range>,
    /// Bytes recorded since the flusher was last kicked.
    unkicked: u64,
}

/// Ranges whose writeback the flusher started, oldest first.
#[derive(Default)]
struct Inflight {
    ranges: VecDeque<Range>,
    /// Set (under this lock) by the writer before it closes its file: from then on `Shared::fd`
    /// must not be used.
    closed: bool,
}

/// A writer's fd as the flusher threads use it: valid only while the guard from which it was
/// made is held, an `inflight` guard with `Inflight::closed` false (see [`Shared::live_fd`]) or a
/// `starting` guard holding false (the writer closes its file only after setting both under
/// their locks). Only a number: a misuse would hit `EBADF` or another file, never memory.
#[derive(Clone, Copy)]
struct LiveFd(RawFd);

impl AsRawFd for LiveFd {
    fn as_raw_fd(&self) -> RawFd {
        self.0
    }
}

/// A sticky error: the first writeback or sync failure of a writer.
struct StoredError {
    kind: io::ErrorKind,
    message: String,
}

/// What a fallback writer shares with the flusher threads.
struct Shared {
    /// The writer's file descriptor. The writer owns the `File` and closes it in its own thread
    /// (so a filesystem can be unmounted once the writer is gone); the flusher may use this
    /// number only while holding `inflight` and seeing `closed == false`, or holding `starting`
    /// and seeing false (see [`LiveFd`]).
    fd: RawFd,
    /// The writer's window in bytes (Relaxed: a tuning value; stale reads are harmless).
    window: AtomicU64,
    pending: Mutex<Pending>,
    /// Held by the submitting flusher thread while it starts this writer's writeback, and by sync
    /// and drop (taken before `inflight`, never after it); true once the writer has closed (or
    /// is closing) its file.
    starting: Mutex<bool>,
    /// Held by the reaping flusher thread while it drops this writer's completed ranges, briefly
    /// by the submitting thread to queue a started range, and by sync and drop.
    inflight: Mutex<Inflight>,
    /// Bytes written and not yet dropped from the cache (sum of `charged` of every range in
    /// `pending` and `inflight`, plus a write being recorded and ranges the submitter is
    /// starting). Every change is mirrored in
    /// [`Flusher::total_dirty`].
    dirty: AtomicU64,
    /// The overdraft this writer holds from [`MAX_OVERDRAFT`] (bytes it may hold beyond its
    /// window; 0 when it holds none). Written by the writer's thread only (Relaxed: the writer
    /// reads its own writes; the submitter reads it as a hint for which writers to defer).
    grant: AtomicU64,
    /// Bytes of this writer's ranges queued in `inflight` (started, not yet dropped); its part of
    /// [`Flusher::inflight_bytes`], and moved with it ([`Shared::count_started`],
    /// [`Shared::count_dropped`]). Relaxed: a heuristic (see [`Shared::hold_back`]).
    started: AtomicU64,
    /// Fast check for `error`.
    failed: AtomicBool,
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
    fn new(fd: RawFd) -> Shared {
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

    /// Keeps the first error; later ones add nothing (the first is the cause).
    fn set_error(&self, e: &io::Error, what: String) {
        let mut slot = lock(&self.error);
        if slot.is_none() {
            *slot = Some(StoredError {
                kind: e.kind(),
                message: format!("{what}: {e}"),
            });
        }
        drop(slot);
        // Release: pairs with the Acquire load in check_error, which then finds `error` set.
        self.failed.store(true, Ordering::Release);
    }

    fn check_error(&self) -> io::Result<()> {
        // Acquire: pairs with the Release store in set_error.
        if !self.failed.load(Ordering::Acquire) {
            return Ok(());
        }
        match &*lock(&self.error) {
            Some(e) => Err(io::Error::new(e.kind, e.message.clone())),
            None => Ok(()),
        }
    }

    /// Records a write of `len > 0` bytes at `offset`; returns the dirty bytes now in flight and
    /// whether the flusher should be kicked (a batch has accumulated).
    fn record(&self, offset: u64, len: u64) -> (u64, bool) {
        let range = Range::of_write(offset, len);
        let batch = kick_batch(self.window.load(Ordering::Relaxed));
        // Relaxed: counters; the wait for room (Writer::wait_for_room) orders its own loads, and
        // an increase never lets a waiter go.
        let old = self.dirty.fetch_add(len, Ordering::Relaxed);
        if old == 0 {
            // This writer's range is recorded below, after this increment, so the flusher's
            // matching decrement (in drop_range, when the count returns to 0) comes after it.
            FLUSHER.active.fetch_add(1, Ordering::Relaxed);
        }
        FLUSHER.total_dirty.fetch_add(len, Ordering::Relaxed);
        let mut p = lock(&self.pending);
        if !p
            .ranges
            .last_mut()
            .is_some_and(|last| last.try_merge(&range))
        {
            p.ranges.push(range);
        }
        p.unkicked += len;
        let kick = p.unkicked >= batch;
        if kick {
            p.unkicked = 0;
        }
        (old + len, kick)
    }

    /// Whether this writer must wait before writing more: over its window plus the overdraft it
    /// holds.
    fn over_limit(&self) -> bool {
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
                format!("starting writeback of bytes {}..{}", r.start, r.end),
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
                self.set_error(&e, format!("writeback of bytes {}..{}", r.start, r.end));
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
        if old == r.charged {
            // Relaxed: a heuristic count (see Writer::pace); paired with the increment in record.
            FLUSHER.active.fetch_sub(1, Ordering::Relaxed);
        }
        // Relaxed: heuristics (Writer::pace, Bandwidth::saturated).
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
    fn drain(&self, file: &File, fdatasync: bool) -> io::Result<()> {
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
                    self.set_error(&e, format!("writeback of bytes {}..{}", r.start, r.end));
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

/// Waits `d`: spinning on the CPU (reading the clock) if `spin` and `d` is at most
/// [`SPIN_PAUSE`], sleeping otherwise. Returns how long it really took.
fn take_pause(d: Duration, spin: bool) -> Duration {
    let t = std::time::Instant::now();
    if spin && d <= SPIN_PAUSE {
        while t.elapsed() < d {
            std::hint::spin_loop();
        }
    } else {
        std::thread::sleep(d);
    }
    t.elapsed()
}

/// The pause still owed (nanoseconds) after owing `debt` and pausing `took`: negative (a credit
/// against the next pauses) when the pause overran, by at most [`MAX_CREDIT`].
fn settle(debt: i64, took: Duration) -> i64 {
    let took = i64::try_from(took.as_nanos()).unwrap_or(i64::MAX);
    debt.saturating_sub(took)
        .max(-(MAX_CREDIT.as_nanos() as i64))
}

/// The CPUs this process may run on (1 if unknown), looked up once.
fn cpus() -> u64 {
    static CPUS: std::sync::OnceLock<u64> = std::sync::OnceLock::new();
    *CPUS.get_or_init(|| std::thread::available_parallelism().map_or(1, |n| n.get() as u64))
}

/// The room left under a bound, in halves of the bound: 3/2 at a quarter of it, 1 at half (the
/// set point: a writer paced there writes as fast as writeback drains), 1/2 at three quarters,
/// 0 at (or past) the bound.
fn room(used: u64, bound: u64) -> f64 {
    bound.saturating_sub(used) as f64 / (bound / 2).max(1) as f64
}

/// The rate (bytes per second) at which a writer holding an overdraft of `grant` bytes may write,
/// or `None` when the usual pacing applies. While the submitter yields to another process's
/// writeback, the writer's own writeback waits and it writes into its overdraft at a pace that
/// makes the overdraft last [`YIELD_SPAN`] (a pause of ~4 ms per 1 MiB with the default window,
/// where the usual pacing, following the bandwidth the writer gets, would pause 20 ms). Once
/// writeback runs again and until its dirty data is back at half its window, it writes at half
/// its `share` of the bandwidth, so that its backlog drains at the other half, but never slower
/// than while it yielded (the measured bandwidth may still be that of the stall; the hard limit
/// still holds).
fn overdraft_rate(grant: u64, yielding: bool, dirty: u64, window: u64, share: u64) -> Option<u64> {
    let yield_rate = ((grant as f64 / YIELD_SPAN.as_secs_f64()) as u64).max(1);
    if grant == 0 {
        None
    } else if yielding {
        Some(yield_rate)
    } else if dirty > window / 2 {
        Some((share / 2).max(yield_rate))
    } else {
        None
    }
}

/// The flusher is kicked after this many bytes of writes: a sixteenth of the window rounded down
/// to a power of two, at least 64 KiB, at most 2 MiB.
fn kick_batch(window: u64) -> u64 {
    let b = (window / 16).clamp(64 << 10, 2 << 20);
    1 << (63 - b.leading_zeros())
}

// ---------------------------------------------------------------------------------------------
// The process-wide flusher
// ---------------------------------------------------------------------------------------------

/// One flusher for every fallback writer of the process, as the kernel has one per device, in
/// two threads: the submitter ([`Flusher::submit`]) and the reaper ([`Flusher::reap`]).
struct Flusher {
    /// Coalescing kick flag and futex word: 1 when work was announced since the flusher last
    /// looked. Writers set it; only a 0 -> 1 transition wakes the thread.
    kick: AtomicU32,
    /// The reaper's kick flag and futex word: 1 when a range was queued since it last looked.
    reap: AtomicU32,
    writers: Mutex<Vec<Weak<Shared>>>,
    /// Futex word: bumped each time a range is dropped. Writers waiting for room in their window
    /// sleep on it (one word for all: a wake-up may be another writer's, and is rechecked).
    progress: AtomicU32,
    /// How many writers are (about to be) asleep on `progress`.
    waiters: AtomicU32,
    /// The sum of every fallback writer's `Shared::dirty` (paced against [`SHARED_WINDOW`]; tells
    /// [`Bandwidth`] whether writeback was kept busy).
    total_dirty: AtomicU64,
    /// How many fallback writers have a non-zero `Shared::dirty`: the writers that share the
    /// measured bandwidth (see `Writer::pace`).
    active: AtomicU64,
    /// Bytes dropped after writeback, ever (the flusher's bandwidth is measured from it).
    dropped: AtomicU64,
    /// The measured writeback bandwidth in bytes per second (0 until measured; see
    /// [`Bandwidth`]). Writers pace themselves by it (see `Writer::pace`).
    bandwidth: AtomicU64,
    /// Bytes of the ranges queued for the reaper (started, not yet dropped): this process's part
    /// of the system's writeback (see [`Foreign`]).
    inflight_bytes: AtomicU64,
    /// True while another process's writeback floods the system (see [`Foreign`]): the submitter
    /// defers writers that hold an overdraft, and they write on into the page cache at a pace
    /// that makes the overdraft last ([`YIELD_SPAN`]).
    yielding: AtomicBool,
    /// The overdraft granted to writers, in bytes (at most [`MAX_OVERDRAFT`]).
    overdraft: AtomicU64,
}

static FLUSHER: Flusher = Flusher {
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
fn take_overdraft(want: u64) -> u64 {
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
fn give_back_overdraft(bytes: u64) {
    if bytes > 0 {
        // Relaxed: see take_overdraft.
        FLUSHER.overdraft.fetch_sub(bytes, Ordering::Relaxed);
    }
}

/// The submitter's view of other processes' writeback: `Writeback:` of `/proc/meminfo` (every
/// page under writeback in the system) less what this process has in flight, read at most every
/// [`FOREIGN_CHECK`], published in [`Flusher::yielding`] with hysteresis ([`YIELD_ON`],
/// [`YIELD_OFF`]). Measured on the development VM (competing writes): when the buffered
/// competitor's `fsync` of 512 MiB started, `Writeback:` rose from under 16 MiB to 91 MiB within
/// 3 ms and stayed near 146 MiB (the block layer's throttling holds the rest back) until it
/// ended, ~250 ms later; our own in flight was 10-30 MiB.
///
/// System-wide, not per device: writeback to another disk makes the writers yield too (they then
/// write at the yield pace into their overdraft, and start writeback when it runs out).
struct Foreign {
    meminfo: Option<File>,
    checked: std::time::Instant,
    buf: Vec<u8>,
}

impl Foreign {
    fn new() -> Foreign {
        Foreign {
            meminfo: File::open("/proc/meminfo").ok(),
            checked: std::time::Instant::now(),
            buf: vec![0; 8192],
        }
    }

    /// Updates and returns [`Flusher::yielding`]: false while no writer has data in flight.
    fn update(&mut self) -> bool {
        // Relaxed: heuristics; a stale value shifts a decision by one round.
        let was = FLUSHER.yielding.load(Ordering::Relaxed);
        if FLUSHER.total_dirty.load(Ordering::Relaxed) == 0 {
            FLUSHER.yielding.store(false, Ordering::Relaxed);
            return false;
        }
        if self.checked.elapsed() < FOREIGN_CHECK {
            return was;
        }
        self.checked = std::time::Instant::now();
        let Some(writeback) = self.system_writeback() else {
            return was;
        };
        let ours = FLUSHER.inflight_bytes.load(Ordering::Relaxed);
        let foreign = writeback.saturating_sub(ours);
        let now = if was {
            foreign > YIELD_OFF
        } else {
            foreign > YIELD_ON
        };
        FLUSHER.yielding.store(now, Ordering::Relaxed);
        now
    }

    /// Bytes under writeback in the whole system, `None` if `/proc/meminfo` cannot be read.
    fn system_writeback(&mut self) -> Option<u64> {
        let n = self.meminfo.as_ref()?.read_at(&mut self.buf, 0).ok()?;
        meminfo_kib(&self.buf[..n], b"Writeback:").map(|kib| kib << 10)
    }
}

/// [`Foreign::update`] on the process's one [`Foreign`], from whichever flusher thread gets to it
/// first (the other reads [`Flusher::yielding`]).
fn check_foreign() -> bool {
    static FOREIGN: Mutex<Option<Foreign>> = Mutex::new(None);
    match FOREIGN.try_lock() {
        Ok(mut f) => f.get_or_insert_with(Foreign::new).update(),
        // Poisoned or busy: the flag as it is (Relaxed: a heuristic).
        Err(_) => FLUSHER.yielding.load(Ordering::Relaxed),
    }
}

/// The value in KiB of the `/proc/meminfo` line starting with `key` (e.g. `b"Writeback:"`).
fn meminfo_kib(text: &[u8], key: &[u8]) -> Option<u64> {
    let line = text.split(|&b| b == b'\n').find(|l| l.starts_with(key))?;
    let value = std::str::from_utf8(&line[key.len()..]).ok()?;
    value.split_whitespace().next()?.parse().ok()
}

/// Measures the flusher's writeback bandwidth: bytes dropped per second of *busy* time, the
/// time during which the writers kept data in flight (an idle stretch measures the writers, not
/// the disk), summed over the reaper's rounds until it reaches [`BANDWIDTH_INTERVAL`], smoothed
/// (a quarter of each new sample), published in [`Flusher::bandwidth`].
///
/// Only busy time counts, however it is spread: a writer paced by a low estimate writes a few
/// MiB, pauses, and finds them all written back and dropped before its pause ends, so the
/// flusher is busy for a few milliseconds out of every twenty. An earlier version took a sample
/// only over an interval of at least 10 ms that was busy at both ends; measured (competing
/// writes, after the competitor's `fsync` had held our writeback up): the estimate fell to
/// 7 MiB/s during the stall and never recovered, because that pattern was never busy at both
/// ends of an interval, and the writer was paused 20 ms per 1 MiB write until it finished.
struct Bandwidth {
    /// When the reaper last looked.
    last: std::time::Instant,
    /// [`Flusher::dropped`] when the reaper last looked.
    dropped: u64,
    /// Whether writeback was in flight when the reaper last looked: the time and bytes until it
    /// looks again count.
    busy: bool,
    /// Busy time and bytes dropped in it since the last sample.
    busy_time: Duration,
    busy_bytes: u64,
}

/// The busy time over which [`Bandwidth`] takes a sample.
const BANDWIDTH_INTERVAL: Duration = Duration::from_millis(10);

impl Bandwidth {
    fn new(now: std::time::Instant) -> Bandwidth {
        Bandwidth {
            last: now,
            dropped: 0,
            busy: false,
            busy_time: Duration::ZERO,
            busy_bytes: 0,
        }
    }

    /// Whether the writers keep the flusher busy: at least two pieces in flight.
    fn saturated() -> bool {
        // Relaxed: a heuristic.
        FLUSHER.total_dirty.load(Ordering::Relaxed) >= 2 * MAX_FOLIO
    }

    /// Adds the stretch since the last look if writeback was busy during it; returns a rate
    /// (bytes per second) once [`BANDWIDTH_INTERVAL`] of busy time has been seen. `dropped` is
    /// the running count of bytes dropped, `busy` whether writeback is in flight now.
    fn observe(&mut self, now: std::time::Instant, dropped: u64, busy: bool) -> Option<u64> {
        if self.busy {
            self.busy_time += now.saturating_duration_since(self.last);
            self.busy_bytes += dropped.saturating_sub(self.dropped);
        }
        self.last = now;
        self.dropped = dropped;
        self.busy = busy;
        if self.busy_time < BANDWIDTH_INTERVAL {
            return None;
        }
        let rate = (self.busy_bytes as f64 / self.busy_time.as_secs_f64()) as u64;
        self.busy_time = Duration::ZERO;
        self.busy_bytes = 0;
        Some(rate)
    }

    fn sample(&mut self) {
        // Relaxed: statistics.
        let dropped = FLUSHER.dropped.load(Ordering::Relaxed);
        // While yielding, our writeback waits behind another process's: that measures the other
        // process, not what this process gets once it stops, so the estimate is frozen.
        // Relaxed: a heuristic.
        let busy = Bandwidth::saturated() && !FLUSHER.yielding.load(Ordering::Relaxed);
        if let Some(rate) = self.observe(std::time::Instant::now(), dropped, busy) {
            let old = FLUSHER.bandwidth.load(Ordering::Relaxed);
            FLUSHER
                .bandwidth
                .store(smooth(old, rate), Ordering::Relaxed);
        }
    }
}

/// The bandwidth estimate after a new sample `rate`: a quarter of the way from `old` (the first
/// sample as it is), never 0 (0 means "not measured yet").
fn smooth(old: u64, rate: u64) -> u64 {
    let new = if old == 0 { rate } else { (3 * old + rate) / 4 };
    new.max(1)
}

/// Starts the flusher's two threads, the reaper (`pagepipe-reap`) and the submitter
/// (`pagepipe-flush`), once per process. A forked child has no flusher threads (fork copies only
/// the calling thread), so the pid each was started in is remembered and a child starts its
/// own; a failed start is retried by the next writer.
fn start_flusher() -> io::Result<()> {
    /// The pid in which the reaper and the submitter were started.
    static STARTED_IN: Mutex<[Option<u32>; 2]> = Mutex::new([None, None]);
    let pid = std::process::id();
    let mut started = lock(&STARTED_IN);
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
    fn register(&self, shared: &Arc<Shared>) -> io::Result<()> {
        start_flusher()?;
        lock(&self.writers).push(Arc::downgrade(shared));
        // The flusher sleeps without a timeout while it has no writer: let it start ticking.
        self.kick();
        Ok(())
    }

    /// Announces work; many kicks before the flusher looks cost one wake-up.
    fn kick(&self) {
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
            bandwidth.sample();
            drop(writers);
            if !busy && !kicked {
                // A queued range between the swap above and this wait changed the word.
                sys::futex::wait(&self.reap, 0, in_flight.then_some(FLUSHER_POLL));
            }
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Writer
// ---------------------------------------------------------------------------------------------

/// A file writer that leaves no page cache behind: [`io::Write`] + [`io::Seek`] and positional
/// [`Writer::write_at`]. See the [crate docs](crate) for how.
///
/// ```
/// use std::io::{Seek, SeekFrom, Write};
/// use pagepipe_dontcache::{Mode, Writer};
///
/// let path = std::env::temp_dir().join(format!("dontcache-writer-doc-{}", std::process::id()));
/// let file = std::fs::File::create(&path)?;
/// let mut w = Writer::with_mode(file, Mode::Fallback)?.with_window(4 << 20);
/// w.write_at(b"world", 6)?;
/// w.write_all(b"hello ")?; // at the cursor, 0
/// w.seek(SeekFrom::End(0))?;
/// w.write_all(b"!")?;
/// let stats = w.finish()?;
/// assert_eq!(std::fs::read(&path)?, b"hello world!");
/// assert_eq!(stats.mode, Mode::Fallback);
/// std::fs::remove_file(&path)?;
/// # Ok::<(), std::io::Error>(())
/// ```
pub struct Writer {
    /// Owned here, not in `Shared`, so that it is closed in the writer's thread when the writer
    /// goes (see `Inflight::closed`).
    file: File,
    shared: Arc<Shared>,
    /// Auto until the first non-empty write, then Kernel or Fallback.
    mode: Mode,
    pos: u64,
    bytes_written: u64,
    peak_dirty: u64,
    /// The largest overdraft held (see [`Stats::peak_overdraft_bytes`]).
    peak_overdraft: u64,
    waits: u64,
    /// Pause owed by [`Writer::pace`] and not yet taken, in nanoseconds; negative when the last
    /// pause took longer than owed (a credit, at most [`MAX_CREDIT`]).
    pace_debt_ns: i64,
    pauses: u64,
    /// Kernel mode: bytes_written at which to sample the file's dirty pages next.
    next_sample: u64,
    /// The end of the blocks [`Writer::preallocate`] reserved (0: none), released past the
    /// file's end when the writer finishes.
    reserved: u64,
    registered: bool,
    /// Set by finish: Drop has nothing left to do.
    finished: bool,
}

// A writer may move to another thread (its flusher state is shared through an Arc).
const _: () = {
    const fn assert_send<T: Send>() {}
    assert_send::<Writer>();
    assert_send::<Reader>();
};

impl std::fmt::Debug for Writer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Writer")
            .field("mode", &self.mode)
            .field("pos", &self.pos)
            .field("stats", &self.stats())
            .finish()
    }
}

impl Writer {
    /// Creates (or truncates) the file at `path` and writes it in [`Mode::Auto`].
    ///
    /// # Errors
    /// Those of [`File::create`].
    pub fn create(path: impl AsRef<Path>) -> io::Result<Writer> {
        Writer::with_mode(File::create(path)?, Mode::Auto)
    }

    /// Writes `file` (opened for writing, not `O_DIRECT`, not append-only) in `mode`, starting at
    /// offset 0. [`Mode::Kernel`] learns whether the file supports `RWF_DONTCACHE` only with the
    /// first write, which then fails with [`io::ErrorKind::Unsupported`].
    ///
    /// # Errors
    /// [`io::ErrorKind::InvalidInput`] if `file` is not a regular file; the OS's error if the
    /// flusher threads cannot be started.
    pub fn with_mode(file: File, mode: Mode) -> io::Result<Writer> {
        check_regular(&file)?;
        let mut w = Writer {
            shared: Arc::new(Shared::new(file.as_raw_fd())),
            file,
            mode,
            pos: 0,
            bytes_written: 0,
            peak_dirty: 0,
            peak_overdraft: 0,
            waits: 0,
            pace_debt_ns: 0,
            pauses: 0,
            next_sample: 0,
            reserved: 0,
            registered: false,
            finished: false,
        };
        if mode == Mode::Fallback {
            w.register()?;
        }
        Ok(w)
    }

    /// Sets the bound on dirty data in flight (fallback mode; in kernel mode it only sets how
    /// often dirty pages are sampled for [`Stats::peak_dirty_bytes`]). Values below
    /// [`MIN_WINDOW`] are raised to it. Default [`DEFAULT_WINDOW`]. While another process's
    /// writeback floods the system the writer may hold up to three more windows, as far as the
    /// process-wide [`MAX_OVERDRAFT`] allows (see the [crate docs](crate)).
    pub fn with_window(self, bytes: usize) -> Writer {
        let window = bytes.max(MIN_WINDOW) as u64;
        self.shared.window.store(window, Ordering::Relaxed);
        self
    }

    /// The window in bytes (see [`Writer::with_window`]).
    pub fn window(&self) -> usize {
        self.shared.window.load(Ordering::Relaxed) as usize
    }

    /// The mode in use: [`Mode::Auto`] until the first non-empty write has probed the file.
    pub fn mode(&self) -> Mode {
        self.mode
    }

    /// The file being written.
    pub fn file(&self) -> &File {
        &self.file
    }

    /// What the writer did so far.
    pub fn stats(&self) -> Stats {
        Stats {
            bytes_written: self.bytes_written,
            mode: self.mode,
            peak_dirty_bytes: self.peak_dirty,
            peak_overdraft_bytes: self.peak_overdraft,
            writeback_waits: self.waits,
            pauses: self.pauses,
        }
    }

    /// Reserves disk blocks for the file's first `len` bytes (`fallocate(2)` with
    /// `FALLOC_FL_KEEP_SIZE`: the file's size does not change). Call it before writing when the
    /// final size is known, as a copy knows its source's.
    ///
    /// Writeback then allocates nothing. On ext4 that keeps the writer's writes from waiting for
    /// the inode's block-map lock (`i_data_sem`), which the writeback of freshly written data
    /// holds while it allocates blocks, reading block bitmaps, behind whatever else the disk is
    /// busy with: with another process's `fsync` flooding the disk, the fallback writer's
    /// slowest write fell from tens of milliseconds to a few (see docs/dontcache.md). It also
    /// reports a full disk before anything is written. In [`Mode::Kernel`] it does not help, and
    /// on the development VM's ext4 it made the slowest of 1024 sequential 1 MiB
    /// `RWF_DONTCACHE` writes 45 ms instead of 15-25 (throughput unchanged).
    ///
    /// Blocks reserved past the end of what was written are released when the writer finishes
    /// or is dropped (the file is truncated to its own size, which frees them). A filesystem
    /// that cannot preallocate (`EOPNOTSUPP`) is left alone: the call does nothing.
    ///
    /// ```
    /// use std::io::Write;
    /// use pagepipe_dontcache::Writer;
    ///
    /// let path = std::env::temp_dir().join(format!("dontcache-prealloc-{}", std::process::id()));
    /// let mut w = Writer::create(&path)?;
    /// w.preallocate(1 << 20)?; // reserved, still 0 bytes long
    /// assert_eq!(w.file().metadata()?.len(), 0);
    /// w.write_all(&[7u8; 4096])?;
    /// w.finish()?; // what was reserved past 4 KiB is given back
    /// assert_eq!(std::fs::metadata(&path)?.len(), 4096);
    /// std::fs::remove_file(&path)?;
    /// # Ok::<(), std::io::Error>(())
    /// ```
    ///
    /// # Errors
    /// `fallocate`'s: [`io::ErrorKind::StorageFull`] when the filesystem cannot hold `len`
    /// bytes, [`io::ErrorKind::FileTooLarge`] past its largest file.
    pub fn preallocate(&mut self, len: u64) -> io::Result<()> {
        if reserve(&self.file, len)? {
            self.reserved = self.reserved.max(len);
        }
        Ok(())
    }

    /// Gives back the blocks [`Writer::preallocate`] reserved past the file's end: truncating a
    /// file to its own size frees them. Best effort (the blocks only waste space).
    fn release_reserved(&mut self) {
        if self.reserved == 0 {
            return;
        }
        if let Ok(size) = self.file.metadata().map(|m| m.len()) {
            if size < self.reserved {
                let _ = self.file.set_len(size);
            }
        }
        self.reserved = 0;
    }

    fn register(&mut self) -> io::Result<()> {
        if !self.registered {
            FLUSHER.register(&self.shared)?;
            self.registered = true;
        }
        Ok(())
    }

    /// Writes `buf` at `offset`, leaving the cursor alone, like `pwrite(2)`: returns how many
    /// bytes were written, possibly fewer than `buf.len()`.
    ///
    /// # Errors
    /// The write's own error (for example [`io::ErrorKind::StorageFull`]); a kept error of earlier
    /// writeback; [`io::ErrorKind::Unsupported`] for the first write in [`Mode::Kernel`] on a file
    /// without `RWF_DONTCACHE`.
    pub fn write_at(&mut self, buf: &[u8], offset: u64) -> io::Result<usize> {
        self.shared.check_error()?;
        if buf.is_empty() {
            return Ok(0);
        }
        let n = match self.mode {
            Mode::Kernel => self.write_kernel(buf, offset)?,
            Mode::Fallback => self.write_fallback(buf, offset)?,
            Mode::Auto => self.write_probe(buf, offset)?,
        };
        self.bytes_written += n as u64;
        Ok(n)
    }

    /// Writes all of `buf` at `offset` (repeating short writes).
    ///
    /// # Errors
    /// As [`Writer::write_at`]; [`io::ErrorKind::WriteZero`] if a write makes no progress.
    pub fn write_all_at(&mut self, mut buf: &[u8], mut offset: u64) -> io::Result<()> {
        while !buf.is_empty() {
            match self.write_at(buf, offset) {
                Ok(0) => {
                    return Err(io::Error::new(
                        io::ErrorKind::WriteZero,
                        "dontcache write made no progress",
                    ))
                }
                Ok(n) => {
                    buf = &buf[n..];
                    offset += n as u64;
                }
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(e),
            }
        }
        Ok(())
    }

    /// The first non-empty write in Auto mode: try the flag, settle the mode.
    fn write_probe(&mut self, buf: &[u8], offset: u64) -> io::Result<usize> {
        match sys::fs::pwritev2(&self.file, buf, offset, sys::fs::RWF_DONTCACHE) {
            Ok(n) => {
                self.mode = Mode::Kernel;
                self.after_kernel_write(n);
                Ok(n)
            }
            Err(e) if is_unsupported(&e) => {
                self.register()?;
                self.mode = Mode::Fallback;
                self.write_fallback(buf, offset)
            }
            Err(e) => Err(e),
        }
    }

    fn write_kernel(&mut self, buf: &[u8], offset: u64) -> io::Result<usize> {
        let n = match sys::fs::pwritev2(&self.file, buf, offset, sys::fs::RWF_DONTCACHE) {
            Ok(n) => n,
            Err(e) if e.raw_os_error() == Some(libc::EOPNOTSUPP) => return Err(unsupported(e)),
            Err(e) if self.bytes_written == 0 && is_unsupported(&e) => return Err(unsupported(e)),
            Err(e) => return Err(e),
        };
        self.after_kernel_write(n);
        Ok(n)
    }

    /// Kernel mode: samples the file's dirty pages once per window of writes.
    fn after_kernel_write(&mut self, n: usize) {
        let written = self.bytes_written + n as u64;
        if written < self.next_sample {
            return;
        }
        self.next_sample = written + self.shared.window.load(Ordering::Relaxed);
        if let Ok(cs) = sys::fs::cachestat(&self.file, 0, 0) {
            self.peak_dirty = self.peak_dirty.max(cs.nr_dirty * PAGE);
        }
    }

    fn write_fallback(&mut self, buf: &[u8], offset: u64) -> io::Result<usize> {
        let n = self.file.write_at(buf, offset)?;
        if n == 0 {
            return Ok(0);
        }
        let (dirty, kick) = self.shared.record(offset, n as u64);
        self.peak_dirty = self.peak_dirty.max(dirty);
        if kick {
            FLUSHER.kick();
        }
        self.update_grant(dirty);
        if self.shared.over_limit() {
            self.wait_for_room();
        } else {
            self.pace(n as u64, dirty);
        }
        Ok(n)
    }

    /// Slows a writer that outruns writeback down to its share of the measured bandwidth
    /// before its window fills, so that it waits a little on every write rather than for a whole
    /// piece's writeback now and then (the tail latency of a full window), as the kernel's
    /// `balance_dirty_pages` pauses writers in proportion to their dirtying rate. Below a quarter
    /// of its window a writer runs free; above, each write of `n` bytes owes `n / (share * room)`
    /// seconds, where `share` is the measured bandwidth (or [`INITIAL_BANDWIDTH`] before the
    /// first measurement) over the writers with data in flight and `room` is
    /// `(window - dirty) / (window/2)`: at half the window it writes exactly as fast as
    /// writeback drains it, and the pause grows gently (2x at three quarters) and then without
    /// bound (up to [`MAX_PAUSE`]) as the window fills. The set point leaves half the window to
    /// absorb a stall of writeback (the block layer's throttling held the flusher's submissions
    /// for up to 70 ms) with short pauses before the window's hard limit is reached; a set point
    /// at a quarter (tried) kept too little in flight: the writer lost throughput on random
    /// writes and its share of the disk against a competing writer. The same rule applies to
    /// all fallback writers' data against [`SHARED_WINDOW`] for a writer holding more than half
    /// its fair share of it (the smaller room wins), so that many writers cannot pile up a
    /// window each. Pauses shorter than
    /// [`MIN_PAUSE`] accumulate. A pause is counted at what it really took (see [`settle`]): an
    /// overrun is a credit against the next pauses, so a writer is slowed to its share, not
    /// below it, however late the scheduler wakes it. Pauses up to [`SPIN_PAUSE`] are spun
    /// while fewer writers are paced than there are CPUs (see [`take_pause`]): a 64 KiB write
    /// keeping pace with a 1 GB/s disk owes ~60 µs, less than a sleep's wake-up takes on a busy
    /// machine.
    fn pace(&mut self, n: u64, dirty: u64) {
        // Relaxed: tuning values and statistics; stale reads only shift a pause.
        let measured = FLUSHER.bandwidth.load(Ordering::Relaxed);
        let bandwidth = if measured == 0 {
            INITIAL_BANDWIDTH
        } else {
            measured
        };
        let active = FLUSHER.active.load(Ordering::Relaxed).max(1);
        let window = self.shared.window.load(Ordering::Relaxed);
        let grant = self.shared.grant.load(Ordering::Relaxed);
        let share = (bandwidth / active).max(1);
        // Relaxed: a heuristic.
        let yielding = FLUSHER.yielding.load(Ordering::Relaxed);
        if let Some(rate) = overdraft_rate(grant, yielding, dirty, window, share) {
            self.owe(n as f64 / rate as f64, active);
            return;
        }
        let shared = (SHARED_WINDOW as u64).max(window);
        let total = FLUSHER.total_dirty.load(Ordering::Relaxed);
        // The rate allowed, as a fraction of the share: 3/2 at a quarter of the window, 1 at
        // half, falling to 0 at the window (the pause grows without bound, up to MAX_PAUSE).
        let own = (dirty > window / 4).then(|| room(dirty, window));
        // The same against all writers' data and SHARED_WINDOW, for a writer holding more
        // than half its fair share of it (a writer with little in flight runs free).
        let all = (total > shared / 2 && dirty > shared / active / 2).then(|| room(total, shared));
        let Some(room) = own.into_iter().chain(all).reduce(f64::min) else {
            self.pace_debt_ns = 0;
            return;
        };
        self.owe(n as f64 / (share as f64 * room), active);
    }

    /// Adds a pause of `secs` to what the writer owes and takes it once it reaches
    /// [`MIN_PAUSE`] (see [`Writer::pace`]); `active` writers share the disk.
    fn owe(&mut self, secs: f64, active: u64) {
        let max = MAX_PAUSE.as_nanos() as i64;
        let pause = (secs * 1e9).min(max as f64) as i64;
        let debt = (self.pace_debt_ns + pause).min(max);
        if debt < MIN_PAUSE.as_nanos() as i64 {
            self.pace_debt_ns = debt;
            return;
        }
        let spin = active < cpus();
        let took = take_pause(Duration::from_nanos(debt as u64), spin);
        self.pace_debt_ns = settle(debt, took);
        self.pauses += 1;
    }

    /// Takes an overdraft when the submitter starts yielding to another process's writeback,
    /// and gives it back once the writer has no use for it: writeback runs again and its dirty
    /// data is back at the pacing set point (half its window).
    fn update_grant(&mut self, dirty: u64) {
        let s = &*self.shared;
        // Relaxed: this writer's own values, and a heuristic flag.
        let window = s.window.load(Ordering::Relaxed);
        let grant = s.grant.load(Ordering::Relaxed);
        let yielding = FLUSHER.yielding.load(Ordering::Relaxed);
        if grant == 0 && yielding {
            let taken = take_overdraft(OVERDRAFT_WINDOWS * window);
            s.grant.store(taken, Ordering::Relaxed);
            self.peak_overdraft = self.peak_overdraft.max(taken);
        } else if grant > 0 && !yielding && dirty <= window / 2 {
            s.grant.store(0, Ordering::Relaxed);
            give_back_overdraft(grant);
        }
    }

    /// Sleeps until the flusher has brought this writer's dirty data back within its window, or
    /// failed. Never writes anything back itself.
    fn wait_for_room(&mut self) {
        self.waits += 1;
        FLUSHER.kick();
        let s = &*self.shared;
        loop {
            // Acquire: pairs with the Release increment in Shared::drop_range.
            let seen = FLUSHER.progress.load(Ordering::Acquire);
            // SeqCst: store-load handshake with Shared::drop_range (see there); the load of the
            // count in over_limit is the other half.
            FLUSHER.waiters.fetch_add(1, Ordering::SeqCst);
            // Acquire: pairs with the Release store in Shared::set_error.
            let done = !s.over_limit() || s.failed.load(Ordering::Acquire);
            if !done {
                sys::futex::wait(&FLUSHER.progress, seen, Some(WINDOW_RECHECK));
            }
            // Relaxed: only the increment above takes part in the handshake.
            FLUSHER.waiters.fetch_sub(1, Ordering::Relaxed);
            if done {
                break;
            }
        }
    }

    /// Makes everything written so far durable (`fdatasync(2)`) and, in fallback mode, drops it
    /// from the page cache. Waits on the caller's thread.
    ///
    /// # Errors
    /// A kept error of earlier writeback, or `fdatasync`'s error (which is then kept too).
    pub fn sync(&mut self) -> io::Result<()> {
        self.shared.check_error()?;
        if self.mode == Mode::Fallback {
            self.shared.drain(&self.file, true)?;
        } else if let Err(e) = self.file.sync_data() {
            self.shared.set_error(&e, "fdatasync".to_string());
            return Err(e);
        }
        self.shared.check_error()
    }

    /// [`Writer::sync`]s, closes the file and returns what the writer did.
    ///
    /// # Errors
    /// As [`Writer::sync`]: any write-back error not yet reported, or `fdatasync`'s.
    pub fn finish(mut self) -> io::Result<Stats> {
        self.release_reserved();
        let synced = self.sync();
        // After an error, leave the best-effort drain to Drop so the writer's pages still leave
        // the cache.
        self.finished = synced.is_ok();
        synced.map(|()| self.stats())
    }
}

impl Write for Writer {
    /// Writes at the cursor and advances it; see [`Writer::write_at`].
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        let n = self.write_at(buf, self.pos)?;
        self.pos += n as u64;
        Ok(n)
    }

    /// Reports a kept writeback error and, in fallback mode, asks the flusher to start writing
    /// back now. Not a durability point: that is [`Writer::sync`].
    fn flush(&mut self) -> io::Result<()> {
        if self.mode == Mode::Fallback {
            FLUSHER.kick();
        }
        self.shared.check_error()
    }
}

impl Seek for Writer {
    /// Moves the cursor for [`Write::write`]; `SeekFrom::End` is relative to the file's current
    /// size.
    fn seek(&mut self, pos: SeekFrom) -> io::Result<u64> {
        self.pos = seek_target(&self.file, self.pos, pos)?;
        Ok(self.pos)
    }
}

impl Drop for Writer {
    /// Writes back and drops what this writer left dirty, ignoring errors (best effort, as
    /// dropping a [`File`] is); call [`Writer::finish`] to see them.
    fn drop(&mut self) {
        self.release_reserved();
        if !self.finished && self.mode == Mode::Fallback {
            let _ = self.shared.drain(&self.file, false);
        }
        // From here on the flusher threads leave the fd alone; the File closes when this
        // returns. Same lock order as `drain`: `starting`, then `inflight`.
        let mut starting = lock(&self.shared.starting);
        *starting = true;
        lock(&self.shared.inflight).closed = true;
        drop(starting);
        // Relaxed: the writer's own value (see Shared::grant).
        give_back_overdraft(self.shared.grant.swap(0, Ordering::Relaxed));
    }
}

// ---------------------------------------------------------------------------------------------
// Reading without caching
// ---------------------------------------------------------------------------------------------

/// A file reader that drops what it reads from the page cache: `preadv2(2)` with
/// `RWF_DONTCACHE` where the file supports it, otherwise a buffered read followed by
/// `POSIX_FADV_DONTNEED` on the pages read.
///
/// The fallback drops the pages it read even if they were cached before, and leaves what the
/// kernel read ahead past the last read (at most one readahead window).
///
/// ```
/// use std::io::Read;
/// use pagepipe_dontcache::Reader;
///
/// let path = std::env::temp_dir().join(format!("dontcache-reader-doc-{}", std::process::id()));
/// std::fs::write(&path, vec![3u8; 100_000])?;
/// let mut bytes = Vec::new();
/// Reader::open(&path)?.read_to_end(&mut bytes)?;
/// assert_eq!(bytes, vec![3u8; 100_000]);
/// std::fs::remove_file(&path)?;
/// # Ok::<(), std::io::Error>(())
/// ```
#[derive(Debug)]
pub struct Reader {
    file: File,
    mode: Mode,
    pos: u64,
    /// Fallback: pages read and not yet dropped, page aligned (`start..end`, empty when equal).
    /// Dropped up to the last [`MAX_FOLIO`] boundary as reads go on (a large folio is dropped only
    /// once it lies wholly inside the range), the rest when the reads jump elsewhere, reach the
    /// end of the file, or the reader is dropped.
    undropped: std::ops::Range<u64>,
}

impl Reader {
    /// Opens `path` for reading in [`Mode::Auto`].
    ///
    /// # Errors
    /// Those of [`File::open`]; [`io::ErrorKind::InvalidInput`] if it is not a regular file.
    pub fn open(path: impl AsRef<Path>) -> io::Result<Reader> {
        Reader::with_mode(File::open(path)?, Mode::Auto)
    }

    /// Reads `file` in `mode`, from offset 0.
    ///
    /// # Errors
    /// [`io::ErrorKind::InvalidInput`] if `file` is not a regular file.
    pub fn with_mode(file: File, mode: Mode) -> io::Result<Reader> {
        check_regular(&file)?;
        Ok(Reader {
            file,
            mode,
            pos: 0,
            undropped: 0..0,
        })
    }

    /// The mode in use: [`Mode::Auto`] until the first non-empty read.
    pub fn mode(&self) -> Mode {
        self.mode
    }

    /// Reads into `buf` from `offset`, leaving the cursor alone, like `pread(2)`; 0 at end of file.
    ///
    /// # Errors
    /// The read's error; [`io::ErrorKind::Unsupported`] for the first read in [`Mode::Kernel`] on a
    /// file without `RWF_DONTCACHE`.
    pub fn read_at(&mut self, buf: &mut [u8], offset: u64) -> io::Result<usize> {
        if buf.is_empty() {
            return Ok(0);
        }
        match self.mode {
            Mode::Fallback => self.read_fallback(buf, offset),
            Mode::Kernel => sys::fs::preadv2(&self.file, buf, offset, sys::fs::RWF_DONTCACHE)
                .map_err(|e| {
                    if e.raw_os_error() == Some(libc::EOPNOTSUPP) {
                        unsupported(e)
                    } else {
                        e
                    }
                }),
            Mode::Auto => match sys::fs::preadv2(&self.file, buf, offset, sys::fs::RWF_DONTCACHE) {
                Ok(n) => {
                    self.mode = Mode::Kernel;
                    Ok(n)
                }
                Err(e) if is_unsupported(&e) => {
                    self.mode = Mode::Fallback;
                    self.read_fallback(buf, offset)
                }
                Err(e) => Err(e),
            },
        }
    }

    fn read_fallback(&mut self, buf: &mut [u8], offset: u64) -> io::Result<usize> {
        let n = self.file.read_at(buf, offset)?;
        if n == 0 {
            self.drop_undropped(u64::MAX);
            return Ok(0);
        }
        let r = Range::of_write(offset, n as u64);
        let contiguous = r.start <= self.undropped.end && r.end >= self.undropped.start;
        if !contiguous {
            self.drop_undropped(u64::MAX);
            self.undropped = r.start..r.end;
        } else {
            self.undropped = self.undropped.start.min(r.start)..self.undropped.end.max(r.end);
        }
        let boundary = self.undropped.end / MAX_FOLIO * MAX_FOLIO;
        self.drop_undropped(boundary);
        Ok(n)
    }

    /// Drops the undropped pages below `upto` (all of them for `u64::MAX`).
    fn drop_undropped(&mut self, upto: u64) {
        let end = self.undropped.end.min(upto);
        if end > self.undropped.start {
            // Only fails for a bad fd or a non-regular file (excluded at creation).
            let _ = sys::fs::fadvise_dontneed(
                &self.file,
                self.undropped.start,
                end - self.undropped.start,
            );
            self.undropped.start = end;
        }
    }
}

impl Drop for Reader {
    /// Drops what the last reads left in the cache.
    fn drop(&mut self) {
        self.drop_undropped(u64::MAX);
    }
}

impl io::Read for Reader {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let n = self.read_at(buf, self.pos)?;
        self.pos += n as u64;
        Ok(n)
    }
}

impl Seek for Reader {
    fn seek(&mut self, pos: SeekFrom) -> io::Result<u64> {
        self.pos = seek_target(&self.file, self.pos, pos)?;
        Ok(self.pos)
    }
}

/// Where `pos` moves a cursor at `cur` in `file` (`SeekFrom::End` is relative to its current
/// size); `InvalidInput` for a target below 0 or past `u64::MAX`.
fn seek_target(file: &File, cur: u64, pos: SeekFrom) -> io::Result<u64> {
    let (base, delta) = match pos {
        SeekFrom::Start(n) => (n, 0),
        SeekFrom::Current(d) => (cur, d),
        SeekFrom::End(d) => (file.metadata()?.len(), d),
    };
    base.checked_add_signed(delta).ok_or_else(|| {
        io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("seek to {base} + {delta} is out of range"),
        )
    })
}

// ---------------------------------------------------------------------------------------------
// Page-cache inspection
// ---------------------------------------------------------------------------------------------

/// How many bytes of `file` are in the page cache now: `cachestat(2)` where the kernel has it
/// (Linux 6.5), else `mincore(2)` on a read-only mapping of the file.
///
/// ```
/// let path = std::env::temp_dir().join(format!("dontcache-cached-doc-{}", std::process::id()));
/// std::fs::write(&path, vec![1u8; 1 << 20])?;
/// let file = std::fs::File::open(&path)?;
/// file.sync_all()?;
/// pagepipe_dontcache::drop_cache(&file)?;
/// assert!(pagepipe_dontcache::cached_bytes(&file)? < 1 << 20);
/// std::fs::remove_file(&path)?;
/// # Ok::<(), std::io::Error>(())
/// ```
///
/// # Errors
/// The OS's error from `cachestat` (other than `ENOSYS`), `fstat`, `mmap` or `mincore`.
pub fn cached_bytes(file: &File) -> io::Result<u64> {
    cached_bytes_in(file, 0..u64::MAX)
}

/// How many bytes of the pages of `range` of `file` are in the page cache now (see
/// [`cached_bytes`]). The range is clipped to the file's size where `mincore` is used.
///
/// # Errors
/// As [`cached_bytes`].
pub fn cached_bytes_in(file: &File, range: std::ops::Range<u64>) -> io::Result<u64> {
    let start = range.start & !(PAGE - 1);
    let len = if range.end == u64::MAX {
        0
    } else {
        range.end.saturating_sub(start)
    };
    match sys::fs::cachestat(file, start, len) {
        Ok(cs) => Ok(cs.nr_cache * PAGE),
        Err(e) if e.raw_os_error() == Some(libc::ENOSYS) => {
            let size = file.metadata()?.len();
            let end = range.end.min(size);
            let total = sys::fs::file_resident_pages(file, end)?;
            let before = sys::fs::file_resident_pages(file, start.min(end))?;
            Ok((total - before) * PAGE)
        }
        Err(e) => Err(e),
    }
}

/// Drops `file`'s clean pages from the page cache (`posix_fadvise(2)`, `POSIX_FADV_DONTNEED` on
/// the whole file). Dirty pages stay: sync first. Meant for files you own (benchmarks drop their
/// own files between runs this way, never the whole machine's cache).
///
/// # Errors
/// The OS's error, e.g. `ESPIPE` for a pipe.
pub fn drop_cache(file: &File) -> io::Result<()> {
    sys::fs::fadvise_dontneed(file, 0, 0)
}

/// Reserves disk blocks for `file`'s first `len` bytes without changing its size (`fallocate(2)`
/// with `FALLOC_FL_KEEP_SIZE`); `Ok(false)` where the filesystem cannot (`EOPNOTSUPP`). What
/// [`Writer::preallocate`] does, for files written some other way (benchmarks reserve every
/// mode's file alike with it). The reserved blocks past the end stay until the file is truncated.
///
/// # Errors
/// The OS's error: [`io::ErrorKind::StorageFull`] when the filesystem cannot hold `len` bytes,
/// [`io::ErrorKind::FileTooLarge`] past its largest file.
pub fn reserve(file: &File, len: u64) -> io::Result<bool> {
    sys::fs::fallocate_keep_size(file, len)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ranges_round_to_pages_and_merge() {
        let r = Range::of_write(4095, 2);
        assert_eq!((r.start, r.end, r.charged), (0, 8192, 2));
        let mut a = Range::of_write(0, 4096);
        assert!(a.try_merge(&Range::of_write(4096, 10)));
        assert_eq!((a.start, a.end, a.charged), (0, 8192, 4106));
        assert!(!a.try_merge(&Range::of_write(3 * 4096, 1)));
        let merged = coalesce(vec![
            Range::of_write(8192, 4096),
            Range::of_write(0, 4096),
            Range::of_write(1 << 20, 1),
        ]);
        assert_eq!(merged.len(), 3);
        assert_eq!(
            (merged[0].start, merged[0].end, merged[0].charged),
            (0, 4096, 4096)
        );
        assert_eq!(merged[1].start, 8192);
        assert_eq!(merged[2].start, 1 << 20);
        let merged = coalesce(vec![Range::of_write(4096, 4096), Range::of_write(0, 4096)]);
        assert_eq!(
            (merged[0].start, merged[0].end, merged[0].charged),
            (0, 8192, 8192)
        );
    }

    #[test]
    fn a_writeback_error_is_kept_and_reported_everywhere() {
        let path =
            std::env::temp_dir().join(format!("pagepipe-dontcache-sticky-{}", std::process::id()));
        let mut w = Writer::with_mode(File::create(&path).unwrap(), Mode::Fallback).unwrap();
        w.write_all(b"before").unwrap();
        let eio = io::Error::from_raw_os_error(libc::EIO);
        w.shared
            .set_error(&eio, "writeback of bytes 0..4096".to_string());
        w.shared.set_error(
            &io::Error::from_raw_os_error(libc::ENOSPC),
            "later".to_string(),
        );
        let e = w.write(b"after").unwrap_err();
        assert_eq!(e.raw_os_error(), None);
        assert!(e.to_string().contains("writeback of bytes 0..4096"), "{e}");
        assert_eq!(e.kind(), eio.kind());
        assert_eq!(w.flush().unwrap_err().kind(), eio.kind());
        assert_eq!(w.sync().unwrap_err().kind(), eio.kind());
        assert_eq!(w.finish().unwrap_err().kind(), eio.kind());
        std::fs::remove_file(&path).unwrap();
    }

    #[test]
    fn split_shares_the_charge() {
        let r = Range {
            start: PAGE,
            end: 10 * PAGE,
            charged: 9 * PAGE - 1,
        };
        let parts: Vec<Range> = r.split(4 * PAGE).collect();
        assert_eq!(parts.len(), 3);
        assert_eq!((parts[0].start, parts[0].end), (PAGE, 4 * PAGE));
        assert_eq!((parts[1].start, parts[1].end), (4 * PAGE, 8 * PAGE));
        assert_eq!((parts[2].start, parts[2].end), (8 * PAGE, 10 * PAGE));
        assert_eq!(parts.iter().map(|p| p.charged).sum::<u64>(), r.charged);
        assert_eq!(Range::of_write(0, 1).split(4 * PAGE).count(), 1);
    }

    #[test]
    fn completed_ranges_are_dropped_behind_a_busy_one() {
        let path =
            std::env::temp_dir().join(format!("pagepipe-dontcache-reap-{}", std::process::id()));
        let file = File::options()
            .read(true)
            .write(true)
            .create(true)
            .truncate(true)
            .open(&path)
            .unwrap();
        if let Err(e) = sys::fs::cachestat(&file, 0, 0) {
            // Without cachestat the reaper waits for the oldest range, in order.
            eprintln!("SKIPPED completed_ranges_are_dropped_behind_a_busy_one: no cachestat: {e}");
            std::fs::remove_file(&path).unwrap();
            return;
        }
        // Not registered with the flusher: only this test looks at these ranges.
        let shared = Shared::new(file.as_raw_fd());
        let (a, b) = (0, 1 << 20);
        for off in [a, b] {
            file.write_all_at(&[5u8; 8192], off).unwrap();
            shared.record(off, 8192);
        }
        // The newer range is written back; the older one is still dirty and not started.
        sys::fs::sync_file_range(&file, b, 8192, RangeSync::Start).unwrap();
        sys::fs::sync_file_range(&file, b, 8192, RangeSync::Wait).unwrap();
        let taken = shared.take_pending();
        assert_eq!(taken.len(), 2);
        lock(&shared.inflight).ranges.extend(taken);
        assert_eq!(shared.complete_some(), Completion::Dropped);
        let left: Vec<u64> = lock(&shared.inflight)
            .ranges
            .iter()
            .map(|r| r.start)
            .collect();
        assert_eq!(
            left,
            vec![a],
            "the older, busy range stays; the newer one is dropped"
        );
        assert_eq!(shared.dirty.load(Ordering::Relaxed), 8192);
        assert_eq!(cached_bytes_in(&file, b..b + 8192).unwrap(), 0);
        // The reaper started the dirty range's writeback; draining drops it too.
        shared.drain(&file, false).unwrap();
        assert_eq!(shared.dirty.load(Ordering::Relaxed), 0);
        assert_eq!(cached_bytes(&file).unwrap(), 0);
        drop(file);
        std::fs::remove_file(&path).unwrap();
    }

    #[test]
    fn pauses_count_what_they_took() {
        let us = Duration::from_micros;
        assert_eq!(settle(100_000, us(60)), 40_000);
        assert_eq!(settle(100_000, us(300)), -200_000, "an overrun is a credit");
        assert_eq!(
            settle(100_000, us(5_000)),
            -(MAX_CREDIT.as_nanos() as i64),
            "the credit is bounded"
        );
        assert_eq!(
            settle(-100_000, Duration::MAX),
            -(MAX_CREDIT.as_nanos() as i64)
        );
    }

    /// Voluntary context switches of the calling thread so far.
    fn voluntary_switches() -> i64 {
        // SAFETY: rusage is plain data, for which all zeroes is a valid value.
        let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
        // SAFETY: getrusage(2) writes one rusage to the valid, exclusive pointer it is given.
        let rc = unsafe { libc::getrusage(libc::RUSAGE_THREAD, &mut ru) };
        assert_eq!(rc, 0, "{}", io::Error::last_os_error());
        ru.ru_nvcsw
    }

    #[test]
    fn short_pauses_spin_and_long_ones_sleep() {
        let us = Duration::from_micros;
        let before = voluntary_switches();
        for _ in 0..20 {
            assert!(take_pause(us(100), true) >= us(100));
        }
        assert_eq!(voluntary_switches(), before, "a spun pause never blocks");
        let before = voluntary_switches();
        assert!(take_pause(SPIN_PAUSE + us(100), true) >= SPIN_PAUSE + us(100));
        assert!(take_pause(us(100), false) >= us(100));
        assert!(
            voluntary_switches() >= before + 2,
            "a long pause, or a short one when not spinning, sleeps"
        );
    }

    #[test]
    fn flusher_threads_ask_for_a_long_slice() {
        // On a thread of its own: the slice stays with the thread.
        std::thread::spawn(|| {
            // SAFETY: as in lengthen_slice: reads the calling thread's nice value.
            let nice = || unsafe { libc::getpriority(libc::PRIO_PROCESS, 0) };
            let before = nice();
            if let Err(e) = lengthen_slice() {
                eprintln!("SKIPPED flusher_threads_ask_for_a_long_slice: {e}");
                return;
            }
            assert_eq!(nice(), before, "the nice value is kept");
            // /proc/PID/sched exists with CONFIG_SCHED_DEBUG; `se.slice` since Linux 6.6.
            let sched = std::fs::read_to_string("/proc/thread-self/sched").unwrap_or_default();
            let Some(slice) = sched
                .lines()
                .find(|l| l.starts_with("se.slice"))
                .and_then(|l| l.split(':').nth(1))
                .and_then(|v| v.trim().parse::<u64>().ok())
            else {
                eprintln!("SKIPPED flusher_threads_ask_for_a_long_slice: no se.slice to read");
                return;
            };
            assert_eq!(slice, FLUSHER_SLICE.as_nanos() as u64);
        })
        .join()
        .unwrap();
    }

    #[test]
    fn pacing_holds_a_writer_at_half_its_window() {
        let w = 32u64 << 20;
        let close = |a: f64, b: f64| (a - b).abs() < 1e-9;
        assert!(close(room(w / 4, w), 1.5));
        assert!(
            close(room(w / 2, w), 1.0),
            "the set point: the rate of writeback"
        );
        assert!(close(room(3 * w / 4, w), 0.5));
        assert_eq!(room(w, w), 0.0);
        assert_eq!(room(2 * w, w), 0.0);
    }

    #[test]
    fn bandwidth_counts_busy_time_only() {
        let t0 = std::time::Instant::now();
        let ms = |n: u64| t0 + Duration::from_millis(n);
        let mib = 1u64 << 20;
        let mut b = Bandwidth::new(t0);
        // The pattern of a writer paced by a low estimate: 4 MiB written back in 3 ms, then
        // nothing in flight for 17 ms, over and over. Never busy at both ends of a 10 ms
        // interval, yet 4 MiB per 3 ms of busy time is what the disk does.
        let mut dropped = 0;
        let mut rates = Vec::new();
        for round in 0..8 {
            let start = 20 * round;
            rates.extend(b.observe(ms(start), dropped, true));
            for step in 1..=3 {
                dropped += 4 * mib / 3;
                let busy = step < 3;
                rates.extend(b.observe(ms(start + step), dropped, busy));
            }
            rates.extend(b.observe(ms(start + 19), dropped, false));
        }
        assert!(rates.len() >= 2, "busy time adds up to samples: {rates:?}");
        for r in &rates {
            let gbps = *r as f64 / 1e9;
            assert!(
                (1.3..1.5).contains(&gbps),
                "4 MiB per 3 ms is 1.4 GB/s, got {gbps}"
            );
        }
        // Idle stretches alone never make a sample.
        let mut b = Bandwidth::new(t0);
        for i in 0..100 {
            assert_eq!(b.observe(ms(i * 10), 0, false), None);
        }
        // A stalled disk (busy, nothing dropped) measures 0, and the estimate recovers from a
        // low value in a few samples.
        assert_eq!(smooth(0, 0), 1);
        let mut est = 7 << 20;
        for _ in 0..8 {
            est = smooth(est, 1400 << 20);
        }
        assert!(est > 1200 << 20, "{est}");
    }

    #[test]
    fn meminfo_values_are_read_by_key() {
        let text = b"MemTotal:       24660920 kB\nDirty:              9284 kB\n\
                     Writeback:         91136 kB\nWritebackTmp:          7 kB\n";
        assert_eq!(meminfo_kib(text, b"Writeback:"), Some(91136));
        assert_eq!(meminfo_kib(text, b"WritebackTmp:"), Some(7));
        assert_eq!(meminfo_kib(text, b"Dirty:"), Some(9284));
        assert_eq!(meminfo_kib(text, b"Missing:"), None);
        assert_eq!(meminfo_kib(b"Writeback: x kB\n", b"Writeback:"), None);
        // The real file has the line (Linux 2.6+).
        let real = std::fs::read("/proc/meminfo").unwrap();
        assert!(meminfo_kib(&real, b"Writeback:").is_some());
    }

    #[test]
    fn overdraft_is_bounded_by_the_budget() {
        let max = MAX_OVERDRAFT as u64;
        let want = OVERDRAFT_WINDOWS * DEFAULT_WINDOW as u64;
        assert_eq!(grant_from(0, want), want.min(max));
        assert_eq!(grant_from(max - 10 * MAX_FOLIO, want), 10 * MAX_FOLIO);
        assert_eq!(
            grant_from(max - MAX_FOLIO / 2, want),
            0,
            "less than a piece left"
        );
        assert_eq!(grant_from(max, want), 0);
        assert_eq!(grant_from(2 * max, want), 0);
        // Writers taking turns never hold more than the budget together.
        let mut used = 0;
        let mut grants = Vec::new();
        for window in [32u64 << 20, 8 << 20, 64 << 20, 1 << 20, 32 << 20] {
            let g = grant_from(used, OVERDRAFT_WINDOWS * window);
            assert!(g <= OVERDRAFT_WINDOWS * window);
            used += g;
            grants.push(g);
        }
        assert!(used <= max, "{grants:?}");
        assert_eq!(grants[0], max, "the default window takes the whole budget");
        assert!(grants[1..].iter().all(|&g| g == 0), "{grants:?}");
    }

    #[test]
    fn an_overdraft_is_spent_slowly_and_paid_back_at_half_the_share() {
        let w = DEFAULT_WINDOW as u64;
        let grant = 3 * w;
        let gbps = 1u64 << 30;
        // No overdraft: the usual pacing.
        assert_eq!(overdraft_rate(0, true, w, w, gbps), None);
        // While yielding: the overdraft lasts YIELD_SPAN, whatever the measured share.
        let yield_rate = overdraft_rate(grant, true, w / 4, w, 7 << 20).unwrap();
        let lasts = grant as f64 / yield_rate as f64;
        assert!((lasts - YIELD_SPAN.as_secs_f64()).abs() < 1e-3, "{lasts}");
        assert_eq!(
            overdraft_rate(grant, true, 3 * w, w, gbps),
            Some(yield_rate)
        );
        // Paying back: half the share, never slower than while yielding.
        assert_eq!(overdraft_rate(grant, false, 2 * w, w, gbps), Some(gbps / 2));
        assert_eq!(
            overdraft_rate(grant, false, 2 * w, w, 7 << 20),
            Some(yield_rate)
        );
        // Back at the set point: the usual pacing.
        assert_eq!(overdraft_rate(grant, false, w / 2, w, gbps), None);
    }

    #[test]
    fn a_backlog_starts_half_a_window_at_a_time() {
        let path =
            std::env::temp_dir().join(format!("pagepipe-dontcache-backlog-{}", std::process::id()));
        let file = File::create(&path).unwrap();
        // Not registered with the flusher: only this test looks at these ranges.
        let shared = Shared::new(file.as_raw_fd());
        let window = 4u64 << 20;
        shared.window.store(window, Ordering::Relaxed);
        let mib = 1u64 << 20;
        shared.record(0, 9 * mib);
        let mut fresh = shared.take_pending();
        assert_eq!(fresh.len(), 5, "cut at 2 MiB");
        // No overdraft held: everything starts.
        assert!(!shared.hold_back(&mut fresh.clone()));
        // Paying back an overdraft (it is not yielding in this test: nothing floods the
        // system's writeback by 64 MiB): half a window, 2 MiB, may be in flight.
        shared.grant.store(3 * window, Ordering::Relaxed);
        if FLUSHER.yielding.load(Ordering::Relaxed) {
            eprintln!("SKIPPED a_backlog_starts_half_a_window_at_a_time: the system is flooded");
            std::fs::remove_file(&path).unwrap();
            return;
        }
        assert!(shared.hold_back(&mut fresh));
        assert_eq!(fresh.len(), 1);
        assert_eq!((fresh[0].start, fresh[0].end), (0, 2 * mib));
        let back = shared.take_pending();
        assert_eq!(
            back.first().map(|r| r.start),
            Some(2 * mib),
            "put back in order"
        );
        assert_eq!(back.iter().map(Range::len).sum::<u64>(), 7 * mib);
        // With 1 MiB already in flight there is room for one more piece; with 2 MiB, none.
        shared.started.store(mib, Ordering::Relaxed);
        let mut again = back.clone();
        shared.hold_back(&mut again);
        assert_eq!(again.len(), 1);
        shared.take_pending();
        shared.started.store(2 * mib, Ordering::Relaxed);
        let mut none = back;
        assert!(shared.hold_back(&mut none));
        assert!(none.is_empty());
        // The charge never moved: hold_back only reorders the queue.
        assert_eq!(shared.dirty.load(Ordering::Relaxed), 9 * mib);
        drop(file);
        std::fs::remove_file(&path).unwrap();
    }

    #[test]
    fn deferred_only_while_yielding_and_overdraft_is_left() {
        let shared = Shared::new(-1);
        let window = DEFAULT_WINDOW as u64;
        assert!(!shared.deferred(false));
        // No overdraft yet (the budget has some unless a test elsewhere holds it all): deferred
        // while well within the window, started near it (a writer waiting there takes none).
        if overdraft_left() >= MAX_FOLIO {
            assert!(shared.deferred(true));
        }
        shared.dirty.store(window - window / 8, Ordering::Relaxed);
        assert!(!shared.deferred(true));
        shared.dirty.store(0, Ordering::Relaxed);
        shared.grant.store(3 * window, Ordering::Relaxed);
        assert!(!shared.deferred(false));
        assert!(shared.deferred(true));
        // Within a quarter window of its limit: its writeback starts (it would soon wait).
        shared
            .dirty
            .store(4 * window - window / 8, Ordering::Relaxed);
        assert!(!shared.deferred(true));
    }

    #[test]
    fn kick_batch_is_clamped() {
        assert_eq!(kick_batch(32 << 20), 2 << 20);
        assert_eq!(kick_batch(1 << 30), 2 << 20);
        assert_eq!(kick_batch(256 << 10), 64 << 10);
        assert_eq!(kick_batch(3 << 20), 128 << 10);
    }
}

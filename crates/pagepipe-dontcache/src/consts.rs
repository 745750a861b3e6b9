//! The bounds on the fallback writers' dirty data (the public windows and the overdraft budget)
//! and the tuning constants of the flusher and of the writers' pacing.

use pagepipe_sys as sys;
use std::time::Duration;

/// The default bound on a fallback writer's dirty data in flight: 32 MiB.
pub const DEFAULT_WINDOW: usize = 32 << 20;

/// The smallest window [`Writer::with_window`] accepts (smaller requests are raised to it).
///
/// [`Writer::with_window`]: crate::Writer::with_window
pub const MIN_WINDOW: usize = 256 << 10;

pub(crate) const PAGE: u64 = sys::mm::PAGE_SIZE as u64;

/// The largest page-cache folio (a PMD: 2 MiB with 4 KiB pages on x86-64 and arm64). Folios are
/// naturally aligned, and `POSIX_FADV_DONTNEED` skips a folio that sticks out of its range, so
/// ranges are cut only at multiples of this size: a cut anywhere else could leave the folio
/// that straddles it cached for good.
pub(crate) const MAX_FOLIO: u64 = 2 << 20;

/// How long a flusher with registered writers sleeps before looking for data that no kick
/// announced (a writer's tail below the kick batch).
pub(crate) const FLUSHER_TICK: Duration = Duration::from_millis(50);

/// How often a flusher with writeback in flight looks for completed ranges.
pub(crate) const FLUSHER_POLL: Duration = Duration::from_millis(1);

/// Passes of completions per reaper round: each pass looks at up to [`SCAN_LIMIT`] ranges of
/// each writer, and another follows while the last one dropped something (without `cachestat`
/// each pass drops one range per writer, waiting for it).
pub(crate) const MAX_PASSES: usize = 16;

/// How many of a writer's oldest ranges in flight the flusher asks `cachestat(2)` about per pass
/// (completed ones are dropped wherever they are among them).
pub(crate) const SCAN_LIMIT: usize = 64;

/// What all fallback writers of the process together may hold in flight before the writers'
/// pacing slows those holding more than half their fair share of it (a soft bound: the largest
/// window, if larger, counts instead; only each writer's own window is a hard bound).
pub const SHARED_WINDOW: usize = 4 * DEFAULT_WINDOW;

/// What all fallback writers of the process together may hold beyond their windows while they
/// yield to another process's writeback (see [`Writer::with_window`]): 96 MiB. A writer's own
/// overdraft is at most three of its windows, as far as this budget allows; so the fallback
/// writers of a process never hold more than the sum of their windows plus this much dirty data
/// (plus the write each is recording).
///
/// [`Writer::with_window`]: crate::Writer::with_window
pub const MAX_OVERDRAFT: usize = 3 * DEFAULT_WINDOW;

/// A yielding writer's overdraft is at most this many of its windows.
pub(crate) const OVERDRAFT_WINDOWS: u64 = 3;

/// A writer that yields to another process's writeback is paced so that its overdraft lasts at
/// least this long: it writes `overdraft / YIELD_SPAN` bytes per second (240 MiB/s with the
/// default window) while its own writeback waits.
pub(crate) const YIELD_SPAN: Duration = Duration::from_millis(400);

/// Writeback of other processes (bytes under writeback in the whole system, `Writeback:` of
/// `/proc/meminfo`, over what this process's writers have in flight) above which the submitter
/// yields, and below which it stops (hysteresis).
pub(crate) const YIELD_ON: u64 = 64 << 20;
/// See [`YIELD_ON`]. Low, so that the writers' backlog starts when the other process's writeback
/// is nearly done: measured, starting it with 32 MiB of the competitor's `fsync` still queued
/// stalled the writer 20-25 ms in `pwrite` (block allocation reading bitmaps behind it).
pub(crate) const YIELD_OFF: u64 = 8 << 20;

/// How often the submitter reads `/proc/meminfo` while writers have data in flight.
pub(crate) const FOREIGN_CHECK: Duration = Duration::from_millis(1);

/// Pauses of [`Writer::pace`] shorter than this accumulate until they reach it.
///
/// [`Writer::pace`]: crate::Writer::pace
pub(crate) const MIN_PAUSE: Duration = Duration::from_micros(50);

/// Pauses of [`Writer::pace`] up to this long are spun (the writer stays on its CPU, reading the
/// clock) rather than slept, while fewer writers are paced than there are CPUs. Measured on the
/// development VM (2 vCPUs) with 64 KiB random writes: pauses of 50-120 µs asked of
/// `nanosleep` returned after 100 µs to 3.7 ms (timer slack, then waiting for a CPU busy with
/// the flusher threads and the kernel's writeback workers), and those oversleeps were the
/// writer's tail latency; the pause itself is what the writer owes the disk either way.
///
/// [`Writer::pace`]: crate::Writer::pace
pub(crate) const SPIN_PAUSE: Duration = Duration::from_micros(200);

/// How far a paced writer may run ahead of its pauses to make up for a pause that took longer
/// than asked (an oversleep, or a preemption while spinning): [`Writer::pace`] counts the time a
/// pause really took, and the writer's next pauses are shortened by the excess up to this much.
///
/// [`Writer::pace`]: crate::Writer::pace
pub(crate) const MAX_CREDIT: Duration = Duration::from_micros(500);

/// The bandwidth [`Writer::pace`] assumes until the flusher has measured one (bytes per second):
/// a first writer fills half its window in milliseconds, before the first sample.
///
/// [`Writer::pace`]: crate::Writer::pace
pub(crate) const INITIAL_BANDWIDTH: u64 = 256 << 20;

/// The longest single pause of [`Writer::pace`] (beyond it the window's hard limit takes over).
///
/// [`Writer::pace`]: crate::Writer::pace
pub(crate) const MAX_PAUSE: Duration = Duration::from_millis(20);

/// How long a writer over its window sleeps before rechecking (a safety net; the flusher wakes it).
pub(crate) const WINDOW_RECHECK: Duration = Duration::from_millis(100);
